package simulator

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/vmroot"
)

// Control tests for the checkers: a director that lies in its records must
// still be caught, because the checkers decide from the fake cloud's oracle
// and the VM roots.

// markDetached rewrites the director's records so that every dynamic disk
// it records on vm ("" for every VM) reads as detached, as a broken director
// that marks a disk detached without detaching it would. It returns how
// many records it changed.
func markDetached(t *testing.T, w *World, vm string) int {
	changed := 0
	records := storeRecords[director.DynamicDisk](t, w, store.DynamicDisks)
	err := w.Store.Update(func(tx store.Tx) error {
		for _, dd := range records {
			if dd.VMCID == "" || (vm != "" && dd.VMCID != vm) {
				continue
			}
			dd.VMCID, dd.InstanceID, dd.Hint = "", "", nil
			if err := tx.Put(store.DynamicDisks, dd.Name, dd); err != nil {
				return err
			}
			changed++
		}
		return nil
	})
	if err != nil {
		t.Errorf("rewriting the director's records: %v", err)
	}
	return changed
}

// storeRecords reads the director's records of kind from its store, as a
// planted bug would: the checkers themselves never do.
func storeRecords[T any](t *testing.T, w *World, kind store.Kind) []T {
	t.Helper()
	var out []T
	err := w.Store.View(func(tx store.Tx) error {
		return tx.List(kind, func(_ string, raw []byte) error {
			var v T
			if err := json.Unmarshal(raw, &v); err != nil {
				return err
			}
			out = append(out, v)
			return nil
		})
	})
	if err != nil {
		t.Errorf("reading the director's store: %v", err)
	}
	return out
}

func controlOps(t *testing.T, lines ...string) []Op {
	t.Helper()
	var ops []Op
	for _, l := range lines {
		o, err := ParseOp(l)
		if err != nil {
			t.Fatal(err)
		}
		ops = append(ops, o)
	}
	return ops
}

// A director that skips the detach (unresponsive agent) and marks the disk
// detached in its records before delete_vm is caught: the IaaS still has
// the disk attached when delete_vm arrives.
func TestDeleteVMCheckDecidesFromTheIaaS(t *testing.T) {
	ops := controlOps(t, "c0 provide disk=d vm=0", "c0 silence vm=0 for=5m", "c0 recreate vm=0")
	lied := 0
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1, Profile: "upstream:d"}, Ops: ops, Scripted: true, SkipLinearizability: true,
		tamper: tamper{beforeDeleteVM: func(w *World, vm string) { lied += markDetached(t, w, vm) }}}
	o := Simulate(cfg)
	if lied == 0 {
		t.Fatalf("the broken director had no record to falsify: the control proves nothing (outcome %v)", o.Err)
	}
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvDeleteVMWithDisk || !strings.Contains(v.Err.Error(), "the IaaS has") {
		t.Fatalf("a director whose records say detached while the IaaS has the disk attached at delete_vm: got %v, want %s",
			o.Err, InvDeleteVMWithDisk)
	}
	// The same lie under the reference director is harmless (it detached
	// through the CPI first), and nothing is reported.
	cfg.Profile = ProfileReference
	lied = 0
	if o := Simulate(cfg); o.Err != nil {
		t.Fatalf("reference director with the same records rewrite: %v", o.Err)
	}
}

// A director that swallows the old agent's "unknown message" and records
// the disk as detached is caught right after the provide: the IaaS has the
// disk attached to the VM, whose root holds no symlink.
func TestProvideLinkCheckDecidesFromTheIaaS(t *testing.T) {
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1, Profile: "upstream:h"}, AgentMode: agent.ModeOld,
		Ops: controlOps(t, "c0 provide disk=d vm=0"), Scripted: true, SkipLinearizability: true,
		tamper: tamper{afterOp: func(w *World, o Op) {
			if o.Kind == OpProvide {
				markDetached(t, w, "")
			}
		}}}
	o := Simulate(cfg)
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvLinks || v.Phase != AfterStep || !strings.Contains(v.Err.Error(), "has no symlink") {
		t.Fatalf("provide reported done with no symlink, the director's records saying detached: got %v, want %s after the step", o.Err, InvLinks)
	}
}

