package director

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/rt"
)

// Lock names. A VM lock held across a job is named by the instance that
// owns the VM slot, so it also covers the gap of a recreate, when the
// instance has no VM CID; under VMLockPerCPICallOnly the per-call lock is
// named by the VM CID, as upstream's.
func deploymentLock(name string) string { return "lock:deployment:" + name }
func vmLock(id string) string           { return "lock:vm:" + id }
func diskLock(diskName string) string   { return "lock:disk:" + diskName }

// ErrLockTimeout is returned (wrapped) when a lock was not acquired in time.
var ErrLockTimeout = errors.New("failed to acquire lock")

// ErrLockLost is returned (wrapped) when a held lease expired and another
// holder took the lock.
var ErrLockLost = errors.New("lock lost")

// LockRenewalGoroutine names the logical goroutine that renews held
// leases on a timer (upstream's lock renewal thread, lock.rb), so that a
// simulation can stall it (simrt.Sim.Stall).
const LockRenewalGoroutine = "director/lock_renewal"

// lockTable is the director's lock table: leases on the runtime's clock. A
// set of names is acquired atomically (all or none), so holders never
// deadlock on order. Held locks are mirrored to the store for inspection;
// on restart the table starts empty (in-flight tasks are failed).
//
// Shared (Config.Shared), the store's lock records are the locks: an
// acquisition is one store transaction that finds every name free (absent
// or expired) and writes them all, so processes sharing the store exclude
// each other; waiters look again every poll (sooner when a lock of this
// process is released).
//
// Lock order: lockTable.mu is a leaf lock; no other lock is taken under it
// except the store's.
type lockTable struct {
	r     rt.Runtime
	st    store.Store
	lease time.Duration

	shared  bool            // locks live in the store (Config.Shared)
	owner   string          // this process, in shared lock owners
	poll    time.Duration   // shared waiters look again this often
	observe func(LockEvent) // Config.LockObserver; nil: none

	// renewEvery is how often held sets are renewed on a timer while held
	// (LockLease/2, as upstream's lock.rb); 0: never, leases are renewed
	// only by the jobs' checkpoints (Config.PerStepLockRenewal).
	renewEvery time.Duration
	// spawn starts the renewer as a logical goroutine of the director (its
	// group), so that Close waits for it.
	spawn    func(name string, fn func())
	kept     map[*heldLocks]bool // guarded by mu: the sets the renewer renews
	renewing bool                // guarded by mu: the renewer runs
	idle     rt.Cond             // on mu: broadcast when kept becomes empty

	mu   rt.Mutex
	c    rt.Cond
	held map[string]*lease // guarded by mu
	seq  int64             // guarded by mu
}

type lease struct {
	owner   string
	taskID  int64
	expires time.Time
}

func newLockTable(r rt.Runtime, st store.Store, leaseFor time.Duration) *lockTable {
	m := r.NewMutex()
	return &lockTable{r: r, st: st, lease: leaseFor, mu: m, c: r.NewCond(m), held: map[string]*lease{}}
}

// heldLocks is a set of acquired leases.
type heldLocks struct {
	t      *lockTable
	names  []string
	owner  string
	taskID int64
	lost   error // guarded by t.mu: a timer renewal found a lease lost
}

// newHeld returns the set just acquired, kept by the renewer.
func (t *lockTable) newHeld(names []string, owner string, taskID int64) *heldLocks {
	h := &heldLocks{t: t, names: names, owner: owner, taskID: taskID}
	if t.renewEvery <= 0 || t.spawn == nil {
		return h
	}
	t.mu.Lock()
	if t.kept == nil {
		t.kept, t.idle = map[*heldLocks]bool{}, t.r.NewCond(t.mu)
	}
	t.kept[h] = true
	start := !t.renewing
	t.renewing = true
	t.mu.Unlock()
	if start {
		t.spawn(LockRenewalGoroutine, t.renewHeld)
	}
	return h
}

