package simulator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"math"
	"net/http"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/simulator/diskmodel"
	"github.com/cpilab/cpilab/vmroot"
)

// AsViolation returns the *Violation in err's chain.
func AsViolation(err error) (*Violation, bool) {
	var v *Violation
	ok := errors.As(err, &v)
	return v, ok
}

// ---- CPI-seam checks: at the moment of the call, against the oracle and
// the VM roots; never the director's own records ----

func (w *World) oracleDisk(cid string) (fakeiaas.Disk, bool) {
	dc, err := cpiv2.NewDiskCID(cid)
	if err != nil {
		return fakeiaas.Disk{}, false
	}
	d, err := w.Cloud.Disk(context.Background(), dc)
	return d, err == nil
}

// checkAttach: attach_disk of a disk attached to another VM.
func (w *World) checkAttach(vm, disk string) {
	if d, ok := w.oracleDisk(disk); ok && !d.VMCID.IsZero() && d.VMCID.String() != vm {
		w.addSeamViolation(&Violation{Invariant: InvAttachElsewhere, Phase: AfterStep,
			Err: fmt.Errorf("attach_disk(%s, %s) called while the IaaS has %s attached to %s", vm, disk, disk, d.VMCID)})
	}
}

// checkDeleteDisk: delete_disk of an attached disk.
func (w *World) checkDeleteDisk(disk string) {
	if d, ok := w.oracleDisk(disk); ok && !d.VMCID.IsZero() {
		w.addSeamViolation(&Violation{Invariant: InvDeleteAttachedDisk, Phase: AfterStep,
			Err: fmt.Errorf("delete_disk(%s) called while the IaaS has it attached to %s", disk, d.VMCID)})
	}
}

// checkDeleteVM: delete_vm while the IaaS has a dynamic disk attached to
// the VM. The simulated deployment has no persistent disks, so every disk
// the IaaS attaches is a dynamic disk. What the director records does not
// matter: a director that marks a disk detached without detaching it is
// caught here.
func (w *World) checkDeleteVM(vm string) {
	st, err := w.Cloud.State(context.Background())
	if err != nil {
		return
	}
	for _, v := range st.VMs {
		if v.CID.String() != vm || len(v.Disks) == 0 {
			continue
		}
		cids := make([]string, len(v.Disks))
		for i, d := range v.Disks {
			cids[i] = d.String()
		}
		w.addSeamViolation(&Violation{Invariant: InvDeleteVMWithDisk, Phase: AfterStep,
			Err: fmt.Errorf("delete_vm(%s) called while the IaaS has %s attached to it", vm, strings.Join(cids, ", "))})
	}
}

// ---- views ----

// View is what the checkers see, taken from outside the system: the
// fakeiaas oracle, the agents' VM roots, the Director's HTTP API as its user
// sees it, and the workload's own record of what it asked and was told.
// Nothing in it comes from the Director's store.
type View struct {
	// IaaS is the fakeiaas oracle's state.
	IaaS fakeiaas.State
	// APIErr is the error reading the Director's API at quiescence (it is
	// down); the API fields below are then empty.
	APIErr error
	// Disks is GET /dynamic_disks.
	Disks []director.DiskInfo
	// Orphans is GET /disks?orphaned=true.
	Orphans []director.OrphanedDisk
	// Instances is GET /deployments/:name/instances.
	Instances []director.InstanceInfo
	// OpenTasks is GET /tasks?state=queued,processing.
	OpenTasks []director.TaskView
	// Given are the tasks the Director gave the workload, each as
	// GET /tasks/:id answered last.
	Given []GivenTask
	// InstanceIDs are the deployment's instance IDs by index (what
	// InstanceLabel numbers).
	InstanceIDs []string
	// Deployment is the deployment the workload works in.
	Deployment string
	// Links maps VM CID → disk CID → symlink target (in-guest), for every
	// IaaS VM, read from the VM's root.
	Links map[string]map[string]string
	// LinkOK maps VM CID → disk CID → whether the symlink, followed inside
	// the VM's root, reaches that disk's bytes (the device the IaaS
	// attached for it); false for a dangling link or one to another disk.
	LinkOK map[string]map[string]bool
	// Unlinked are the disk names where a provide or attach that failed on
	// an injected CPI fault, or whose outcome is unknown, came after the
	// name's last OK disk operation (by call; VM operations aside): it may
	// have attached the disk and stopped before its agent linked it (a
	// failed set_disk_metadata comes between the two, as upstream's).
	Unlinked map[string]bool
	// LinkDirs maps VM CID → the mode of its dynamic disks directory
	// (/var/vcap/data/dynamic_disks), for each VM root that has one.
	LinkDirs map[string]fs.FileMode
	// Excused are the agent IDs whose agent or messages had a fault.
	Excused map[string]bool
	// LostDisks are disk CIDs made by a create_disk whose response was lost.
	LostDisks map[string]bool
	// Crashes counts director crashes.
	Crashes int
	// LastOK maps a disk name to the OK provide or attach that is the last
	// operation on that name, when there is one: the instance it named and
	// the disk CID the API answered.
	LastOK map[string]Promise
	// InDoubt are the disk names whose record may disagree with the
	// IaaS because a delete or detach of the name failed, or its client
	// never learned its outcome, with no OK operation on the name since
	// that settles it (namesInDoubt). Upstream's delete and detach jobs
	// (jobs/dynamic_disks/delete_dynamic_disk.rb, detach_dynamic_disk.rb)
	// change the record only once the CPI call returns, so a call the
	// cloud applied with its answer lost, then a failure of the calls
	// made again, leaves a record of a disk the IaaS deleted or detached;
	// the next delete or detach of the name settles it. A provide, attach
	// or VM operation that failed on a CPI fault leaves an attachment in
	// doubt the same way (nameInDoubt).
	InDoubt map[string]Doubt
}

