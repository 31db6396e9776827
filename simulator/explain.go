package simulator

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/simulator/diskmodel"
	"github.com/cpilab/cpilab/simulator/faults"
)

// Every failure explained: a checker outside the system takes each failed
// operation, as its client saw it (the task's error from GET /tasks/:id,
// or the Director's refusal of the request), and asks whether a failure is
// allowed there:
//
//   - a documented refusal, whatever the disk name's state: a concurrent
//     task holds the name (one whose end its client had not yet seen), the
//     instance has no active VM, a lock wait timed out while another live
//     task held the lock (diskmodel.Refused: no effect);
//   - an invalid request by the workload: detach or attach of an unknown
//     name, provide or attach of a disk attached to another instance,
//     create of a name that exists (diskmodel.Invalid: no effect, and the
//     linearizability check verifies the name's state made it invalid);
//   - a fault on its path: the error carries an injected fault, names an
//     agent that had a fault or runs as the world set it up (an old agent,
//     a VM that restarts on attach), names a VM a delete_vm removed without
//     the Director hearing of it, or a fault fired while the operation
//     was in flight (or shortly before: its effects outlast it by
//     faultReach) (diskmodel.Failed: any prefix of the effects);
//   - a lock renewal stall let a lease lapse and another task took the
//     lock (lapses.go): the task that lost it stops with the loss at its
//     next checkpoint, and until then both act on what the lock guards,
//     so either may fail, on anything (diskmodel.Failed).
//
// Anything else is a violation of InvExplained naming the task, its error
// and the operations it overlapped, and the history records it as
// diskmodel.Unexplained, which no state allows.

// faultReach is how long a fault's effects may outlast it: the Director's
// agent timeouts (30 s), its lock wait (60 s) and the mbus task timeout
// (1 min) laid end to end.
const faultReach = 3 * time.Minute

// refusal is one class of error a task may fail with whatever faults: what
// the Director answers and how the history records it.
type refusal struct {
	re      *regexp.Regexp
	outcome diskmodel.Outcome
	why     string
}

// refusals are the documented refusals, matched against the whole error a
// user reads in the task (GET /tasks/:id "result"), in the reference
// Director's wording (director/jobs_disks.go, jobs_vm.go and locks.go,
// which follow upstream's dynamic-disk jobs and lock helper).
var refusals = []refusal{
	// detach: the name has no disk.
	{regexp.MustCompile("^disk `[^`]+` can not be found in the database$"), diskmodel.Invalid, "detach of an unknown name"},
	// attach: the name has no disk.
	{regexp.MustCompile("^disk `[^`]+` not found$"), diskmodel.Invalid, "attach of an unknown name"},
	// provide, attach: the disk is attached to another VM.
	{regexp.MustCompile("(^|: )disk (`[^`]+` is already )?(is )?attached to a different vm `[^`]+`"), diskmodel.Invalid,
		"the disk is attached to another instance"},
	// create: the name is taken.
	{regexp.MustCompile("^disk `[^`]+` already exists$"), diskmodel.Invalid, "create of a name that exists"},
	// provide/attach: the instance has no active VM (stopped hard, VM deleted, mid-recreate).
	{regexp.MustCompile("^no active vm found for instance `[^`]+`"), diskmodel.Refused, "the instance has no active VM"},
	{regexp.MustCompile("^instance `[^`]+` not found$"), diskmodel.Refused, "the instance is gone"},
	// A VM operation (stop, start, restart, recreate) on an instance the
	// deployment's delete removed.
	{regexp.MustCompile(`^instance "[^"]+" not found$`), diskmodel.Refused, "the instance is gone"},
	// create by deployment and AZ: the deployment was deleted.
	{regexp.MustCompile("^deployment `[^`]+` not found$"), diskmodel.Refused, "the deployment is gone"},
	// A VM operation's client found the deployment gone when it listed
	// the instances (GET /deployments/:name/instances).
	{regexp.MustCompile(`^listing instances: GET /deployments/[^/ ]+/instances: 404 `), diskmodel.Refused, "the deployment is gone"},
	// create by deployment and AZ: no instance of the AZ has a VM.
	{regexp.MustCompile("^no active VM found in deployment `[^`]+` in AZ `[^`]+`$"), diskmodel.Refused, "no instance of the AZ has a VM"},
	// Another task is working on the name (cpilab's disk states).
	{diskBusyRE, diskmodel.Refused, "another task holds the disk name"},
	// The client found no VM to delete (GET /deployments/:name/instances).
	{regexp.MustCompile(`^instance has no VM$`), diskmodel.Refused, "the instance has no VM to delete"},
	// DELETE /vms/:cid of a VM gone since the client looked it up.
	{regexp.MustCompile(`^VM "[^"]+" not found$`), diskmodel.Refused, "the VM was gone"},
	// DELETE /vms/:cid of a VM a concurrent recreate replaced.
	{regexp.MustCompile(`^VM \S+ is no longer the VM of instance \S+$`), diskmodel.Refused, "the VM was replaced"},
	// A lock wait timed out (the holder is checked below).
	{lockTimeoutRE, diskmodel.Refused, "a lock wait timed out"},
}