// renewHeld is the renewer: while any set is held it renews every held
// set every renewEvery, as upstream's lock thread renews its lock every
// half lease (lock.rb), so that a job whose one step (a CPI call, an
// agent's wait) outlasts the lease keeps its locks. It runs only while
// some set is held (one logical goroutine, started by the first
// acquisition after none was held), so an idle director has no timer.
//
// A renewal that finds a lease lost (expired and taken by another holder)
// records it on the set and stops renewing it; the job learns it at its
// next checkpoint (renew: each step, each in-doubt call made again) and
// fails with ErrLockLost, where upstream marks the task cancelling and
// the job stops at its next checkpoint. Renewals write the new expiry to
// the store's copy too, as upstream's renewal updates the lock's row.
func (t *lockTable) renewHeld() {
	t.mu.Lock()
	next := t.r.Now().Add(t.renewEvery)
	for {
		if len(t.kept) == 0 {
			t.renewing = false
			t.mu.Unlock()
			return
		}
		if wait := next.Sub(t.r.Now()); wait > 0 {
			t.idle.WaitFor(wait)
			continue
		}
		next = t.r.Now().Add(t.renewEvery)
		sets := make([]*heldLocks, 0, len(t.kept))
		for h := range t.kept {
			sets = append(sets, h)
		}
		slices.SortFunc(sets, func(a, b *heldLocks) int { return strings.Compare(a.owner, b.owner) })
		if !t.shared {
			t.renewLocked(sets)
			continue
		}
		t.mu.Unlock()
		for _, h := range sets {
			if err := h.extend(t.r.Now().Add(t.lease)); err != nil {
				t.mu.Lock()
				t.lostLocked(h, err)
				t.mu.Unlock()
			}
		}
		t.mu.Lock()
	}
}

