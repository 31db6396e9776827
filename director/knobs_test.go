package director_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/fakeiaas"
)

// Each test runs one race of docs/upstream.md under the reference knobs and
// with the one knob that reproduces upstream, and checks both outcomes
// against the fake cloud (the oracle) and the agents' VM roots.

func bothWays(t *testing.T, knob func(*director.Knobs), test func(t *testing.T, upstream bool, k director.Knobs)) {
	t.Run("reference", func(t *testing.T) { test(t, false, director.Knobs{}) })
	t.Run("upstream", func(t *testing.T) {
		var k director.Knobs
		knob(&k)
		test(t, true, k)
	})
}

// (a) two concurrent provides of one new name.
func TestKnobNoDiskNameLockLeaksOnConcurrentCreate(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.NoDiskNameLock = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		w := newWorld(t, worldOpts{knobs: k})
		rule := w.pauseRule(fakeiaas.OpCreateDisk, "")
		id1, err1 := w.provide("shared", 0)
		id2, err2 := w.provide("shared", 1)
		if upstream {
			waitFor(t, "both create_disk calls paused", func() bool { return w.ruleStatus(rule.ID).Paused == 2 })
		} else {
			waitFor(t, "one create_disk paused, the other provide waiting for the disk lock", func() bool {
				return w.ruleStatus(rule.ID).Paused == 1 && (w.lockWaiting(id1) || w.lockWaiting(id2))
			})
		}
		w.release(rule.ID)
		t1, t2 := w.wait(id1, err1), w.wait(id2, err2)
		failures := 0
		for _, task := range []director.Task{t1, t2} {
			if task.State != director.TaskDone {
				failures++
			}
		}
		disks, _ := w.d.DynamicDisks()
		iaas := len(w.state().Disks)
		if failures != 1 || len(disks) != 1 {
			t.Fatalf("%d provides failed and the director records %d disks; want 1 and 1", failures, len(disks))
		}
		if upstream && iaas != 2 {
			t.Fatalf("upstream: IaaS holds %d disks; want 2 (one leaked)", iaas)
		}
		if !upstream && iaas != 1 {
			t.Fatalf("reference: IaaS holds %d disks; want 1", iaas)
		}
	})
}

// (b) provide of one unattached disk to two VMs at once.
func TestKnobNoDiskNameLockDoubleAttach(t *testing.T) {
	// Upstream also takes the refused attach's error at its word: counting
	// attach calls then counts the provides that reached the IaaS.
	bothWays(t, func(k *director.Knobs) { k.NoDiskNameLock, k.TrustCPIErrors = true, true }, func(t *testing.T, upstream bool, k director.Knobs) {
		w := newWorld(t, worldOpts{knobs: k})
		w.done(w.d.CreateDynamicDisk("admin", director.CreateDiskRequest{DiskSize: 4, DiskName: "d", DiskPoolName: "small", InstanceID: w.insts[0].ID}))
		rule := w.pauseRule(fakeiaas.OpAttachDisk, "")
		id1, err1 := w.provide("d", 0)
		id2, err2 := w.provide("d", 1)
		if upstream {
			waitFor(t, "two attach_disk calls paused", func() bool { return w.ruleStatus(rule.ID).Paused == 2 })
		} else {
			waitFor(t, "one attach paused, one provide waiting", func() bool {
				return w.ruleStatus(rule.ID).Paused == 1 && (w.lockWaiting(id1) || w.lockWaiting(id2))
			})
		}
		w.release(rule.ID)
		w.wait(id1, err1)
		w.wait(id2, err2)
		// Every attach_disk that reached the IaaS is in its history, applied
		// or refused.
		attaches := w.history(fakeiaas.OpAttachDisk, "")
		if upstream && attaches != 2 {
			t.Fatalf("upstream: %d attach_disk calls; want 2 (no disk lock)", attaches)
		}
		if !upstream && attaches != 1 {
			t.Fatalf("reference: %d attach_disk calls; want 1", attaches)
		}
	})
}

// gatedAgents holds the first call of method until released: a window in
// the middle of a director job, between two CPI calls.
type gatedAgents struct {
	director.Agents
	method  string
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gatedAgents) Run(agentID, method string, args ...any) (json.RawMessage, error) {
	if method == g.method {
		hold := false
		g.once.Do(func() { hold = true })
		if hold {
			close(g.entered)
			<-g.release
		}
	}
	return g.Agents.Run(agentID, method, args...)
}

