package director

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/rt"
)

// Several director processes on one store (Config.Shared): how a task goes
// from queued to its end.
//
//   - An api process records the task queued (enqueue) and runs nothing.
//   - A worker claims the oldest queued task of its queues (in priority
//     order) with store.Claimer.ClaimFirst: one transaction marks it
//     processing with Owner and LeaseExpiresAt, so no two workers, in one
//     process or in many, claim one task.
//   - While the job runs, the lease is renewed every TaskLease/3; every
//     write of the task checks the lease is still this process's
//     (ErrLeaseLost otherwise), so a worker that lost its task never
//     overwrites the worker that took it over.
//   - A sweeper in every worker process looks, every TaskLease/2, for
//     processing tasks whose lease lapsed (their worker died: kill -9, a lost
//     database). The first to renew such a lease owns the task; it takes
//     the dead task's locks (expired or not), settles what the task left in
//     flight as restart reconciliation does (its intents, its dynamic disks
//     in transient states), and fails the task with ReasonLeaseLapsed.

// ReasonLeaseLapsed is the error of a task whose worker stopped renewing its
// lease while it ran (it died or lost the database); the worker that took
// it over reconciled its work.
const ReasonLeaseLapsed = "the worker running this task stopped renewing its lease; another worker took the task over and reconciled its work"

// ErrLeaseLost is returned (wrapped) when this process writes a task whose
// lease another process took over.
var ErrLeaseLost = errors.New("task lease lost")

// wake wakes this process's idle workers and waiters.
func (d *Director) wake() {
	d.mu.Lock()
	d.changed.Broadcast()
	d.mu.Unlock()
}

// queuedInStore counts the queued tasks of queue in the store.
func (d *Director) queuedInStore(queue string) int {
	n := 0
	_ = d.st.View(func(tx store.Tx) error {
		n = 0
		return tx.List(store.Tasks, func(_ string, raw []byte) error {
			if (store.Match{"state": {string(TaskQueued)}, "queue": {queue}}).Matches(raw) {
				n++
			}
			return nil
		})
	})
	return n
}

// workShared is a worker's loop on a shared store.
func (d *Director) workShared(queues []string) {
	for {
		d.mu.Lock()
		closed := d.closed
		d.mu.Unlock()
		if closed {
			return
		}
		if t, ok := d.claim(queues); ok {
			d.runClaimed(&t)
			continue
		}
		d.mu.Lock()
		if !d.closed {
			d.changed.WaitFor(d.cfg.PollInterval)
		}
		d.mu.Unlock()
	}
}

// claim takes the oldest queued task of the first queue (in priority
// order) that has one.
func (d *Director) claim(queues []string) (Task, bool) {
	c := d.st.(store.Claimer)
	for _, q := range queues {
		var t Task
		ok, err := c.ClaimFirst(store.Tasks, store.Match{"state": {string(TaskQueued)}, "queue": {q}},
			func(tx store.Tx, key string, raw []byte) error {
				t = Task{}
				if err := json.Unmarshal(raw, &t); err != nil {
					return fmt.Errorf("task %s: %w", key, err)
				}
				now := d.r.Now()
				t.State, t.StartedAt, t.Owner, t.LeaseExpiresAt = TaskProcessing, now, d.cfg.Owner, now.Add(d.cfg.TaskLease)
				return tx.Put(store.Tasks, key, t)
			})
		if err == nil && ok {
			return t, true
		}
	}
	return Task{}, false
}

// sweepLapsed is the process's lease sweeper: every TaskLease/2 it looks
// for processing tasks of queues whose lease lapsed, takes each over and
// settles it. It runs beside the workers, so that a takeover never waits
// for a worker that is itself waiting for the dead task's locks.
func (d *Director) sweepLapsed(queues []string) {
	for {
		next := d.r.Now().Add(d.cfg.TaskLease / 2)
		d.mu.Lock()
		for !d.closed {
			left := next.Sub(d.r.Now())
			if left <= 0 {
				break
			}
			d.changed.WaitFor(left) // woken early by task ends: wait on
		}
		closed := d.closed
		d.mu.Unlock()
		if closed {
			return
		}
		for {
			t, ok := d.takeExpired(queues)
			if !ok {
				break
			}
			if d.cfg.Knobs.NoTaskTakeover {
				d.timeOut(t)
				continue
			}
			d.takeOver(t)
		}
	}
}