// GivenTask is a task the Director queued for a workload operation.
type GivenTask struct {
	// Op is the operation.
	Op Op
	// ID is the task ID the API answered.
	ID int64
	// Task is GET /tasks/:id's last answer; Err the error it gave instead.
	Task director.TaskView
	Err  error
}

// Promise is what an OK provide or attach told its client: the disk CID
// the API answered is attached to the instance, with its symlink.
type Promise struct {
	// Instance is the instance label (InstanceLabel).
	Instance string
	// CID is the disk CID the API answered.
	CID string
	// Reattached counts the recreates that re-attached the disk since.
	Reattached int
	// Meta is the metadata serial the operation sent (OpMetadata), 0 for
	// none.
	Meta int
}

// SafetyView is the part of View the after-step checks need.
func (w *World) SafetyView() View {
	st, _ := w.Cloud.State(context.Background())
	return View{IaaS: st}
}

// tasksOpen reports whether the API lists a queued or processing task, or
// cannot be read.
func (w *World) tasksOpen() bool {
	var open []director.TaskView
	err := w.apiGet("/tasks?state=queued,processing&limit=1", &open)
	return err != nil || len(open) > 0
}

// livenessView is the part of View checkLiveness needs.
func (w *World) livenessView(given []GivenTask) View {
	var v View
	v.APIErr = w.apiGet("/tasks?state=queued,processing&limit="+strconv.Itoa(director.MaxTaskListLimit), &v.OpenTasks)
	for _, g := range given {
		g.Task, g.Err = w.Task(g.ID)
		v.Given = append(v.Given, g)
	}
	return v
}

// QuiescentView takes the whole view: history gives LastOK; given are the
// workload's tasks as GET /tasks/:id last answered (livenessView reads
// them).
func (w *World) QuiescentView(history []porcupine.Operation, given []GivenTask) View {
	v := w.recordsView(w.SafetyView(), lastOK(history), namesInDoubt(history))
	v.APIErr = errors.Join(v.APIErr, w.apiGet("/tasks?state=queued,processing&limit="+strconv.Itoa(director.MaxTaskListLimit), &v.OpenTasks))
	v.Given = given
	v.Unlinked = unlinkedNames(history)
	v.Links = map[string]map[string]string{}
	v.LinkOK = map[string]map[string]bool{}
	v.LinkDirs = map[string]fs.FileMode{}
	for _, vm := range v.IaaS.VMs {
		links, mode, found := w.agentLinkDir(vm.Root)
		if found {
			v.LinkDirs[vm.CID.String()] = mode
		}
		v.Links[vm.CID.String()] = links
		ok := map[string]bool{}
		for cid := range links {
			ok[cid] = w.linkReachesDisk(vm.Root, cid)
		}
		v.LinkOK[vm.CID.String()] = ok
	}
	w.mu.Lock()
	v.Excused = cloneSet(w.excused)
	w.mu.Unlock()
	return v
}