// (c) provide lands in a recreate's window, after detach, before delete_vm.
func TestKnobVMLockPerCPICallOnlyRecreateWindow(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.VMLockPerCPICallOnly = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		gate := &gatedAgents{method: "stop", entered: make(chan struct{}), release: make(chan struct{})}
		w := newWorld(t, worldOpts{knobs: k, configure: func(c *director.Config) {
			gate.Agents = c.Agents
			c.Agents = gate
		}})
		w.done(w.provide("d", 0))
		oldVM := w.instance(0).VMCID
		rid, rerr := w.d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: w.insts[0].ID, State: "recreate"})
		<-gate.entered // recreate detached "d" and is about to delete the VM
		pid, perr := w.provide("d", 0)
		if upstream {
			w.done(pid, perr) // lands in the window
			if dd, _ := w.disk("d"); dd.VMCID != oldVM {
				t.Fatalf("upstream: provide in the window attached to %s; want the doomed VM %s", dd.VMCID, oldVM)
			}
		} else {
			waitFor(t, "provide waiting for the VM lock", func() bool { return w.lockWaiting(pid) })
		}
		close(gate.release)
		w.done(rid, rerr)
		ptask := w.wait(pid, perr)
		newVM := w.instance(0).VMCID
		dd, _ := w.disk("d")
		iaas, _ := w.iaasDisk(dd.CID)
		if upstream {
			if iaas.VMCID.String() == newVM {
				t.Fatal("upstream: the disk ended on the new VM")
			}
			return
		}
		if ptask.State != director.TaskDone || dd.VMCID != newVM || iaas.VMCID.String() != newVM || !w.linked(newVM, dd.CID) {
			t.Fatalf("reference: provide %s; disk record on %q, IaaS on %v; want both on the new VM %s, linked",
				ptask.State, dd.VMCID, iaas.VMCID, newVM)
		}
	})
}

// (d) recreate with an unresponsive agent.
func TestKnobRecreateUnresponsiveSkipsDetach(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.RecreateUnresponsiveSkipsDetach = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		w := newWorld(t, worldOpts{knobs: k})
		w.done(w.provide("d", 0))
		dd, _ := w.disk("d")
		vm := w.instance(0).VMCID
		a, ok := w.lab.Agent(vm)
		if !ok {
			t.Fatal("no agent on the VM")
		}
		a.Stop() // unresponsive
		w.done(w.d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: w.insts[0].ID, State: "recreate"}))
		detaches := w.history(fakeiaas.OpDetachDisk, vm)
		if upstream && detaches != 0 {
			t.Fatalf("upstream: %d detach_disk calls for %s; want 0 (delete_vm with the disk attached)", detaches, dd.CID)
		}
		if !upstream && detaches != 1 {
			t.Fatalf("reference: %d detach_disk calls for %s; want 1 before delete_vm", detaches, dd.CID)
		}
		if got, _ := w.disk("d"); got.Attached() {
			t.Fatalf("after recreate the record says attached to %s", got.VMCID)
		}
	})
}

// (e) DELETE of an attached disk.
func TestKnobDeleteWithoutDetach(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.DeleteWithoutDetach = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		w := newWorld(t, worldOpts{knobs: k})
		w.done(w.provide("d", 0))
		dd, _ := w.disk("d")
		vm := w.instance(0).VMCID
		w.wait(w.d.DeleteDynamicDisk("admin", "d"))
		detaches := w.history(fakeiaas.OpDetachDisk, vm)
		if upstream {
			if detaches != 0 || !w.linked(vm, dd.CID) {
				t.Fatalf("upstream: %d detach calls, link present %v; want 0 and a dangling link", detaches, w.linked(vm, dd.CID))
			}
			return
		}
		if _, ok := w.iaasDisk(dd.CID); ok || w.linked(vm, dd.CID) || detaches != 1 {
			t.Fatalf("reference: IaaS disk present %v, link present %v, %d detaches; want gone, gone, 1", ok, w.linked(vm, dd.CID), detaches)
		}
	})
}

