package fakeiaas_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
)

func TestDiskAttachedToAtMostOneVM(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 2)
	vm1, vm2 := mustVM(t, c, sc, nil), mustVM(t, c, sc, nil)
	d := mustDisk(t, c, 10)
	a, err := c.AttachDisk(bg, vm1.CID, d.CID)
	if err != nil {
		t.Fatal(err)
	}
	if a.Device != "sdc" || a.LUN != 2 || a.SDPath != "/dev/sdc" {
		t.Fatalf("first attachment = %+v, want sdc, LUN 2", a)
	}
	_, err = c.AttachDisk(bg, vm2.CID, d.CID)
	wantErr(t, "attach to a second VM", err, cpiv2.ErrCloudError, fakeiaas.ErrConflict)
	again, err := c.AttachDisk(bg, vm1.CID, d.CID)
	if err != nil || again.Device != "sdc" {
		t.Fatalf("re-attach to the same VM = %+v, %v; want the same attachment", again, err)
	}
	disks, err := c.VMDisks(bg, vm2.CID)
	if err != nil || len(disks) != 0 {
		t.Fatalf("vm2 disks = %v, %v; want none", disks, err)
	}
}

func TestConcurrentAttachOfOneDiskToManyVMs(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 2)
	d := mustDisk(t, c, 1)
	var vms []fakeiaas.VM
	for range 8 {
		vms = append(vms, mustVM(t, c, sc, nil))
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wins := 0
	for _, vm := range vms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.AttachDisk(bg, vm.CID, d.CID); err == nil {
				mu.Lock()
				wins++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if wins != 1 {
		t.Fatalf("%d concurrent attaches of one disk succeeded, want exactly 1", wins)
	}
}

func TestAttachMissingVMOrDisk(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 2)
	vm := mustVM(t, c, sc, nil)
	d := mustDisk(t, c, 1)
	_, err := c.AttachDisk(bg, vmCID("vm-missing"), d.CID)
	wantErr(t, "attach to a missing VM", err, cpiv2.ErrVMNotFound, fakeiaas.ErrNotFound)
	_, err = c.AttachDisk(bg, vm.CID, diskCID("disk-missing"))
	wantErr(t, "attach a missing disk", err, cpiv2.ErrDiskNotFound, fakeiaas.ErrNotFound)
	err = c.DetachDisk(bg, vm.CID, d.CID)
	wantErr(t, "detach an unattached disk", err, cpiv2.ErrDiskNotAttached, fakeiaas.ErrConflict)
	err = c.DetachDisk(bg, vmCID("vm-missing"), d.CID)
	wantErr(t, "detach from a missing VM", err, cpiv2.ErrVMNotFound, nil)
	err = c.DetachDisk(bg, vm.CID, diskCID("disk-missing"))
	wantErr(t, "detach a missing disk", err, cpiv2.ErrDiskNotFound, nil)
	err = c.DeleteVM(bg, vmCID("vm-missing"))
	wantErr(t, "delete a missing VM", err, cpiv2.ErrVMNotFound, nil)
	err = c.DeleteDisk(bg, diskCID("disk-missing"))
	wantErr(t, "delete a missing disk", err, cpiv2.ErrDiskNotFound, nil)
	_, err = c.VMDisks(bg, vmCID("vm-missing"))
	wantErr(t, "get_disks of a missing VM", err, cpiv2.ErrVMNotFound, nil)
	err = c.SetVMMetadata(bg, vmCID("vm-missing"), cpiv2.Metadata{"a": "b"})
	wantErr(t, "set_vm_metadata of a missing VM", err, cpiv2.ErrVMNotFound, nil)
	err = c.RebootVM(bg, vmCID("vm-missing"))
	wantErr(t, "reboot a missing VM", err, cpiv2.ErrVMNotFound, nil)
	_, err = c.SnapshotDisk(bg, diskCID("disk-missing"), nil)
	wantErr(t, "snapshot a missing disk", err, cpiv2.ErrDiskNotFound, nil)
	_, err = c.CreateVM(bg, fakeiaas.VMSpec{AgentID: "a", StemcellCID: cpiv2.MustCID[cpiv2.StemcellKind]("sc-missing")})
	wantErr(t, "create_vm from a missing stemcell", err, cpiv2.ErrVMCreationFailed, fakeiaas.ErrNotFound)
}

