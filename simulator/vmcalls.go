package simulator

import (
	"fmt"
	"time"
)

// ---- CPI-seam check: one disk call per VM at a time ----

// The calls that change a VM's disks or the VM itself. Upstream makes each
// under the VM's lock (with_vm_lock around attach_disk, detach_disk and
// delete_vm, lock_helper.rb), and CPIs rely on it: a CPI picks the device
// an attachment takes from the VM's current devices (the AWS CPI's device
// name, the vSphere CPI's unit number), so two at once may pick the same
// one, and an IaaS refuses a change to a VM another is reconfiguring. The
// oracle sees each call from the moment the Director makes it (before its
// latency) to its answer.
var vmSerialMethods = map[string]bool{"attach_disk": true, "detach_disk": true, "delete_vm": true}

// vmCall is a disk call in flight on a VM, as the cloud sees it.
type vmCall struct {
	what  string    // "attach_disk(vm, disk)"
	gen   int       // the director generation that made it
	since time.Time // when it was made
}

// enterVMCall records that method was called on vm by director generation
// gen, reporting InvVMCallsSerial if the live director already has a call
// in flight on vm (a dead generation's calls never end, and are ignored).
// The returned func ends the call.
func (w *World) enterVMCall(gen int, method, vm, disk string) func() {
	if !vmSerialMethods[method] {
		return func() {}
	}
	what := method + "(" + vm + ")"
	if disk != "" {
		what = method + "(" + vm + ", " + disk + ")"
	}
	now := w.s.Now()
	w.mu.Lock()
	if w.vmCalls == nil {
		w.vmCalls = map[string]vmCall{}
	}
	prev, busy := w.vmCalls[vm]
	busy = busy && prev.gen == w.liveGen
	w.vmCalls[vm] = vmCall{what: what, gen: gen, since: now}
	w.mu.Unlock()
	if busy {
		w.addSeamViolation(&Violation{Invariant: InvVMCallsSerial, Phase: AfterStep,
			Err: fmt.Errorf("%s called while %s, made %s before, was still in flight on the VM", what, prev.what, now.Sub(prev.since))})
	}
	return func() {
		w.mu.Lock()
		if c, ok := w.vmCalls[vm]; ok && c.what == what && c.since.Equal(now) {
			delete(w.vmCalls, vm)
		}
		w.mu.Unlock()
	}
}