// (f) detach whose CPI call fails.
func TestKnobUnlinkBeforeDetach(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.UnlinkBeforeDetach = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		w := newWorld(t, worldOpts{knobs: k})
		w.done(w.provide("d", 0))
		dd, _ := w.disk("d")
		vm := w.instance(0).VMCID
		// Every try fails: the reference director's retries of an in-doubt
		// error cannot settle it.
		if _, err := w.lab.Cloud.AddFault(t.Context(), fakeiaas.Rule{Op: fakeiaas.OpDetachDisk, Times: director.InDoubtTries,
			Effect: fakeiaas.Effect{Kind: fakeiaas.EffectError, Message: "injected"}}); err != nil {
			t.Fatal(err)
		}
		w.failed(w.d.DetachDynamicDisk("admin", "d"))
		iaas, _ := w.iaasDisk(dd.CID)
		if iaas.VMCID.String() != vm {
			t.Fatalf("after a failed detach the disk is on %v; want still %s", iaas.VMCID, vm)
		}
		if linked := w.linked(vm, dd.CID); linked == upstream {
			t.Fatalf("upstream=%v: link present %v after a failed detach; upstream unlinks first, reference keeps it", upstream, linked)
		}
		if rec, _ := w.disk("d"); rec.VMCID != vm {
			t.Fatalf("record says %q after a failed detach; want %s", rec.VMCID, vm)
		}
	})
}

// (g) a CPI that restarts the VM on attach: add_dynamic_disk without
// wait_until_ready reaches no agent.
func TestKnobNoWaitUntilReadyAfterAttach(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.NoWaitUntilReadyAfterAttach = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		w := newWorld(t, worldOpts{knobs: k, vmType: "restarting", lab: func(c *lab.Config) {
			c.BootDelay = 200 * time.Millisecond
			c.AgentRequestTimeout = 100 * time.Millisecond
		}})
		task := w.wait(w.provide("d", 0))
		dd, _ := w.disk("d")
		vm := w.instance(0).VMCID
		if upstream {
			if task.State != director.TaskError || w.linked(vm, dd.CID) {
				t.Fatalf("upstream: provide %s, link %v; want error (agent rebooting) and no link", task.State, w.linked(vm, dd.CID))
			}
			return
		}
		if task.State != director.TaskDone || !w.linked(vm, dd.CID) {
			t.Fatalf("reference: provide %s (%s), link %v; want done and linked", task.State, task.Error, w.linked(vm, dd.CID))
		}
	})
}

// (h) an old agent answers "unknown message".
func TestKnobSwallowUnknownMessage(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.SwallowUnknownMessage = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		w := newWorld(t, worldOpts{knobs: k, agentMode: agent.ModeOld})
		task := w.wait(w.provide("d", 0))
		dd, _ := w.disk("d")
		vm := w.instance(0).VMCID
		if w.linked(vm, dd.CID) {
			t.Fatal("an old agent made a link")
		}
		if upstream && task.State != director.TaskDone {
			t.Fatalf("upstream: provide %s (%s); want done (the answer swallowed)", task.State, task.Error)
		}
		if !upstream && (task.State != director.TaskError || !strings.Contains(task.Error, "add_dynamic_disk")) {
			t.Fatalf("reference: provide %s (%q); want an error naming add_dynamic_disk", task.State, task.Error)
		}
	})
}

// (i) no dynamic-disk workers.
func TestKnobZeroDynamicDiskWorkers(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.ZeroDynamicDiskWorkers = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		w := newWorld(t, worldOpts{knobs: k})
		id, err := w.provide("d", 0)
		if err != nil {
			t.Fatal(err)
		}
		// A later deploy (normal queue) finishes either way.
		w.deploy(3)
		task, _ := w.d.Task(id)
		if upstream {
			if task.State != director.TaskQueued || w.d.QueueLen(director.QueueDynamicDisks) != 1 {
				t.Fatalf("upstream: provide is %s with %d queued; want queued forever", task.State, w.d.QueueLen(director.QueueDynamicDisks))
			}
			return
		}
		w.done(id, nil)
	})
}