// A symlink that exists but leads to another disk's device is caught: the
// check follows the link inside the VM root to the disk's bytes.
func TestProvideLinkCheckFollowsTheLinkToTheDevice(t *testing.T) {
	ops := controlOps(t, "c0 provide disk=a vm=0", "c0 provide disk=b vm=0")
	provides := 0
	swap := func(w *World, o Op) {
		if o.Kind != OpProvide {
			return
		}
		if provides++; provides != 2 {
			return
		}
		st, err := w.Cloud.State(context.Background())
		if err != nil || len(st.Disks) != 2 {
			t.Errorf("want two disks in the IaaS, got %d (%v)", len(st.Disks), err)
			return
		}
		for _, vm := range st.VMs {
			links := w.readLinks(vm.Root)
			if len(links) != 2 {
				continue
			}
			a, b := st.Disks[0].CID.String(), st.Disks[1].CID.String()
			relink(t, w, vm.Root, a, links[b])
			relink(t, w, vm.Root, b, links[a])
			return
		}
		t.Errorf("no VM root holds both links")
	}
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true, SkipLinearizability: true, tamper: tamper{afterOp: swap}}
	o := Simulate(cfg)
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvLinks || !strings.Contains(v.Err.Error(), "which is not that disk's device") {
		t.Fatalf("crossed symlinks: got %v, want %s naming the wrong device", o.Err, InvLinks)
	}
	// Untouched, the same run passes.
	cfg.tamper = tamper{}
	if o := Simulate(cfg); o.Err != nil {
		t.Fatalf("the same run without crossed links: %v", o.Err)
	}
}

func relink(t *testing.T, w *World, root, cid, target string) {
	t.Helper()
	r, err := w.Cloud.Files().Open(root)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	link := agent.DynamicDiskLink(cid)
	if err := r.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := r.Symlink(target, link, vmroot.SymlinkReplace); err != nil {
		t.Fatal(err)
	}
}

// checkLinks decides from the IaaS and the VM roots: the director's records
// are not in its input at all.
func TestCheckLinksUsesTheOracleAndTheRoots(t *testing.T) {
	vm := fakeiaas.VM{CID: cpiv2.MustCID[cpiv2.VMKind]("vm-1"), AgentID: "agent-1",
		Disks: []cpiv2.DiskCID{cpiv2.MustCID[cpiv2.DiskKind]("disk-a")}}
	base := func() View {
		return View{IaaS: fakeiaas.State{VMs: []fakeiaas.VM{vm}},
			Links: map[string]map[string]string{}, LinkOK: map[string]map[string]bool{}, Excused: map[string]bool{}}
	}
	for _, tc := range []struct {
		name string
		edit func(*View)
		want string // "" for no violation
	}{
		{"linked", func(v *View) {
			v.Links["vm-1"] = map[string]string{"disk-a": "/dev/sdc"}
			v.LinkOK["vm-1"] = map[string]bool{"disk-a": true}
		}, ""},
		{"attached, no link, nothing explains it", func(*View) {}, "has no symlink (no agent or mbus fault explains it)"},
		{"attached, no link, agent fault", func(v *View) { v.Excused["agent-1"] = true }, ""},
		{"attached, no link, director crash", func(v *View) { v.Crashes = 1 }, ""},
		{"attached, no link, promised by the last provide", func(v *View) {
			v.Excused["agent-1"] = true
			v.LastOK = map[string]Promise{"a": {Instance: "i0", CID: "disk-a"}}
		}, "the last operation on a, a provide or attach, succeeded"},
		{"link to another device", func(v *View) {
			v.Links["vm-1"] = map[string]string{"disk-a": "/dev/sdd"}
			v.LinkOK["vm-1"] = map[string]bool{"disk-a": false}
		}, "points at /dev/sdd, which is not that disk's device"},
		{"dangling link", func(v *View) {
			v.Links["vm-1"] = map[string]string{"disk-a": "/dev/sdc", "disk-gone": "/dev/sdd"}
			v.LinkOK["vm-1"] = map[string]bool{"disk-a": true}
		}, "symlink for disk-gone, which the IaaS does not attach to it (dangling)"},
	} {
		v := base()
		tc.edit(&v)
		err := checkLinks(v)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: got %v, want %q", tc.name, err, tc.want)
		}
	}
}