func TestResizeOnlyDetachedAndLarger(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 2)
	vm := mustVM(t, c, sc, nil)
	d := mustDisk(t, c, 10)
	if _, err := c.AttachDisk(bg, vm.CID, d.CID); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "resize an attached disk", c.ResizeDisk(bg, d.CID, 20), cpiv2.ErrCloudError, fakeiaas.ErrConflict)
	if err := c.DetachDisk(bg, vm.CID, d.CID); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "shrink a disk", c.ResizeDisk(bg, d.CID, 5), cpiv2.ErrNotSupported, fakeiaas.ErrConflict)
	wantErr(t, "resize a missing disk", c.ResizeDisk(bg, diskCID("disk-x"), 5), cpiv2.ErrDiskNotFound, nil)
	if err := c.ResizeDisk(bg, d.CID, 20); err != nil {
		t.Fatal(err)
	}
	got, err := c.Disk(bg, d.CID)
	if err != nil || got.SizeMiB != 20 {
		t.Fatalf("after resize: %+v, %v; want 20 MiB", got, err)
	}
	fi, err := os.Stat(c.DiskFile(d.CID))
	if err != nil || fi.Size() != 20<<20 {
		t.Fatalf("backing file after resize: %v, %v; want %d bytes", fi, err, 20<<20)
	}
	if err := c.UpdateDisk(bg, fakeiaas.DiskUpdate{DiskCID: d.CID, NewSizeMiB: 30, CloudProperties: json.RawMessage(`{"type":"ssd"}`)}); err != nil {
		t.Fatal(err)
	}
	got, _ = c.Disk(bg, d.CID)
	if got.SizeMiB != 30 || string(got.CloudProperties) != `{"type":"ssd"}` {
		t.Fatalf("after update_disk: %+v", got)
	}
}

func TestDeleteAttachedDiskRefusedAndDeleteVMDetaches(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 2)
	vm := mustVM(t, c, sc, nil)
	d1, d2 := mustDisk(t, c, 1), mustDisk(t, c, 1)
	for _, d := range []fakeiaas.Disk{d1, d2} {
		if _, err := c.AttachDisk(bg, vm.CID, d.CID); err != nil {
			t.Fatal(err)
		}
	}
	wantErr(t, "delete an attached disk", c.DeleteDisk(bg, d1.CID), cpiv2.ErrCloudError, fakeiaas.ErrConflict)
	if err := c.DeleteVM(bg, vm.CID); err != nil {
		t.Fatal(err)
	}
	for _, d := range []fakeiaas.Disk{d1, d2} {
		got, err := c.Disk(bg, d.CID)
		if err != nil {
			t.Fatalf("disk %s after delete_vm: %v; want it kept", d.CID, err)
		}
		if !got.VMCID.IsZero() || got.Device != "" {
			t.Fatalf("disk %s after delete_vm still attached: %+v", d.CID, got)
		}
		if _, err := os.Stat(c.DiskFile(d.CID)); err != nil {
			t.Fatalf("backing file of %s gone after delete_vm: %v", d.CID, err)
		}
	}
	if _, err := os.Stat(c.VMRoot(vm.CID)); !os.IsNotExist(err) {
		t.Fatalf("VM root still there after delete_vm: %v", err)
	}
	if err := c.DeleteDisk(bg, d1.CID); err != nil {
		t.Fatalf("delete a detached disk: %v", err)
	}
	if _, err := os.Stat(c.DiskFile(d1.CID)); !os.IsNotExist(err) {
		t.Fatalf("backing file still there after delete_disk: %v", err)
	}
}