// bosh 1869: a detach_disk the IaaS applied, whose response was lost.
func TestKnobTrustCPIErrors(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.TrustCPIErrors = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		w := newWorld(t, worldOpts{knobs: k})
		w.done(w.provide("d", 0))
		dd, _ := w.disk("d")
		vm := w.instance(0).VMCID
		if _, err := w.lab.Cloud.AddFault(t.Context(), fakeiaas.Rule{Op: fakeiaas.OpDetachDisk, Times: 1,
			Effect: fakeiaas.Effect{Kind: fakeiaas.EffectLoseResponse}}); err != nil {
			t.Fatal(err)
		}
		id, err := w.d.DetachDynamicDisk("admin", "d")
		task := w.wait(id, err)
		iaas, _ := w.iaasDisk(dd.CID)
		rec, _ := w.disk("d")
		if !iaas.VMCID.IsZero() {
			t.Fatalf("the IaaS should have applied the detach; the disk is on %s", iaas.VMCID)
		}
		if upstream {
			if task.State != director.TaskError || rec.VMCID != vm {
				t.Fatalf("upstream: task %s, record on %q; want a failed task and a record still on %s (records and IaaS apart)", task.State, rec.VMCID, vm)
			}
			return
		}
		if task.State != director.TaskDone || rec.VMCID != "" || w.linked(vm, dd.CID) {
			t.Fatalf("reference: task %s, record on %q, link present %v; want done, detached, unlinked", task.State, rec.VMCID, w.linked(vm, dd.CID))
		}
	})
}

// (j) DELETE /vms/:cid with a responsive agent.
func TestKnobDeleteVMKeepsDisksAttached(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.DeleteVMKeepsDisksAttached = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		w := newWorld(t, worldOpts{knobs: k})
		w.done(w.provide("d", 0))
		dd, _ := w.disk("d")
		vm := w.instance(0).VMCID
		w.done(w.d.DeleteVM("admin", vm))
		detaches := w.history(fakeiaas.OpDetachDisk, vm)
		if upstream && detaches != 0 {
			t.Fatalf("upstream: %d detach_disk calls for %s; want 0 (delete_vm with the disk attached, agent answering)", detaches, dd.CID)
		}
		if !upstream && detaches != 1 {
			t.Fatalf("reference: %d detach_disk calls for %s; want 1 before delete_vm", detaches, dd.CID)
		}
		if got, _ := w.disk("d"); got.Attached() {
			t.Fatalf("after delete-vm the record says attached to %s", got.VMCID)
		}
	})
}

// hasDiskCounter counts the director's has_disk calls.
type hasDiskCounter struct {
	director.CPI
	mu sync.Mutex
	n  int
}

func (c *hasDiskCounter) HasDisk(ctx context.Context, cid cpiv2.DiskCID) (bool, error) {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
	return c.CPI.HasDisk(ctx, cid)
}

// DELETE /dynamic_disks/:name: upstream asks has_disk first.
func TestKnobDeleteChecksHasDisk(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.DeleteChecksHasDisk = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		counter := &hasDiskCounter{}
		w := newWorld(t, worldOpts{knobs: k, configure: func(c *director.Config) { counter.CPI = c.CPI; c.CPI = counter }})
		w.done(w.provide("d", 0))
		dd, _ := w.disk("d")
		w.done(w.d.DetachDynamicDisk("admin", "d"))
		w.done(w.d.DeleteDynamicDisk("admin", "d"))
		counter.mu.Lock()
		has := counter.n
		counter.mu.Unlock()
		deletes := w.history(fakeiaas.OpDeleteDisk, dd.CID)
		if upstream && (has != 1 || deletes != 1) {
			t.Fatalf("upstream: %d has_disk and %d delete_disk calls; want 1 and 1", has, deletes)
		}
		if !upstream && (has != 0 || deletes != 1) {
			t.Fatalf("reference: %d has_disk and %d delete_disk calls; want 0 and 1", has, deletes)
		}
		if _, ok := w.iaasDisk(dd.CID); ok {
			t.Fatal("the IaaS still has the disk")
		}
	})
}

