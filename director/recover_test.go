package director_test

import (
	"context"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/store"
)

// Restart reconciliation, from each crash state a job can leave (the
// subprocess kill -9 test hits them at random; this one builds each).
func TestReconcileAfterCrashStates(t *testing.T) {
	st := store.NewMemory()
	w := newWorld(t, worldOpts{store: st})
	w.done(w.provide("attached", 0))
	w.done(w.provide("deleting", 1))
	w.done(w.d.CreateDynamicDisk("admin", director.CreateDiskRequest{DiskSize: 4, DiskName: "attaching", DiskPoolName: "small", InstanceID: w.insts[0].ID}))
	if err := w.d.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := cpiv2.WithStemcellAPIVersion(context.Background(), 2)
	cpi := w.lab.CPI
	vm0 := cpiv2.MustCID[cpiv2.VMKind](w.instance(0).VMCID)
	mustDisk := func() cpiv2.DiskCID {
		cid, err := cpi.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 8})
		if err != nil {
			t.Fatal(err)
		}
		return cid
	}
	// create_disk returned, the crash came before its CID was recorded.
	lost := mustDisk()
	// An attach the director never recorded (an unknown disk on a VM).
	stray := mustDisk()
	if _, err := cpi.AttachDisk(ctx, vm0, stray); err != nil {
		t.Fatal(err)
	}
	attaching, _ := w.disk("attaching")
	if _, err := cpi.AttachDisk(ctx, vm0, cpiv2.MustCID[cpiv2.DiskKind](attaching.CID)); err != nil {
		t.Fatal(err)
	}
	del, _ := w.disk("deleting")
	err := st.Update(func(tx store.Tx) error {
		// The crash left: a create in flight, an attach in flight (applied
		// in the IaaS), a delete in flight, and a task processing.
		if err := tx.Put(store.DynamicDisks, "creating", director.DynamicDisk{Name: "creating", State: director.DiskCreating, TaskID: 99}); err != nil {
			return err
		}
		attaching.State, attaching.VMCID, attaching.InstanceID = director.DiskAttaching, vm0.String(), w.insts[0].ID
		if err := tx.Put(store.DynamicDisks, "attaching", attaching); err != nil {
			return err
		}
		del.State = director.DiskDeleting
		if err := tx.Put(store.DynamicDisks, "deleting", del); err != nil {
			return err
		}
		return tx.Put(store.Tasks, store.IDKey(99), director.Task{ID: 99, Type: "provide_dynamic_disk",
			Queue: director.QueueDynamicDisks, State: director.TaskProcessing, StartedAt: time.Now()})
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := director.New(director.Config{Store: st, CPI: cpi, Agents: w.lab.Agents, Inventory: w.lab})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if task, _ := d.Task(99); task.State != director.TaskError || task.Error != director.ReasonRestarted {
		t.Fatalf("the in-flight task is %s %q; want error with the restart reason", task.State, task.Error)
	}
	disks, _ := d.DynamicDisks()
	names := map[string]director.DynamicDisk{}
	for _, dd := range disks {
		names[dd.Name] = dd
		if dd.State != director.DiskReady {
			t.Errorf("disk %s left %s", dd.Name, dd.State)
		}
	}
	if _, ok := names["creating"]; ok {
		t.Error("the record of an unfinished create survived")
	}
	if _, ok := names["deleting"]; ok {
		t.Error("an unfinished delete was not finished")
	}
	if dd := names["attaching"]; dd.Attached() {
		t.Error("an unfinished attach was kept; want it undone")
	}
	if dd := names["attached"]; !dd.Attached() {
		t.Error("a settled attachment was lost")
	}
	orphans, _ := d.OrphanedDisks()
	got := map[string]bool{}
	for _, o := range orphans {
		got[o.CID] = true
	}
	if !got[lost.String()] || !got[stray.String()] || len(orphans) != 2 {
		t.Fatalf("orphans %+v; want the lost disk %s and the stray one %s", orphans, lost, stray)
	}
	st2 := w.state()
	for _, disk := range st2.Disks {
		if disk.CID == stray && !disk.VMCID.IsZero() {
			t.Error("the stray disk is still attached")
		}
		if disk.CID.String() == attaching.CID && !disk.VMCID.IsZero() {
			t.Error("the half-attached disk is still attached")
		}
	}
	id, err := d.DeleteOrphanedDisks("admin", nil)
	if err != nil {
		t.Fatal(err)
	}
	if task, _ := d.WaitTask(id, time.Minute); task.State != director.TaskDone {
		t.Fatalf("orphan clean-up: %s %s", task.State, task.Error)
	}
	if orphans, _ := d.OrphanedDisks(); len(orphans) != 0 {
		t.Fatalf("orphans left after clean-up: %+v", orphans)
	}
	if n := len(w.state().Disks); n != len(disks) {
		t.Fatalf("the IaaS holds %d disks, the director records %d", n, len(disks))
	}
}