// takeExpired finds a processing task of queues whose lease lapsed and
// makes it this process's.
func (d *Director) takeExpired(queues []string) (Task, bool) {
	now := d.r.Now()
	var lapsed []int64
	err := d.st.View(func(tx store.Tx) error {
		lapsed = nil
		return tx.List(store.Tasks, func(_ string, raw []byte) error {
			if !(store.Match{"state": {string(TaskProcessing)}, "queue": queues}).Matches(raw) {
				return nil
			}
			var t Task
			if err := json.Unmarshal(raw, &t); err != nil {
				return err
			}
			if !now.Before(t.LeaseExpiresAt) {
				lapsed = append(lapsed, t.ID)
			}
			return nil
		})
	})
	if err != nil {
		return Task{}, false
	}
	for _, id := range lapsed {
		var t Task
		taken := false
		err := d.st.Update(func(tx store.Tx) error {
			taken = false
			ok, err := tx.Get(store.Tasks, store.IDKey(id), &t)
			if err != nil || !ok {
				return err
			}
			now := d.r.Now()
			if t.State != TaskProcessing || now.Before(t.LeaseExpiresAt) {
				return nil // ended, or another worker took it first
			}
			prev := t.Owner
			t.Owner, t.LeaseExpiresAt = d.cfg.Owner, now.Add(d.cfg.TaskLease)
			t.Debug = append(t.Debug, fmt.Sprintf("%s lease of %s lapsed at %s; taken over by %s",
				now.UTC().Format("2006-01-02T15:04:05.000Z07:00"), orNone(prev), t.LeaseExpiresAt.Add(-d.cfg.TaskLease).UTC().Format("15:04:05.000"), d.cfg.Owner))
			taken = true
			return tx.Put(store.Tasks, store.IDKey(id), t)
		})
		if err == nil && taken {
			return t, true
		}
	}
	return Task{}, false
}

func orNone(s string) string {
	if s == "" {
		return "(no owner)"
	}
	return s
}

// saveOwnedTask writes t if this process still holds its lease, keeping the
// lease expiry the renewals wrote.
func (d *Director) saveOwnedTask(t *Task) error {
	return d.st.Update(func(tx store.Tx) error {
		var cur Task
		ok, err := tx.Get(store.Tasks, store.IDKey(t.ID), &cur)
		if err != nil {
			return err
		}
		if ok && cur.Owner != t.Owner {
			return fmt.Errorf("%w: task %d is now %s's", ErrLeaseLost, t.ID, orNone(cur.Owner))
		}
		if cur.LeaseExpiresAt.After(t.LeaseExpiresAt) {
			t.LeaseExpiresAt = cur.LeaseExpiresAt
		}
		return tx.Put(store.Tasks, store.IDKey(t.ID), t)
	})
}

// holdLease renews the lease of task id every TaskLease/3 until the
// returned stop is called (and returns once renewals have stopped).
func (d *Director) holdLease(id int64) (stop func()) {
	quit, done := rt.NewEvent(d.r), rt.NewEvent(d.r)
	d.group.Go(fmt.Sprintf("director/lease_task_%d", id), func() {
		defer done.Set()
		for !quit.Wait(d.cfg.TaskLease / 3) {
			err := d.st.Update(func(tx store.Tx) error {
				var t Task
				ok, err := tx.Get(store.Tasks, store.IDKey(id), &t)
				if err != nil {
					return err
				}
				if !ok || t.Owner != d.cfg.Owner || t.State != TaskProcessing {
					return ErrLeaseLost
				}
				t.LeaseExpiresAt = d.r.Now().Add(d.cfg.TaskLease)
				return tx.Put(store.Tasks, store.IDKey(id), t)
			})
			if errors.Is(err, ErrLeaseLost) {
				return
			}
		}
	})
	return func() {
		quit.Set()
		done.Wait(0)
	}
}

// takeOver settles a task whose worker's lease lapsed and fails it
// visibly.
func (d *Director) takeOver(t Task) {
	stop := d.holdLease(t.ID)
	defer stop()
	j := &job{d: d, task: &t}
	err := d.recoverTask(j)
	for _, h := range j.held {
		h.release()
	}
	t.EndedAt = d.r.Now()
	t.State, t.Error = TaskError, ReasonLeaseLapsed
	if err != nil {
		t.Error += "; reconciling it failed: " + err.Error()
		j.debugf("reconcile after takeover failed: %v", err)
	}
	_ = d.saveTask(&t)
	d.taskEnded(t.ID)
}

// timeOut ends a task whose worker died as upstream does
// (Knobs.NoTaskTakeover): state timeout, nothing settled, its locks left to
// expire.
func (d *Director) timeOut(t Task) {
	t.EndedAt = d.r.Now()
	t.State, t.Error = TaskTimeout, "the worker running this task stopped renewing its lease; nothing it left in flight was settled"
	_ = d.saveTask(&t)
	d.taskEnded(t.ID)
}