// (a) for create: without the disk-name lock two creates of one new name
// both call create_disk, but the loser deletes the disk it made when its
// row insert fails, as upstream's create job does; nothing leaks either way.
func TestKnobNoDiskNameLockConcurrentCreateCleansUp(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.NoDiskNameLock = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		w := newWorld(t, worldOpts{knobs: k})
		inst := w.insts[0]
		rule := w.pauseRule(fakeiaas.OpCreateDisk, "")
		create := func() (int64, error) {
			return w.d.CreateDynamicDisk("admin", director.CreateDiskRequest{DiskName: "shared", DiskPoolName: "small",
				Deployment: inst.Deployment, AZ: inst.AZ, DiskSize: 4})
		}
		id1, err1 := create()
		id2, err2 := create()
		if upstream {
			waitFor(t, "both create_disk calls paused", func() bool { return w.ruleStatus(rule.ID).Paused == 2 })
		} else {
			// The second create waits for the lock or already sees the
			// first's intent row ("already exists").
			ended := func(id int64) bool {
				task, err := w.d.Task(id)
				return err == nil && task.State != director.TaskQueued && task.State != director.TaskProcessing
			}
			waitFor(t, "one create_disk paused, the other create waiting for the disk lock or refused", func() bool {
				return w.ruleStatus(rule.ID).Paused == 1 && (w.lockWaiting(id1) || w.lockWaiting(id2) || ended(id1) || ended(id2))
			})
		}
		w.release(rule.ID)
		t1, t2 := w.wait(id1, err1), w.wait(id2, err2)
		if (t1.State == director.TaskDone) == (t2.State == director.TaskDone) {
			t.Fatalf("tasks %s and %s; want one done and one failed", t1.State, t2.State)
		}
		disks, _ := w.d.DynamicDisks()
		if len(disks) != 1 || len(w.state().Disks) != 1 {
			t.Fatalf("the director records %d disks and the IaaS holds %d; want 1 and 1", len(disks), len(w.state().Disks))
		}
		if want := 1 + btoi(upstream); w.history(fakeiaas.OpDeleteDisk, "") != want-1 || w.history(fakeiaas.OpCreateDisk, "") != want {
			t.Fatalf("create_disk %d, delete_disk %d times; want %d and %d", w.history(fakeiaas.OpCreateDisk, ""),
				w.history(fakeiaas.OpDeleteDisk, ""), want, want-1)
		}
	})
}

// A create that arrives while a provide of the same new name is creating
// the disk waits for the name instead of answering "already exists" from the
// provide's intent row: the provide's create_disk may fail and remove the
// row, and then the name has no disk and the create must make it. (Upstream
// has no intent row, so its create never sees a disk that is not there.)
func TestCreateWaitsForAProvideStillCreatingTheName(t *testing.T) {
	w := newWorld(t, worldOpts{})
	inst := w.insts[0]
	pause, err := w.lab.Cloud.AddFault(context.Background(), fakeiaas.Rule{Op: fakeiaas.OpCreateDisk, Times: 1,
		Effect: fakeiaas.Effect{Kind: fakeiaas.EffectPause}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.lab.Cloud.AddFault(context.Background(), fakeiaas.Rule{Op: fakeiaas.OpCreateDisk, Times: 1,
		Effect: fakeiaas.Effect{Kind: fakeiaas.EffectError, Message: "no capacity"}}); err != nil {
		t.Fatal(err)
	}
	released := false
	t.Cleanup(func() {
		if !released { // a failed check must not leave the provide blocked
			w.release(pause.ID)
		}
	})
	pid, perr := w.provide("racing", 0)
	waitFor(t, "the provide's create_disk paused", func() bool { return w.ruleStatus(pause.ID).Paused == 1 })
	if dd, ok := w.disk("racing"); !ok || dd.State != director.DiskCreating {
		t.Fatalf("while create_disk runs the record is %+v (found %v); want the provide's intent row", dd, ok)
	}
	cid, cerr := w.d.CreateDynamicDisk("admin", director.CreateDiskRequest{DiskName: "racing", DiskPoolName: "small",
		Deployment: inst.Deployment, AZ: inst.AZ, DiskSize: 4})
	waitFor(t, "the create waiting for the disk name's lock", func() bool { return w.lockWaiting(cid) })
	w.release(pause.ID)
	released = true
	if task := w.failed(pid, perr); !strings.Contains(task.Error, "no capacity") {
		t.Fatalf("provide: %q; want the injected create_disk error", task.Error)
	}
	w.done(cid, cerr)
	if dd, ok := w.disk("racing"); !ok || dd.State != director.DiskReady || dd.CID == "" {
		t.Fatalf("after the create the record is %+v (found %v); want a ready disk", dd, ok)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
