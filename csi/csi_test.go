package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/cpilab/cpilab/director"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestLoadConfigNamesEachBadField(t *testing.T) {
	dir := t.TempDir()
	write := func(s string) string {
		p := filepath.Join(dir, "c.json")
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	_, err := LoadConfig(write(`{"mounter":"vmroot","node":{"root":"rel"},"default_size_mib":-1}`), ModeAll)
	for _, want := range []string{"director.url", "director.client", "deployment", "default_az", "node.instance_id", "node.root", "default_size_mib"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
	if _, err := LoadConfig(write(`{"node":{"instance_id":"i"},"bogus":1}`), ModeNode); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := LoadConfig(write(`{"node":{"instance_id":"i"}}`), "both"); err == nil || !strings.Contains(err.Error(), `"both"`) {
		t.Errorf("bad mode: %v", err)
	}
	c, err := LoadConfig(write(`{"node":{"instance_id":"i"}}`), ModeNode)
	if err != nil || c.Node.Root != "/" || c.AttachWaitSeconds != 30 || c.Mounter != MounterReal {
		t.Errorf("node config: %+v, %v", c, err)
	}
}

func TestDiskName(t *testing.T) {
	if got := DiskName("pvc-1234_a.b"); got != "csi-pvc-1234_a.b" {
		t.Errorf("clean name: %q", got)
	}
	a, b := DiskName("a/b"), DiskName("a b")
	if a == b || !strings.HasPrefix(a, "csi-a-b-") {
		t.Errorf("names with bad characters must not share a disk: %q %q", a, b)
	}
}

func TestParseEndpoint(t *testing.T) {
	for ep, want := range map[string]string{"unix:///run/csi.sock": "/run/csi.sock", "unix:/run/csi.sock": "/run/csi.sock", "/run/x.sock": "/run/x.sock"} {
		if got, err := ParseEndpoint(ep); err != nil || got != want {
			t.Errorf("%s: %q, %v", ep, got, err)
		}
	}
	for _, ep := range []string{"tcp://1.2.3.4:5", "unix://relative", ""} {
		if _, err := ParseEndpoint(ep); err == nil {
			t.Errorf("%q accepted", ep)
		}
	}
}

func TestDirectorErrorCodes(t *testing.T) {
	task := func(msg string) error {
		return &director.TaskFailedError{Task: director.TaskView{ID: 7, State: director.TaskError, Result: msg}}
	}
	for _, c := range []struct {
		err  error
		want codes.Code
	}{
		{&net.OpError{Op: "dial", Err: errors.New("connection refused")}, codes.Unavailable},
		{fmt.Errorf("director: GET /dynamic_disks: %w", errors.New("EOF")), codes.Unavailable},
		{&director.APIError{Status: 503}, codes.Unavailable},
		{&director.APIError{Status: 401}, codes.PermissionDenied},
		{&director.APIError{Status: 403}, codes.PermissionDenied},
		{&director.APIError{Status: 404}, codes.NotFound},
		{&director.APIError{Status: 400}, codes.InvalidArgument},
		{&director.APIError{Status: 409}, codes.Aborted},
		{task("instance `x` not found"), codes.NotFound},
		{task("disk `d` not found"), codes.NotFound},
		{task("Could not find disk pool by name `p`"), codes.InvalidArgument},
		{task("disk `d` already exists"), codes.AlreadyExists},
		{task("disk `d` is in AZ `z1` but instance `i` is in AZ `z2`"), codes.FailedPrecondition},
		{task("no active VM found in deployment `k` in AZ `z9`"), codes.ResourceExhausted},
		{task("CPI error"), codes.Internal},
		{context.DeadlineExceeded, codes.DeadlineExceeded},
	} {
		if got := status.Code(directorError("call", c.err)); got != c.want {
			t.Errorf("%v → %s, want %s", c.err, got, c.want)
		}
	}
}

// fakeBackend is an in-memory Director.
type fakeBackend struct {
	mu      sync.Mutex
	disks   map[string]director.DiskInfo
	creates int
}

func (f *fakeBackend) CreateDynamicDisk(_ context.Context, r director.CreateDiskRequest) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.disks[r.DiskName]; ok {
		return "", &director.TaskFailedError{Task: director.TaskView{Result: "disk `" + r.DiskName + "` already exists"}}
	}
	f.creates++
	az := r.AZ
	f.disks[r.DiskName] = director.DiskInfo{Name: r.DiskName, CID: fmt.Sprintf("disk-%d", f.creates), SizeMiB: r.DiskSize, AZ: &az, DiskPoolName: r.DiskPoolName}
	return f.disks[r.DiskName].CID, nil
}
func (f *fakeBackend) DeleteDynamicDisk(_ context.Context, n string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.disks, n)
	return nil
}
func (f *fakeBackend) AttachDynamicDisk(_ context.Context, n, id string, _ map[string]any) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d, ok := f.disks[n]
	if !ok {
		return "", &director.TaskFailedError{Task: director.TaskView{Result: "disk `" + n + "` not found"}}
	}
	in := "dd/" + id
	d.Instance = &in
	f.disks[n] = d
	return "", nil
}
func (f *fakeBackend) DetachDynamicDisk(_ context.Context, n string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.disks[n]
	d.Instance = nil
	f.disks[n] = d
	return nil
}
func (f *fakeBackend) ResizeDynamicDisk(_ context.Context, n string, mib int) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	d := f.disks[n]
	d.SizeMiB = mib
	f.disks[n] = d
	return d.CID, nil
}
func (f *fakeBackend) DynamicDisks(context.Context) ([]director.DiskInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []director.DiskInfo
	for _, d := range f.disks {
		out = append(out, d)
	}
	return out, nil
}

