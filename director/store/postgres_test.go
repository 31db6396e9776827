package store_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/internal/pgtest"
)

// Several stores on one database stand for several director processes:
// they race to insert the same names and to draw ids, and conflicting
// transactions are retried, never lost or doubled.
func TestPostgresStoresShareOneDatabase(t *testing.T) {
	url := pgtest.URL(t)
	ctx := context.Background()
	const procs, rounds = 4, 25
	stores := make([]*store.Postgres, procs)
	for i := range stores {
		s, err := store.OpenPostgres(ctx, store.PostgresConfig{URL: url, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores[i] = s
	}
	var mu sync.Mutex
	won := map[string]int{}
	ids := map[int64]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, procs*rounds*2)
	for p, s := range stores {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				name := fmt.Sprintf("disk-%d", r)
				err := s.Update(func(tx store.Tx) error { return tx.Insert(store.DynamicDisks, name, rec{p}) })
				switch {
				case err == nil:
					mu.Lock()
					won[name]++
					mu.Unlock()
				case !errors.Is(err, store.ErrExists):
					errs <- err
				}
				var id int64
				err = s.Update(func(tx store.Tx) error {
					var err error
					id, err = tx.NextID("tasks")
					return err
				})
				if err != nil {
					errs <- err
					continue
				}
				mu.Lock()
				if ids[id] {
					errs <- fmt.Errorf("id %d drawn twice", id)
				}
				ids[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for r := range rounds {
		if n := won[fmt.Sprintf("disk-%d", r)]; n != 1 {
			t.Errorf("disk-%d inserted by %d processes, want exactly 1", r, n)
		}
	}
	if len(ids) != procs*rounds {
		t.Errorf("%d distinct ids, want %d", len(ids), procs*rounds)
	}
	// A read-modify-write counter: serializable transactions lose no update.
	var wg2 sync.WaitGroup
	for _, s := range stores {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			for range rounds {
				err := s.Update(func(tx store.Tx) error {
					var c rec
					if _, err := tx.Get(store.Locks, "counter", &c); err != nil {
						return err
					}
					c.V++
					return tx.Put(store.Locks, "counter", c)
				})
				if err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg2.Wait()
	var c rec
	_ = stores[0].View(func(tx store.Tx) error { _, err := tx.Get(store.Locks, "counter", &c); return err })
	if c.V != procs*rounds {
		t.Fatalf("counter = %d after %d increments: an update was lost", c.V, procs*rounds)
	}
}

func TestPostgresBadURLSaysWhere(t *testing.T) {
	_, err := store.OpenPostgres(context.Background(), store.PostgresConfig{URL: "postgres://u:secret@127.0.0.1:1/x?connect_timeout=2"})
	if err == nil {
		t.Fatal("opened a database on port 1")
	}
	if s := err.Error(); !strings.Contains(s, "127.0.0.1:1") || strings.Contains(s, "secret") {
		t.Fatalf("error %q should name the address and hide the password", s)
	}
}
