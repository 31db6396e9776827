package simulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/simulator/diskmodel"
)

// AsViolation returns the *Violation in err's chain.
func AsViolation(err error) (*Violation, bool) {
	var v *Violation
	ok := errors.As(err, &v)
	return v, ok
}

// ---- CPI-seam checks: at the moment of the call, against the oracle and
// the director's store read directly ----

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
		w.addViolation(&Violation{Invariant: InvAttachElsewhere, Phase: AfterStep,
			Err: fmt.Errorf("attach_disk(%s, %s) called while the IaaS has %s attached to %s", vm, disk, disk, d.VMCID)})
	}
}

// checkDeleteDisk: delete_disk of an attached disk.
func (w *World) checkDeleteDisk(disk string) {
	if d, ok := w.oracleDisk(disk); ok && !d.VMCID.IsZero() {
		w.addViolation(&Violation{Invariant: InvDeleteAttachedDisk, Phase: AfterStep,
			Err: fmt.Errorf("delete_disk(%s) called while the IaaS has it attached to %s", disk, d.VMCID)})
	}
}

// checkDeleteVM: delete_vm while the director records a dynamic disk on
// the VM.
func (w *World) checkDeleteVM(vm string) {
	var names []string
	for _, dd := range w.storeDisks() {
		if dd.VMCID == vm {
			names = append(names, fmt.Sprintf("%s (%s)", dd.Name, dd.CID))
		}
	}
	if len(names) > 0 {
		w.addViolation(&Violation{Invariant: InvDeleteVMWithDisk, Phase: AfterStep,
			Err: fmt.Errorf("delete_vm(%s) called while the director records %s attached to it", vm, strings.Join(names, ", "))})
	}
}

// storeDisks reads the director's dynamic disk records from its store.
func (w *World) storeDisks() []director.DynamicDisk {
	return listStore[director.DynamicDisk](w.Store, store.DynamicDisks)
}

func listStore[T any](st store.Store, kind store.Kind) []T {
	var out []T
	_ = st.View(func(tx store.Tx) error {
		return tx.List(kind, func(_ string, raw []byte) error {
			var v T
			if err := json.Unmarshal(raw, &v); err == nil {
				out = append(out, v)
			}
			return nil
		})
	})
	return out
}

// ---- views ----

// View is what the checkers see, taken from outside the system: the
// fakeiaas oracle, the director's store read directly, the agents' VM roots.
type View struct {
	// IaaS is the fakeiaas oracle's state.
	IaaS fakeiaas.State
	// Disks are the director's dynamic disk records.
	Disks []director.DynamicDisk
	// Orphans are the director's orphaned disk records.
	Orphans []director.OrphanedDisk
	// Tasks are the director's tasks.
	Tasks []director.Task
	// Links maps VM CID → disk CID → symlink target, for every IaaS VM.
	Links map[string]map[string]string
	// Excused are the agent IDs whose agent or messages had a fault.
	Excused map[string]bool
	// LostDisks are disk CIDs made by a create_disk whose response was lost.
	LostDisks map[string]bool
	// Crashes counts director crashes.
	Crashes int
	// LastOK maps a disk name to the instance ID of an OK provide that is
	// the last operation on that name, when there is one.
	LastOK map[string]string
	// Instances maps instance label (InstanceLabel) → VM CID, from the
	// director's store.
	Instances map[string]string
}

// SafetyView is the part of View the after-step checks need.
func (w *World) SafetyView() View {
	st, _ := w.Cloud.State(context.Background())
	return View{IaaS: st}
}

// QuiescentView takes the whole view; history gives LastOK.
func (w *World) QuiescentView(history []porcupine.Operation) View {
	v := w.SafetyView()
	v.Disks = w.storeDisks()
	v.Orphans = listStore[director.OrphanedDisk](w.Store, store.OrphanedDisks)
	v.Tasks = listStore[director.Task](w.Store, store.Tasks)
	v.Links = map[string]map[string]string{}
	for _, vm := range v.IaaS.VMs {
		v.Links[vm.CID.String()] = readLinks(vm.Root)
	}
	w.mu.Lock()
	v.Excused = cloneSet(w.excused)
	v.LostDisks = cloneSet(w.lostDisks)
	v.Crashes = w.crashes
	w.mu.Unlock()
	v.Instances = map[string]string{}
	vmOf := map[string]string{}
	for _, in := range listStore[director.Instance](w.Store, store.Instances) {
		vmOf[in.ID] = in.VMCID
	}
	for i, id := range w.Instances {
		v.Instances[InstanceLabel(i)] = vmOf[id]
	}
	v.LastOK = lastOK(history)
	return v
}