// recordsView is the part of View the leak and records checks need: the
// oracle (v, a SafetyView the caller has taken), the API's disks, orphans
// and instances, the workload's promises and its names in doubt.
func (w *World) recordsView(v View, promised map[string]Promise, doubt map[string]Doubt) View {
	v.InstanceIDs = slices.Clone(w.Instances)
	v.Deployment = w.Deployment
	insErr := w.apiGet("/deployments/"+w.Deployment+"/instances", &v.Instances)
	if ae := (*apiError)(nil); errors.As(insErr, &ae) && ae.Status == http.StatusNotFound {
		insErr = nil // the deployment was deleted: no instances
	}
	v.APIErr = errors.Join(w.apiGet("/dynamic_disks", &v.Disks), w.apiGet("/disks?orphaned=true", &v.Orphans), insErr)
	w.mu.Lock()
	v.LostDisks = cloneSet(w.lostDisks)
	v.Crashes = w.crashes
	w.mu.Unlock()
	v.LastOK = promised
	v.InDoubt = doubt
	return v
}

func cloneSet(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// readLinks lists the dynamic disk symlinks in a VM root (on the world's
// file system, the cloud's).
func (w *World) readLinks(root string) map[string]string {
	links, _, _ := w.agentLinkDir(root)
	return links
}

// agentLinkDir reads a VM root's dynamic disks directory in one pass: its
// symlinks (name → target) and, if it is there, its mode (not followed if
// it is a symlink itself).
func (w *World) agentLinkDir(root string) (links map[string]string, mode fs.FileMode, found bool) {
	links = map[string]string{}
	r, err := w.Cloud.Files().Open(root)
	if err != nil {
		return links, 0, false
	}
	defer r.Close()
	guest := path.Dir(agent.DynamicDiskLink("x"))
	if fi, err := r.Lstat(guest); err == nil {
		mode, found = fi.Mode(), true
	}
	dir, err := r.Resolve(guest)
	if err != nil {
		return links, mode, found
	}
	ents, err := r.ReadDir(dir)
	if err != nil {
		return links, mode, found
	}
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		if t, err := r.Readlink(path.Join(dir, e.Name())); err == nil {
			links[e.Name()] = t
		}
	}
	return links, mode, found
}

// unlinkedNames is View.Unlinked from the history: walking each name's
// disk operations by call, a provide or attach that failed on an injected
// fault, or whose outcome is unknown, may leave the disk attached and
// unlinked; an OK disk operation ends that (it links, detaches or deletes
// the disk); a failed detach or delete leaves it as it was.
func unlinkedNames(history []porcupine.Operation) map[string]bool {
	ops := slices.Clone(history)
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	out := map[string]bool{}
	for _, op := range ops {
		in := op.Input.(diskmodel.Input)
		if in.Kind == diskmodel.Evict || in.Kind == diskmodel.Reattach {
			continue // a VM operation is recorded on every name, whichever instance has the disk
		}
		linking := in.Kind == diskmodel.Provide || in.Kind == diskmodel.Attach
		switch o, done := op.Output.(diskmodel.Output); {
		case !done || o.Outcome == diskmodel.Unknown:
			out[in.Disk] = out[in.Disk] || linking
		case o.Outcome == diskmodel.OK:
			out[in.Disk] = false
		case o.Outcome == diskmodel.Failed && o.Injected && linking:
			out[in.Disk] = true
		}
	}
	for name, ok := range out {
		if !ok {
			delete(out, name)
		}
	}
	return out
}

// cloudDiskNames maps each cloud disk's CID to the name its create_disk's
// cloud_properties gave it (the Director passes the disk's name there).
func cloudDiskNames(disks []fakeiaas.Disk) map[string]string {
	out := map[string]string{}
	for _, d := range disks {
		var p struct {
			Name string `json:"name"`
		}
		if json.Unmarshal(d.CloudProperties, &p) == nil && p.Name != "" {
			out[d.CID.String()] = p.Name
		}
	}
	return out
}

// linkDirPerm is the dynamic disks directory's mode, as upstream's agent
// makes it (SetupDataDir, persistentDiskPermissions).
const linkDirPerm fs.FileMode = 0o700

// lastOK maps each disk name whose last operation (by call) is an OK
// provide or attach, every operation on it having returned, to what that
// operation promised. An operation on the name that was still running when
// that one was called may take effect after it (a hard stop queued behind
// an attach detaches the disk again), so the name then has no promise; an
// eviction from another VM is no such operation, as it leaves a disk
// attached elsewhere alone. OK recreates of the promised instance that
// re-attach its disks, each called after the one before returned, keep
// the promise: with nothing else on the name, the disk cannot have moved.
// Evictions and re-attaching recreates of other instances, whatever their
// outcome and whenever called, are left out (namePromise).
func lastOK(history []porcupine.Operation) map[string]Promise {
	byName := map[string][]porcupine.Operation{}
	for _, op := range history {
		in := op.Input.(diskmodel.Input)
		byName[in.Disk] = append(byName[in.Disk], op)
	}
	out := map[string]Promise{}
	for name, ops := range byName {
		if p, ok := namePromise(ops); ok {
			out[name] = p
		}
	}
	return out
}

