package director_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
)

// deviceOf is the path, under the VM root, of the device a disk is attached
// as (the oracle's attachment), "" when it is not attached to vm.
func (w *world) deviceOf(vmCID, diskCID string) string {
	w.t.Helper()
	for _, v := range w.state().VMs {
		if v.CID.String() != vmCID {
			continue
		}
		for _, a := range v.Attachments {
			if a.DiskCID.String() == diskCID {
				return filepath.Join(v.Root, "dev", a.Device)
			}
		}
	}
	return ""
}

// writeAt writes b into the disk's device on vm at offset off.
func (w *world) writeAt(vmCID, diskCID string, off int64, b []byte) {
	w.t.Helper()
	dev := w.deviceOf(vmCID, diskCID)
	if dev == "" {
		w.t.Fatalf("disk %s is not attached to %s", diskCID, vmCID)
	}
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		w.t.Fatal(err)
	}
}

// readAt reads n bytes of the disk's device on vm at offset off.
func (w *world) readAt(vmCID, diskCID string, off int64, n int) []byte {
	w.t.Helper()
	dev := w.deviceOf(vmCID, diskCID)
	if dev == "" {
		w.t.Fatalf("disk %s is not attached to %s", diskCID, vmCID)
	}
	f, err := os.Open(dev)
	if err != nil {
		w.t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		w.t.Fatal(err)
	}
	return b
}

// checkResized requires the disk named name to be recorded at sizeMiB,
// attached to instance i's VM and linked there, and the oracle to agree.
func (w *world) checkResized(name string, i, sizeMiB int) director.DynamicDisk {
	w.t.Helper()
	dd, ok := w.disk(name)
	if !ok {
		w.t.Fatalf("disk %q gone", name)
	}
	vm := w.instance(i).VMCID
	if dd.SizeMiB != sizeMiB || dd.VMCID != vm || dd.State != director.DiskReady {
		w.t.Fatalf("record %+v; want %d MiB, attached to %s, ready", dd, sizeMiB, vm)
	}
	d, ok := w.iaasDisk(dd.CID)
	if !ok || d.SizeMiB != sizeMiB || d.VMCID.String() != vm {
		w.t.Fatalf("the cloud has disk %s as %+v (present %v); want %d MiB attached to %s", dd.CID, d, ok, sizeMiB, vm)
	}
	if !w.linked(vm, dd.CID) {
		w.t.Fatalf("agent on %s has no link for %s after the resize", vm, dd.CID)
	}
	return dd
}

func TestResizeGrowsInPlace(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.done(w.provide("data", 0))
	before, _ := w.disk("data")
	vm := w.instance(0).VMCID
	w.writeAt(vm, before.CID, 1<<20, []byte("kept across the resize"))
	task := w.done(w.d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: "data", DiskSize: 16}))
	if string(task.Result) != `{"disk_cid":"`+before.CID+`"}` {
		t.Fatalf("resize result %s, want the same disk CID %s", task.Result, before.CID)
	}
	dd := w.checkResized("data", 0, 16)
	if dd.CID != before.CID {
		t.Fatalf("an in-place resize changed the CID from %s to %s", before.CID, dd.CID)
	}
	if n := w.history(fakeiaas.OpResizeDisk, dd.CID); n != 1 {
		t.Fatalf("resize_disk called %d times, want 1", n)
	}
	if got := w.readAt(vm, dd.CID, 1<<20, 22); string(got) != "kept across the resize" {
		t.Fatalf("data after the resize: %q", got)
	}
	// Idempotent: the same size again makes no CPI call at all.
	calls := len(mustHistory(t, w))
	again := w.done(w.d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: "data", DiskSize: 16}))
	if string(again.Result) != string(task.Result) {
		t.Fatalf("idempotent resize result %s, first %s", again.Result, task.Result)
	}
	if n := len(mustHistory(t, w)); n != calls {
		t.Fatalf("a resize to the current size made %d cloud operations, want none", n-calls)
	}
	if ins, _ := w.d.Intents(); len(ins) != 0 {
		t.Fatalf("intents left: %+v", ins)
	}
}

func mustHistory(t *testing.T, w *world) []fakeiaas.HistoryEntry {
	t.Helper()
	h, err := w.lab.Cloud.History(context.Background(), fakeiaas.HistoryFilter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []fakeiaas.HistoryEntry
	for _, e := range h { // the agents' settings reads are not CPI calls
		if e.Op == fakeiaas.OpMetadataGet || e.Op == fakeiaas.OpRegistryGet {
			continue
		}
		out = append(out, e)
	}
	return out
}

func TestResizeShrinksByCopy(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.done(w.d.Provide("admin", director.ProvideRequest{DiskSize: 16, DiskName: "data", DiskPoolName: "small",
		InstanceID: w.insts[0].ID, Metadata: map[string]any{"owner": "test"}}))
	before, _ := w.disk("data")
	vm := w.instance(0).VMCID
	w.writeAt(vm, before.CID, 3<<20, []byte("copied to the new disk"))
	task := w.done(w.d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: "data", DiskSize: 8}))
	dd := w.checkResized("data", 0, 8)
	if dd.CID == before.CID {
		t.Fatal("a shrink kept the disk CID; want a new disk")
	}
	if string(task.Result) != `{"disk_cid":"`+dd.CID+`"}` {
		t.Fatalf("resize result %s, want the new CID %s", task.Result, dd.CID)
	}
	if got := w.readAt(vm, dd.CID, 3<<20, 22); string(got) != "copied to the new disk" {
		t.Fatalf("data on the new disk: %q", got)
	}
	if w.linked(vm, before.CID) {
		t.Fatal("the agent still links the old disk")
	}
	old, ok := w.iaasDisk(before.CID)
	if !ok || !old.VMCID.IsZero() {
		t.Fatalf("the old disk is %+v (present %v); want kept, detached", old, ok)
	}
	orphans, _ := w.d.OrphanedDisks()
	if len(orphans) != 1 || orphans[0].CID != before.CID {
		t.Fatalf("orphans %+v; want the old disk %s", orphans, before.CID)
	}
	nd, _ := w.iaasDisk(dd.CID)
	if nd.Metadata["owner"] != "test" {
		t.Fatalf("the new disk's metadata %v; want the old one's", nd.Metadata)
	}
	if n := w.history(fakeiaas.OpResizeDisk, ""); n != 0 {
		t.Fatalf("a shrink called resize_disk %d times", n)
	}
}

