package testbed

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/dockerapi"
)

// The proxy in front of a Docker daemon (the face stands in for one here):
// it passes requests on, notes what they create, fails a container create
// after the daemon made its bind volumes, and holds volume creates.
func TestDockerProxy(t *testing.T) {
	dir, err := os.MkdirTemp("", "cpilab-px-") // short: socket paths
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	cloud, err := fakeiaas.New(fakeiaas.Config{DataDir: filepath.Join(dir, "cloud"), Store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	defer cloud.Close()
	face, err := dockerapi.New(dockerapi.Config{Cloud: cloud})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := dockerapi.Serve(face, filepath.Join(dir, "d.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	d, err := DialDocker(ctx, srv.Host())
	if err != nil {
		t.Fatal(err)
	}
	if d.APIVersion != dockerapi.MaxAPIVersion || d.CPIAPIVersion() != DockerAPIVersion {
		t.Errorf("daemon API %s, CPI API %s; want %s and %s", d.APIVersion, d.CPIAPIVersion(), dockerapi.MaxAPIVersion, DockerAPIVersion)
	}
	px, err := StartDockerProxy(d, filepath.Join(dir, "px.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer px.Close()
	via, err := DialDocker(ctx, px.Host())
	if err != nil {
		t.Fatalf("through the proxy: %v", err)
	}
	tgz, err := stemcellTarball([]byte(`{"name": "s", "version": "1", "api_version": 2}`))
	if err != nil {
		t.Fatal(err)
	}
	// Import (gunzipped by the client, as the Docker CPI does: the face takes a tar).
	req, _ := http.NewRequest("POST", "http://docker/v1.44/images/create?fromSrc=-&repo=bosh.io%2Fstemcells&tag=img-1", gunzip(t, tgz))
	resp, err := via.http.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("import through the proxy: %v %v", resp, err)
	}
	resp.Body.Close()

	if _, err := via.do(ctx, "POST", "/v1.44/volumes/create", map[string]any{"Name": "vol-1"}, nil); err != nil {
		t.Fatal(err)
	}
	create := map[string]any{"Image": "bosh.io/stemcells:img-1", "HostConfig": map[string]any{"Binds": []string{"vol-eph-c-1:/var/vcap/data/", "vol-1:/warden-cpi-dev/vol-1"}}}
	if _, err := via.do(ctx, "POST", "/v1.44/containers/create?name=c-1", create, nil); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"image/bosh.io/stemcells:img-1", "volume/vol-1", "container/c-1", "volume/vol-eph-c-1"} {
		kind, name, _ := strings.Cut(n, "/")
		if !px.Made(kind, name) {
			t.Errorf("the proxy did not note %s", n)
		}
	}
	if px.Made("container", "c-9") {
		t.Error("the proxy notes a container nobody made")
	}
	oracle := RealDockerOracle{Docker: d, VolumeSizeMiB: 1024, Proxy: px}
	// An object made beside the proxy is not this worker's.
	if _, err := d.do(ctx, "POST", "/v1.44/volumes/create", map[string]any{"Name": "vol-other"}, nil); err != nil {
		t.Fatal(err)
	}
	inv, err := oracle.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(inv.Disks, ",") != "vol-1,vol-eph-c-1" || strings.Join(inv.VMs, ",") != "c-1" || strings.Join(inv.Stemcells, ",") != "bosh.io/stemcells:img-1" {
		t.Errorf("inventory through the proxy: %+v", inv)
	}
	od, ok, err := oracle.Disk(ctx, "vol-1")
	if err != nil || !ok || od.AttachedTo != "c-1" || od.Path != "/warden-cpi-dev/vol-1" || od.SizeMiB != 1024 {
		t.Errorf("oracle disk vol-1: %+v %v %v", od, ok, err)
	}
	vm, ok, err := oracle.VM(ctx, "c-1")
	if err != nil || !ok || vm.Disks["vol-1"] != "/warden-cpi-dev/vol-1" {
		t.Errorf("oracle VM c-1: %+v %v %v", vm, ok, err)
	}

	// A failed create: the daemon made the first bind's volume; the client
	// gets the injected capacity error; the next create is not failed.
	clear, err := RealDockerFaults{px}.FailVMCreations(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	create2 := map[string]any{"Image": "bosh.io/stemcells:img-1", "HostConfig": map[string]any{"Binds": []string{"vol-eph-c-2:/var/vcap/data/"}}}
	code, err := via.do(ctx, "POST", "/v1.44/containers/create?name=c-2", create2, nil)
	if code != http.StatusInternalServerError || err == nil || !strings.Contains(err.Error(), injectedCapacity) {
		t.Errorf("the failed create: %d %v", code, err)
	}
	if _, ok, _ := oracle.Disk(ctx, "vol-eph-c-2"); !ok {
		t.Error("the failed create made no volume: a daemon makes the bind volumes first")
	}
	if _, ok, _ := oracle.VM(ctx, "c-2"); ok {
		t.Error("the failed create made a container")
	}
	if _, err := via.do(ctx, "POST", "/v1.44/containers/create?name=c-2", create2, nil); err != nil {
		t.Errorf("the create after the failure: %v", err)
	}
	if err := clear(); err != nil {
		t.Fatal(err)
	}

	// Held volume creates wait for the release.
	gate, err := RealDockerFaults{px}.Hold(ctx, cpiv2.MethodCreateDisk)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := (RealDockerFaults{px}).Hold(ctx, cpiv2.MethodCreateVM); err == nil {
		t.Error("holding create_vm on a real daemon: no error")
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = via.do(ctx, "POST", "/v1.44/volumes/create", map[string]any{"Name": "vol-h" + string(rune('a'+i))}, nil)
		}()
	}
	held := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && held < 3; time.Sleep(5 * time.Millisecond) {
		if held, err = gate.Waiting(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if held != 3 {
		t.Errorf("%d volume creates held, want 3", held)
	}
	if _, ok, _ := oracle.Disk(ctx, "vol-ha"); ok {
		t.Error("a held volume create reached the daemon")
	}
	if err := gate.Release(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("held create %d: %v", i, err)
		}
	}
	if _, ok, _ := oracle.Disk(ctx, "vol-hc"); !ok {
		t.Error("a released volume create did not reach the daemon")
	}
}

func gunzip(t *testing.T, b []byte) *bytes.Reader {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(out)
}
