package director_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
)

// The model of the dynamic disks API (upstream's jobs): per
// disk name, whether it exists, which instance it is attached to (-1: none)
// and its AZ (set by create and by every attach, checked by attach), and
// its size (set by provide and create, changed by cpilab's resize).
type diskModel map[string]diskState

type diskState struct {
	at   int
	az   string
	size int
}

type apiOp struct {
	kind string // provide, create, attach, detach, delete, resize
	name string
	inst int
	size int // resize's MiB
}

func (o apiOp) String() string {
	if o.kind == "resize" {
		return fmt.Sprintf("resize(%s,%d MiB)", o.name, o.size)
	}
	return fmt.Sprintf("%s(%s,%d)", o.kind, o.name, o.inst)
}

// apply runs op on m and reports whether the API must succeed; azs are the
// instances' AZs.
func (m diskModel) apply(o apiOp, azs []string) bool {
	d, exists := m[o.name]
	switch o.kind {
	case "provide":
		if exists && d.at >= 0 && d.at != o.inst {
			return false
		}
		size := d.size
		if !exists {
			size = 4
		}
		m[o.name] = diskState{o.inst, azs[o.inst], size}
	case "create":
		if exists { // upstream: "disk `<name>` already exists"
			return false
		}
		m[o.name] = diskState{-1, azs[o.inst], 4}
	case "attach":
		if !exists || (d.at >= 0 && d.at != o.inst) || (d.az != "" && d.az != azs[o.inst]) {
			return false
		}
		m[o.name] = diskState{o.inst, azs[o.inst], d.size}
	case "detach":
		if !exists {
			return false
		}
		m[o.name] = diskState{-1, d.az, d.size}
	case "delete":
		delete(m, o.name)
	case "resize":
		// A shrink copies in the guest: a detached disk cannot shrink.
		if !exists || (o.size < d.size && d.at < 0) {
			return false
		}
		d.size = o.size
		m[o.name] = d
	}
	return true
}

// linearizable reports whether some serial order of the concurrent ops
// gives their observed outcomes and the observed final state.
func linearizable(start diskModel, ops []apiOp, ok []bool, final diskModel, azs []string) (string, bool) {
	idx := make([]int, len(ops))
	for i := range idx {
		idx[i] = i
	}
	var tried []string
	var try func(k int) bool
	try = func(k int) bool {
		if k == len(idx) {
			m := diskModel{}
			for n, v := range start {
				m[n] = v
			}
			for _, i := range idx {
				if m.apply(ops[i], azs) != ok[i] {
					return false
				}
			}
			tried = append(tried, fmt.Sprint(m))
			return fmt.Sprint(m) == fmt.Sprint(final)
		}
		for j := k; j < len(idx); j++ {
			idx[k], idx[j] = idx[j], idx[k]
			if try(k + 1) {
				return true
			}
			idx[k], idx[j] = idx[j], idx[k]
		}
		return false
	}
	if try(0) {
		return "", true
	}
	return fmt.Sprintf("no serial order explains it; serial orders matching the outcomes end in %v", tried), false
}

// TestDynamicDisksAPIStateMachine drives the director with rounds of
// concurrent API calls drawn by rapid and checks, after each round:
// linearizability against the model (so provide/detach/delete idempotency),
// the records against the fake cloud (at most one VM per disk, no leaked
// disk, agent links on the attached VM), and lock exclusion (no two tasks on
// one disk name held its lock at once). rapid's 100 checks by default; a
// deeper run: go test ./director/ -run StateMachine -rapid.checks=2000.
func TestDynamicDisksAPIStateMachine(t *testing.T) {
	w := newWorld(t, worldOpts{instances: 3, lab: func(c *lab.Config) { c.AgentTaskPollInterval = time.Millisecond },
		configure: func(c *director.Config) { c.DynamicDiskWorkers = 4 }})
	names := []string{"r0", "r1", "r2"}
	var azs []string
	for i := range w.insts {
		azs = append(azs, w.instance(i).AZ)
	}
	checks := 0
	rapid.Check(t, func(rt *rapid.T) {
		for _, n := range names { // a clean slate for each check
			w.done(w.d.DeleteDynamicDisk("admin", n))
		}
		w.done(w.d.DeleteOrphanedDisks("admin", nil)) // the disks shrinks replaced
		model := diskModel{}
		rounds := rapid.IntRange(1, 3).Draw(rt, "rounds")
		for range rounds {
			ops := rapid.SliceOfN(rapid.Custom(func(t *rapid.T) apiOp {
				return apiOp{
					kind: rapid.SampledFrom([]string{"provide", "provide", "create", "attach", "detach", "delete", "resize"}).Draw(t, "kind"),
					name: rapid.SampledFrom(names).Draw(t, "name"),
					inst: rapid.IntRange(0, 2).Draw(t, "inst"),
					size: rapid.SampledFrom([]int{4, 6, 8}).Draw(t, "size"),
				}
			}), 1, 4).Draw(rt, "ops")
			ids := make([]int64, len(ops))
			for i, o := range ops { // queue them all before waiting: they run concurrently
				var err error
				inst := w.insts[o.inst].ID
				switch o.kind {
				case "provide":
					ids[i], err = w.d.Provide("admin", director.ProvideRequest{DiskSize: 4, DiskName: o.name, DiskPoolName: "small", InstanceID: inst})
				case "create":
					ids[i], err = w.d.CreateDynamicDisk("admin", director.CreateDiskRequest{DiskSize: 4, DiskName: o.name, DiskPoolName: "small", InstanceID: inst})
				case "attach":
					ids[i], err = w.d.AttachDynamicDisk("admin", director.AttachRequest{DiskName: o.name, InstanceID: inst})
				case "detach":
					ids[i], err = w.d.DetachDynamicDisk("admin", o.name)
				case "delete":
					ids[i], err = w.d.DeleteDynamicDisk("admin", o.name)
				case "resize":
					ids[i], err = w.d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: o.name, DiskSize: o.size})
				}
				if err != nil {
					rt.Fatalf("%v: %v", o, err)
				}
			}
			ok := make([]bool, len(ops))
			tasks := make([]director.Task, len(ops))
			for i, id := range ids {
				task, err := w.d.WaitTask(id, time.Minute)
				if err != nil {
					rt.Fatal(err)
				}
				tasks[i], ok[i] = task, task.State == director.TaskDone
			}
			final := w.observe(rt)
			if why, good := linearizable(model, ops, ok, final, azs); !good {
				var outcomes []string
				for i := range ops {
					outcomes = append(outcomes, fmt.Sprintf("%v=%v(%s)", ops[i], ok[i], tasks[i].Error))
				}
				rt.Fatalf("from %v, ops %v ended in %v: %s", model, outcomes, final, why)
			}
			model = final
			checkLockExclusion(rt, ops, tasks)
			checks++
		}
	})
	t.Logf("%d rounds checked", checks)
}