func cloneSet(m map[string]bool) map[string]bool {
	out := make(map[string]bool, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// readLinks lists the dynamic disk symlinks in a VM root.
func readLinks(root string) map[string]string {
	out := map[string]string{}
	dir := filepath.Join(root, filepath.FromSlash(path.Dir(agent.DynamicDiskLink("x"))))
	ents, err := os.ReadDir(dir)
	if err != nil {
		return out
	}
	for _, e := range ents {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		if t, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil {
			out[e.Name()] = t
		}
	}
	return out
}

// lastOK maps each disk name whose last operation (by call) is an OK
// provide or attach, every operation on it having returned, to the
// instance it named.
func lastOK(history []porcupine.Operation) map[string]string {
	last := map[string]porcupine.Operation{}
	open := map[string]bool{}
	for _, op := range history {
		in := op.Input.(diskmodel.Input)
		if op.Output == nil || op.Output.(diskmodel.Output).Outcome == diskmodel.Unknown {
			open[in.Disk] = true
		}
		if l, ok := last[in.Disk]; !ok || op.Call > l.Call {
			last[in.Disk] = op
		}
	}
	out := map[string]string{}
	for name, op := range last {
		in := op.Input.(diskmodel.Input)
		if open[name] || (in.Kind != diskmodel.Provide && in.Kind != diskmodel.Attach) {
			continue
		}
		if op.Output.(diskmodel.Output).Outcome == diskmodel.OK {
			out[name] = in.VM
		}
	}
	return out
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

func checkNoLeak(v View) error {
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
		return fmt.Errorf("IaaS disks with no director record (dynamic disk or orphan): %s", strings.Join(leaked, ", "))
	}
	return nil
}

func checkRecords(v View) error {
	iaas := map[string]fakeiaas.Disk{}
	for _, d := range v.IaaS.Disks {
		iaas[d.CID.String()] = d
	}
	var bad []string
	for _, dd := range v.Disks {
		if dd.State != director.DiskReady {
			bad = append(bad, fmt.Sprintf("%s is still %s (task %d)", dd.Name, dd.State, dd.TaskID))
			continue
		}
		d, ok := iaas[dd.CID]
		switch {
		case !ok:
			bad = append(bad, fmt.Sprintf("%s: disk %s is not in the IaaS", dd.Name, dd.CID))
		case d.VMCID.String() != dd.VMCID:
			bad = append(bad, fmt.Sprintf("%s (%s): director says attached to %q, IaaS says %q", dd.Name, dd.CID, dd.VMCID, d.VMCID))
		}
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

func checkLinks(v View) error {
	byCID := map[string]director.DynamicDisk{}
	for _, dd := range v.Disks {
		byCID[dd.CID] = dd
	}
	var bad []string
	for _, vm := range v.IaaS.VMs {
		links := v.Links[vm.CID.String()]
		excused := v.Excused[vm.AgentID]
		for _, d := range vm.Disks {
			dd, recorded := byCID[d.String()]
			if !recorded || dd.VMCID != vm.CID.String() {
				continue // a mismatch of records, reported by director-records-match-iaas
			}
			if _, ok := links[d.String()]; ok {
				continue
			}
			promised := v.LastOK[dd.Name] != "" && v.Instances[v.LastOK[dd.Name]] == vm.CID.String()
			if promised || (!excused && v.Crashes == 0) {
				why := "no agent or mbus fault explains it"
				if promised {
					why = "the last operation on it, a provide, succeeded"
				}
				bad = append(bad, fmt.Sprintf("%s (%s) is attached to %s but its agent has no symlink (%s)", dd.Name, d, vm.CID, why))
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
	}
	if len(bad) > 0 {
		return errors.New(strings.Join(bad, "; "))
	}
	return nil
}

// checkLiveness lists the tasks that have not ended.
func checkLiveness(tasks []director.Task) error {
	var open []string
	for _, t := range tasks {
		if !t.State.Final() {
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

// checkProvideLink runs when a provide reports success: if the director's
// record and the IaaS both still have the disk attached to the instance's
// VM, its agent must have the symlink (race h: a swallowed "unknown
// message" reports success without one).
func (w *World) checkProvideLink(instance int, name, cid string) {
	var dd director.DynamicDisk
	found := false
	for _, x := range w.storeDisks() {
		if x.Name == name {
			dd, found = x, true
		}
	}
	if !found || dd.State != director.DiskReady || dd.VMCID == "" || dd.CID != cid {
		return
	}
	var vm string
	for _, in := range listStore[director.Instance](w.Store, store.Instances) {
		if in.ID == w.Instances[instance] {
			vm = in.VMCID
		}
	}
	if vm == "" || dd.VMCID != vm {
		return
	}
	if d, ok := w.oracleDisk(dd.CID); !ok || d.VMCID.String() != vm {
		return
	}
	root := w.Cloud.VMRoot(cpiv2.MustCID[cpiv2.VMKind](vm))
	if _, ok := readLinks(root)[dd.CID]; !ok {
		w.addViolation(&Violation{Invariant: InvLinks, Phase: AfterStep,
			Err: fmt.Errorf("provide of %s (%s) to %s succeeded, the disk is attached, but its agent has no symlink", name, dd.CID, vm)})
	}
}