func TestHistoryRecordsMutationsWithRequestID(t *testing.T) {
	c := newCloud(t, nil)
	ctx := fakeiaas.WithRequestID(bg, "cpi-000042")
	sc, err := c.CreateStemcell(ctx, fakeiaas.StemcellSpec{Image: image(1, "")})
	if err != nil {
		t.Fatal(err)
	}
	if sc.APIVersion != 1 || sc.DeviceResolver != "" && sc.DeviceResolver != "identity" {
		t.Fatalf("stemcell = %+v", sc)
	}
	ctx2 := cpiv2.WithCallInfo(bg, cpiv2.CallInfo{RequestID: "cpi-000043"})
	_ = c.DeleteDisk(ctx2, diskCID("disk-nope"))
	h, err := c.History(bg, fakeiaas.HistoryFilter{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 2 {
		t.Fatalf("history = %+v, want 2 entries", h)
	}
	if h[0].Op != fakeiaas.OpCreateStemcell || h[0].RequestID != "cpi-000042" || h[0].Result != "ok" || h[0].Target != sc.CID.String() || h[0].Time.IsZero() {
		t.Fatalf("first entry = %+v", h[0])
	}
	if h[1].Op != fakeiaas.OpDeleteDisk || h[1].RequestID != "cpi-000043" || h[1].Result != string(cpiv2.TypeDiskNotFound) {
		t.Fatalf("second entry = %+v", h[1])
	}
	only, _ := c.History(bg, fakeiaas.HistoryFilter{Since: h[0].Seq}, 0)
	if len(only) != 1 || only[0].Seq != h[1].Seq {
		t.Fatalf("history since %d = %+v", h[0].Seq, only)
	}
}

func TestHostileCIDsNeverReachTheFileSystem(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 2)
	vm := mustVM(t, c, sc, nil)
	outside := filepath.Join(filepath.Dir(c.DataDir()), "outside")
	for _, bad := range []string{"..", "../outside", "/etc/passwd", "vm-\x00x", "disk-../../x", "a/b", "../" + filepath.Base(c.DataDir())} {
		if _, err := c.AttachDisk(bg, vm.CID, diskCID(bad)); err == nil {
			t.Fatalf("attach of disk %q succeeded", bad)
		}
		if err := c.DeleteVM(bg, vmCID(bad)); err == nil {
			t.Fatalf("delete_vm %q succeeded", bad)
		}
		if err := c.DeleteDisk(bg, diskCID(bad)); err == nil {
			t.Fatalf("delete_disk %q succeeded", bad)
		}
		if err := c.PutSettings(bg, bad, json.RawMessage(`{"agent_id":"x"}`)); err != nil {
			t.Fatalf("registry put for %q: %v (the registry is keyed by string, never a path)", bad, err)
		}
	}
	if _, err := os.Stat(outside); !os.IsNotExist(err) {
		t.Fatalf("something was created outside the data dir: %v", err)
	}
	if _, err := os.Stat(c.DataDir()); err != nil {
		t.Fatalf("data dir gone: %v", err)
	}
	if _, err := os.Stat(c.VMRoot(vm.CID)); err != nil {
		t.Fatalf("VM root damaged by hostile CIDs: %v", err)
	}
}

type recHooks struct {
	mu     sync.Mutex
	events []string
	infos  []fakeiaas.BootInfo
}

func (h *recHooks) Boot(bi fakeiaas.BootInfo) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, "boot "+bi.VMCID)
	h.infos = append(h.infos, bi)
	return nil
}

func (h *recHooks) Halt(vm string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, "halt "+vm)
}