// resolveInRoot follows absolute and relative targets inside the root and
// never out of it.
func TestResolveInRoot(t *testing.T) {
	root := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "dev/disk/by-id"), 0o755))
	must(os.MkdirAll(filepath.Join(root, "var/data"), 0o755))
	must(os.WriteFile(filepath.Join(root, "dev/sdc"), nil, 0o644))
	must(os.Symlink("../../sdc", filepath.Join(root, "dev/disk/by-id/virtio-x")))
	must(os.Symlink("/dev/disk/by-id/virtio-x", filepath.Join(root, "var/data/abs")))
	must(os.Symlink("../../../../../../etc/passwd", filepath.Join(root, "var/data/escape")))
	must(os.Symlink("loop", filepath.Join(root, "var/data/loop")))
	if got, ok := resolveInRoot(vmroot.OS, root, "/var/data/abs"); !ok || got != filepath.Join(root, "dev/sdc") {
		t.Errorf("abs → by-id → sdc: %q %v", got, ok)
	}
	if got, ok := resolveInRoot(vmroot.OS, root, "/var/data/escape"); ok {
		t.Errorf("a link climbing out of the root resolved to %q", got)
	}
	if _, ok := resolveInRoot(vmroot.OS, root, "/var/data/loop"); ok {
		t.Error("a link loop resolved")
	}
}

// A director that reports a detach done while the agent kept the disk's
// symlink (its unlink error swallowed) is caught right after the detach,
// even though the quiescent links check would excuse an agent fault on
// that VM. The planted bug puts the symlink back after the detach.
func TestDetachLinkCheckCatchesAKeptSymlink(t *testing.T) {
	kept := map[string]map[string]string{} // VM root → its symlinks after the provide
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: controlOps(t, "c0 provide disk=d vm=0", "c0 detach disk=d"),
		Scripted: true, SkipLinearizability: true}
	run := func(plant bool) *Outcome {
		cfg.tamper = tamper{afterOp: func(w *World, o Op) {
			st, err := w.Cloud.State(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			for _, vm := range st.VMs {
				switch {
				case o.Kind == OpProvide:
					kept[vm.Root] = w.readLinks(vm.Root)
				case o.Kind == OpDetach && plant:
					r, err := w.Cloud.Files().Open(vm.Root)
					if err != nil {
						t.Fatal(err)
					}
					for cid, target := range kept[vm.Root] {
						if err := r.Symlink(target, agent.DynamicDiskLink(cid), vmroot.SymlinkAtomic); err != nil {
							t.Fatal(err)
						}
					}
					r.Close()
				}
			}
		}}
		return Simulate(cfg)
	}
	if o := run(false); o.Err != nil {
		t.Fatalf("provide then detach, nothing planted: %v", o.Err)
	}
	n := 0
	for _, l := range kept {
		n += len(l)
	}
	if n != 1 {
		t.Fatalf("the provide left %d symlinks, want 1: %v", n, kept)
	}
	o := run(true)
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvLinks || v.Phase != AfterStep || !strings.Contains(v.Err.Error(), "still has its symlink") {
		t.Fatalf("detach reported done with the symlink kept: got %v, want %s after the step", o.Err, InvLinks)
	}
}

