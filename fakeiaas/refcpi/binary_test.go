package refcpi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
)

var built struct {
	once sync.Once
	dir  string
	bin  string
	err  error
}

// TestMain removes the CPI binary built by buildCPI.
func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// buildCPI builds cmd/fakeiaas-cpi once per test binary.
func buildCPI(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(runtime.GOROOT(), "bin", "go")
		}
		if built.dir, built.err = os.MkdirTemp("", "fakeiaas-cpi-"); built.err != nil {
			return
		}
		built.bin = filepath.Join(built.dir, "fakeiaas-cpi")
		out, err := exec.Command(goTool, "build", "-o", built.bin, "github.com/cpilab/cpilab/cmd/fakeiaas-cpi").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("building fakeiaas-cpi: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

func writeCPIConfig(t *testing.T, dir, url string, maxAPI int, registry bool) string {
	t.Helper()
	props := map[string]any{
		"fakeiaas": map[string]any{"url": url, "retry": map[string]int{"max_attempts": 5, "base_delay_ms": 5}},
		"agent":    map[string]string{"mbus": "nats://127.0.0.1:4222"},
		"debug":    map[string]any{"cpi": map[string]int{"api_version": maxAPI}},
	}
	if registry {
		props["registry"] = map[string]string{"endpoint": url + "/registry", "user": "reg", "password": "secret"}
	}
	b, _ := json.Marshal(map[string]any{"cloud": map[string]any{"plugin": "fakeiaas", "properties": props}})
	p := filepath.Join(dir, "cpi.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestLifecycleThroughBinary runs every CPI method through the real
// fakeiaas-cpi executable, at api_version 1, 2 and 3, and checks the result
// shapes, the error types and what fakeiaas really did.
func TestLifecycleThroughBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the CPI binary")
	}
	bin := buildCPI(t)
	srv, err := fakeiaas.Serve(fakeiaas.ServeConfig{DataDir: t.TempDir(), Store: "memory", RegistryUser: "reg", RegistryPassword: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	oracle := fakeiaas.NewClient(srv.URL()).WithRegistryAuth("reg", "secret")

	cases := []struct {
		api      int
		profile  cpiv2.Profile
		stemcell int
		image    string
	}{
		{1, cpiv2.ProfileDirectorV1, 1, stemcellV1},
		{2, cpiv2.ProfileDirectorV2, 2, stemcellV2},
		{3, cpiv2.ProfileDirectorCurrent, 2, stemcellV2},
	}
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	for _, tc := range cases {
		t.Run("api_version_"+string(rune('0'+tc.api)), func(t *testing.T) {
			cfg := writeCPIConfig(t, t.TempDir(), srv.URL(), 3, true)
			var calls []cpiv2.CallRecord
			r := cpiv2.NewRunner(cpiv2.RunnerConfig{Command: []string{bin, "-configPath", cfg}, Profile: tc.profile,
				DebugLog: func(rec cpiv2.CallRecord) { calls = append(calls, rec) }})
			ctx := cpiv2.WithStemcellAPIVersion(bg, tc.stemcell)
			must := func(what string, err error) {
				t.Helper()
				if err != nil {
					t.Fatalf("%s at api_version %d: %v", what, tc.api, err)
				}
			}
			info, err := r.Info(ctx)
			must("info", err)
			if info.APIVersion != 3 || len(info.StemcellFormats) == 0 {
				t.Fatalf("info = %+v", info)
			}
			sc, err := r.CreateStemcell(ctx, cpiv2.CreateStemcellArgs{ImagePath: abs(tc.image), CloudProperties: cpiv2.MustCloudProps(map[string]string{"k": "v"})})
			must("create_stemcell", err)
			res, err := r.CreateVM(ctx, vmArgs(sc, map[string]any{"device_prefix": "vd"}))
			must("create_vm", err)
			if (res.Networks != nil) != (tc.api >= 2) {
				t.Fatalf("create_vm networks %v at api_version %d", res.Networks, tc.api)
			}
			ok, err := r.HasVM(ctx, res.VMCID)
			must("has_vm", err)
			if !ok {
				t.Fatal("has_vm = false for a new VM")
			}
			must("set_vm_metadata", r.SetVMMetadata(ctx, res.VMCID, cpiv2.Metadata{"deployment": "d"}))
			must("reboot_vm", r.RebootVM(ctx, res.VMCID))
			props, err := r.CalculateVMCloudProperties(ctx, cpiv2.VMResources{CPU: 2, RAM: 1024, EphemeralDiskSize: 2048})
			must("calculate_vm_cloud_properties", err)
			var cp struct{ CPU, RAM int }
			if props.As(&cp); cp.CPU != 2 || cp.RAM != 1024 {
				t.Fatalf("cloud properties = %s", props.Raw())
			}
			d, err := r.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 16, VMCID: res.VMCID})
			must("create_disk", err)
			ok, err = r.HasDisk(ctx, d)
			must("has_disk", err)
			if !ok {
				t.Fatal("has_disk = false for a new disk")
			}
			hint, err := r.AttachDisk(ctx, res.VMCID, d)
			must("attach_disk", err)
			if tc.api >= 2 && hint.Path != "/dev/sdc" {
				t.Fatalf("attach_disk hint = %+v", hint)
			}
			disks, err := r.GetDisks(ctx, res.VMCID)
			must("get_disks", err)
			if len(disks) != 1 || disks[0] != d {
				t.Fatalf("get_disks = %v", disks)
			}
			if _, err := os.Stat(filepath.Join(srv.Cloud().VMRoot(res.VMCID), "dev", "vdc")); err != nil {
				t.Fatalf("device not laid out: %v", err)
			}
			must("set_disk_metadata", r.SetDiskMetadata(ctx, d, cpiv2.Metadata{"purpose": "test"}))
			snap, err := r.SnapshotDisk(ctx, d, cpiv2.Metadata{"s": "1"})
			must("snapshot_disk", err)
			must("delete_snapshot", r.DeleteSnapshot(ctx, snap))
			if err := r.ResizeDisk(ctx, d, 32); !errors.Is(err, cpiv2.ErrCloudError) {
				t.Fatalf("resize_disk of an attached disk: %v", err)
			}
			must("detach_disk", r.DetachDisk(ctx, res.VMCID, d))
			if err := r.DetachDisk(ctx, res.VMCID, d); !errors.Is(err, cpiv2.ErrDiskNotAttached) {
				t.Fatalf("second detach_disk: %v, want DiskNotAttached", err)
			}
			must("resize_disk", r.ResizeDisk(ctx, d, 32))
			if err := r.ResizeDisk(ctx, d, 8); !errors.Is(err, cpiv2.ErrNotSupported) {
				t.Fatalf("shrinking resize_disk: %v, want NotSupported", err)
			}
			newCID, err := r.UpdateDisk(ctx, cpiv2.UpdateDiskArgs{DiskCID: d, NewSizeMiB: 64, CloudProperties: cpiv2.MustCloudProps(map[string]string{"type": "fast"})})
			if tc.api < 2 {
				if !errors.Is(err, cpiv2.ErrNotSupported) && !errors.Is(err, cpiv2.ErrNotImplemented) {
					t.Fatalf("update_disk at api_version 1: %v", err)
				}
			} else {
				must("update_disk", err)
				if !newCID.IsZero() {
					t.Fatalf("update_disk returned a new CID %s; the disk keeps its CID", newCID)
				}
				got, _ := oracle.Disk(bg, d)
				if got.SizeMiB != 64 {
					t.Fatalf("update_disk: size %d", got.SizeMiB)
				}
			}
			must("delete_disk", r.DeleteDisk(ctx, d))
			if err := r.DeleteDisk(ctx, d); !errors.Is(err, cpiv2.ErrDiskNotFound) {
				t.Fatalf("second delete_disk: %v, want DiskNotFound", err)
			}
			must("delete_vm", r.DeleteVM(ctx, res.VMCID))
			if err := r.DeleteVM(ctx, res.VMCID); !errors.Is(err, cpiv2.ErrVMNotFound) {
				t.Fatalf("second delete_vm: %v, want VMNotFound", err)
			}
			ok, err = r.HasVM(ctx, res.VMCID)
			must("has_vm after delete", err)
			if ok {
				t.Fatal("has_vm = true after delete_vm")
			}
			must("delete_stemcell", r.DeleteStemcell(ctx, sc))

			// The oracle saw what the binary did, under the runner's request_ids.
			byReq := map[string]cpiv2.CallRecord{}
			for _, c := range calls {
				byReq[c.RequestID] = c
			}
			h, err := oracle.History(bg, fakeiaas.HistoryFilter{Target: res.VMCID.String()}, 0)
			must("history", err)
			var ops []string
			for _, e := range h {
				c, ok := byReq[e.RequestID]
				if !ok {
					t.Fatalf("history entry %+v carries a request_id the runner never sent", e)
				}
				if !strings.HasPrefix(c.Method, strings.Split(string(e.Op), "_")[0]) && !strings.HasPrefix(string(e.Op), "registry") {
					t.Fatalf("history entry %+v came from call %s", e, c.Method)
				}
				ops = append(ops, string(e.Op))
			}
			joined := strings.Join(ops, " ")
			wantRegistry := tc.stemcell < 2 || tc.api < 2
			if strings.Contains(joined, "registry_put") != wantRegistry {
				t.Fatalf("registry used = %v at api_version %d, stemcell %d: %s", !wantRegistry, tc.api, tc.stemcell, joined)
			}
			for _, c := range calls {
				if c.ExitCode != 0 {
					t.Fatalf("%s exited %d", c.Method, c.ExitCode)
				}
			}
		})
	}
}

func TestBinaryBadConfigAnswersCpiError(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the CPI binary")
	}
	dir := t.TempDir()
	bin := buildCPI(t)
	r := cpiv2.NewRunner(cpiv2.RunnerConfig{Command: []string{bin, "-configPath", filepath.Join(dir, "missing.json")}, Profile: cpiv2.ProfileCLI})
	_, err := r.Info(bg)
	if !errors.Is(err, cpiv2.ErrCpiError) {
		t.Fatalf("info with a missing config: %v, want CpiError (and exit 0)", err)
	}
}
