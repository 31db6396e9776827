package director_test

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
)

// Dynamic disks: VM recreate and delete detach dynamic disks first; recreate
// re-attaches them when asked; deployment delete deletes them.
func TestRecreateDetachesAndReattaches(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.done(w.provide("a", 0))
	w.done(w.provide("b", 0))
	old := w.instance(0).VMCID
	w.done(w.d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: w.insts[0].ID, State: "recreate"}))
	if w.history(fakeiaas.OpDetachDisk, old) != 2 {
		t.Fatalf("recreate made %d detach_disk calls on %s; want 2", w.history(fakeiaas.OpDetachDisk, old), old)
	}
	for _, n := range []string{"a", "b"} {
		if dd, _ := w.disk(n); dd.Attached() {
			t.Fatalf("after recreate without reattach disk %s is attached to %s", n, dd.VMCID)
		}
	}
	w.done(w.provide("a", 0)) // the orchestrator provides again
	w.done(w.d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: w.insts[0].ID, State: "recreate",
		ReattachDynamicDisks: true}))
	vm := w.instance(0).VMCID
	dd, _ := w.disk("a")
	if iaas, _ := w.iaasDisk(dd.CID); dd.VMCID != vm || iaas.VMCID.String() != vm || !w.linked(vm, dd.CID) {
		t.Fatalf("after recreate with reattach: record %q, IaaS %v, link %v; want %s", dd.VMCID, iaas.VMCID, w.linked(vm, dd.CID), vm)
	}
}

func TestStopHardStartRestartAndDeleteVM(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.done(w.provide("a", 0))
	w.done(w.d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: w.insts[0].ID, State: "stopped", Hard: true}))
	in := w.instance(0)
	if in.VMCID != "" || in.State != director.InstanceDetached {
		t.Fatalf("after stop --hard: vm %q state %s", in.VMCID, in.State)
	}
	dd, _ := w.disk("a")
	if iaas, ok := w.iaasDisk(dd.CID); !ok || !iaas.VMCID.IsZero() || dd.Attached() {
		t.Fatal("stop --hard must detach (not delete) dynamic disks")
	}
	w.failed(w.provide("a", 0)) // no VM
	w.done(w.d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: w.insts[0].ID, State: "started"}))
	w.done(w.d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: w.insts[0].ID, State: "restart"}))
	w.done(w.provide("a", 0))
	vm := w.instance(0).VMCID
	w.done(w.d.DeleteVM("admin", vm))
	if got, _ := w.disk("a"); got.Attached() {
		t.Fatal("VM delete left the disk attached in the record")
	}
	if w.history(fakeiaas.OpDetachDisk, vm) != 1 {
		t.Fatal("VM delete did not detach the dynamic disk first")
	}
	if _, err := w.d.DeleteVM("admin", vm); err == nil {
		t.Fatal("DeleteVM of a deleted VM queued a task; want 404")
	}
}

func TestDeleteDeploymentDeletesDynamicDisks(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.done(w.provide("a", 0))
	w.done(w.d.CreateDynamicDisk("admin", director.CreateDiskRequest{DiskSize: 4, DiskName: "b", DiskPoolName: "small", Deployment: "workers", AZ: "z1"}))
	w.done(w.d.DeleteDeployment("admin", "workers"))
	st := w.state()
	if len(st.Disks) != 0 || len(st.VMs) != 0 {
		t.Fatalf("after deployment delete the IaaS holds %d disks and %d VMs; want none", len(st.Disks), len(st.VMs))
	}
	if disks, _ := w.d.DynamicDisks(); len(disks) != 0 {
		t.Fatalf("the director still records %d dynamic disks", len(disks))
	}
	if _, err := w.d.DeleteDeployment("admin", "workers"); err == nil {
		t.Fatal("deleting an unknown deployment queued a task; want 404")
	}
}

func TestDeployScalesDown(t *testing.T) {
	w := newWorld(t, worldOpts{instances: 3})
	w.done(w.provide("a", 2))
	w.deploy(2)
	if n := len(w.state().VMs); n != 2 {
		t.Fatalf("after scaling to 2 the IaaS holds %d VMs", n)
	}
	if dd, _ := w.disk("a"); dd.Attached() {
		t.Fatal("scale-down left the disk attached to a deleted VM")
	}
}

// CPI calls about a VM carry its stemcell's api_version: a v1
// stemcell's VM gets its settings through the registry, a v2 one's through
// user-data only.
func TestStemcellAPIVersionReachesTheCPI(t *testing.T) {
	w := newWorld(t, worldOpts{})
	v2VM := w.instance(0).VMCID
	abs, _ := filepath.Abs(filepath.Join(fixtures, "stemcell-v1", "image"))
	w.done(w.d.UploadStemcell("admin", readFixture(t, "stemcell-v1/stemcell.MF"), abs))
	m := strings.NewReplacer("name: workers", "name: old", "os: ubuntu-jammy", "os: ubuntu-bionic").Replace(string(readFixture(t, "manifest.yml")))
	w.done(w.d.Deploy("admin", []byte(m)))
	old, _ := w.d.Instances("old")
	st := w.state()
	if _, ok := st.Registry[old[0].VMCID]; !ok {
		t.Fatalf("the v1-stemcell VM %s has no registry settings: the stemcell api_version did not reach the CPI", old[0].VMCID)
	}
	if _, ok := st.Registry[v2VM]; ok {
		t.Fatalf("the v2-stemcell VM %s has registry settings", v2VM)
	}
	// Dynamic disks work on both.
	w.done(w.d.Provide("admin", director.ProvideRequest{DiskSize: 4, DiskName: "o", DiskPoolName: "small", InstanceID: old[0].ID}))
}

// Disk work never waits behind a deploy: with a deploy stuck in create_vm,
// provide and detach on other instances finish.
func TestDiskWorkDoesNotWaitBehindADeploy(t *testing.T) {
	w := newWorld(t, worldOpts{configure: func(c *director.Config) { c.NormalWorkers = 1 }})
	rule := w.pauseRule(fakeiaas.OpCreateVM, "")
	dep, err := w.d.Deploy("admin", manifestWith(t, 3))
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deploy paused in create_vm", func() bool { return w.ruleStatus(rule.ID).Paused == 1 })
	w.done(w.provide("a", 0))
	w.done(w.d.DetachDynamicDisk("admin", "a"))
	if task, _ := w.d.Task(dep); task.State.Final() {
		t.Fatalf("the deploy ended (%s) before its create_vm was released", task.State)
	}
	w.release(rule.ID)
	w.done(dep, nil)
}