var (
	// diskBusyRE: the disk name's record says another task is working on it
	// (the task is checked below: one whose client saw it end left the
	// state behind).
	diskBusyRE    = regexp.MustCompile(`^dynamic disk "[^"]+" (is (\w+) \(task (\d+)\)|moved to another VM each time)`)
	lockTimeoutRE = regexp.MustCompile(`^failed to acquire lock \[[^\]]*\] within \S+ \(held by \[(.*)\]\)$`)
	holderTaskRE  = regexp.MustCompile(`task (\d+)`)
)

// span is one operation as its client saw it.
type span struct {
	op        Op
	task      int64
	call, ret time.Time
	done      bool
}

// explanation is the verdict on one failed operation.
type explanation struct {
	outcome diskmodel.Outcome // Invalid, Refused, Failed or Unexplained
	why     string
}

// explain decides whether the failure of the operation in flight from call
// to ret, with the error errText, is allowed.
func (r *workloadRun) explain(o Op, res opResult, call, ret time.Time) explanation {
	errText := res.taskErr
	if res.task == 0 {
		errText = res.detail
	}
	for _, rf := range refusals {
		if !rf.re.MatchString(errText) {
			continue
		}
		if rf.re == lockTimeoutRE {
			if stale := r.staleHolder(errText, call); stale != "" {
				return explanation{outcome: diskmodel.Unexplained, why: stale}
			}
		}
		if rf.re == diskBusyRE {
			if stale := r.staleDiskState(errText, call); stale != "" {
				return explanation{outcome: diskmodel.Unexplained, why: stale}
			}
		}
		return explanation{outcome: rf.outcome, why: rf.why}
	}
	if res.refused != nil {
		return explanation{outcome: diskmodel.Refused, why: "the Director refused the request"}
	}
	if strings.Contains(errText, "injected") {
		return explanation{outcome: diskmodel.Failed, why: "an injected fault on its path"}
	}
	w := r.w
	w.mu.Lock()
	fired := w.fired
	crashes := w.crashes
	var quirk string
	for _, id := range slices.Sorted(maps.Keys(w.quirks)) {
		if quirk == "" && strings.Contains(errText, id) {
			quirk = fmt.Sprintf("agent %s: %s", id, w.quirks[id])
		}
	}
	var goneVM string
	for _, vm := range slices.Sorted(maps.Keys(w.goneVMs)) {
		if agent := w.vmAgents[vm]; goneVM == "" && (strings.Contains(errText, vm) || agent != "" && strings.Contains(errText, agent)) {
			goneVM = vm
		}
	}
	vmAgents := maps.Clone(w.vmAgents)
	w.mu.Unlock()
	if quirk != "" {
		return explanation{outcome: diskmodel.Failed, why: quirk}
	}
	if goneVM != "" {
		return explanation{outcome: diskmodel.Failed, why: fmt.Sprintf("VM %s was deleted by a delete_vm whose success the Director never heard of (a lost response or a crash)", goneVM)}
	}
	for _, f := range fired {
		// A VM's fault (an old agent, a VM that restarts on attach) lasts
		// as long as the VM; an agent's request fault (unresponsive,
		// restarted) excuses what names that agent while its effects last
		// (faultReach past its end), not for the rest of the run: an agent
		// that fails a request long after it came back is not explained by
		// having once been away.
		persistent := f.f.Kind.Seam() == faults.SeamVM
		lasting := !f.at.After(ret) && f.at.Add(f.f.Duration+faultReach).After(call)
		if f.agent != "" && strings.Contains(errText, f.agent) && (persistent || lasting) {
			return explanation{outcome: diskmodel.Failed, why: fmt.Sprintf("fault %v on agent %s", f.f, f.agent)}
		}
	}
	if why := w.stalledTakeover(res.task); why != "" {
		// A stalled lock renewal let a lease lapse and another task took
		// the lock (lapses.go): the task that lost it stops at its next
		// checkpoint with the loss, and until then both tasks act on what
		// the lock guards, so either may fail on what the other changed.
		// That, for those two tasks only, is what the stall explains.
		return explanation{outcome: diskmodel.Failed, why: why}
	}
	if f, ok := faultOnPath(fired, vmAgents, o, errText, call, ret); ok {
		return explanation{outcome: diskmodel.Failed, why: fmt.Sprintf("fault %v on its path while in flight", f.f)}
	}
	if res.task == 0 && crashes > 0 && errText == "director down" {
		return explanation{outcome: diskmodel.Failed, why: "the director had crashed"}
	}
	return explanation{outcome: diskmodel.Unexplained}
}