// recoverTask does for one task what restart reconciliation does for every
// task in flight: under the task's locks (taken from the dead worker, plus
// those of the disks and VMs it left in transient states), its intents are
// settled and its dynamic disks brought out of transient states.
func (d *Director) recoverTask(j *job) error {
	ctx := context.Background()
	id := j.task.ID
	var names []string
	var disks []DynamicDisk
	var intents []Intent
	err := d.st.View(func(tx store.Tx) error {
		names, disks, intents = nil, nil, nil
		if err := tx.List(store.Locks, func(key string, raw []byte) error {
			var l LockRecord
			if err := json.Unmarshal(raw, &l); err != nil {
				return err
			}
			if l.TaskID == id {
				names = append(names, key)
			}
			return nil
		}); err != nil {
			return err
		}
		if err := tx.List(store.DynamicDisks, func(_ string, raw []byte) error {
			var dd DynamicDisk
			if err := json.Unmarshal(raw, &dd); err != nil {
				return err
			}
			if dd.TaskID == id && dd.State != DiskReady {
				disks = append(disks, dd)
			}
			return nil
		}); err != nil {
			return err
		}
		return tx.List(store.Intents, func(_ string, raw []byte) error {
			var in Intent
			if err := json.Unmarshal(raw, &in); err != nil {
				return err
			}
			if in.TaskID == id {
				intents = append(intents, in)
			}
			return nil
		})
	})
	if err != nil {
		return err
	}
	for _, dd := range disks {
		names = append(names, diskLock(dd.Name))
		if dd.InstanceID != "" {
			names = append(names, vmLock(dd.InstanceID))
		}
	}
	for _, in := range intents {
		if in.InstanceID != "" {
			names = append(names, vmLock(in.InstanceID))
		}
	}
	slices.Sort(names)
	names = slices.Compact(names)
	if len(names) > 0 {
		h, err := d.locks.acquireShared(names, id, d.cfg.VMLockTimeout, id)
		if err != nil {
			return err
		}
		j.held = append(j.held, h)
		j.debugf("took over %v", names)
	}
	var problems []string
	for _, in := range intents {
		settled, why, err := d.settleIntent(ctx, in)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("settle %s intent %d: %v", in.Op, in.ID, err))
		case !settled:
			in.Unsettled++
			in.Note = why
			j.debugf("%s intent %d left for the next reconciliation: %s", in.Op, in.ID, why)
			if err := d.st.Update(func(tx store.Tx) error { return tx.Put(store.Intents, store.IDKey(in.ID), in) }); err != nil {
				problems = append(problems, err.Error())
			}
		default:
			j.debugf("settled %s intent %d", in.Op, in.ID)
		}
	}
	vmOf := func(cid string) (VM, bool) {
		var v VM
		ok, err := j.load(store.VMs, cid, &v)
		return v, ok && err == nil
	}
	creating := false
	for _, dd := range disks {
		if dd.State == DiskCreating {
			creating = true
		}
		if err := d.settleDisk(ctx, dd, vmOf); err != nil {
			problems = append(problems, fmt.Sprintf("disk %q: %v", dd.Name, err))
			continue
		}
		j.debugf("settled dynamic disk %q (was %s)", dd.Name, dd.State)
	}
	if creating {
		if err := d.orphanUnknownDisks(ctx, j); err != nil {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
}

// orphanUnknownDisks records the IaaS disks the director does not know as
// orphaned disks, after a create_disk in flight was lost: the disk it may
// have made has no record. Another task's create in flight could own an
// unknown disk too, so nothing is recorded while any other disk is being
// created; the next full reconciliation (a director start that owns the
// store alone) finds it then.
func (d *Director) orphanUnknownDisks(ctx context.Context, j *job) error {
	if d.cfg.Inventory == nil {
		j.debugf("no disk inventory: a disk the lost create_disk made, if any, is not found")
		return nil
	}
	var all []cpiv2.DiskCID
	if err := d.reconcileCall(func() error {
		var err error
		all, err = d.cfg.Inventory.ListDisks(ctx)
		return err
	}); err != nil {
		return fmt.Errorf("list IaaS disks: %w", err)
	}
	var orphaned []string
	err := d.st.Update(func(tx store.Tx) error {
		orphaned = nil
		known := map[string]bool{}
		busy := false
		if err := tx.List(store.DynamicDisks, func(_ string, raw []byte) error {
			var dd DynamicDisk
			if err := json.Unmarshal(raw, &dd); err != nil {
				return err
			}
			known[dd.CID] = true
			if dd.State == DiskCreating {
				busy = true
			}
			return nil
		}); err != nil {
			return err
		}
		if busy {
			return nil
		}
		if err := tx.List(store.OrphanedDisks, func(key string, _ []byte) error {
			known[key] = true
			return nil
		}); err != nil {
			return err
		}
		for _, c := range all {
			if known[c.String()] {
				continue
			}
			orphaned = append(orphaned, c.String())
			o := OrphanedDisk{CID: c.String(), Reason: fmt.Sprintf("found in the IaaS after task %d lost its worker during create_disk, unknown to the director", j.task.ID),
				OrphanedAt: d.r.Now()}
			if err := tx.Put(store.OrphanedDisks, c.String(), o); err != nil {
				return err
			}
		}
		return nil
	})
	if len(orphaned) > 0 {
		j.debugf("recorded orphaned disks %v", orphaned)
	}
	return err
}
