package dockerapi_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/dockerapi"
)

// CPIEnv names the Docker CPI binary the interop tests run; they skip,
// saying why, without it. `make interop CPI=PATH` sets it, and so does the
// project's CI when it has an interop build.
const CPIEnv = "CPILAB_DOCKER_CPI"

func dockerCPI(tb testing.TB) string {
	tb.Helper()
	p := os.Getenv(CPIEnv)
	if p == "" {
		tb.Skipf("the BOSH Docker CPI binary is not given (set %s=PATH, or run make interop CPI=PATH; docs/docker.md says how to build it)", CPIEnv)
	}
	if _, err := os.Stat(p); err != nil {
		tb.Fatalf("%s=%s: %v", CPIEnv, p, err)
	}
	return p
}

// cloudEnv is a fakeiaas cloud, its Docker face on a socket, and the real
// Docker CPI run through cpiv2.Runner as the current Director runs it.
type cloudEnv struct {
	dir   string
	cloud *fakeiaas.Cloud
	face  *dockerapi.Face
	srv   *dockerapi.Server
	cpi   *cpiv2.Runner
	image string // a stemcell tarball
}

func newCloudEnv(tb testing.TB, cpiPath string, defect dockerapi.Defect) *cloudEnv {
	tb.Helper()
	dir, err := os.MkdirTemp("", "cpilab-docker-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	cloud, err := fakeiaas.New(fakeiaas.Config{DataDir: filepath.Join(dir, "cloud"), Store: "memory"})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = cloud.Close() })
	face, err := dockerapi.New(dockerapi.Config{Cloud: cloud, Defect: defect})
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := dockerapi.Serve(face, filepath.Join(dir, "docker.sock"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = srv.Close() })
	cfg := map[string]any{
		"Actions": map[string]any{
			"Docker": map[string]any{"host": srv.Host(), "api_version": "1.44"},
			"Agent":  map[string]any{"mbus": "nats://127.0.0.1:4222", "ntp": []string{}},
		},
	}
	cfgPath := filepath.Join(dir, "cpi.json")
	writeJSONFile(tb, cfgPath, cfg)
	env := &cloudEnv{dir: dir, cloud: cloud, face: face, srv: srv}
	env.cpi = cpiv2.NewRunner(cpiv2.RunnerConfig{Command: []string{cpiPath, "-configPath", cfgPath}, Timeout: time.Minute})
	env.image = filepath.Join(dir, "stemcell.tgz")
	writeStemcell(tb, env.image)
	return env
}

func writeJSONFile(tb testing.TB, path string, v any) {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
}

// stemcellImage is the fakeiaas stemcell image the tarball carries.
const stemcellImage = `{"name": "bosh-fakeiaas-ubuntu-jammy-go_agent", "version": "2.0", "api_version": 2, "agent": {"device_path_resolution_type": "virtio"}}`

// imageTar is a small root file system with the fakeiaas stemcell image.
func imageTar(tb testing.TB) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, d := range []string{"var/", "var/vcap/", "var/vcap/bosh/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			tb.Fatal(err)
		}
	}
	if err := tw.WriteHeader(&tar.Header{Name: dockerapi.ImageMember, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(stemcellImage))}); err != nil {
		tb.Fatal(err)
	}
	if _, err := tw.Write([]byte(stemcellImage)); err != nil {
		tb.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func writeStemcell(tb testing.TB, path string) {
	tb.Helper()
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	if _, err := zw.Write(imageTar(tb)); err != nil {
		tb.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, gz.Bytes(), 0o600); err != nil {
		tb.Fatal(err)
	}
}

// manualNetworks is one manual network with the address ip (two running
// containers cannot share an address, on Docker or on the face).
func manualNetworks(tb testing.TB, ip string) cpiv2.Networks {
	tb.Helper()
	cp, err := cpiv2.NewCloudProps(map[string]string{"name": "cpilab-net"})
	if err != nil {
		tb.Fatal(err)
	}
	return cpiv2.Networks{"default": {Type: "manual", IP: ip, Netmask: "255.255.255.0", Gateway: "10.244.0.1",
		DNS: []string{"10.244.0.2"}, Default: []string{"dns", "gateway"}, CloudProperties: cp}}
}

// settingsPath is where the Docker CPI writes the agent settings, inside
// the container (vm/fs_agent_env_service.go).
const settingsPath = "var/vcap/bosh/warden-cpi-agent-env.json"

// report is what one lifecycle run found: each check that failed, by id.
type report struct {
	failed map[string]string // check id → what happened
	passed []string
}

func (r *report) check(id string, ok bool, format string, args ...any) bool {
	if ok {
		r.passed = append(r.passed, id)
		return true
	}
	if r.failed == nil {
		r.failed = map[string]string{}
	}
	r.failed[id] = fmt.Sprintf(format, args...)
	return false
}

func (r *report) failedIDs() []string {
	ids := make([]string, 0, len(r.failed))
	for id := range r.failed {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

// Expected findings: clauses the upstream Docker CPI (bosh-docker-cpi-release
// @6de0dab7, src/bosh-docker-cpi) really breaks; docs/docker.md explains each.
var expectedFindings = map[string]string{
	// cpi/get_disks.go:18 `return nil, nil`: get_disks answers null, never
	// the attached disks.
	"get_disks.lists_attached": "cpi/get_disks.go:18",
	// vm/container.go:249 restartByRecreating calls c.Delete(), which
	// removes the ephemeral volume (vm/container.go:85); the new container
	// binds a fresh one (vm/factory.go:161): attach and detach wipe
	// /var/vcap/data.
	"attach_disk.keeps_ephemeral_data": "vm/container.go:249, vm/container.go:85",
	// cpi/reboot_vm.go:14 `return nil`: reboot_vm succeeds and does nothing.
	"reboot_vm.reboots": "cpi/reboot_vm.go:14",
	// cpi/disks.go:18 `return nil`: resize_disk succeeds and leaves the
	// size as it was, where it must resize or raise NotSupported (the
	// Director then copies the disk).
	"resize_disk.resizes_or_not_supported": "cpi/disks.go:18",
	// cpi/snapshots.go:14 returns an empty snapshot CID and no error.
	"snapshot_disk.snapshots_or_not_implemented": "cpi/snapshots.go:14",
}

// lifecycle runs info … delete_stemcell with the real CPI and checks
// each step against the oracle (the cloud's state and the VM roots).
func (env *cloudEnv) lifecycle(t testing.TB) *report {
	ctx := context.Background()
	r := &report{}
	cpi := env.cpi
	info, err := cpi.Info(ctx)
	if !r.check("info", err == nil && info.APIVersion == 2, "info: %+v, %v", info, err) {
		return r
	}
	scCID, err := cpi.CreateStemcell(ctx, cpiv2.CreateStemcellArgs{ImagePath: env.image})
	if !r.check("create_stemcell", err == nil, "create_stemcell: %v", err) {
		return r
	}
	scFake, ok := env.face.ImageStemcell(scCID.String())
	st := env.state(t)
	r.check("create_stemcell.oracle", ok && slices.ContainsFunc(st.Stemcells, func(s fakeiaas.Stemcell) bool {
		return s.CID == scFake && s.APIVersion == 2
	}), "stemcell %s (fakeiaas %s, found %v) not in the oracle with api_version 2", scCID, scFake, ok)

	res, err := cpi.CreateVM(ctx, cpiv2.CreateVMArgs{AgentID: "agent-docker-1", StemcellCID: scCID, Networks: manualNetworks(t, "10.244.0.5")})
	if !r.check("create_vm", err == nil, "create_vm: %v", err) {
		return r
	}
	vmCID := res.VMCID
	root, vmFake := env.root(vmCID)
	r.check("create_vm.oracle", root != "" && env.hasVM(t, vmFake), "VM %s has no fakeiaas VM (%s) in the oracle", vmCID, vmFake)
	settings, serr := env.settings(root)
	if raw, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(settingsPath))); err == nil {
		t.Logf("the settings the Docker CPI wrote to /%s: %s", settingsPath, raw)
	}
	r.check("create_vm.settings_in_root", serr == nil && settings.AgentID == "agent-docker-1" && settings.VM.Name == vmCID.String(),
		"%s in the root of %s: %+v, %v", settingsPath, vmCID, settings, serr)
	has, err := cpi.HasVM(ctx, vmCID)
	r.check("has_vm.true", err == nil && has, "has_vm(%s) = %v, %v", vmCID, has, err)

	diskCID, err := cpi.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 1024, VMCID: vmCID})
	if !r.check("create_disk", err == nil, "create_disk: %v", err) {
		return r
	}
	diskFake, ok := env.face.VolumeDisk(diskCID.String())
	r.check("create_disk.oracle", ok && env.disk(t, diskFake) != nil, "disk %s has no fakeiaas disk in the oracle", diskCID)
	has, err = cpi.HasDisk(ctx, diskCID)
	r.check("has_disk.true", err == nil && has, "has_disk(%s) = %v, %v", diskCID, has, err)

	// The guest's ephemeral data, to see whether attach keeps it.
	ephMarker := filepath.Join(root, "var", "vcap", "data", "marker")
	_ = os.WriteFile(ephMarker, []byte("ephemeral"), 0o644)

	hint, err := cpi.AttachDisk(ctx, vmCID, diskCID)
	if !r.check("attach_disk", err == nil, "attach_disk: %v", err) {
		return r
	}
	mount := "/warden-cpi-dev/" + diskCID.String()
	r.check("attach_disk.hint", hint.Path == mount, "hint %+v, want path %s", hint, mount)
	newRoot, newVM := env.root(vmCID)
	r.check("attach_disk.vm_restarted", newVM != vmFake && env.vm(t, newVM) != nil && env.vm(t, newVM).Boots == 1 && env.vm(t, vmFake) == nil,
		"the container %s was not recreated and started: fakeiaas VM %s before, %s (boots %d) after", vmCID, vmFake, newVM, boots(env.vm(t, newVM)))
	d := env.disk(t, diskFake)
	r.check("attach_disk.oracle", d != nil && d.VMCID == newVM, "disk %s: %s, want attached to %s", diskCID, diskState(d), newVM)
	fi, err := os.Stat(filepath.Join(newRoot, filepath.FromSlash(mount)))
	r.check("attach_disk.bound", err == nil && fi.IsDir(), "%s in the root of %s: %v", mount, vmCID, err)
	settings, serr = env.settings(newRoot)
	r.check("attach_disk.settings", serr == nil && settings.AgentID == "agent-docker-1" && string(settings.Disks.Persistent[diskCID.String()]) == `"`+mount+`"`,
		"settings after attach: %+v, %v", settings, serr)
	_, err = os.Stat(filepath.Join(newRoot, "var", "vcap", "data", "marker"))
	r.check("attach_disk.keeps_ephemeral_data", err == nil, "/var/vcap/data/marker is gone after attach_disk: %v", err)
	// The guest writes onto the persistent disk.
	_ = os.WriteFile(filepath.Join(newRoot, filepath.FromSlash(mount), "data"), []byte("persistent"), 0o644)

	disks, err := cpi.GetDisks(ctx, vmCID)
	r.check("get_disks.lists_attached", err == nil && slices.Contains(disks, diskCID), "get_disks(%s) = %v, %v; want [%s]", vmCID, disks, err, diskCID)

	err = cpi.DetachDisk(ctx, vmCID, diskCID)
	if !r.check("detach_disk", err == nil, "detach_disk: %v", err) {
		return r
	}
	detRoot, detVM := env.root(vmCID)
	d = env.disk(t, diskFake)
	r.check("detach_disk.oracle", d != nil && d.VMCID.IsZero() && env.hasVM(t, detVM), "disk %s after detach: %s (VM %s)", diskCID, diskState(d), detVM)
	_, err = os.Stat(filepath.Join(detRoot, filepath.FromSlash(mount)))
	r.check("detach_disk.unbound", errors.Is(err, os.ErrNotExist), "%s still in the root after detach: %v", mount, err)
	settings, serr = env.settings(detRoot)
	_, still := settings.Disks.Persistent[diskCID.String()]
	r.check("detach_disk.settings", serr == nil && !still, "settings after detach: %+v, %v", settings, serr)

	// The data written through the mount moved with the volume.
	vol := filepath.Join(env.cloud.DataDir(), "docker", "volumes", diskFake.String(), "data")
	b, err := os.ReadFile(vol)
	r.check("detach_disk.data_kept", err == nil && string(b) == "persistent", "the volume's file after detach: %q, %v", b, err)

	// The disk's files move to another VM.
	res2, err := cpi.CreateVM(ctx, cpiv2.CreateVMArgs{AgentID: "agent-docker-2", StemcellCID: scCID, Networks: manualNetworks(t, "10.244.0.6")})
	if r.check("create_vm.second", err == nil, "second create_vm: %v", err) {
		_, err = cpi.AttachDisk(ctx, res2.VMCID, diskCID)
		root2, vm2 := env.root(res2.VMCID)
		b, rerr := os.ReadFile(filepath.Join(root2, filepath.FromSlash(mount), "data"))
		d = env.disk(t, diskFake)
		r.check("attach_disk.data_moves", err == nil && rerr == nil && string(b) == "persistent" && d != nil && d.VMCID == vm2,
			"attach to a second VM: %v; the file written on the first: %q, %v; disk %s", err, b, rerr, diskState(d))
		err = cpi.DetachDisk(ctx, res2.VMCID, diskCID)
		r.check("detach_disk.second", err == nil, "detach from the second VM: %v", err)
		err = cpi.DeleteVM(ctx, res2.VMCID)
		r.check("delete_vm.second", err == nil, "delete the second VM: %v", err)
	}

	// Methods the CPI answers without doing anything.
	_, vmNow := env.root(vmCID)
	bootsBefore := env.vm(t, vmNow).Boots
	err = cpi.RebootVM(ctx, vmCID)
	_, vmAfter := env.root(vmCID)
	after := env.vm(t, vmAfter)
	r.check("reboot_vm.reboots", err == nil && after != nil && (vmAfter != vmNow || after.Boots > bootsBefore),
		"reboot_vm(%s): %v; the VM behind it was %s (boots %d), is %s (boots %d)", vmCID, err, vmNow, bootsBefore, vmAfter, boots(after))
	err = cpi.ResizeDisk(ctx, diskCID, 2048)
	d = env.disk(t, diskFake)
	r.check("resize_disk.resizes_or_not_supported", errors.Is(err, cpiv2.ErrNotSupported) || err == nil && d != nil && d.SizeMiB == 2048,
		"resize_disk(%s, 2048): %v; the disk in the oracle: %s", diskCID, err, diskState(d))
	snap, err := cpi.SnapshotDisk(ctx, diskCID, nil)
	r.check("snapshot_disk.snapshots_or_not_implemented", errors.Is(err, cpiv2.ErrNotImplemented) || errors.Is(err, cpiv2.ErrNotSupported) || err == nil && !snap.IsZero(),
		"snapshot_disk(%s): %q, %v", diskCID, snap, err)

	err = cpi.DeleteDisk(ctx, diskCID)
	r.check("delete_disk", err == nil, "delete_disk: %v", err)
	r.check("delete_disk.oracle", env.disk(t, diskFake) == nil, "disk %s still in the oracle", diskFake)
	has, err = cpi.HasDisk(ctx, diskCID)
	r.check("has_disk.false", err == nil && !has, "has_disk(%s) after delete = %v, %v", diskCID, has, err)
	err = cpi.DeleteDisk(ctx, diskCID)
	r.check("delete_disk.missing_tolerated", err == nil || errors.Is(err, cpiv2.ErrDiskNotFound), "delete_disk of a missing disk: %v", err)

	err = cpi.DeleteVM(ctx, vmCID)
	r.check("delete_vm", err == nil, "delete_vm: %v", err)
	st = env.state(t)
	r.check("delete_vm.oracle", len(st.VMs) == 0 && len(st.Disks) == 0, "after delete_vm the cloud holds VMs %d, disks %d (the ephemeral volume must go too)", len(st.VMs), len(st.Disks))
	has, err = cpi.HasVM(ctx, vmCID)
	r.check("has_vm.false", err == nil && !has, "has_vm(%s) after delete = %v, %v", vmCID, has, err)
	err = cpi.DeleteVM(ctx, vmCID)
	r.check("delete_vm.missing_tolerated", err == nil || errors.Is(err, cpiv2.ErrVMNotFound), "delete_vm of a missing VM: %v", err)

	err = cpi.DeleteStemcell(ctx, scCID)
	r.check("delete_stemcell", err == nil, "delete_stemcell: %v", err)
	r.check("delete_stemcell.oracle", len(env.state(t).Stemcells) == 0, "the stemcell is still in the oracle")
	return r
}

