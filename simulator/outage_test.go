package simulator

import (
	"strings"
	"testing"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/simulator/faults"
)

// A cloud outage outlasts the reference Director's in-doubt retries: the
// delete's three delete_disk calls all fail, the task fails with the
// injected error (which explains it), and the disk is kept, recorded
// and in the IaaS, so the run passes; the next delete, after the outage,
// deletes it.
func TestCPIOutageOutlastsTheDirectorsRetries(t *testing.T) {
	sched, err := faults.ParseSchedule("cpi-outage@0 on=delete_disk n=1 d=1m")
	if err != nil {
		t.Fatal(err)
	}
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Scripted: true, Schedule: sched,
		Ops: controlOps(t, "c0 provide disk=d vm=0", "c0 delete disk=d", "c0 delete disk=d delay=2m")}
	o := Simulate(cfg)
	if o.Err != nil {
		t.Fatalf("reference director under a cloud outage: %v", o.Err)
	}
	if len(o.Fired) != 1 || o.Fired[0].Kind != faults.CPIOutage {
		t.Fatalf("fired %v, want the one outage", o.Fired)
	}
	want := []string{"provide disk=d vm=0: ok", "delete disk=d: failed", "delete disk=d delay=2m0s: ok"}
	if len(o.Log) != len(want) {
		t.Fatalf("log %q, want %d lines", o.Log, len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(o.Log[i], w) {
			t.Errorf("log line %d: %q, want …%q", i, o.Log[i], w)
		}
	}
}

// A delete_disk the cloud applied with its answer lost, then an outage
// that outlasts the Director's in-doubt retries: the delete fails and the
// Director keeps the record of a disk the cloud no longer has, as
// upstream's delete job does (it destroys the record only after
// delete_disk returns). The records check allows that record while the
// delete is in doubt, and the next delete, which finds the disk gone,
// settles it. A Director that keeps the record after that delete answered
// OK is caught.
func TestDeleteInDoubtKeepsTheRecordUntilTheNextDelete(t *testing.T) {
	cfg := runLog(t, "lost-response@0 on=delete_disk n=1; cpi-outage@0 on=delete_disk n=2 d=1m",
		[]string{"c0 provide disk=d vm=0", "c0 delete disk=d", "c0 detach disk=d delay=10s", "c0 delete disk=d delay=2m"},
		[]string{"provide disk=d vm=0: ok", "delete disk=d: failed", "detach disk=d delay=10s: ok", "delete disk=d delay=2m0s: ok"})

	// The planted bug: the record of the gone disk comes back after the
	// delete that settled it answered OK.
	var kept []director.DynamicDisk
	cfg.tamper = putRecordsBack(t, OpDelete, &kept)
	o := Simulate(cfg)
	if len(kept) != 1 {
		t.Fatalf("the failed delete left %d records, want the one of the gone disk: the control proves nothing (outcome %v)", len(kept), o.Err)
	}
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvRecords || !strings.Contains(v.Err.Error(), "is not in the IaaS") {
		t.Fatalf("a director that keeps the record after a delete answered OK: got %v, want %s", o.Err, InvRecords)
	}
}

// The same for a detach: a detach_disk the cloud applied with its answer
// lost, then an outage past the retries, fails the detach and keeps the
// record of the disk as attached (upstream's detach job changes the record
// only once detach_disk returns); the records check allows it while the
// detach is in doubt, and the next detach (DiskNotAttached) settles it.
// A Director that keeps the record attached after that detach answered OK
// is caught.
func TestDetachInDoubtKeepsTheAttachmentUntilTheNextDetach(t *testing.T) {
	cfg := runLog(t, "lost-response@0 on=detach_disk n=1; cpi-outage@0 on=detach_disk n=2 d=1m",
		[]string{"c0 provide disk=d vm=0", "c0 detach disk=d", "c0 detach disk=d delay=2m"},
		[]string{"provide disk=d vm=0: ok", "detach disk=d: failed", "detach disk=d delay=2m0s: ok"})

	// The planted bug: the record says attached again after the detach
	// that settled it answered OK.
	var kept []director.DynamicDisk
	cfg.tamper = putRecordsBack(t, OpDetach, &kept)
	o := Simulate(cfg)
	if len(kept) != 1 || kept[0].VMCID == "" {
		t.Fatalf("the failed detach left records %+v, want the one of the disk, attached: the control proves nothing (outcome %v)", kept, o.Err)
	}
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvRecords || !strings.Contains(v.Err.Error(), "the IaaS has it attached to \"\"") {
		t.Fatalf("a director that keeps the record attached after a detach answered OK: got %v, want %s", o.Err, InvRecords)
	}
}

