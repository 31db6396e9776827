package director_test

import (
	"errors"
	"testing"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/store"
)

// GuardedStore calls before ahead of every transaction, runs it on the store
// it guards, and leaves that store open when closed.
func TestGuardedStoreCallsBeforeEachTransaction(t *testing.T) {
	inner := director.MemoryStore()
	calls := 0
	g := director.GuardedStore(inner, func() { calls++ })
	if err := g.Update(func(tx store.Tx) error { return tx.Put(store.Deployments, "d", map[string]string{"name": "d"}) }); err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := g.View(func(tx store.Tx) error { _, err := tx.Get(store.Deployments, "d", &got); return err }); err != nil {
		t.Fatal(err)
	}
	if calls != 2 || got["name"] != "d" {
		t.Fatalf("before called %d times (want 2), read %v (want the record written through the guard)", calls, got)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if err := inner.View(func(store.Tx) error { return nil }); errors.Is(err, store.ErrClosed) {
		t.Fatalf("closing the guard closed the store it guards")
	}
}