// renewLocked extends the sets' leases in this process's table and writes
// the new expiry to the store's copy (t.mu held; the store is the one
// lock taken under it).
func (t *lockTable) renewLocked(sets []*heldLocks) {
	exp := t.r.Now().Add(t.lease)
	var recs []LockRecord
	for _, h := range sets {
		var err error
		for _, n := range h.names {
			if l, ok := t.held[n]; !ok || l.owner != h.owner {
				err = fmt.Errorf("%w: %s (lease of %s expired)", ErrLockLost, n, t.lease)
				break
			}
		}
		if err != nil {
			t.lostLocked(h, err)
			continue
		}
		for _, n := range h.names {
			t.held[n].expires = exp
			recs = append(recs, LockRecord{Name: n, Owner: h.owner, TaskID: h.taskID, ExpiresAt: exp})
		}
	}
	if len(recs) == 0 {
		return
	}
	_ = t.st.Update(func(tx store.Tx) error {
		for _, rec := range recs {
			if err := tx.Put(store.Locks, rec.Name, rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// lostLocked records that a renewal found h's lease lost and stops
// renewing h (t.mu held).
func (t *lockTable) lostLocked(h *heldLocks, err error) {
	if h.lost == nil {
		h.lost = fmt.Errorf("%w (found by the lock renewal every %s)", err, t.renewEvery)
	}
	t.forgetLocked(h)
}

// forgetLocked stops renewing h (t.mu held).
func (t *lockTable) forgetLocked(h *heldLocks) {
	if !t.kept[h] {
		return
	}
	delete(t.kept, h)
	if len(t.kept) == 0 {
		t.idle.Broadcast()
	}
}

// acquire takes every name in names, waiting up to timeout on the runtime's
// clock for all of them to be free (or their leases expired).
func (t *lockTable) acquire(names []string, taskID int64, timeout time.Duration) (*heldLocks, error) {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	if t.shared {
		return t.acquireShared(names, taskID, timeout, 0)
	}
	t.mu.Lock()
	t.seq++
	owner := fmt.Sprintf("task-%d/%d", taskID, t.seq)
	deadline := t.r.Now().Add(timeout)
	for {
		now := t.r.Now()
		free := true
		next := deadline
		for _, n := range names {
			if l, ok := t.held[n]; ok && now.Before(l.expires) {
				free = false
				if l.expires.Before(next) {
					next = l.expires
				}
			}
		}
		if free {
			exp := now.Add(t.lease)
			for _, n := range names {
				t.held[n] = &lease{owner: owner, taskID: taskID, expires: exp}
			}
			t.mu.Unlock()
			t.mirror(names, owner, taskID, exp)
			t.notify(names, owner, taskID, true)
			return t.newHeld(names, owner, taskID), nil
		}
		if !now.Before(deadline) {
			busy := t.holdersLocked(names)
			t.mu.Unlock()
			return nil, fmt.Errorf("%w %v within %s (held by %s)", ErrLockTimeout, names, timeout, busy)
		}
		t.c.WaitFor(next.Sub(now))
	}
}

func (t *lockTable) holdersLocked(names []string) string {
	var out []string
	for _, n := range names {
		if l, ok := t.held[n]; ok {
			out = append(out, fmt.Sprintf("%s: task %d", n, l.taskID))
		}
	}
	return fmt.Sprint(out)
}

// renew is a job's checkpoint: it fails with ErrLockLost if a timer
// renewal found a lease lost or one expired and was taken over, and
// otherwise extends the leases.
func (h *heldLocks) renew() error {
	if h == nil {
		return nil
	}
	t := h.t
	t.mu.Lock()
	lost := h.lost
	t.mu.Unlock()
	if lost != nil {
		return lost
	}
	return h.extend(t.r.Now().Add(t.lease))
}

// extend extends the leases to exp; it fails with ErrLockLost if one
// expired and was taken over.
func (h *heldLocks) extend(exp time.Time) error {
	t := h.t
	if t.shared {
		return h.renewShared(exp)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, n := range h.names {
		l, ok := t.held[n]
		if !ok || l.owner != h.owner {
			return fmt.Errorf("%w: %s (lease of %s expired)", ErrLockLost, n, t.lease)
		}
		l.expires = exp
	}
	return nil
}

// release frees the leases still owned by h. Releasing nil does nothing.
func (h *heldLocks) release() {
	if h == nil {
		return
	}
	t := h.t
	if t.renewEvery > 0 && t.spawn != nil {
		t.mu.Lock()
		t.forgetLocked(h)
		t.mu.Unlock()
	}
	if t.shared {
		h.releaseShared()
		return
	}
	t.notify(h.names, h.owner, 0, false)
	t.mu.Lock()
	var freed []string
	for _, n := range h.names {
		if l, ok := t.held[n]; ok && l.owner == h.owner {
			delete(t.held, n)
			freed = append(freed, n)
		}
	}
	t.c.Broadcast()
	t.mu.Unlock()
	if len(freed) > 0 {
		_ = t.st.Update(func(tx store.Tx) error {
			for _, n := range freed {
				if err := tx.Delete(store.Locks, n); err != nil {
					return err
				}
			}
			return nil
		})
	}
}

// mirror records acquired locks in the store; failures only lose the
// inspection copy, never the lock.
func (t *lockTable) mirror(names []string, owner string, taskID int64, exp time.Time) {
	_ = t.st.Update(func(tx store.Tx) error {
		for _, n := range names {
			if err := tx.Put(store.Locks, n, LockRecord{Name: n, Owner: owner, TaskID: taskID, ExpiresAt: exp}); err != nil {
				return err
			}
		}
		return nil
	})
}

// holder returns the task holding name, if it is held.
func (t *lockTable) holder(name string) (int64, bool) {
	if t.shared {
		return t.holderShared(name)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.held[name]
	if !ok || !t.r.Now().Before(l.expires) {
		return 0, false
	}
	return l.taskID, true
}
