package simulator

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/simulator/simrt"
)

// ---- lapsed leases: a job whose lock another job took must stop ----

// A lock's lease lapses when nothing renews it for a whole lease: the
// Director's renewal thread renews every half lease, so only a stall of
// that thread (faults.LockRenewalStall) lets a job's lease lapse under
// one long step, and a job waiting for the lock then takes it. The job
// that lost it must learn it at its next checkpoint and stop (upstream's
// lock.rb marks its task cancelling): from then on it starts no step.
//
// The world watches what GET /locks shows, at the moment the Director
// records it (director.Config.LockObserver, the hook its own tests use):
// a lock acquired by one task while another task's acquisition of it was
// never released is a takeover. It then reads the old holder's event log
// (GET /tasks/:id/output?type=event), as a user would, and reads it again
// once the run is quiescent: a step started in between is a violation of
// InvLostLockHonoured.

// takeover is one lock taken by a task while another task's lease of it
// had lapsed.
type takeover struct {
	gen      int       // the director generation
	name     string    // the lock
	from     string    // the old holder's acquisition (owner name)
	fromTask int64     // the old holder's task
	to       int64     // the new holder's task
	at       time.Time // when the new holder took it
	stalled  bool      // a lock renewal stall was in force then
	started  int       // the old holder's started steps then (-1: unread)
	released bool      // the old holder has released its acquisition
	toOwner  string    // the new holder's acquisition (owner name)
	toDone   bool      // the new holder has released its acquisition
}

// lockKey is a lock of one director generation (a restarted Director
// starts with an empty lock table).
type lockKey struct {
	gen  int
	name string
}

// lockHolder is the acquisition that holds a lock.
type lockHolder struct {
	owner string
	task  int64
}

// observeLock is director generation gen's Config.LockObserver.
func (w *World) observeLock(gen int, e director.LockEvent) {
	key := lockKey{gen, e.Name}
	w.mu.Lock()
	if w.lockHolders == nil {
		w.lockHolders = map[lockKey]lockHolder{}
	}
	if !e.Acquired {
		if h, ok := w.lockHolders[key]; ok && h.owner == e.Owner {
			delete(w.lockHolders, key)
		}
		for _, t := range w.takeovers {
			if t.gen == gen && t.name == e.Name && t.from == e.Owner {
				t.released = true
			}
			if t.gen == gen && t.name == e.Name && t.toOwner == e.Owner {
				t.toDone = true
			}
		}
		w.mu.Unlock()
		return
	}
	prev, held := w.lockHolders[key]
	w.lockHolders[key] = lockHolder{owner: e.Owner, task: e.TaskID}
	if !held || prev.owner == e.Owner {
		w.mu.Unlock()
		return
	}
	t := &takeover{gen: gen, name: e.Name, from: prev.owner, fromTask: prev.task, to: e.TaskID, toOwner: e.Owner, at: e.At,
		stalled: w.stallInForceLocked(e.At), started: -1}
	w.takeovers = append(w.takeovers, t)
	w.mu.Unlock()
	if n, err := w.startedSteps(prev.task); err == nil {
		w.mu.Lock()
		t.started = n
		w.mu.Unlock()
	}
}

// stallInForceLocked reports whether a lock renewal stall was in force at
// at (w.mu held).
func (w *World) stallInForceLocked(at time.Time) bool {
	for _, f := range w.fired {
		if f.f.Kind == faults.LockRenewalStall && !f.at.After(at) && f.at.Add(f.f.Duration).After(at) {
			return true
		}
	}
	return false
}

// lapsedHolderRunningLocked is a takeover made while a lock renewal stall
// was in force of which either task still holds its acquisition: the old
// holder is still in the step that outlasted its lease, or the new holder
// is still acting on what it found while that step was in flight. Until
// both have released it, two jobs' views of what the lock guards may
// disagree, and the CPI-seam checks of exclusive use (one disk call per
// VM, no delete_vm of a VM with a disk, no attach of a disk attached
// elsewhere, no delete of an attached disk) are excused, as upstream's
// leases fence nothing either. "" when there is none (w.mu held).
func (w *World) lapsedHolderRunningLocked() string {
	for _, t := range w.takeovers {
		if t.stalled && (!t.released || !t.toDone) {
			return fmt.Sprintf("task %d took %s from task %d, whose lease lapsed while the lock renewal was stalled, and they have not both released it yet",
				t.to, t.name, t.fromTask)
		}
	}
	return ""
}

// stalledTakeover says how task took part in a takeover made while a
// lock renewal stall was in force: it lost a lock to another task, or
// took one from a task whose step was still in flight. "" when it did
// not.
func (w *World) stalledTakeover(task int64) string {
	if task == 0 {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range w.takeovers {
		switch {
		case !t.stalled:
		case t.fromTask == task:
			return fmt.Sprintf("task %d took its lock %s while the lock renewal was stalled (its lease lapsed)", t.to, t.name)
		case t.to == task:
			return fmt.Sprintf("it took lock %s from task %d, whose lease lapsed while the lock renewal was stalled", t.name, t.fromTask)
		}
	}
	return ""
}

// addSeamViolation adds v, a CPI-seam check's violation, unless a stalled
// takeover's old holder is still running (lapsedHolderRunningLocked).
func (w *World) addSeamViolation(v *Violation) {
	w.mu.Lock()
	why := w.lapsedHolderRunningLocked()
	w.mu.Unlock()
	if why != "" {
		simrt.Annotate(w.s, fmt.Sprintf("excused %s: %v: %s", v.Invariant, v.Err, why))
		return
	}
	w.addViolation(v)
}

// startedSteps counts the steps task id started, as its event log (GET
// /tasks/:id/output?type=event) lists them.
func (w *World) startedSteps(id int64) (int, error) {
	path := "/tasks/" + strconv.FormatInt(id, 10) + "/output?type=event"
	body, err := w.apiGetBody(path)
	if err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var ev struct {
			State string `json:"state"`
		}
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return 0, fmt.Errorf("GET %s: %w", path, err)
		}
		if ev.State == "started" {
			n++
		}
	}
	return n, sc.Err()
}

// lostLockViolation, once the run is quiescent, reports a task that
// started a step after another task took one of its locks.
func (w *World) lostLockViolation() error {
	w.mu.Lock()
	tos := append([]*takeover(nil), w.takeovers...)
	w.mu.Unlock()
	var out []string
	for _, t := range tos {
		if t.started < 0 {
			continue
		}
		n, err := w.startedSteps(t.fromTask)
		if err != nil || n <= t.started {
			continue
		}
		out = append(out, fmt.Sprintf("task %d started %d step(s) after task %d took its lock %s (its lease had lapsed): a job that lost a lock must stop at its next checkpoint",
			t.fromTask, n-t.started, t.to, t.name))
	}
	if len(out) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(out, "; "))
}