func TestHooksBootHaltAndRestartOnAttach(t *testing.T) {
	h := &recHooks{}
	c := newCloud(t, h)
	sc := mustStemcell(t, c, 2)
	vm := mustVM(t, c, sc, map[string]any{"restart_on_attach": true})
	d := mustDisk(t, c, 1)
	if _, err := c.AttachDisk(bg, vm.CID, d.CID); err != nil {
		t.Fatal(err)
	}
	if err := c.RebootVM(bg, vm.CID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteVM(bg, vm.CID); err != nil {
		t.Fatal(err)
	}
	id := vm.CID.String()
	want := []string{"boot " + id, "halt " + id, "boot " + id, "halt " + id, "boot " + id, "halt " + id}
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.events) != len(want) {
		t.Fatalf("hook events = %v, want %v", h.events, want)
	}
	for i := range want {
		if h.events[i] != want[i] {
			t.Fatalf("hook events = %v, want %v", h.events, want)
		}
	}
	bi := h.infos[0]
	if bi.AgentID != "agent-1" || bi.StemcellAPIVersion != 2 || bi.DeviceResolver != "virtio" || bi.Root != c.VMRoot(vm.CID) || bi.RegistryUser != "reg" {
		t.Fatalf("boot info = %+v", bi)
	}
}

type failBoot struct{}

func (failBoot) Boot(fakeiaas.BootInfo) error { return os.ErrPermission }
func (failBoot) Halt(string)                  {}

func TestBootFailureIsVMCreationFailedAndLeavesNoVM(t *testing.T) {
	c := newCloud(t, failBoot{})
	sc := mustStemcell(t, c, 2)
	_, err := c.CreateVM(bg, fakeiaas.VMSpec{AgentID: "a", StemcellCID: sc.CID})
	wantErr(t, "create_vm with a failing boot", err, cpiv2.ErrVMCreationFailed, nil)
	s, _ := c.State(bg)
	if len(s.VMs) != 0 {
		t.Fatalf("a VM was left after a failed boot: %+v", s.VMs)
	}
}

func TestUserDataPlaceholderAndRegistry(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 1)
	vm, err := c.CreateVM(bg, fakeiaas.VMSpec{AgentID: "a", StemcellCID: sc.CID,
		UserData: json.RawMessage(`{"server":{"name":"((vm_cid))"},"registry":{"endpoint":"http://r"}}`)})
	if err != nil {
		t.Fatal(err)
	}
	ud, err := c.UserData(bg, vm.CID.String())
	if err != nil {
		t.Fatal(err)
	}
	var got struct {
		Server struct{ Name string } `json:"server"`
	}
	if err := json.Unmarshal(ud, &got); err != nil || got.Server.Name != vm.CID.String() {
		t.Fatalf("user-data = %s, want server.name %s", ud, vm.CID)
	}
	if _, err := c.GetSettings(bg, vm.CID.String()); err == nil {
		t.Fatal("registry GET before PUT succeeded")
	}
	h, _ := c.History(bg, fakeiaas.HistoryFilter{Op: fakeiaas.OpMetadataGet}, 0)
	if len(h) != 1 || h[0].Target != vm.CID.String() {
		t.Fatalf("metadata access history = %+v", h)
	}
}

func TestAccessHistoryWithDurableStore(t *testing.T) {
	c, err := fakeiaas.New(fakeiaas.Config{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	vm := mustVM(t, c, mustStemcell(t, c, 1), nil)
	if _, err := c.UserData(bg, vm.CID.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSettings(bg, vm.CID.String()); err == nil {
		t.Fatal("registry GET of absent settings succeeded")
	}
	h, err := c.History(bg, fakeiaas.HistoryFilter{Target: vm.CID.String()}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(h) != 3 || h[1].Op != fakeiaas.OpMetadataGet || h[2].Op != fakeiaas.OpRegistryGet || h[2].Result != string(cpiv2.TypeCloudError) {
		t.Fatalf("history with the sqlite store = %+v", h)
	}
}
