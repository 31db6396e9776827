package director_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
)

// Dynamic disks: provide creates, attaches and links; provide again is
// idempotent; detach unlinks and is idempotent; delete is idempotent.
func TestProvideDetachDeleteLifecycle(t *testing.T) {
	w := newWorld(t, worldOpts{})
	task := w.done(w.provide("data", 0))
	dd, ok := w.disk("data")
	if !ok || !dd.Attached() {
		t.Fatalf("after provide the record is %+v (present %v); want attached", dd, ok)
	}
	if string(task.Result) != `{"disk_cid":"`+dd.CID+`"}` {
		t.Fatalf("provide result %s, want {\"disk_cid\":%q}", task.Result, dd.CID)
	}
	vm := w.instance(0).VMCID
	if d, ok := w.iaasDisk(dd.CID); !ok || d.VMCID.String() != vm {
		t.Fatalf("IaaS disk %s attached to %v, want %s", dd.CID, d.VMCID, vm)
	}
	if !w.linked(vm, dd.CID) {
		t.Fatalf("agent on %s has no link for %s", vm, dd.CID)
	}
	again := w.done(w.provide("data", 0))
	if string(again.Result) != string(task.Result) {
		t.Fatalf("idempotent provide returned %s, first %s", again.Result, task.Result)
	}
	if n := len(w.state().Disks); n != 1 {
		t.Fatalf("IaaS has %d disks after two provides of one name, want 1", n)
	}
	// Attached elsewhere → fail.
	other := w.failed(w.provide("data", 1))
	if other.Error == "" {
		t.Fatal("provide to a second VM failed without a message")
	}
	w.done(w.d.DetachDynamicDisk("admin", "data"))
	if d, _ := w.iaasDisk(dd.CID); !d.VMCID.IsZero() {
		t.Fatalf("after detach the IaaS disk is attached to %s", d.VMCID)
	}
	if w.linked(vm, dd.CID) {
		t.Fatal("after detach the agent still links the disk")
	}
	w.done(w.d.DetachDynamicDisk("admin", "data")) // idempotent
	// Exists unattached → provide attaches it to the requested VM.
	w.done(w.provide("data", 1))
	vm1 := w.instance(1).VMCID
	if d, _ := w.iaasDisk(dd.CID); d.VMCID.String() != vm1 {
		t.Fatalf("re-provide attached to %s, want %s", d.VMCID, vm1)
	}
	w.done(w.d.DeleteDynamicDisk("admin", "data"))
	if _, ok := w.iaasDisk(dd.CID); ok {
		t.Fatal("after delete the IaaS disk still exists")
	}
	if w.linked(vm1, dd.CID) {
		t.Fatal("after delete the agent still links the disk")
	}
	w.done(w.d.DeleteDynamicDisk("admin", "data")) // idempotent
	// Unknown name → detach fails.
	w.failed(w.d.DetachDynamicDisk("admin", "nope"))
}

func TestCreateThenAttachAndMetadata(t *testing.T) {
	w := newWorld(t, worldOpts{})
	task := w.done(w.d.CreateDynamicDisk("admin", director.CreateDiskRequest{DiskSize: 4, DiskName: "c1", DiskPoolName: "fast",
		InstanceID: w.insts[0].ID, Metadata: map[string]any{"owner": "t"}}))
	dd, _ := w.disk("c1")
	if dd.Attached() || dd.SizeMiB != 4 {
		t.Fatalf("created disk %+v; want unattached, 4 MiB as asked", dd)
	}
	if d, ok := w.iaasDisk(dd.CID); !ok || d.Metadata["owner"] != "t" {
		t.Fatalf("IaaS disk metadata %v, want owner=t", d.Metadata)
	}
	_ = task
	// Upstream's attach refuses an instance in another AZ.
	if task := w.failed(w.d.AttachDynamicDisk("admin", director.AttachRequest{DiskName: "c1", InstanceID: w.insts[1].ID})); !strings.Contains(task.Error, "is in AZ `z1` but instance") {
		t.Fatalf("attach across AZs: %q", task.Error)
	}
	w.done(w.d.AttachDynamicDisk("admin", director.AttachRequest{DiskName: "c1", InstanceID: w.insts[0].ID}))
	if d, _ := w.iaasDisk(dd.CID); d.VMCID.String() != w.instance(0).VMCID {
		t.Fatalf("attach put the disk on %s", d.VMCID)
	}
	w.failed(w.d.AttachDynamicDisk("admin", director.AttachRequest{DiskName: "missing", InstanceID: w.insts[1].ID}))
	// Metadata changes → set_disk_metadata, with the director and
	// deployment tags merged in; any JSON value.
	w.done(w.d.Provide("admin", director.ProvideRequest{DiskSize: 4, DiskName: "c1", DiskPoolName: "fast", InstanceID: w.insts[0].ID,
		Metadata: map[string]any{"owner": "u", "n": 2}}))
	if d, _ := w.iaasDisk(dd.CID); d.Metadata["owner"] != "u" || d.Metadata["n"] != "2" || d.Metadata["director"] != "cpilab" || d.Metadata["deployment"] != "workers" {
		t.Fatalf("metadata after change %v", d.Metadata)
	}
}