func (env *cloudEnv) state(tb testing.TB) fakeiaas.State {
	tb.Helper()
	st, err := env.cloud.State(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

func (env *cloudEnv) root(vm cpiv2.VMCID) (string, cpiv2.VMCID) {
	fake, ok := env.face.ContainerVM(vm.String())
	if !ok {
		return "", cpiv2.VMCID{}
	}
	return env.cloud.VMRoot(fake), fake
}

func (env *cloudEnv) hasVM(tb testing.TB, cid cpiv2.VMCID) bool {
	return !cid.IsZero() && slices.ContainsFunc(env.state(tb).VMs, func(v fakeiaas.VM) bool { return v.CID == cid })
}

func boots(v *fakeiaas.VM) int {
	if v == nil {
		return -1
	}
	return v.Boots
}

func diskState(d *fakeiaas.Disk) string {
	if d == nil {
		return "absent"
	}
	return fmt.Sprintf("%s size %d MiB attached to %q", d.CID, d.SizeMiB, d.VMCID)
}

func (env *cloudEnv) vm(tb testing.TB, cid cpiv2.VMCID) *fakeiaas.VM {
	for _, v := range env.state(tb).VMs {
		if v.CID == cid {
			return &v
		}
	}
	return nil
}

func (env *cloudEnv) disk(tb testing.TB, cid cpiv2.DiskCID) *fakeiaas.Disk {
	for _, d := range env.state(tb).Disks {
		if d.CID == cid {
			return &d
		}
	}
	return nil
}

type agentSettings struct {
	AgentID string `json:"agent_id"`
	VM      struct {
		Name string `json:"name"`
	} `json:"vm"`
	Disks struct {
		Persistent map[string]json.RawMessage `json:"persistent"`
	} `json:"disks"`
}

func (env *cloudEnv) settings(root string) (agentSettings, error) {
	var s agentSettings
	if root == "" {
		return s, errors.New("no VM")
	}
	b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(settingsPath)))
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(b, &s)
}