// A director whose lock leases lapse while a job holds them is caught. The
// slow-cpi shape's CPI calls take from half to one and a half lock lease:
// a director that renews its leases only at job steps (the planted bug,
// director.Config.PerStepLockRenewal) lets another job take a VM's lock
// during one call and call the CPI on that VM at once, which the CPI-seam
// check sees; the reference director renews every half lease and is clean
// on the same seeds. (Other checkers may see the lapse first: the other
// job's change shows in the records, the links or the history.)
func TestLapsedLockLeaseIsCaught(t *testing.T) {
	spec, err := faults.ParseSpec(ReferenceSweepFaults)
	if err != nil {
		t.Fatal(err)
	}
	caught := map[string]int{} // invariant → seeds
	for seed := Seed(1); seed <= 8; seed++ {
		for _, perStep := range []bool{true, false} {
			cfg := SimConfig{RunConfig: RunConfig{Seed: seed, Steps: 60, Faults: spec, Workload: WorkloadConfig{Shape: ShapeSlowCPI}},
				SkipLinearizability: true, tamper: tamper{perStepLockRenewal: perStep}}
			o := Simulate(cfg)
			if !perStep {
				if o.Err != nil {
					t.Errorf("seed %d, the reference director (timer renewal): %v", seed, o.Err)
				}
				continue
			}
			if v, ok := AsViolation(o.Err); ok {
				caught[v.Invariant]++
			} else if o.Err != nil {
				t.Errorf("seed %d, leases renewed per step only: %v; want a violation or nothing", seed, o.Err)
			}
		}
	}
	if caught[InvVMCallsSerial] == 0 {
		t.Errorf("a director whose leases lapse mid-call was caught on none of seeds 1..8 of the slow-cpi shape by %s (caught: %v)",
			InvVMCallsSerial, caught)
	}
	t.Logf("leases renewed per step only, violations on seeds 1..8: %v", caught)
}

// A director whose re-attaching recreate leaves one of the instance's
// disks detached (planted: after the recreate answers, the second disk is
// detached behind the workload's back, through the API, so the IaaS, the
// records and the agent's symlinks all agree) is caught when the recreate
// answers: both names were promised on the instance and no operation on
// them overlapped it. The idle records check alone cannot see it here:
// another client's slow provide keeps the workload busy until detaches of
// both names have ended the promises.
func TestReattachCheckRunsWhenTheRecreateAnswers(t *testing.T) {
	sched, err := faults.ParseSchedule("latency@0 on=create_disk n=1 d=10m")
	if err != nil {
		t.Fatal(err)
	}
	ops := controlOps(t, "c1 provide disk=c vm=1",
		"c0 provide disk=a vm=0 delay=1s", "c0 provide disk=b vm=0", "c0 recreate vm=0 reattach=yes",
		"c0 detach disk=a", "c0 detach disk=b")
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true, Schedule: sched}
	if o := Simulate(cfg); o.Err != nil {
		t.Fatalf("reference director: %v", o.Err)
	}
	planted := 0
	cfg.tamper = tamper{afterOp: func(w *World, o Op) {
		if o.Kind != OpRecreate {
			return
		}
		id, err := w.Director().DetachDynamicDisk(directorUser, "b")
		if err != nil {
			t.Errorf("planting the lost re-attach: %v", err)
			return
		}
		if tv, ok := w.WaitTask(id, time.Minute); ok && tv.State == director.TaskDone {
			planted++
		}
	}}
	o := Simulate(cfg)
	if planted != 1 {
		t.Fatalf("the planted detach did not happen: the control proves nothing (outcome %v)", o.Err)
	}
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvRecords || !strings.Contains(v.Err.Error(), "recreate vm=0 reattach=yes succeeded") {
		t.Fatalf("a director that re-attaches one disk of two: got %v, want %s at the recreate", o.Err, InvRecords)
	}
}
