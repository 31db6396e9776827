package director

import (
	"errors"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/simulator/simrt"
)

// Locks are leases on the runtime's clock: a waiter times out, an expired
// lease is taken over and its holder learns it lost the lock, and sets are
// taken all or nothing.
func TestLockLeases(t *testing.T) {
	var failures []string
	fail := func(s string) { failures = append(failures, s) }
	res := simrt.Run(simrt.Config{Seed: 1, MaxTime: time.Hour}, func(s *simrt.Sim) {
		st := store.NewMemory()
		lt := newLockTable(s, st, 240*time.Second)
		a, err := lt.acquire([]string{"lock:vm:i1", "lock:disk:d"}, 1, time.Second)
		if err != nil {
			fail("first acquire: " + err.Error())
			return
		}
		if recs, _ := listAll[LockRecord](st, store.Locks, nil); len(recs) != 2 {
			fail("held locks are not mirrored in the store")
		}
		t0 := s.Now()
		if _, err := lt.acquire([]string{"lock:disk:d"}, 2, 10*time.Second); !errors.Is(err, ErrLockTimeout) {
			fail("a held lock was acquired: " + errString(err))
		}
		if waited := s.Now().Sub(t0); waited != 10*time.Second {
			fail("the waiter gave up after " + waited.String())
		}
		// A set overlapping a held lock waits for all of it.
		if _, err := lt.acquire([]string{"lock:disk:other", "lock:vm:i1"}, 3, time.Second); !errors.Is(err, ErrLockTimeout) {
			fail("a set overlapping a held lock was acquired")
		}
		if _, ok := lt.holder("lock:disk:other"); ok {
			fail("a failed set acquisition left a lock held")
		}
		if err := a.renew(); err != nil {
			fail("renew: " + err.Error())
		}
		s.Sleep(241 * time.Second) // the lease expires unrenewed
		b, err := lt.acquire([]string{"lock:disk:d"}, 4, time.Second)
		if err != nil {
			fail("an expired lease was not taken over: " + err.Error())
			return
		}
		if err := a.renew(); !errors.Is(err, ErrLockLost) {
			fail("the old holder did not learn it lost the lock: " + errString(err))
		}
		a.release() // must not free b's lease
		if id, ok := lt.holder("lock:disk:d"); !ok || id != 4 {
			fail("releasing an expired lease freed the new holder's lock")
		}
		b.release()
		if _, ok := lt.holder("lock:disk:d"); ok {
			fail("release left the lock held")
		}
		// A waiter wakes when the holder releases.
		c, _ := lt.acquire([]string{"x"}, 5, time.Second)
		s.Go("releaser", func() { s.Sleep(time.Second); c.release() })
		t1 := s.Now()
		if _, err := lt.acquire([]string{"x"}, 6, time.Minute); err != nil || s.Now().Sub(t1) != time.Second {
			fail("a waiter did not get the lock when it was released")
		}
	})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, f := range failures {
		t.Error(f)
	}
}

func errString(err error) string {
	if err == nil {
		return "<nil>"
	}
	return err.Error()
}