// TestInteropDockerCPI runs the upstream BOSH Docker CPI on the face and
// checks every step with the oracle. The failures must be exactly the
// named upstream findings: a new failure is a bug (here or upstream), and
// a finding that no longer shows means upstream fixed it.
func TestInteropDockerCPI(t *testing.T) {
	cpi := dockerCPI(t)
	env := newCloudEnv(t, cpi, dockerapi.DefectNone)
	r := env.lifecycle(t)
	for _, id := range r.failedIDs() {
		if src, ok := expectedFindings[id]; ok {
			t.Logf("expected finding %s (upstream %s): %s", id, src, r.failed[id])
			continue
		}
		t.Errorf("check %s failed: %s", id, r.failed[id])
	}
	for id, src := range expectedFindings {
		if _, ok := r.failed[id]; !ok {
			t.Errorf("expected finding %s (upstream %s) did not show: has upstream fixed it? (passed: %v)", id, src, slices.Contains(r.passed, id))
		}
	}
	if t.Failed() {
		t.Logf("CPI debug log: run with -v; checks passed: %s", strings.Join(r.passed, " "))
	}
}

// TestInteropBrokenFaceFails shows the interop checks can fail: a face
// that does not bind volumes into a recreated container (the Docker CPI's
// attach) must fail attach_disk's oracle checks.
func TestInteropBrokenFaceFails(t *testing.T) {
	cpi := dockerCPI(t)
	env := newCloudEnv(t, cpi, dockerapi.DefectUnboundOnRecreate)
	r := env.lifecycle(t)
	for _, id := range []string{"attach_disk.oracle", "attach_disk.bound"} {
		if _, ok := r.failed[id]; !ok {
			t.Errorf("the broken face passed %s; the checks that failed: %v", id, r.failedIDs())
		}
	}
}

