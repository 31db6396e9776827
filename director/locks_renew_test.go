package director

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/simulator/simrt"
)

// renewingTable is a lock table whose held sets are renewed every half
// lease, as the director's (Config.PerStepLockRenewal unset).
func renewingTable(s *simrt.Sim, st store.Store, leaseFor time.Duration) *lockTable {
	lt := newLockTable(s, st, leaseFor)
	lt.renewEvery, lt.spawn = leaseFor/2, s.Go
	return lt
}

// inRenewingTable runs body in a simulation on a renewing lock table of
// lease leaseFor over a memory store; body's fail records a failure, which
// the test reports once the simulation has ended.
func inRenewingTable(t *testing.T, leaseFor time.Duration, body func(s *simrt.Sim, lt *lockTable, fail func(string))) {
	t.Helper()
	var failures []string
	fail := func(s string) { failures = append(failures, s) }
	res := simrt.Run(simrt.Config{Seed: 1, MaxTime: time.Hour}, func(s *simrt.Sim) {
		body(s, renewingTable(s, store.NewMemory(), leaseFor), fail)
	})
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	for _, f := range failures {
		t.Error(f)
	}
}

// A lock held through a wait of three leases, with no step between, stays
// its holder's under timer renewal: another task waiting for it times
// out, the store's copy shows the renewed expiry, and the renewer stops
// once nothing is held. Without the timer (per-step renewal only) the
// same wait lets the other task take the lock, and the holder learns it
// only at its next checkpoint.
func TestLockTimerRenewalKeepsALongHolder(t *testing.T) {
	const leaseFor = 20 * time.Second
	for _, timer := range []bool{true, false} {
		var failures []string
		fail := func(s string) { failures = append(failures, s) }
		res := simrt.Run(simrt.Config{Seed: 1, MaxTime: time.Hour}, func(s *simrt.Sim) {
			st := store.NewMemory()
			lt := newLockTable(s, st, leaseFor)
			if timer {
				lt = renewingTable(s, st, leaseFor)
			}
			a, err := lt.acquire([]string{"lock:disk:d", "lock:vm:i1"}, 1, time.Second)
			if err != nil {
				fail("first acquire: " + err.Error())
				return
			}
			s.Sleep(3 * leaseFor) // one CPI call or agent wait, no checkpoint
			b, err := lt.acquire([]string{"lock:disk:d"}, 2, time.Second)
			if !timer {
				if err != nil {
					fail("per-step renewal: the lapsed lease was not taken: " + err.Error())
					return
				}
				if err := a.renew(); !errors.Is(err, ErrLockLost) {
					fail("per-step renewal: the holder's checkpoint did not find its lock lost: " + errString(err))
				}
				b.release()
				a.release()
				return
			}
			if !errors.Is(err, ErrLockTimeout) {
				fail("a lock renewed on its timer was taken by another task: " + errString(err))
				return
			}
			if err := a.renew(); err != nil {
				fail("the holder's checkpoint after the long wait: " + err.Error())
			}
			recs, _ := listAll[LockRecord](st, store.Locks, nil)
			for _, r := range recs {
				if !s.Now().Before(r.ExpiresAt) || r.ExpiresAt.Sub(s.Now()) > leaseFor {
					fail("the store's copy of " + r.Name + " was not renewed: expires " + r.ExpiresAt.String())
				}
			}
			if len(recs) != 2 {
				fail(fmt.Sprintf("the store holds %d lock records, want 2", len(recs)))
			}
			a.release()
			lt.mu.Lock()
			kept, running := len(lt.kept), lt.renewing
			lt.mu.Unlock()
			if kept != 0 {
				fail("a released set is still renewed")
			}
			s.Sleep(leaseFor)
			lt.mu.Lock()
			running = lt.renewing
			lt.mu.Unlock()
			if running {
				fail("the renewer still runs with nothing held")
			}
			if c, err := lt.acquire([]string{"lock:disk:d"}, 3, time.Second); err != nil {
				fail("after release: " + err.Error())
			} else {
				c.release()
			}
		})
		if res.Err != nil {
			t.Fatalf("timer=%v: %v", timer, res.Err)
		}
		for _, f := range failures {
			t.Errorf("timer=%v: %s", timer, f)
		}
	}
}

