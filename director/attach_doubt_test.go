package director_test

import (
	"strings"
	"testing"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
)

// attachOutage makes every further attach_disk and detach_disk fail with a
// generic error (the outcome in doubt) for as many calls as the Director
// makes in one attach and its undo, after first, when lost, an attach the
// cloud applies with its answer lost.
func (w *world) attachOutage(lost bool) {
	w.t.Helper()
	down := fakeiaas.Effect{Kind: fakeiaas.EffectError, Message: "cloud API down"}
	rules := []fakeiaas.Rule{{Op: fakeiaas.OpDetachDisk, Times: director.InDoubtTries, Effect: down}}
	// Latest call first: an error rule that fires stops the others from
	// counting that call, so each Nth counts every call only this way.
	for n := director.InDoubtTries; n >= 1; n-- {
		r := fakeiaas.Rule{Op: fakeiaas.OpAttachDisk, Nth: n, Effect: down}
		if lost && n == 1 {
			r.Effect = fakeiaas.Effect{Kind: fakeiaas.EffectLoseResponse}
		}
		rules = append(rules, r)
	}
	for _, r := range rules {
		if _, err := w.lab.Cloud.AddFault(w.t.Context(), r); err != nil {
			w.t.Fatal(err)
		}
	}
}

// An attach_disk the cloud applied with its answer lost, then an outage
// that fails the calls made again and the detach_disk undoing it: the
// record must not say detached while the cloud may hold the disk, or the
// Director attaches it to another VM the cloud has it off. It keeps the
// disk on the VM, in doubt: a provide elsewhere is refused without a CPI
// call, one to the same VM attaches again and links, a detach settles it.
func TestAttachUndoneInDoubtKeepsTheRecord(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.done(w.provide("d", 0))
	w.done(w.d.DetachDynamicDisk("admin", "d"))
	dd, _ := w.disk("d")
	vm0, vm1 := w.instance(0).VMCID, w.instance(1).VMCID

	w.attachOutage(true)
	task := w.failed(w.provide("d", 0))
	if !strings.Contains(task.Error, "undo") {
		t.Errorf("the provide's error %q does not say its undo failed", task.Error)
	}
	if iaas, _ := w.iaasDisk(dd.CID); iaas.VMCID.String() != vm0 {
		t.Fatalf("the cloud has the disk on %q; the lost attach should have put it on %s", iaas.VMCID, vm0)
	}
	rec, _ := w.disk("d")
	if rec.VMCID != vm0 || !rec.AttachInDoubt || rec.State != director.DiskReady || rec.AZ != w.instance(0).AZ {
		t.Fatalf("record on %q, in doubt %v, state %s, AZ %q after an attach and its undo failed in doubt; want on %s, in doubt, ready, AZ %q",
			rec.VMCID, rec.AttachInDoubt, rec.State, rec.AZ, vm0, w.instance(0).AZ)
	}

	before := w.history(fakeiaas.OpAttachDisk, vm1)
	w.failed(w.provide("d", 1))
	if n := w.history(fakeiaas.OpAttachDisk, vm1); n != before {
		t.Fatalf("a provide to another VM called attach_disk on it (%d calls) while the disk may be on %s", n-before, vm0)
	}

	before = w.history(fakeiaas.OpAttachDisk, vm0)
	w.done(w.provide("d", 0))
	if n := w.history(fakeiaas.OpAttachDisk, vm0); n == before {
		t.Fatal("a provide to the VM of an attachment in doubt made no attach_disk to learn it")
	}
	if rec, _ := w.disk("d"); rec.AttachInDoubt || len(rec.Hint) == 0 || !w.linked(vm0, dd.CID) {
		t.Fatalf("after the provide: in doubt %v, hint %s, linked %v; want settled, a hint, linked", rec.AttachInDoubt, rec.Hint, w.linked(vm0, dd.CID))
	}
}

// The same outage when attach_disk never took effect: the record keeps
// the disk on the VM in doubt, the cloud has it detached; an attach made
// again that fails leaves it so, and the next detach settles it
// (DiskNotAttached is detached).
func TestAttachInDoubtSettledByDetach(t *testing.T) {
	w := newWorld(t, worldOpts{})
	vm0, az := w.instance(0).VMCID, w.instance(0).AZ
	if az == "" {
		t.Fatal("the deployment's instances have no AZ: the test proves nothing of the record's")
	}

	// A provide that creates the disk: its record has no AZ until an
	// attach gives it the instance's, which one in doubt does too.
	w.attachOutage(false)
	w.failed(w.provide("d", 0))
	dd, _ := w.disk("d")
	if iaas, _ := w.iaasDisk(dd.CID); !iaas.VMCID.IsZero() {
		t.Fatalf("the cloud has the disk on %q; no attach took effect", iaas.VMCID)
	}
	if dd.VMCID != vm0 || !dd.AttachInDoubt || dd.AZ != az {
		t.Fatalf("record on %q, in doubt %v, AZ %q; want on %s, in doubt, AZ %q", dd.VMCID, dd.AttachInDoubt, dd.AZ, vm0, az)
	}

	// The attach made again to learn it fails too: it is not undone (a
	// failed provide has no effect), the record stays in doubt.
	for n := director.InDoubtTries; n >= 1; n-- {
		if _, err := w.lab.Cloud.AddFault(t.Context(), fakeiaas.Rule{Op: fakeiaas.OpAttachDisk, Nth: n,
			Effect: fakeiaas.Effect{Kind: fakeiaas.EffectError, Message: "cloud API down"}}); err != nil {
			t.Fatal(err)
		}
	}
	detaches := w.history(fakeiaas.OpDetachDisk, vm0)
	w.failed(w.provide("d", 0))
	if n := w.history(fakeiaas.OpDetachDisk, vm0); n != detaches {
		t.Fatalf("a failed attach made again to learn an attachment in doubt was undone (%d detach_disk calls)", n-detaches)
	}
	if rec, _ := w.disk("d"); rec.VMCID != vm0 || !rec.AttachInDoubt {
		t.Fatalf("after the attach made again failed: record on %q, in doubt %v; want still on %s, in doubt", rec.VMCID, rec.AttachInDoubt, vm0)
	}

	w.done(w.d.DetachDynamicDisk("admin", "d"))
	if rec, _ := w.disk("d"); rec.VMCID != "" || rec.AttachInDoubt {
		t.Fatalf("after the detach the record is on %q, in doubt %v; want detached", rec.VMCID, rec.AttachInDoubt)
	}
	w.done(w.provide("d", 1))
}