// BenchmarkDockerCPICycle times create_vm + attach_disk + detach_disk +
// delete_vm of the real Docker CPI on the face and prints the median.
func BenchmarkDockerCPICycle(b *testing.B) {
	cpi := dockerCPI(b)
	env := newCloudEnv(b, cpi, dockerapi.DefectNone)
	ctx := context.Background()
	sc, err := env.cpi.CreateStemcell(ctx, cpiv2.CreateStemcellArgs{ImagePath: env.image})
	if err != nil {
		b.Fatal(err)
	}
	disk, err := env.cpi.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 1024})
	if err != nil {
		b.Fatal(err)
	}
	nets := manualNetworks(b, "10.244.0.5")
	var laps []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		res, err := env.cpi.CreateVM(ctx, cpiv2.CreateVMArgs{AgentID: fmt.Sprintf("agent-%d", i), StemcellCID: sc, Networks: nets})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := env.cpi.AttachDisk(ctx, res.VMCID, disk); err != nil {
			b.Fatal(err)
		}
		if err := env.cpi.DetachDisk(ctx, res.VMCID, disk); err != nil {
			b.Fatal(err)
		}
		if err := env.cpi.DeleteVM(ctx, res.VMCID); err != nil {
			b.Fatal(err)
		}
		laps = append(laps, time.Since(start))
	}
	b.StopTimer()
	slices.Sort(laps)
	med := laps[len(laps)/2]
	b.ReportMetric(float64(med.Microseconds())/1000, "ms/cycle(median)")
	b.Logf("Docker CPI create_vm+attach_disk+detach_disk+delete_vm on the fake: median %v over %d cycles", med, len(laps))
}