// A timer renewal that finds a lease lost (taken over while its holder's
// process stalled past the lease) records it: the holder's next checkpoint
// fails with ErrLockLost naming the lock and the renewal, the renewal of
// its other sets goes on, and the lost set is no longer renewed.
func TestLockTimerRenewalFindsALostLease(t *testing.T) {
	const leaseFor = 20 * time.Second
	inRenewingTable(t, leaseFor, func(s *simrt.Sim, lt *lockTable, fail func(string)) {
		a, err := lt.acquire([]string{"lock:disk:d"}, 1, time.Second)
		if err != nil {
			fail("acquire: " + err.Error())
			return
		}
		other, err := lt.acquire([]string{"lock:disk:e"}, 1, time.Second)
		if err != nil {
			fail("acquire: " + err.Error())
			return
		}
		// What a stall past the lease lets happen: another holder took d.
		lt.mu.Lock()
		lt.held["lock:disk:d"] = &lease{owner: "task-9/99", taskID: 9, expires: s.Now().Add(time.Hour)}
		lt.mu.Unlock()
		s.Sleep(leaseFor/2 + time.Second) // one renewal
		err = a.renew()
		if !errors.Is(err, ErrLockLost) || !strings.Contains(err.Error(), "lock:disk:d") || !strings.Contains(err.Error(), "renewal") {
			fail("the checkpoint after a renewal found the lease lost: " + errString(err))
		}
		lt.mu.Lock()
		keptA, keptOther := lt.kept[a], lt.kept[other]
		lt.mu.Unlock()
		if keptA || !keptOther {
			fail("after the loss: the lost set is still renewed, or the other set is not")
		}
		s.Sleep(2 * leaseFor)
		if err := other.renew(); err != nil {
			fail("the other set lapsed: " + err.Error())
		}
		a.release()
		if id, ok := lt.holder("lock:disk:d"); !ok || id != 9 {
			fail("releasing the lost set freed the new holder's lock")
		}
		other.release()
	})
}

// A stall of the renewal goroutine (simrt.Stall by LockRenewalGoroutine,
// what the simulator's lock-renewal-stall fault does) past the lease lets
// the lease lapse under one long step: a task waiting for the lock takes
// it when it expires, the holder's next checkpoint fails with ErrLockLost
// before the stalled renewal could have noticed, and once the stall ends
// the renewal neither gives the lock back nor renews the lost set.
func TestStalledRenewalLetsALeaseLapse(t *testing.T) {
	const leaseFor = 20 * time.Second
	inRenewingTable(t, leaseFor, func(s *simrt.Sim, lt *lockTable, fail func(string)) {
		a, err := lt.acquire([]string{"lock:vm:i1"}, 1, time.Second)
		if err != nil {
			fail("acquire: " + err.Error())
			return
		}
		s.Stall(LockRenewalGoroutine, 3*leaseFor)
		var b *heldLocks
		var bErr error
		took := rt.NewEvent(s)
		s.Go("waiter", func() {
			b, bErr = lt.acquire([]string{"lock:vm:i1"}, 2, 2*leaseFor)
			took.Set()
		})
		s.Sleep(leaseFor + time.Second) // one long step, no checkpoint
		if !took.Wait(time.Second) || bErr != nil {
			fail("the waiter did not take the lapsed lease: " + errString(bErr))
			return
		}
		if err := a.renew(); !errors.Is(err, ErrLockLost) {
			fail("the holder's checkpoint after the takeover: " + errString(err))
		}
		s.Sleep(3 * leaseFor) // the stall ends; the renewal runs again
		if id, ok := lt.holder("lock:vm:i1"); !ok || id != 2 {
			fail(fmt.Sprintf("after the stall the lock is held by task %d (%v), want task 2", id, ok))
		}
		lt.mu.Lock()
		keptA := lt.kept[a]
		lt.mu.Unlock()
		if keptA {
			fail("the lost set is still renewed after the stall")
		}
		a.release()
		b.release()
	})
}