// observe reads the director's records, checks them against the fake
// cloud and the agents, and returns them as a model.
func (w *world) observe(rt *rapid.T) diskModel {
	disks, err := w.d.DynamicDisks()
	if err != nil {
		rt.Fatal(err)
	}
	orphans, err := w.d.OrphanedDisks()
	if err != nil {
		rt.Fatal(err)
	}
	st := w.state()
	if len(st.Disks) != len(disks)+len(orphans) {
		rt.Fatalf("the IaaS holds %d disks, the director records %d and %d orphans: a disk leaked or vanished",
			len(st.Disks), len(disks), len(orphans))
	}
	m := diskModel{}
	for _, dd := range disks {
		if dd.State != director.DiskReady {
			rt.Fatalf("disk %s is %s at rest", dd.Name, dd.State)
		}
		iaas, ok := w.iaasDisk(dd.CID)
		if !ok {
			rt.Fatalf("disk %s (%s) is not in the IaaS", dd.Name, dd.CID)
		}
		if iaas.VMCID.String() != dd.VMCID {
			rt.Fatalf("disk %s: record on VM %q, IaaS on %q", dd.Name, dd.VMCID, iaas.VMCID)
		}
		if iaas.SizeMiB != dd.SizeMiB {
			rt.Fatalf("disk %s: record %d MiB, IaaS %d MiB", dd.Name, dd.SizeMiB, iaas.SizeMiB)
		}
		m[dd.Name] = diskState{-1, dd.AZ, dd.SizeMiB}
		if dd.Attached() {
			idx := slices.IndexFunc(w.insts, func(in director.Instance) bool { return in.ID == dd.InstanceID })
			if idx < 0 || w.instance(idx).VMCID != dd.VMCID {
				rt.Fatalf("disk %s attached to %s, not the VM of a known instance", dd.Name, dd.VMCID)
			}
			if !w.linked(dd.VMCID, dd.CID) {
				rt.Fatalf("disk %s attached to %s without an agent link", dd.Name, dd.VMCID)
			}
			m[dd.Name] = diskState{idx, dd.AZ, dd.SizeMiB}
		}
	}
	return m
}

// checkLockExclusion checks that tasks on one disk name never held its lock
// at the same time: each task's span from lock acquired to end is disjoint
// from the others'.
func checkLockExclusion(rt *rapid.T, ops []apiOp, tasks []director.Task) {
	type span struct{ from, to time.Time }
	spans := map[string][]span{}
	for i, task := range tasks {
		// The last acquisition counts: a job that found the attachment
		// moved releases and locks again.
		for k := len(task.Events) - 1; k >= 0; k-- {
			if e := task.Events[k]; e.Stage == "Locking" && e.State == "finished" {
				spans[ops[i].name] = append(spans[ops[i].name], span{e.Time, task.EndedAt})
				break
			}
		}
	}
	for name, ss := range spans {
		for i := range ss {
			for j := i + 1; j < len(ss); j++ {
				if ss[i].from.Before(ss[j].to) && ss[j].from.Before(ss[i].to) {
					rt.Fatalf("two tasks held the lock of %s at once: %v and %v", name, ss[i], ss[j])
				}
			}
		}
	}
}
