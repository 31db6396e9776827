package refcpi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/refcpi"
	"github.com/cpilab/cpilab/rt"
)

var bg = context.Background()

const stemcellV1 = "../../fixtures/stemcells/fakeiaas-stemcell-v1.json"
const stemcellV2 = "../../fixtures/stemcells/fakeiaas-stemcell-v2.json"

func newCloud(t *testing.T) *fakeiaas.Cloud {
	t.Helper()
	c, err := fakeiaas.New(fakeiaas.Config{DataDir: t.TempDir(), Store: "memory", Runtime: rt.Real(1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func vmArgs(sc cpiv2.StemcellCID, props map[string]any) cpiv2.CreateVMArgs {
	return cpiv2.CreateVMArgs{
		AgentID: "agent-1", StemcellCID: sc, CloudProperties: cpiv2.MustCloudProps(props),
		Networks: cpiv2.Networks{"default": {Type: "manual", IP: "10.0.0.5", Netmask: "255.255.255.0", Gateway: "10.0.0.1"}},
		Env:      cpiv2.MustCloudProps(map[string]any{"bosh": map[string]any{"group": "g"}}),
	}
}

// TestReferenceTable checks every row of the API versions' reference table: which of
// registry or user-data carries the agent settings.
func TestReferenceTable(t *testing.T) {
	profiles := map[int]cpiv2.Profile{1: cpiv2.ProfileDirectorV1, 2: cpiv2.ProfileDirectorV2}
	rows := []struct {
		director, cpi, stemcell int
		registry                bool
	}{
		{1, 1, 1, true}, {1, 1, 2, true}, {1, 2, 2, true}, {2, 2, 2, false},
		{1, 2, 1, true}, {2, 2, 1, true}, {2, 1, 1, true}, {2, 1, 2, true},
	}
	for _, row := range rows {
		t.Run(fmt.Sprintf("director%d-cpi%d-stemcell%d", row.director, row.cpi, row.stemcell), func(t *testing.T) {
			cloud := newCloud(t)
			cpi := refcpi.New(refcpi.Config{MaxAPIVersion: row.cpi, Registry: cloud, RegistryEndpoint: "http://registry.example", MBus: "nats://m"}, cloud)
			caller := cpiv2.NewLoopback(cpi, cpiv2.LoopbackConfig{Profile: profiles[row.director], MaxAPIVersion: cpi.MaxAPIVersion()})
			ctx := cpiv2.WithStemcellAPIVersion(bg, row.stemcell)
			img := stemcellV1
			if row.stemcell == 2 {
				img = stemcellV2
			}
			sc, err := caller.CreateStemcell(ctx, cpiv2.CreateStemcellArgs{ImagePath: img})
			if err != nil {
				t.Fatal(err)
			}
			res, err := caller.CreateVM(ctx, vmArgs(sc, nil))
			if err != nil {
				t.Fatal(err)
			}
			negotiated := min(row.director, row.cpi)
			if (res.Networks != nil) != (negotiated >= 2) {
				t.Fatalf("create_vm networks = %v at api_version %d", res.Networks, negotiated)
			}
			state, _ := cloud.State(bg)
			settings, inRegistry := state.Registry[res.VMCID.String()]
			ud, err := cloud.UserData(bg, res.VMCID.String())
			if err != nil {
				t.Fatal(err)
			}
			var udm map[string]json.RawMessage
			json.Unmarshal(ud, &udm)
			_, udHasAgent := udm["agent_id"]
			if inRegistry != row.registry || udHasAgent == row.registry {
				t.Fatalf("registry updated = %v, user-data has settings = %v; want registry %v (user-data %s)", inRegistry, udHasAgent, row.registry, ud)
			}
			var s struct {
				AgentID string            `json:"agent_id"`
				VM      map[string]string `json:"vm"`
				MBus    string            `json:"mbus"`
			}
			src := ud
			if row.registry {
				src = settings
				var reg struct {
					Registry struct{ Endpoint string } `json:"registry"`
					Server   struct{ Name string }     `json:"server"`
				}
				json.Unmarshal(ud, &reg)
				if reg.Registry.Endpoint != "http://registry.example" || reg.Server.Name != res.VMCID.String() {
					t.Fatalf("registry-flow user-data = %s", ud)
				}
			}
			if err := json.Unmarshal(src, &s); err != nil || s.AgentID != "agent-1" || s.VM["name"] != res.VMCID.String() || s.MBus != "nats://m" {
				t.Fatalf("settings = %s (%v)", src, err)
			}

			// attach_disk: hint at ≥ 2; the registry's disks.persistent in the registry flow.
			d, err := caller.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 10})
			if err != nil {
				t.Fatal(err)
			}
			hint, err := caller.AttachDisk(ctx, res.VMCID, d)
			if err != nil {
				t.Fatal(err)
			}
			if negotiated >= 2 && hint.Path != "/dev/sdc" {
				t.Fatalf("hint at api_version %d = %+v", negotiated, hint)
			}
			if negotiated < 2 && !hint.IsZero() {
				t.Fatalf("attach_disk at api_version 1 gave the caller a hint %+v; the result must be null", hint)
			}
			if row.registry {
				raw, _ := cloud.GetSettings(bg, res.VMCID.String())
				var got struct {
					Disks struct {
						Persistent map[string]cpiv2.DiskHint `json:"persistent"`
					} `json:"disks"`
				}
				if err := json.Unmarshal(raw, &got); err != nil || got.Disks.Persistent[d.String()].Path != "/dev/sdc" {
					t.Fatalf("registry disks.persistent after attach = %s (%v)", raw, err)
				}
				if err := caller.DetachDisk(ctx, res.VMCID, d); err != nil {
					t.Fatal(err)
				}
				raw, _ = cloud.GetSettings(bg, res.VMCID.String())
				got.Disks.Persistent = nil
				if err := json.Unmarshal(raw, &got); err != nil || got.Disks.Persistent == nil {
					t.Fatalf("registry settings after detach = %s (%v)", raw, err)
				}
				if _, still := got.Disks.Persistent[d.String()]; still {
					t.Fatalf("registry still lists the disk after detach: %s", raw)
				}
			}
			if err := caller.DeleteVM(ctx, res.VMCID); err != nil {
				t.Fatal(err)
			}
			state, _ = cloud.State(bg)
			if _, still := state.Registry[res.VMCID.String()]; still {
				t.Fatal("registry settings survived delete_vm")
			}
		})
	}
}

func TestRegistryFlowWithoutRegistryFails(t *testing.T) {
	cloud := newCloud(t)
	cpi := refcpi.New(refcpi.Config{}, cloud)
	caller := cpiv2.NewLoopback(cpi, cpiv2.LoopbackConfig{Profile: cpiv2.ProfileDirectorCurrent})
	ctx := cpiv2.WithStemcellAPIVersion(bg, 1)
	sc, err := caller.CreateStemcell(ctx, cpiv2.CreateStemcellArgs{ImagePath: stemcellV1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = caller.CreateVM(ctx, vmArgs(sc, nil))
	if !errors.Is(err, cpiv2.ErrCloudError) || !strings.Contains(err.Error(), "no registry is configured") {
		t.Fatalf("create_vm in the registry flow without a registry: %v", err)
	}
	if s, _ := cloud.State(bg); len(s.VMs) != 0 {
		t.Fatal("a VM was created although the registry flow could not work")
	}
	// The same call with a v2 stemcell needs no registry.
	if _, err := caller.CreateVM(cpiv2.WithStemcellAPIVersion(bg, 2), vmArgs(sc, nil)); err != nil {
		t.Fatalf("user-data flow: %v", err)
	}
}

// TestDetachWithoutRegistryChangesNothing: a detach_disk that must fail for
// want of a registry fails before touching the IaaS, so the caller's view
// (error: still attached) matches the cloud's.
func TestDetachWithoutRegistryChangesNothing(t *testing.T) {
	cloud := newCloud(t)
	cpi := refcpi.New(refcpi.Config{}, cloud)
	caller := cpiv2.NewLoopback(cpi, cpiv2.LoopbackConfig{Profile: cpiv2.ProfileDirectorCurrent})
	v2 := cpiv2.WithStemcellAPIVersion(bg, 2)
	sc, err := caller.CreateStemcell(v2, cpiv2.CreateStemcellArgs{ImagePath: stemcellV2})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := caller.CreateVM(v2, vmArgs(sc, nil))
	if err != nil {
		t.Fatal(err)
	}
	d, err := caller.CreateDisk(v2, cpiv2.CreateDiskArgs{SizeMiB: 4})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := caller.AttachDisk(v2, vm.VMCID, d); err != nil {
		t.Fatal(err)
	}
	err = caller.DetachDisk(cpiv2.WithStemcellAPIVersion(bg, 1), vm.VMCID, d)
	if !errors.Is(err, cpiv2.ErrCloudError) || !strings.Contains(err.Error(), "no registry is configured") {
		t.Fatalf("detach_disk in the registry flow without a registry: %v", err)
	}
	disks, err := cloud.VMDisks(bg, vm.VMCID)
	if err != nil {
		t.Fatal(err)
	}
	if len(disks) != 1 || disks[0] != d {
		t.Fatalf("detach_disk failed but the cloud shows disks %v on %s, want [%s]", disks, vm.VMCID, d)
	}
}

func TestHintStyles(t *testing.T) {
	cloud := newCloud(t)
	cpi := refcpi.New(refcpi.Config{}, cloud)
	caller := cpiv2.NewLoopback(cpi, cpiv2.LoopbackConfig{})
	ctx := cpiv2.WithStemcellAPIVersion(bg, 2)
	sc, err := caller.CreateStemcell(ctx, cpiv2.CreateStemcellArgs{ImagePath: stemcellV2})
	if err != nil {
		t.Fatal(err)
	}
	cases := map[string]string{
		"":          `{"path":"/dev/sdc"}`,
		"path":      `{"path":"/dev/sdc"}`,
		"string":    `"/dev/sdc"`,
		"id":        `{"path":"/dev/sdc","id":"DISK"}`,
		"volume_id": `{"volume_id":"2"}`,
		"lun":       `{"lun":"2","host_device_id":"2"}`,
	}
	for style, want := range cases {
		props := map[string]any{"device_prefix": "xvd"}
		if style != "" {
			props["disk_hint"] = style
		}
		vm, err := caller.CreateVM(ctx, vmArgs(sc, props))
		if err != nil {
			t.Fatal(err)
		}
		d, err := caller.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 1})
		if err != nil {
			t.Fatal(err)
		}
		hint, err := caller.AttachDisk(ctx, vm.VMCID, d)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := json.Marshal(hint)
		if string(got) != strings.Replace(want, "DISK", d.String(), 1) {
			t.Errorf("disk_hint %q: hint %s, want %s", style, got, want)
		}
	}
	if _, err := caller.CreateVM(ctx, vmArgs(sc, map[string]any{"disk_hint": "bogus"})); !errors.Is(err, cpiv2.ErrCloudError) {
		t.Fatalf("bad disk_hint: %v", err)
	}
}

func TestRateLimitsAreRetriedAndLogged(t *testing.T) {
	cloud := newCloud(t)
	log := &syncBuf{}
	cpi := refcpi.New(refcpi.Config{Log: log, Retry: refcpi.RetryConfig{MaxAttempts: 3}}, cloud)
	caller := cpiv2.NewLoopback(cpi, cpiv2.LoopbackConfig{})
	if _, err := cloud.AddFault(bg, fakeiaas.Rule{Op: fakeiaas.OpCreateDisk, Times: 2, Effect: fakeiaas.Effect{Kind: fakeiaas.EffectRateLimit}}); err != nil {
		t.Fatal(err)
	}
	d, err := caller.CreateDisk(bg, cpiv2.CreateDiskArgs{SizeMiB: 1})
	if err != nil {
		t.Fatalf("create_disk with 2 rate limits and 3 attempts: %v", err)
	}
	if n := strings.Count(log.String(), "rate limited (attempt"); n != 2 {
		t.Fatalf("%d retries logged, want 2:\n%s", n, log)
	}
	h, _ := cloud.History(bg, fakeiaas.HistoryFilter{Op: fakeiaas.OpCreateDisk}, 0)
	if len(h) != 3 || h[2].Result != "ok" || h[2].Target != d.String() {
		t.Fatalf("history = %+v", h)
	}
	// More rate limits than attempts: the error reaches the caller, ok_to_retry.
	if _, err := cloud.AddFault(bg, fakeiaas.Rule{Op: fakeiaas.OpCreateDisk, Effect: fakeiaas.Effect{Kind: fakeiaas.EffectRateLimit}}); err != nil {
		t.Fatal(err)
	}
	_, err = caller.CreateDisk(bg, cpiv2.CreateDiskArgs{SizeMiB: 1})
	var ce *cpiv2.Error
	if !errors.As(err, &ce) || ce.Type != cpiv2.TypeCloudError || !ce.OkToRetry {
		t.Fatalf("exhausted retries: %v", err)
	}
	if !strings.Contains(log.String(), "giving up") {
		t.Fatalf("giving up not logged:\n%s", log)
	}
}

func TestErrorsPerContract(t *testing.T) {
	cloud := newCloud(t)
	cpi := refcpi.New(refcpi.Config{}, cloud)
	caller := cpiv2.NewLoopback(cpi, cpiv2.LoopbackConfig{})
	ctx := cpiv2.WithStemcellAPIVersion(bg, 2)
	sc, _ := caller.CreateStemcell(ctx, cpiv2.CreateStemcellArgs{ImagePath: stemcellV2})
	vm, err := caller.CreateVM(ctx, vmArgs(sc, nil))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := caller.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 4})
	missingVM, missingDisk := cpiv2.MustCID[cpiv2.VMKind]("vm-gone"), cpiv2.MustCID[cpiv2.DiskKind]("disk-gone")
	check := func(what string, err error, want *cpiv2.Error) {
		t.Helper()
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %s", what, err, want.Type)
		}
	}
	check("delete_vm of a missing VM", caller.DeleteVM(ctx, missingVM), cpiv2.ErrVMNotFound)
	check("reboot_vm of a missing VM", caller.RebootVM(ctx, missingVM), cpiv2.ErrVMNotFound)
	check("set_vm_metadata of a missing VM", caller.SetVMMetadata(ctx, missingVM, cpiv2.Metadata{}), cpiv2.ErrVMNotFound)
	_, err = caller.GetDisks(ctx, missingVM)
	check("get_disks of a missing VM", err, cpiv2.ErrVMNotFound)
	_, err = caller.AttachDisk(ctx, missingVM, d)
	check("attach_disk to a missing VM", err, cpiv2.ErrVMNotFound)
	_, err = caller.AttachDisk(ctx, vm.VMCID, missingDisk)
	check("attach_disk of a missing disk", err, cpiv2.ErrDiskNotFound)
	check("detach_disk of an unattached disk", caller.DetachDisk(ctx, vm.VMCID, d), cpiv2.ErrDiskNotAttached)
	check("delete_disk of a missing disk", caller.DeleteDisk(ctx, missingDisk), cpiv2.ErrDiskNotFound)
	check("set_disk_metadata of a missing disk", caller.SetDiskMetadata(ctx, missingDisk, cpiv2.Metadata{}), cpiv2.ErrDiskNotFound)
	_, err = caller.SnapshotDisk(ctx, missingDisk, nil)
	check("snapshot_disk of a missing disk", err, cpiv2.ErrDiskNotFound)
	check("resize_disk of a missing disk", caller.ResizeDisk(ctx, missingDisk, 10), cpiv2.ErrDiskNotFound)
	check("resize_disk smaller", caller.ResizeDisk(ctx, d, 1), cpiv2.ErrNotSupported)
	if _, err := caller.AttachDisk(ctx, vm.VMCID, d); err != nil {
		t.Fatal(err)
	}
	check("resize_disk attached", caller.ResizeDisk(ctx, d, 10), cpiv2.ErrCloudError)
	check("delete_disk attached", caller.DeleteDisk(ctx, d), cpiv2.ErrCloudError)
	if err := caller.DeleteSnapshot(ctx, cpiv2.MustCID[cpiv2.SnapshotKind]("snap-gone")); err != nil {
		t.Fatalf("delete_snapshot of a missing snapshot: %v, want success", err)
	}
	if ok, err := caller.HasVM(ctx, missingVM); ok || err != nil {
		t.Fatalf("has_vm of a missing VM = %v, %v", ok, err)
	}
	if ok, err := caller.HasDisk(ctx, missingDisk); ok || err != nil {
		t.Fatalf("has_disk of a missing disk = %v, %v", ok, err)
	}
}