// namePromise is lastOK's promise for one name, given its operations: none
// while one of them has not returned (or its outcome is unknown), leaving
// out evictions and re-attaching recreates of other VMs than the one the
// name's last provide or attach named: whatever their outcome, they detach
// only the disks of their own VM, and a disk promised to this one (no
// other operation on the name overlapping) is not among them.
func namePromise(ops []porcupine.Operation) (Promise, bool) {
	// The VM of the name's last operation, by call, that is no VM
	// operation.
	vm, last, found := "", int64(0), false
	for _, op := range ops {
		in := op.Input.(diskmodel.Input)
		if in.Kind == diskmodel.Evict || in.Kind == diskmodel.Reattach {
			continue
		}
		if !found || op.Call > last {
			vm, last, found = in.VM, op.Call, true
		}
	}
	kept := make([]porcupine.Operation, 0, len(ops))
	for _, op := range ops {
		in := op.Input.(diskmodel.Input)
		if (in.Kind == diskmodel.Evict || in.Kind == diskmodel.Reattach) && found && in.VM != vm {
			continue
		}
		if op.Output == nil || op.Output.(diskmodel.Output).Outcome == diskmodel.Unknown {
			return Promise{}, false
		}
		kept = append(kept, op)
	}
	if len(kept) == 0 {
		return Promise{}, false
	}
	slices.SortStableFunc(kept, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	return promiseOf(kept)
}

// Doubt is what a name's record may get wrong after a delete or detach
// in doubt (View.InDoubt).
type Doubt uint8

const (
	// DoubtGone: the record may name a disk the IaaS deleted (a delete
	// in doubt).
	DoubtGone Doubt = 1 << iota
	// DoubtDetached: the record may list the disk attached where the IaaS
	// has it detached (a delete or detach in doubt).
	DoubtDetached
)

// namesInDoubt is View.InDoubt of a history.
func namesInDoubt(history []porcupine.Operation) map[string]Doubt {
	byName := map[string][]porcupine.Operation{}
	for _, op := range history {
		in := op.Input.(diskmodel.Input)
		byName[in.Disk] = append(byName[in.Disk], op)
	}
	out := map[string]Doubt{}
	for name, ops := range byName {
		if d := nameInDoubt(ops); d != 0 {
			out[name] = d
		}
	}
	return out
}

// nameInDoubt is what one name's record may get wrong, given its
// operations: a delete that failed, or whose outcome its client did not
// learn (a task a crash cut short, one still running), leaves DoubtGone
// and DoubtDetached, a detach DoubtDetached, until an OK operation called
// after it returned settles them: a delete, create, provide or attach
// both, a detach DoubtDetached. A provide or attach, or a VM operation of
// an instance one was called on, that failed on an injected CPI fault or
// whose outcome is unknown leaves DoubtDetached too: its detach_disk (the
// reference's undo of an attach, or a VM operation detaching its disks,
// as upstream's DetachDynamicDiskStep) may have failed in doubt after the
// cloud applied it, or its attach_disk may never have been applied while
// the record keeps the attachment in doubt.
func nameInDoubt(ops []porcupine.Operation) Doubt {
	ops = slices.Clone(ops)
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	var doubt Doubt
	since := map[Doubt]int64{}
	raise := func(d Doubt, at int64) {
		for _, f := range []Doubt{DoubtGone, DoubtDetached} {
			if d&f != 0 {
				doubt |= f
				since[f] = max(since[f], at)
			}
		}
	}
	on := map[string]bool{} // instances a provide, attach or re-attach of the name was called on
	for _, op := range ops {
		in := op.Input.(diskmodel.Input)
		var raised, cpiFault Doubt
		switch in.Kind {
		case diskmodel.Delete:
			raised = DoubtGone | DoubtDetached
		case diskmodel.Detach:
			raised = DoubtDetached
		case diskmodel.Provide, diskmodel.Attach:
			cpiFault = DoubtDetached
			on[in.VM] = true
		case diskmodel.Evict, diskmodel.Reattach:
			if on[in.VM] {
				cpiFault = DoubtDetached
			}
			if in.Kind == diskmodel.Reattach {
				on[in.VM] = true
			}
		}
		if op.Output == nil {
			raise(raised|cpiFault, math.MaxInt64) // still running: in doubt until it returns
			continue
		}
		switch out := op.Output.(diskmodel.Output); {
		case out.Outcome == diskmodel.Unknown || out.Outcome == diskmodel.Failed && out.Injected:
			raise(raised|cpiFault, op.Return)
		case out.Outcome == diskmodel.Failed:
			raise(raised, op.Return)
		case out.Outcome == diskmodel.OK:
			settled := DoubtGone | DoubtDetached
			switch in.Kind {
			case diskmodel.Detach:
				settled = DoubtDetached
			case diskmodel.Evict, diskmodel.Reattach:
				settled = 0
			}
			for _, f := range []Doubt{DoubtGone, DoubtDetached} {
				if settled&f != 0 && op.Call > since[f] {
					doubt &^= f
				}
			}
		}
	}
	return doubt
}

// promises is lastOK kept up to date as a run's operations are called and
// return: each call works out again only the names whose operations changed
// since the one before. It keeps namesInDoubt the same way.
type promises struct {
	version map[string]int // per name, the recorder's version its entry is of
	promise map[string]Promise
	doubt   map[string]Doubt
}

// lastOK is lastOK(rec.History()) and namesInDoubt(rec.History()).
func (c *promises) lastOK(rec *diskmodel.Recorder) (map[string]Promise, map[string]Doubt) {
	if c.version == nil {
		c.version, c.promise, c.doubt = map[string]int{}, map[string]Promise{}, map[string]Doubt{}
	}
	for name, v := range rec.NameVersions() {
		if c.version[name] == v {
			continue
		}
		c.version[name] = v
		ops := rec.NameHistory(name)
		if d := nameInDoubt(ops); d != 0 {
			c.doubt[name] = d
		} else {
			delete(c.doubt, name)
		}
		if p, ok := namePromise(ops); ok {
			c.promise[name] = p
		} else {
			delete(c.promise, name)
		}
	}
	out := make(map[string]Promise, len(c.promise))
	for name, p := range c.promise {
		out[name] = p
	}
	return out, maps.Clone(c.doubt)
}

// promiseOf is the promise of one name's operations, sorted by call: the
// last OK provide or attach, followed only by OK re-attaching recreates of
// its instance one after the other, and overlapped by no other operation
// but evictions from other VMs.
func promiseOf(ops []porcupine.Operation) (Promise, bool) {
	ok := func(op porcupine.Operation) bool { return op.Output.(diskmodel.Output).Outcome == diskmodel.OK }
	i := len(ops) - 1
	for i > 0 && ops[i].Input.(diskmodel.Input).Kind == diskmodel.Reattach && ok(ops[i]) && ops[i-1].Return < ops[i].Call {
		i--
	}
	p := ops[i]
	in := p.Input.(diskmodel.Input)
	o := p.Output.(diskmodel.Output)
	if (in.Kind != diskmodel.Provide && in.Kind != diskmodel.Attach) || !ok(p) || o.CID == "" {
		return Promise{}, false
	}
	for _, r := range ops[i+1:] {
		if r.Input.(diskmodel.Input).VM != in.VM {
			return Promise{}, false
		}
	}
	for _, op := range ops[:i] {
		other := op.Input.(diskmodel.Input)
		if op.Return < p.Call || (other.Kind == diskmodel.Evict || other.Kind == diskmodel.Reattach) && other.VM != in.VM {
			continue
		}
		return Promise{}, false
	}
	return Promise{Instance: in.VM, CID: o.CID, Reattached: len(ops) - 1 - i, Meta: in.Meta}, true
}

// linkReachesDisk reports whether the dynamic disk symlink for cid in a VM
// root, followed inside that root (an absolute target is a guest path),
// reaches the disk's backing file: fakeiaas lays each attached disk's
// device out as a hard link to it, so only the device the IaaS attached
// for that disk on that VM does.
func (w *World) linkReachesDisk(root, cid string) bool {
	dc, err := cpiv2.NewDiskCID(cid)
	if err != nil {
		return false
	}
	files := w.Cloud.Files()
	want, err := files.Lstat(w.Cloud.DiskFile(dc))
	if err != nil {
		return false
	}
	host, ok := resolveInRoot(files, root, agent.DynamicDiskLink(cid))
	if !ok {
		return false
	}
	got, err := files.Lstat(host)
	return err == nil && got.Mode().IsRegular() && vmroot.SameFile(want, got)
}

// resolveInRoot follows guest path p's symlinks inside root, as the guest
// would (the project's one VM-root resolver, vmroot: absolute targets are
// guest paths, ".." never leaves the root), and returns the host path it
// ends at.
func resolveInRoot(files vmroot.Host, root, p string) (string, bool) {
	r, err := files.Open(root)
	if err != nil {
		return "", false
	}
	defer r.Close()
	guest, err := r.Resolve(p)
	if err != nil {
		return "", false
	}
	return filepath.Join(root, filepath.FromSlash(guest)), true
}

// ---- the checkers ----

// SafetyCheckers are checked after every workload step.
var SafetyCheckers = []Checker[View]{
	Invariant(InvDiskOnOneVM, func(v View) error {
		seen := map[string]string{}
		for _, vm := range v.IaaS.VMs {
			for _, d := range vm.Disks {
				if other, ok := seen[d.String()]; ok {
					return fmt.Errorf("disk %s is attached to %s and %s", d, other, vm.CID)
				}
				seen[d.String()] = vm.CID.String()
			}
		}
		return nil
	}),
}

// QuiescentCheckers are checked once faults have healed and every task has
// ended (task-liveness is checked before them, by the run).
var QuiescentCheckers = []Checker[View]{
	Invariant(InvNoLeak, checkNoLeak),
	Invariant(InvRecords, checkRecords),
	Invariant(InvLinks, checkLinks),
}

// IdleCheckers are checked whenever the workload is idle (every operation
// answered, every task it was given seen to its end, the Director up): what the API
// lists must agree with the IaaS then too, not only once faults have
// healed, or a later operation on the name could mend a record a task
// left wrong before the end. Faults may still be active, so the agents'
// symlinks are left to the quiescent check.
var IdleCheckers = []Checker[View]{
	Invariant(InvNoLeak, checkNoLeak),
	Invariant(InvRecords, checkRecords),
}

// checkNoLeak: every IaaS disk is one the Director's API lists, as a
// dynamic disk or an orphan, or one whose create_disk response was lost.
func checkNoLeak(v View) error {
	if v.APIErr != nil {
		return fmt.Errorf("the Director's API cannot be read: %w", v.APIErr)
	}
	known := map[string]bool{}
	for _, d := range v.Disks {
		known[d.CID] = true
	}
	for _, o := range v.Orphans {
		known[o.CID] = true
	}
	var leaked []string
	for _, d := range v.IaaS.Disks {
		if c := d.CID.String(); !known[c] && !v.LostDisks[c] {
			leaked = append(leaked, c)
		}
	}
	if len(leaked) > 0 {
		return fmt.Errorf("IaaS disks that neither GET /dynamic_disks nor GET /disks?orphaned=true lists: %s", strings.Join(leaked, ", "))
	}
	return nil
}

// instanceByName maps "group/id" (DiskInfo.Instance) and the bare ID to
// the API's instance.
func instanceByName(ins []director.InstanceInfo) map[string]director.InstanceInfo {
	out := map[string]director.InstanceInfo{}
	for _, in := range ins {
		out[in.Job+"/"+in.ID] = in
		out[in.ID] = in
	}
	return out
}

// checkRecords compares what the Director's API lists with the IaaS, and
// the workload's promises with both: every listed disk exists in the IaaS,
// attached to the active VM of the instance the list names (detached when
// it names none), of the size the API lists and the workload asked for; and the disk a name's last operation, an OK provide or
// attach, answered is still the one listed under that name, attached to
// that instance's VM.
func checkRecords(v View) error {
	if v.APIErr != nil {
		return fmt.Errorf("the Director's API cannot be read: %w", v.APIErr)
	}
	iaas := map[string]fakeiaas.Disk{}
	for _, d := range v.IaaS.Disks {
		iaas[d.CID.String()] = d
	}
	ins := instanceByName(v.Instances)
	vmOf := func(name string) string {
		if in, ok := ins[name]; ok && in.CID != nil {
			return *in.CID
		}
		return ""
	}
	listed := map[string]director.DiskInfo{}
	var bad []string
	for _, dd := range v.Disks {
		listed[dd.Name] = dd
		d, ok := iaas[dd.CID]
		inst := ""
		if dd.Instance != nil {
			inst = *dd.Instance
		}
		switch {
		case !ok && v.InDoubt[dd.Name]&DoubtGone != 0:
			// A delete of the name failed after the cloud may have
			// deleted the disk; the next OK delete settles it.
		case !ok:
			bad = append(bad, fmt.Sprintf("%s: disk %s is not in the IaaS", dd.Name, dd.CID))
		case inst == "" && !d.VMCID.IsZero():
			bad = append(bad, fmt.Sprintf("%s (%s): the API lists it detached, the IaaS has it attached to %s", dd.Name, dd.CID, d.VMCID))
		case inst != "" && d.VMCID.IsZero() && v.InDoubt[dd.Name]&DoubtDetached != 0:
			// A detach, delete, attach or VM operation failed after the
			// cloud may have detached the disk (or before it attached it);
			// the next OK detach settles it.
		case inst != "" && d.VMCID.String() != vmOf(inst):
			bad = append(bad, fmt.Sprintf("%s (%s): the API lists it on instance %s, whose VM is %q; the IaaS has it attached to %q",
				dd.Name, dd.CID, inst, vmOf(inst), d.VMCID))
		case dd.SizeMiB != d.SizeMiB || d.SizeMiB != DiskMiBOf(dd.Name):
			bad = append(bad, fmt.Sprintf("%s (%s): the API lists it as %d MiB, the IaaS disk is %d MiB; the workload asked for %d MiB",
				dd.Name, dd.CID, dd.SizeMiB, d.SizeMiB, DiskMiBOf(dd.Name)))
		}
	}
	names := slices.Sorted(maps.Keys(v.LastOK))
	for _, name := range names {
		p := v.LastOK[name]
		id := p.Instance
		if i, err := strconv.Atoi(strings.TrimPrefix(p.Instance, "i")); err == nil && i >= 0 && i < len(v.InstanceIDs) {
			id = v.InstanceIDs[i]
		}
		why := fmt.Sprintf("the last operation on %s, a provide or attach of instance %s, answered %s", name, p.Instance, p.CID)
		if p.Reattached > 0 {
			why = fmt.Sprintf("the last provide or attach on %s, of instance %s, answered %s, and every operation on it since was a recreate of %s that re-attached its disks (%d)",
				name, p.Instance, p.CID, p.Instance, p.Reattached)
		}
		dd, ok := listed[name]
		d, inIaaS := iaas[p.CID]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s: GET /dynamic_disks does not list it, but %s", name, why))
		case dd.CID != p.CID:
			bad = append(bad, fmt.Sprintf("%s: GET /dynamic_disks lists disk %s, but %s", name, dd.CID, why))
		case !inIaaS:
			bad = append(bad, fmt.Sprintf("%s: the IaaS has no disk %s, but %s", name, p.CID, why))
		case d.VMCID.IsZero() || d.VMCID.String() != vmOf(id):
			bad = append(bad, fmt.Sprintf("%s: the IaaS has %s attached to %q, not to instance %s's VM %q, but %s",
				name, p.CID, d.VMCID, p.Instance, vmOf(id), why))
		}
	}
	bad = append(bad, checkDiskContents(v, iaas)...)
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// checkLinks compares the agents' symlinks with the IaaS attachments, from
// the oracle and the VM roots alone: every disk the IaaS attaches to a VM
// has a symlink on that VM reaching its device, and no symlink names a disk
// the IaaS does not attach there. A missing or wrong symlink is excused by
// an agent or mbus fault on that VM or a director crash, unless the last
// operation on the disk's name was an OK provide or attach answering that
// disk's CID: that answer promised the symlink.
func checkLinks(v View) error {
	promised := map[string]string{} // disk CID → the name whose last OK provide answered it
	for name, p := range v.LastOK {
		promised[p.CID] = name
	}
	var bad []string
	names := cloudDiskNames(v.IaaS.Disks)
	for _, vm := range v.IaaS.VMs {
		links := v.Links[vm.CID.String()]
		excused := v.Excused[vm.AgentID]
		for _, d := range vm.Disks {
			target, linked := links[d.String()]
			if linked && v.LinkOK[vm.CID.String()][d.String()] {
				continue
			}
			name, isPromised := promised[d.String()]
			if !isPromised && (excused || v.Crashes > 0) {
				continue
			}
			if !linked && !isPromised && v.Unlinked[names[d.String()]] {
				continue // the last provide or attach of its name stopped before the agent linked it
			}
			why := "no agent or mbus fault explains it"
			if isPromised {
				why = fmt.Sprintf("the last operation on %s, a provide or attach, succeeded", name)
			}
			if linked {
				bad = append(bad, fmt.Sprintf("%s is attached to %s but its agent's symlink points at %s, which is not that disk's device (%s)",
					d, vm.CID, target, why))
			} else {
				bad = append(bad, fmt.Sprintf("%s (%s) is attached to %s but its agent has no symlink (%s)", d, names[d.String()], vm.CID, why))
			}
		}
		var cids []string
		for c := range links {
			cids = append(cids, c)
		}
		slices.Sort(cids)
		for _, c := range cids {
			if !slices.ContainsFunc(vm.Disks, func(x cpiv2.DiskCID) bool { return x.String() == c }) && !excused {
				bad = append(bad, fmt.Sprintf("%s has a symlink for %s, which the IaaS does not attach to it (dangling)", vm.CID, c))
			}
		}
		if mode, ok := v.LinkDirs[vm.CID.String()]; ok && (!mode.IsDir() || mode.Perm() != linkDirPerm) {
			bad = append(bad, fmt.Sprintf("%s: its agent's %s is %v, want a directory of mode %v (only root reads which device each disk is)",
				vm.CID, path.Dir(agent.DynamicDiskLink("x")), mode, fs.ModeDir|linkDirPerm))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// checkLiveness: the API shows no queued or processing task, and every
// task the Director gave the workload has ended, as GET /tasks/:id shows it.
func checkLiveness(v View) error {
	if v.APIErr != nil {
		return fmt.Errorf("the Director's API cannot be read: %w", v.APIErr)
	}
	var open []string
	seen := map[int64]bool{}
	for _, g := range v.Given {
		seen[g.ID] = true
		switch {
		case g.Err != nil:
			open = append(open, fmt.Sprintf("task %d (%v): GET /tasks/%d answers %v", g.ID, g.Op, g.ID, g.Err))
		case !g.Task.State.Final():
			open = append(open, fmt.Sprintf("task %d (%v) still %s", g.ID, g.Op, g.Task.State))
		}
	}
	for _, t := range v.OpenTasks {
		if !seen[t.ID] {
			open = append(open, fmt.Sprintf("task %d (%s) still %s", t.ID, t.Description, t.State))
		}
	}
	if n := len(open); n > 3 {
		open = append(open[:3], fmt.Sprintf("and %d more", n-3))
	}
	if len(open) > 0 {
		return errors.New(strings.Join(open, "; "))
	}
	return nil
}

// checkProvideLink runs when a provide or attach reports success and no
// other operation on the name began since: if the IaaS (oracle) has the
// disk the API answered attached to a VM, that VM's root must hold its
// symlink reaching the disk's device (race h: a swallowed "unknown message"
// reports success without one). Which VM it is comes from the IaaS, not
// the director's records.
//
// It answers the VM it judged, "" if none.
func (w *World) checkProvideLink(kind OpKind, name, cid string) string {
	d, ok := w.oracleDisk(cid)
	if !ok || d.VMCID.IsZero() {
		return "" // not attached at all: the records and linearizability checks decide
	}
	root := w.Cloud.VMRoot(d.VMCID)
	target, linked := w.readLinks(root)[cid]
	switch {
	case !linked:
		w.addViolation(&Violation{Invariant: InvLinks, Phase: AfterStep,
			Err: fmt.Errorf("%s of %s (%s) succeeded and the IaaS has the disk attached to %s, but its agent has no symlink", kind, name, cid, d.VMCID)})
	case !w.linkReachesDisk(root, cid):
		w.addViolation(&Violation{Invariant: InvLinks, Phase: AfterStep,
			Err: fmt.Errorf("%s of %s (%s) succeeded and the IaaS has the disk attached to %s, but its agent's symlink points at %s, which is not that disk's device",
				kind, name, cid, d.VMCID, target)})
	}
	return d.VMCID.String()
}

// checkDetachLink runs when a detach reports success and no other
// operation on the name began since, the one before it being a provide or
// attach that left the disk (cid) attached and linked on vm: that VM's
// root must no longer hold the disk's symlink. The director unlinks
// through the agent after the CPI detach and must fail the task when the
// agent does not: a swallowed error leaves a dangling symlink, which the
// quiescent links check excuses on a VM whose agent had a fault.
func (w *World) checkDetachLink(name, cid, vm string) {
	vc, err := cpiv2.NewVMCID(vm)
	if err != nil {
		return
	}
	if target, linked := w.readLinks(w.Cloud.VMRoot(vc))[cid]; linked {
		w.addViolation(&Violation{Invariant: InvLinks, Phase: AfterStep,
			Err: fmt.Errorf("detach of %s (%s) succeeded, but the agent of %s still has its symlink (to %s)", name, cid, vm, target)})
	}
}
