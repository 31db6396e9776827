package simulator

import (
	"strings"
	"testing"
)

// A Director that makes a second disk call on a VM while its attach_disk
// is still in flight there is caught at the second call; the same run
// without it is clean.
func TestVMCallsCheckCatchesASecondCallInFlight(t *testing.T) {
	run := func(plant bool) error {
		planted := false
		cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Scripted: true, SkipLinearizability: true,
			Ops: controlOps(t, "c0 provide disk=d vm=0"),
			tamper: tamper{beforeCPI: func(w *World, method string) {
				if !plant || planted || method != "attach_disk" {
					return
				}
				planted = true
				w.mu.Lock()
				var vm string
				for cid := range w.vmCalls {
					vm = cid
				}
				gen := w.liveGen
				w.mu.Unlock()
				if vm == "" {
					t.Fatal("attach_disk is in flight on no VM")
				}
				w.enterVMCall(gen, "detach_disk", vm, "disk-other")()
			}}}
		return Simulate(cfg).Err
	}
	if err := run(false); err != nil {
		t.Fatalf("reference run: %v", err)
	}
	err := run(true)
	v, ok := AsViolation(err)
	if !ok || v.Invariant != InvVMCallsSerial || !strings.Contains(v.Err.Error(), "while attach_disk(") {
		t.Fatalf("second call on the VM during attach_disk: got %v, want %s", err, InvVMCallsSerial)
	}
}