func TestBadRequests(t *testing.T) {
	w := newWorld(t, worldOpts{})
	cases := []struct {
		req    director.ProvideRequest
		status error
		field  string
	}{
		{director.ProvideRequest{DiskSize: 4, DiskName: "a/b", DiskPoolName: "small", InstanceID: w.insts[0].ID}, director.ErrBadRequest, "disk_name"},
		{director.ProvideRequest{DiskSize: 4, DiskName: "a\x00b", DiskPoolName: "small", InstanceID: w.insts[0].ID}, director.ErrBadRequest, "disk_name"},
		{director.ProvideRequest{DiskSize: 4, DiskName: "..", DiskPoolName: "small", InstanceID: w.insts[0].ID}, director.ErrBadRequest, "disk_name"},
		{director.ProvideRequest{DiskSize: 4, DiskName: string(make([]byte, 300)), DiskPoolName: "small", InstanceID: w.insts[0].ID}, director.ErrBadRequest, "disk_name"},
		{director.ProvideRequest{DiskName: "ok", DiskSize: -1, DiskPoolName: "small", InstanceID: w.insts[0].ID}, director.ErrBadRequest, "disk_size"},
		{director.ProvideRequest{DiskSize: 4, DiskName: "ok", InstanceID: w.insts[0].ID}, director.ErrBadRequest, "disk_pool_name"},
		{director.ProvideRequest{DiskSize: 4, DiskName: "ok", DiskPoolName: "small"}, director.ErrBadRequest, "instance_id"},
		{director.ProvideRequest{DiskSize: 0, DiskName: "ok", DiskPoolName: "small", InstanceID: w.insts[0].ID}, director.ErrBadRequest, "disk_size"},
	}
	for _, c := range cases {
		_, err := w.d.Provide("admin", c.req)
		var e *director.Error
		if !errors.Is(err, c.status) || !errors.As(err, &e) || e.Field != c.field {
			t.Errorf("Provide(%+v) = %v; want status %v, field %q", c.req, err, c.status, c.field)
		}
	}
	// What the request names is looked up by the task (upstream).
	for _, c := range []struct {
		req  director.ProvideRequest
		want string
	}{
		{director.ProvideRequest{DiskSize: 4, DiskName: "ok", DiskPoolName: "nope", InstanceID: w.insts[0].ID}, "Could not find disk pool by name `nope`"},
		{director.ProvideRequest{DiskSize: 4, DiskName: "ok", DiskPoolName: "small", InstanceID: "no-such"}, "instance `no-such` not found"},
	} {
		if task := w.failed(w.d.Provide("admin", c.req)); task.Error != c.want {
			t.Errorf("Provide(%+v): task error %q; want %q", c.req, task.Error, c.want)
		}
	}
}

// At api_version 1 attach_disk returns no disk hint; provide fails saying
// so (upstream's "No disk_hint") and keeps the attachment recorded.
func TestProvideWithoutDiskHint(t *testing.T) {
	w := newWorld(t, worldOpts{lab: func(c *lab.Config) { c.CPIProfile = cpiv2.ProfileDirectorV1 }})
	task := w.failed(w.provide("a", 0))
	if !strings.Contains(task.Error, "no disk hint") && !strings.Contains(task.Error, "disk_hint") {
		t.Fatalf("provide failed with %q; want the missing disk hint named", task.Error)
	}
	dd, _ := w.disk("a")
	if iaas, _ := w.iaasDisk(dd.CID); iaas.VMCID.String() != dd.VMCID || dd.VMCID == "" {
		t.Fatalf("record %q and IaaS %v disagree", dd.VMCID, iaas.VMCID)
	}
}