func TestResizeShrinkRefusesToLoseData(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.done(w.d.Provide("admin", director.ProvideRequest{DiskSize: 16, DiskName: "data", DiskPoolName: "small", InstanceID: w.insts[0].ID}))
	before, _ := w.disk("data")
	vm := w.instance(0).VMCID
	w.writeAt(vm, before.CID, 12<<20, []byte("past 8 MiB"))
	task := w.failed(w.d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: "data", DiskSize: 8}))
	if !strings.Contains(task.Error, "beyond") {
		t.Fatalf("task error %q; want it to say the data lies beyond the new size", task.Error)
	}
	dd := w.checkResized("data", 0, 16) // undone: the old disk, attached and linked
	if dd.CID != before.CID {
		t.Fatalf("after a failed shrink the record names %s, want %s", dd.CID, before.CID)
	}
	if n := len(w.state().Disks); n != 1 {
		t.Fatalf("the cloud has %d disks after a failed shrink, want 1 (the copy's new disk deleted)", n)
	}
	if got := w.readAt(vm, dd.CID, 12<<20, 10); string(got) != "past 8 MiB" {
		t.Fatalf("data after the failed shrink: %q", got)
	}
	if ins, _ := w.d.Intents(); len(ins) != 0 {
		t.Fatalf("intents left: %+v", ins)
	}
}

// noResizeCPI answers resize_disk with NotSupported, as a CPI whose cloud
// cannot grow a disk.
type noResizeCPI struct{ cpiv2.CPI }

func (noResizeCPI) ResizeDisk(context.Context, cpiv2.DiskCID, int) error {
	return cpiv2.NewError(cpiv2.TypeNotSupported, "resize_disk is not supported")
}

func TestResizeFallsBackToCopyOnNotSupported(t *testing.T) {
	w := newWorld(t, worldOpts{configure: func(c *director.Config) { c.CPI = noResizeCPI{c.CPI.(cpiv2.CPI)} }})
	w.done(w.provide("data", 0))
	before, _ := w.disk("data")
	vm := w.instance(0).VMCID
	w.writeAt(vm, before.CID, 0, []byte("first block"))
	w.done(w.d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: "data", DiskSize: 12}))
	dd := w.checkResized("data", 0, 12)
	if dd.CID == before.CID {
		t.Fatal("NotSupported from resize_disk, yet the disk kept its CID: no copy was made")
	}
	if got := w.readAt(vm, dd.CID, 0, 11); !bytes.Equal(got, []byte("first block")) {
		t.Fatalf("data on the new disk: %q", got)
	}
}

func TestResizeOfADetachedDisk(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.done(w.provide("data", 0))
	w.done(w.d.DetachDynamicDisk("admin", "data"))
	w.done(w.d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: "data", DiskSize: 10}))
	dd, _ := w.disk("data")
	if d, _ := w.iaasDisk(dd.CID); dd.SizeMiB != 10 || d.SizeMiB != 10 || dd.Attached() || !d.VMCID.IsZero() {
		t.Fatalf("record %+v, cloud %+v; want 10 MiB, detached", dd, d)
	}
	// A shrink needs the guest to copy in: refused, nothing changed.
	task := w.failed(w.d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: "data", DiskSize: 4}))
	if !strings.Contains(task.Error, director.ErrResizeNeedsVM.Error()) {
		t.Fatalf("task error %q; want %q", task.Error, director.ErrResizeNeedsVM)
	}
	w.failed(w.d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: "missing", DiskSize: 4}))
	if _, err := w.d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: "data", DiskSize: 0}); !errors.Is(err, director.ErrBadRequest) {
		t.Fatalf("disk_size 0: %v; want a 400", err)
	}
}

func TestResizeRouteAndScopes(t *testing.T) {
	a := newAPIWorld(t)
	a.done(a.provide("data", 0))
	ctx := context.Background()
	if _, err := a.client(t, "reader", director.ScopeDisksAttach).ResizeDynamicDisk(ctx, "data", 8); status(err) != 401 {
		t.Fatalf("resize with the attach scope alone: %v; want 401", err)
	}
	cid, err := a.client(t, "csi", director.ScopeDisksCreate).ResizeDynamicDisk(ctx, "data", 8)
	if err != nil {
		t.Fatalf("resize with the create scope: %v", err)
	}
	if dd := a.checkResized("data", 0, 8); dd.CID != cid {
		t.Fatalf("client returned %s, record %s", cid, dd.CID)
	}
	if _, err := a.client(t, "admin", director.ScopeAdmin).ResizeDynamicDisk(ctx, "data", -1); status(err) != 400 {
		t.Fatalf("disk_size -1: %v; want 400", err)
	}
}