// putRecordsBack plants a Director that forgets what settled a name in
// doubt: after the first operation of kind it keeps the dynamic disk
// records (into kept), and after the second it puts them back.
func putRecordsBack(t *testing.T, kind OpKind, kept *[]director.DynamicDisk) tamper {
	n := 0
	return tamper{afterOp: func(w *World, o Op) {
		if o.Kind != kind {
			return
		}
		if n++; n == 1 {
			*kept = storeRecords[director.DynamicDisk](t, w, store.DynamicDisks)
			return
		}
		if err := w.Store.Update(func(tx store.Tx) error {
			for _, dd := range *kept {
				if err := tx.Put(store.DynamicDisks, dd.Name, dd); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Errorf("putting the records back: %v", err)
		}
	}}
}

// runLog runs ops under sched on the reference Director, wants it clean
// with the log lines ending as want, and returns the run's configuration
// (for a planted-bug rerun).
func runLog(t *testing.T, sched string, ops []string, want []string) SimConfig {
	t.Helper()
	s, err := faults.ParseSchedule(sched)
	if err != nil {
		t.Fatal(err)
	}
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Scripted: true, Schedule: s, Ops: controlOps(t, ops...)}
	o := Simulate(cfg)
	if o.Err != nil {
		t.Fatalf("reference director: %v\nlog %q", o.Err, o.Log)
	}
	if len(o.Log) != len(want) {
		t.Fatalf("log %q, want %d lines", o.Log, len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(o.Log[i], w) {
			t.Errorf("log line %d: %q, want …%q (log %q)", i, o.Log[i], w, o.Log)
		}
	}
	return cfg
}

// An attach_disk the cloud applied with its answer lost, then an outage
// past the Director's retries and past the detach_disk undoing it: the
// provide fails, and the Director keeps the disk recorded on that VM (in
// doubt) rather than detached, so a provide to another instance after the
// outage is refused instead of calling attach_disk on a disk the cloud has
// elsewhere (no-attach-of-disk-attached-elsewhere); the next detach
// settles it and the disk moves.
func TestAttachInDoubtIsNeverAttachedElsewhere(t *testing.T) {
	runLog(t, "lost-response@0 on=attach_disk n=2; cpi-outage@0 on=attach_disk n=3 d=1m",
		[]string{"c0 provide disk=d vm=0", "c0 detach disk=d", "c0 provide disk=d vm=0", "c0 provide disk=d vm=1 delay=2m",
			"c0 detach disk=d", "c0 provide disk=d vm=1"},
		[]string{"provide disk=d vm=0: ok", "detach disk=d: ok", "provide disk=d vm=0: failed", "provide disk=d vm=1 delay=2m0s: failed",
			"detach disk=d: ok", "provide disk=d vm=1: ok"})
}

// The same outage when no attach_disk took effect: the record keeps the
// disk on the VM in doubt while the cloud has it detached. The records
// check allows it after a provide that failed on an injected CPI fault,
// until the next OK operation on the name (here a detach) settles it.
func TestAttachInDoubtAllowedUntilTheNextDetach(t *testing.T) {
	runLog(t, "cpi-outage@0 on=attach_disk n=2 d=1m",
		[]string{"c0 provide disk=d vm=0", "c0 detach disk=d", "c0 provide disk=d vm=0", "c0 detach disk=d delay=2m", "c0 provide disk=d vm=1"},
		[]string{"provide disk=d vm=0: ok", "detach disk=d: ok", "provide disk=d vm=0: failed", "detach disk=d delay=2m0s: ok", "provide disk=d vm=1: ok"})
}

// A VM operation detaches its instance's dynamic disks before delete_vm;
// a detach_disk the cloud applied with its answer lost, then an outage past
// the retries, fails it and keeps the disk recorded on the instance, as
// upstream's DetachDynamicDiskStep changes the record only once
// detach_disk returns. The records check allows it while that VM
// operation is in doubt; the next detach (DiskNotAttached) settles it.
func TestVMOperationDetachInDoubtAllowedUntilTheNextDetach(t *testing.T) {
	runLog(t, "lost-response@0 on=detach_disk n=1; cpi-outage@0 on=detach_disk n=2 d=1m",
		[]string{"c0 provide disk=d vm=0", "c0 delete-vm vm=0", "c0 detach disk=d delay=2m"},
		[]string{"provide disk=d vm=0: ok", "delete-vm vm=0: failed", "detach disk=d delay=2m0s: ok"})
}