func newTestDriver(t *testing.T) (*Driver, *fakeBackend) {
	t.Helper()
	fb := &fakeBackend{disks: map[string]director.DiskInfo{}}
	cfg := Config{Deployment: "k", DiskPool: "p", DefaultAZ: "z1", Resize: true}.WithDefaults()
	d, err := NewDriver(cfg, Deps{Backend: fb})
	if err != nil {
		t.Fatal(err)
	}
	return d, fb
}

func mountCap() []*csi.VolumeCapability {
	return []*csi.VolumeCapability{{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}}
}

// Concurrent CreateVolume calls of one name (a sidecar's retries) make one
// disk and answer one volume.
func TestCreateVolumeConcurrentRetriesMakeOneDisk(t *testing.T) {
	d, fb := newTestDriver(t)
	var wg sync.WaitGroup
	ids := make([]string, 8)
	errs := make([]error, 8)
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := d.CreateVolume(context.Background(), &csi.CreateVolumeRequest{Name: "pvc-1", VolumeCapabilities: mountCap(),
				CapacityRange: &csi.CapacityRange{RequiredBytes: 10<<20 + 1}})
			ids[i], errs[i] = r.GetVolume().GetVolumeId(), err
			if err == nil && r.GetVolume().GetCapacityBytes() != 11<<20 {
				errs[i] = fmt.Errorf("capacity %d, want 11 MiB", r.GetVolume().GetCapacityBytes())
			}
		}()
	}
	wg.Wait()
	for i := range ids {
		if errs[i] != nil || ids[i] != "csi-pvc-1" {
			t.Errorf("call %d: %q, %v", i, ids[i], errs[i])
		}
	}
	if fb.creates != 1 {
		t.Errorf("%d disks created, want 1", fb.creates)
	}
}

func TestCreateVolumeRanges(t *testing.T) {
	d, _ := newTestDriver(t)
	ctx := context.Background()
	req := func(name string, r *csi.CapacityRange) *csi.CreateVolumeRequest {
		return &csi.CreateVolumeRequest{Name: name, VolumeCapabilities: mountCap(), CapacityRange: r}
	}
	if _, err := d.CreateVolume(ctx, req("a", &csi.CapacityRange{RequiredBytes: 1<<20 + 1, LimitBytes: 1<<20 + 2})); status.Code(err) != codes.OutOfRange {
		t.Errorf("a range holding no whole MiB: %v", err)
	}
	if _, err := d.CreateVolume(ctx, req("b", &csi.CapacityRange{RequiredBytes: 16 << 20, LimitBytes: 16 << 20})); err != nil {
		t.Fatal(err)
	}
	if _, err := d.CreateVolume(ctx, req("b", &csi.CapacityRange{RequiredBytes: 32 << 20})); status.Code(err) != codes.AlreadyExists {
		t.Errorf("an existing name, larger: %v", err)
	}
	if r, err := d.CreateVolume(ctx, req("c", nil)); err != nil || r.GetVolume().GetCapacityBytes() != 1024<<20 {
		t.Errorf("no range: the default size: %v %v", r, err)
	}
	bad := &csi.CreateVolumeRequest{Name: "d", VolumeCapabilities: mountCap(), Parameters: map[string]string{"iops": "9"}}
	if _, err := d.CreateVolume(ctx, bad); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "iops") {
		t.Errorf("unknown parameter: %v", err)
	}
}

func TestListVolumesPages(t *testing.T) {
	d, _ := newTestDriver(t)
	ctx := context.Background()
	for _, n := range []string{"a", "b", "c"} {
		if _, err := d.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: n, VolumeCapabilities: mountCap()}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	tok := ""
	for {
		r, err := d.ListVolumes(ctx, &csi.ListVolumesRequest{MaxEntries: 2, StartingToken: tok})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.GetEntries() {
			got = append(got, e.GetVolume().GetVolumeId())
		}
		if tok = r.GetNextToken(); tok == "" {
			break
		}
		// A volume deleted between pages loses no other.
		if _, err := d.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: "csi-b"}); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Join(got, ",") != "csi-a,csi-b,csi-c" {
		t.Errorf("pages listed %v", got)
	}
	if _, err := d.ListVolumes(ctx, &csi.ListVolumesRequest{StartingToken: "junk"}); status.Code(err) != codes.Aborted {
		t.Errorf("a foreign token: %v", err)
	}
}
