package director

import (
	"fmt"
	"strings"
	"time"

	"github.com/cpilab/cpilab/director/store"
)

// notify tells Config.LockObserver about an acquisition or a release.
func (t *lockTable) notify(names []string, owner string, taskID int64, acquired bool) {
	if t.observe == nil {
		return
	}
	at := t.r.Now()
	for _, n := range names {
		t.observe(LockEvent{Name: n, Owner: owner, TaskID: taskID, Acquired: acquired, At: at})
	}
}

// newOwnerName names one acquisition: the process, the task, a sequence.
func (t *lockTable) newOwnerName(taskID int64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	return fmt.Sprintf("%s/task-%d/%d", t.owner, taskID, t.seq)
}

// acquireShared takes every name (sorted, distinct) in one store
// transaction once all are free: absent, expired, or (stealFrom > 0) held
// by the task stealFrom, whose worker's lease has lapsed. It waits up to
// timeout on the runtime's clock, looking again every poll.
func (t *lockTable) acquireShared(names []string, taskID int64, timeout time.Duration, stealFrom int64) (*heldLocks, error) {
	owner := t.newOwnerName(taskID)
	deadline := t.r.Now().Add(timeout)
	for {
		now := t.r.Now()
		exp := now.Add(t.lease)
		var busy []string
		next := deadline
		err := t.st.Update(func(tx store.Tx) error {
			busy, next = nil, deadline
			for _, n := range names {
				var rec LockRecord
				ok, err := tx.Get(store.Locks, n, &rec)
				if err != nil {
					return err
				}
				if ok && now.Before(rec.ExpiresAt) && (stealFrom == 0 || rec.TaskID != stealFrom) {
					busy = append(busy, fmt.Sprintf("%s: task %d (%s)", n, rec.TaskID, rec.Owner))
					if rec.ExpiresAt.Before(next) {
						next = rec.ExpiresAt
					}
				}
			}
			if len(busy) > 0 {
				return nil
			}
			for _, n := range names {
				if err := tx.Put(store.Locks, n, LockRecord{Name: n, Owner: owner, TaskID: taskID, ExpiresAt: exp}); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("lock %v: %w", names, err)
		}
		if len(busy) == 0 {
			t.notify(names, owner, taskID, true)
			return t.newHeld(names, owner, taskID), nil
		}
		if !now.Before(deadline) {
			return nil, fmt.Errorf("%w %v within %s (held by %s)", ErrLockTimeout, names, timeout, strings.Join(busy, ", "))
		}
		wait := min(next.Sub(now), deadline.Sub(now), t.poll)
		if wait <= 0 {
			wait = time.Millisecond
		}
		t.mu.Lock()
		t.c.WaitFor(wait)
		t.mu.Unlock()
	}
}

// renewShared extends the lock records h still owns to exp; ErrLockLost
// when one was taken over.
func (h *heldLocks) renewShared(exp time.Time) error {
	t := h.t
	return t.st.Update(func(tx store.Tx) error {
		for _, n := range h.names {
			var rec LockRecord
			ok, err := tx.Get(store.Locks, n, &rec)
			if err != nil {
				return err
			}
			if !ok || rec.Owner != h.owner {
				return fmt.Errorf("%w: %s (lease of %s expired and another task took it)", ErrLockLost, n, t.lease)
			}
			rec.ExpiresAt = exp
			if err := tx.Put(store.Locks, n, rec); err != nil {
				return err
			}
		}
		return nil
	})
}

// releaseShared deletes the lock records h still owns and wakes this
// process's waiters.
func (h *heldLocks) releaseShared() {
	t := h.t
	t.notify(h.names, h.owner, 0, false)
	_ = t.st.Update(func(tx store.Tx) error {
		for _, n := range h.names {
			var rec LockRecord
			ok, err := tx.Get(store.Locks, n, &rec)
			if err != nil {
				return err
			}
			if ok && rec.Owner == h.owner {
				if err := tx.Delete(store.Locks, n); err != nil {
					return err
				}
			}
		}
		return nil
	})
	t.mu.Lock()
	t.c.Broadcast()
	t.mu.Unlock()
}

// holderShared is holder over the store's records.
func (t *lockTable) holderShared(name string) (int64, bool) {
	var rec LockRecord
	var ok bool
	err := t.st.View(func(tx store.Tx) error {
		var err error
		ok, err = tx.Get(store.Locks, name, &rec)
		return err
	})
	if err != nil || !ok || !t.r.Now().Before(rec.ExpiresAt) {
		return 0, false
	}
	return rec.TaskID, true
}