// staleHolder is why a lock timeout is not allowed: a task said to hold
// the lock is one whose client had seen it end before the waiter was
// called (a lock left behind). "" when every holder may still hold it.
func (r *workloadRun) staleHolder(errText string, call time.Time) string {
	m := lockTimeoutRE.FindStringSubmatch(errText)
	if m == nil {
		return ""
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, h := range holderTaskRE.FindAllStringSubmatch(m[1], -1) {
		id, _ := strconv.ParseInt(h[1], 10, 64)
		for _, sp := range r.spans {
			if sp.task == id && sp.done && sp.ret.Before(call) {
				return fmt.Sprintf("the lock's holder, task %d (%v), had ended before this operation was called", id, sp.op)
			}
		}
	}
	return ""
}

// staleDiskState is why a "the disk is <state> (task N)" refusal is not
// allowed: task N is one whose client had seen it end before this
// operation was called, so the state is a record left behind by a task
// that is over, and the name refuses every operation from then on. ""
// when task N may still be running.
func (r *workloadRun) staleDiskState(errText string, call time.Time) string {
	m := diskBusyRE.FindStringSubmatch(errText)
	if m == nil || m[3] == "" {
		return ""
	}
	id, _ := strconv.ParseInt(m[3], 10, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, sp := range r.spans {
		if sp.task == id && sp.done && sp.ret.Before(call) {
			return fmt.Sprintf("the disk is still %s under task %d (%v), which had ended before this operation was called: a state left behind", m[2], id, sp.op)
		}
	}
	return ""
}

// overlapping lists the operations in flight at some time between call and
// ret, other than the one at index self.
func (r *workloadRun) overlapping(self int, call, ret time.Time) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for i, sp := range r.spans {
		if i == self || sp.call.After(ret) || (sp.done && sp.ret.Before(call)) {
			continue
		}
		s := sp.op.String()
		if sp.task != 0 {
			s = fmt.Sprintf("task %d (%s)", sp.task, s)
		}
		out = append(out, s)
	}
	return out
}

// checkExplained records the verdict on a failed operation and returns the
// outcome its history entry gets.
func (r *workloadRun) checkExplained(self int, o Op, res opResult, call, ret time.Time) diskmodel.Outcome {
	e := r.explain(o, res, call, ret)
	if e.outcome != diskmodel.Unexplained {
		return e.outcome
	}
	what := "the request"
	errText := res.detail
	if res.task != 0 {
		what, errText = fmt.Sprintf("task %d", res.task), res.taskErr
	}
	msg := fmt.Sprintf("%s (%v) failed: %q; no fault was on its path, the request was valid, and the error is no documented refusal",
		what, o, strings.ReplaceAll(errText, r.w.cfg.DataDir, "$DATA"))
	if e.why != "" {
		msg = fmt.Sprintf("%s (%v) failed: %q; %s", what, o, errText, e.why)
	}
	if ov := r.overlapping(self, call, ret); len(ov) > 0 {
		msg += "; it overlapped " + strings.Join(ov, ", ")
	} else {
		msg += "; no other operation overlapped it"
	}
	r.w.addViolation(&Violation{Invariant: InvExplained, Phase: AfterStep, Err: fmt.Errorf("%s", msg)})
	return diskmodel.Unexplained
}

// faultInFlight is a fault that fired while an operation was in flight from
// call to ret, or so shortly before that its effects reach into it.
func faultInFlight(fired []firedFault, call, ret time.Time) (firedFault, bool) {
	for _, f := range fired {
		if !f.at.After(ret) && f.at.Add(f.f.Duration+faultReach).After(call) {
			return f, true
		}
	}
	return firedFault{}, false
}

// faultOnPath is a fault that fired while the operation was in flight, or
// before it by no more than the fault's duration and faultReach, and lies
// on its path: a Director crash or a cloud outage (every operation's path),
// or a fault on an agent, VM (or the VM's agent) or disk the failure's
// error names, or on the create_disk of the operation's disk name. A fault elsewhere in the cloud
// at the same time explains nothing: with the default faults some fault
// fires every few seconds somewhere, and a window alone would excuse
// almost any failure.
func faultOnPath(fired []firedFault, vmAgents map[string]string, o Op, errText string, call, ret time.Time) (firedFault, bool) {
	for _, f := range fired {
		if f.at.After(ret) || !f.at.Add(f.f.Duration+faultReach).After(call) {
			continue
		}
		switch {
		case f.f.Kind == faults.DirectorCrash, f.f.Kind == faults.CPIOutage,
			f.agent != "" && strings.Contains(errText, f.agent),
			f.on.vm != "" && strings.Contains(errText, f.on.vm),
			f.on.vm != "" && vmAgents[f.on.vm] != "" && strings.Contains(errText, vmAgents[f.on.vm]),
			f.on.disk != "" && strings.Contains(errText, f.on.disk),
			f.on.name != "" && f.on.name == o.Disk:
			return f, true
		}
	}
	return firedFault{}, false
}

// checkProgress: a provide or attach the Director queued, with no fault on
// its path, ends within taskTimeout of simulated time (a failure must then
// be explained, which checkExplained decides). One whose client gave up
// waiting is kept for progressViolation, which runs once liveness holds (a
// task that never ends is liveness's to report).
func (r *workloadRun) checkProgress(o Op, res opResult, call, ret time.Time) {
	if (o.Kind != OpProvide && o.Kind != OpAttach) || res.task == 0 || res.final {
		return
	}
	w := r.w
	w.mu.Lock()
	fired := w.fired
	w.mu.Unlock()
	if _, ok := faultInFlight(fired, call, ret); ok {
		return
	}
	r.mu.Lock()
	r.late = append(r.late, fmt.Sprintf("task %d (%v) did not end within %s of simulated time (GET /tasks/%d: %s)",
		res.task, o, taskTimeout, res.task, res.state))
	r.mu.Unlock()
}

// progressViolation reports the provides and attaches checkProgress kept.
func (r *workloadRun) progressViolation() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.late) == 0 {
		return nil
	}
	return fmt.Errorf("%s; no fault was on their path", strings.Join(r.late, "; "))
}
