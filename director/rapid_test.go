package director_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/internal/disksm"
)

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
	names := disksm.Names
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
		model := disksm.Model{}
		rounds := rapid.IntRange(1, 3).Draw(rt, "rounds")
		for range rounds {
			ops := rapid.SliceOfN(disksm.OpGen(disksm.GenConfig{Kinds: disksm.Kinds, Names: names, Instances: 3}), 1, 4).Draw(rt, "ops")
			ids := make([]int64, len(ops))
			for i, o := range ops { // queue them all before waiting: they run concurrently
				var err error
				inst := w.insts[o.Inst].ID
				switch o.Kind {
				case "provide":
					ids[i], err = w.d.Provide("admin", director.ProvideRequest{DiskSize: disksm.NewDiskSize, DiskName: o.Name, DiskPoolName: "small", InstanceID: inst})
				case "create":
					ids[i], err = w.d.CreateDynamicDisk("admin", director.CreateDiskRequest{DiskSize: disksm.NewDiskSize, DiskName: o.Name, DiskPoolName: "small", InstanceID: inst})
				case "attach":
					ids[i], err = w.d.AttachDynamicDisk("admin", director.AttachRequest{DiskName: o.Name, InstanceID: inst})
				case "detach":
					ids[i], err = w.d.DetachDynamicDisk("admin", o.Name)
				case "delete":
					ids[i], err = w.d.DeleteDynamicDisk("admin", o.Name)
				case "resize":
					ids[i], err = w.d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: o.Name, DiskSize: o.Size})
				}
				if err != nil {
					rt.Fatalf("%v: %v", o, err)
				}
			}
			ok := make([]disksm.Outcome, len(ops))
			tasks := make([]director.Task, len(ops))
			for i, id := range ids {
				task, err := w.d.WaitTask(id, time.Minute)
				if err != nil {
					rt.Fatal(err)
				}
				tasks[i], ok[i] = task, disksm.Failed
				if task.State == director.TaskDone {
					ok[i] = disksm.Done
				}
			}
			final := w.observe(rt)
			if why, good := disksm.Linearizable(model, ops, ok, final, azs); !good {
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
func (w *world) observe(rt *rapid.T) disksm.Model {
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
	m := disksm.Model{}
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
		m[dd.Name] = disksm.Disk{At: -1, AZ: dd.AZ, Size: dd.SizeMiB}
		if dd.Attached() {
			idx := slices.IndexFunc(w.insts, func(in director.Instance) bool { return in.ID == dd.InstanceID })
			if idx < 0 || w.instance(idx).VMCID != dd.VMCID {
				rt.Fatalf("disk %s attached to %s, not the VM of a known instance", dd.Name, dd.VMCID)
			}
			if !w.linked(dd.VMCID, dd.CID) {
				rt.Fatalf("disk %s attached to %s without an agent link", dd.Name, dd.VMCID)
			}
			m[dd.Name] = disksm.Disk{At: idx, AZ: dd.AZ, Size: dd.SizeMiB}
		}
	}
	return m
}

// checkLockExclusion checks that tasks on one disk name never held its lock
// at the same time: each task's span from lock acquired to end is disjoint
// from the others'.
func checkLockExclusion(rt *rapid.T, ops []disksm.Op, tasks []director.Task) {
	type span struct{ from, to time.Time }
	spans := map[string][]span{}
	for i, task := range tasks {
		// The last acquisition counts: a job that found the attachment
		// moved releases and locks again.
		for k := len(task.Events) - 1; k >= 0; k-- {
			if e := task.Events[k]; e.Stage == "Locking" && e.State == "finished" {
				spans[ops[i].Name] = append(spans[ops[i].Name], span{e.Time, task.EndedAt})
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
