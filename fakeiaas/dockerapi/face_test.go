package dockerapi_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/dockerapi"
)

// dockerClient speaks the Docker Engine API over the face's unix socket,
// as the Docker client library does (including the hijacked exec stream).
type dockerClient struct {
	tb   testing.TB
	sock string
	http *http.Client
}

type faceEnv struct {
	dir   string
	cloud *fakeiaas.Cloud
	face  *dockerapi.Face
	c     *dockerClient
	stop  func()
}

func newFaceEnv(tb testing.TB, store string) *faceEnv {
	tb.Helper()
	return newFaceEnvWith(tb, fakeiaas.Config{Store: store}, dockerapi.Config{})
}

// newFaceEnvWith starts a cloud (its DataDir set here) and a face (its
// Cloud set here) on a socket in a fresh directory.
func newFaceEnvWith(tb testing.TB, ccfg fakeiaas.Config, fcfg dockerapi.Config) *faceEnv {
	tb.Helper()
	dir, err := os.MkdirTemp("", "cpilab-face-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	env := &faceEnv{dir: dir}
	env.startWith(tb, ccfg, fcfg)
	return env
}

func (env *faceEnv) start(tb testing.TB, store string) {
	env.startWith(tb, fakeiaas.Config{Store: store}, dockerapi.Config{})
}

func (env *faceEnv) startWith(tb testing.TB, ccfg fakeiaas.Config, fcfg dockerapi.Config) {
	tb.Helper()
	ccfg.DataDir = filepath.Join(env.dir, "cloud")
	cloud, err := fakeiaas.New(ccfg)
	if err != nil {
		tb.Fatal(err)
	}
	fcfg.Cloud = cloud
	face, err := dockerapi.New(fcfg)
	if err != nil {
		tb.Fatal(err)
	}
	srv, err := dockerapi.Serve(face, filepath.Join(env.dir, "d.sock"))
	if err != nil {
		tb.Fatal(err)
	}
	var once sync.Once
	env.stop = func() { once.Do(func() { _ = srv.Close(); _ = cloud.Close() }) }
	tb.Cleanup(env.stop)
	env.cloud, env.face = cloud, face
	env.c = &dockerClient{tb: tb, sock: srv.Path(), http: &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", srv.Path())
		}}}}
}

// do sends a request and returns the status and body; v, when not nil,
// is JSON-encoded as the body (a []byte is sent as is).
func (c *dockerClient) do(method, path string, v any) (int, []byte) {
	c.tb.Helper()
	var body io.Reader
	switch b := v.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(b)
	default:
		j, err := json.Marshal(v)
		if err != nil {
			c.tb.Fatal(err)
		}
		body = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, "http://docker"+path, body)
	if err != nil {
		c.tb.Fatal(err)
	}
	if _, raw := v.([]byte); v != nil && (!raw || !strings.Contains(path, "/images/create")) {
		req.Header.Set("Content-Type", "application/json") // as a Docker client sends a JSON body
	}
	resp, err := c.http.Do(req)
	if err != nil {
		c.tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		c.tb.Fatal(err)
	}
	return resp.StatusCode, out
}

// want checks a response's status and decodes its body into v (if not nil).
func (c *dockerClient) want(status int, method, path string, body, v any) []byte {
	c.tb.Helper()
	got, out := c.do(method, path, body)
	if got != status {
		c.tb.Fatalf("%s %s: status %d, want %d; body %s", method, path, got, status, out)
	}
	if v != nil {
		if err := json.Unmarshal(out, v); err != nil {
			c.tb.Fatalf("%s %s: body %s: %v", method, path, out, err)
		}
	}
	return out
}

// wantError checks Docker's error shape: the status and {"message": msg}.
func (c *dockerClient) wantError(status int, method, path string, body any, msg string) {
	c.tb.Helper()
	var e struct {
		Message string `json:"message"`
	}
	c.want(status, method, path, body, &e)
	if e.Message != msg {
		c.tb.Errorf("%s %s: message %q, want %q", method, path, e.Message, msg)
	}
}

// exec creates and runs cmd in ctr with the hijacked stream, feeding stdin
// (if not nil), and returns stdout, stderr and the exit code.
func (c *dockerClient) exec(ctr string, cmd []string, stdin []byte) (string, string, int) {
	c.tb.Helper()
	var id struct {
		ID string `json:"Id"`
	}
	c.want(http.StatusCreated, "POST", "/v1.44/containers/"+ctr+"/exec", container.ExecCreateRequest{
		Cmd: cmd, AttachStdin: stdin != nil, AttachStdout: true, AttachStderr: true}, &id)
	conn, err := net.Dial("unix", c.sock)
	if err != nil {
		c.tb.Fatal(err)
	}
	defer conn.Close()
	req, _ := http.NewRequest("POST", "http://docker/v1.44/exec/"+id.ID+"/start", strings.NewReader(`{"Detach":false,"Tty":false}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	if err := req.Write(conn); err != nil {
		c.tb.Fatal(err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, req)
	if err != nil {
		c.tb.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Content-Type") != "application/vnd.docker.multiplexed-stream" {
		c.tb.Fatalf("exec start: %s, Content-Type %q", resp.Status, resp.Header.Get("Content-Type"))
	}
	if stdin != nil {
		if _, err := conn.Write(stdin); err != nil {
			c.tb.Fatal(err)
		}
	}
	if err := conn.(*net.UnixConn).CloseWrite(); err != nil {
		c.tb.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, br); err != nil {
		c.tb.Fatalf("exec %v: demultiplexing: %v", cmd, err)
	}
	var insp container.ExecInspectResponse
	c.want(http.StatusOK, "GET", "/v1.44/exec/"+id.ID+"/json", nil, &insp)
	if insp.Running || insp.ExitCode == nil {
		c.tb.Fatalf("exec %v finished, but inspect says running=%v exit=%v", cmd, insp.Running, insp.ExitCode)
	}
	return stdout.String(), stderr.String(), *insp.ExitCode
}

func tarOf(tb testing.TB, members ...*tar.Header) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, h := range members {
		body := h.Linkname
		if h.Typeflag == tar.TypeReg {
			h.Linkname = ""
			h.Size = int64(len(body))
		}
		if err := tw.WriteHeader(h); err != nil {
			tb.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(body)); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// file is a regular tar member; its content rides in Linkname until tarOf.
func file(name, content string) *tar.Header {
	return &tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o640, Linkname: content}
}

func TestVersionPrefixAndUnknownRoutes(t *testing.T) {
	env := newFaceEnv(t, "memory")
	for _, p := range []string{"/_ping", "/v1.44/_ping", "/v1.24/_ping", "/v1.52/_ping"} {
		if out := env.c.want(http.StatusOK, "GET", p, nil, nil); string(out) != "OK" {
			t.Errorf("GET %s: %q, want OK", p, out)
		}
	}
	env.c.wantError(http.StatusBadRequest, "GET", "/v1.99/_ping", nil, "client version 1.99 is too new. Maximum supported API version is 1.52")
	env.c.wantError(http.StatusBadRequest, "GET", "/v1.12/_ping", nil, "client version 1.12 is too old. Minimum supported API version is 1.24, please upgrade your client to a newer version")
	env.c.wantError(http.StatusNotFound, "GET", "/v1.44/networks", nil, "page not found: cpilab's Docker face does not serve GET /networks (docs/docker.md lists what it serves)")
	if out := env.c.want(http.StatusOK, "GET", "/v1.44/containers/json?all=1", nil, nil); strings.TrimSpace(string(out)) != "[]" {
		t.Errorf("GET /containers/json on an empty face: %s", out)
	}
	env.c.wantError(http.StatusBadRequest, "GET", `/v1.44/containers/json?filters={"label":["x"]}`, nil, "invalid filter 'label': cpilab's Docker face filters containers by volume only")
	env.c.wantError(http.StatusNotFound, "POST", "/v1.44/swarm/init", nil, "page not found: cpilab's Docker face does not serve POST /swarm/init (docs/docker.md lists what it serves)")
	var v struct{ ApiVersion, MinAPIVersion string }
	env.c.want(http.StatusOK, "GET", "/version", nil, &v)
	if v.ApiVersion != dockerapi.MaxAPIVersion || v.MinAPIVersion != dockerapi.MinAPIVersion {
		t.Errorf("version: %+v", v)
	}
}

func TestNotFoundAndBadRequests(t *testing.T) {
	env := newFaceEnv(t, "memory")
	c := env.c
	c.wantError(http.StatusNotFound, "GET", "/v1.44/containers/c-nope/json", nil, "No such container: c-nope")
	c.wantError(http.StatusNotFound, "POST", "/v1.44/containers/c-nope/start", nil, "No such container: c-nope")
	c.wantError(http.StatusNotFound, "DELETE", "/v1.44/containers/c-nope?force=1", nil, "No such container: c-nope")
	c.wantError(http.StatusNotFound, "GET", "/v1.44/volumes/vol-nope", nil, "get vol-nope: no such volume")
	c.wantError(http.StatusNotFound, "DELETE", "/v1.44/volumes/vol-nope", nil, "get vol-nope: no such volume")
	c.want(http.StatusNoContent, "DELETE", "/v1.44/volumes/vol-nope?force=1", nil, nil) // force: nothing to purge, as in Docker
	c.wantError(http.StatusNotFound, "DELETE", "/v1.44/images/bosh.io/stemcells:img-nope?force=1", nil, "No such image: bosh.io/stemcells:img-nope")
	c.wantError(http.StatusNotFound, "GET", "/v1.44/exec/nope/json", nil, "No such exec instance: nope")
	c.wantError(http.StatusNotFound, "POST", "/v1.44/containers/create?name=c-1", map[string]any{"Image": "bosh.io/stemcells:img-nope"}, "No such image: bosh.io/stemcells:img-nope")
	c.wantError(http.StatusBadRequest, "POST", "/v1.44/containers/create?name=c-1", []byte(`{"Image": `), "POST /containers/create: invalid JSON body: unexpected EOF")
	c.wantError(http.StatusBadRequest, "POST", "/v1.44/containers/create?name=../x", map[string]any{"Image": "x"}, "Invalid container name (../x), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed")
	c.wantError(http.StatusBadRequest, "POST", "/v1.44/volumes/create", map[string]any{"Name": "../etc"}, `create ../etc: "../etc" includes invalid characters for a local volume name, only "[a-zA-Z0-9][a-zA-Z0-9_.-]" are allowed. If you intended to pass a host directory, use absolute path`)
	c.wantError(http.StatusInternalServerError, "POST", "/v1.44/images/create?fromSrc=-&repo=r&tag=t", []byte("not a tar"), "import r:t: the body is not a tar archive: unexpected EOF")
	c.wantError(http.StatusNotFound, "POST", "/v1.44/images/create?fromImage=ubuntu&tag=jammy", nil, "pull access denied for ubuntu: cpilab's Docker face has no registry; import the image instead (POST /images/create?fromSrc=-)")
}

// importImage imports the test stemcell image as repo:tag.
func (env *faceEnv) importImage(tb testing.TB, ref string) cpiv2.StemcellCID {
	tb.Helper()
	repo, tag, _ := strings.Cut(ref, ":")
	env.c.want(http.StatusOK, "POST", "/v1.44/images/create?fromSrc=-&repo="+repo+"&tag="+tag, imageTar(tb), nil)
	sc, ok := env.face.ImageStemcell(ref)
	if !ok {
		tb.Fatalf("image %s has no stemcell", ref)
	}
	return sc
}

func (env *faceEnv) createContainer(tb testing.TB, name, image string, binds ...string) string {
	tb.Helper()
	var created container.CreateResponse
	env.c.want(http.StatusCreated, "POST", "/v1.44/containers/create?name="+name, map[string]any{
		"Image": image, "Cmd": []string{"bash", "-c", "exec /sbin/init"},
		"HostConfig": map[string]any{"Binds": binds, "Privileged": true}}, &created)
	env.c.want(http.StatusNoContent, "POST", "/v1.44/containers/"+name+"/start", nil, nil)
	return created.ID
}

func (env *faceEnv) state(tb testing.TB) fakeiaas.State {
	tb.Helper()
	st, err := env.cloud.State(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return st
}

func TestContainerVolumeLifecycle(t *testing.T) {
	env := newFaceEnv(t, "memory")
	c := env.c
	sc := env.importImage(t, "bosh.io/stemcells:img-1")
	st := env.state(t)
	if len(st.Stemcells) != 1 || st.Stemcells[0].CID != sc || st.Stemcells[0].APIVersion != 2 || st.Stemcells[0].DeviceResolver != "virtio" {
		t.Fatalf("stemcells in the oracle: %+v", st.Stemcells)
	}
	var vol struct{ Name, Driver string }
	c.want(http.StatusCreated, "POST", "/v1.44/volumes/create", map[string]any{"Name": "vol-1", "Driver": "local"}, &vol)
	if vol.Name != "vol-1" || vol.Driver != "local" {
		t.Errorf("volume: %+v", vol)
	}
	id := env.createContainer(t, "c-1", "bosh.io/stemcells:img-1", "vol-eph-c-1:/var/vcap/data/", "vol-1:/warden-cpi-dev/vol-1", "/lib/modules:/usr/lib/modules")
	vm, ok := env.face.ContainerVM("c-1")
	if !ok || vm.String() != id {
		t.Fatalf("container c-1: id %s, VM %s (%v)", id, vm, ok)
	}
	disk, _ := env.face.VolumeDisk("vol-1")
	eph, _ := env.face.VolumeDisk("vol-eph-c-1")
	st = env.state(t)
	if len(st.VMs) != 1 || st.VMs[0].CID != vm || len(st.VMs[0].Disks) != 2 {
		t.Fatalf("VMs in the oracle: %+v", st.VMs)
	}
	for _, d := range st.Disks {
		if (d.CID == disk || d.CID == eph) && d.VMCID != vm {
			t.Errorf("disk %s attached to %q, want %s", d.CID, d.VMCID, vm)
		}
	}
	root := env.cloud.VMRoot(vm)
	for _, p := range []string{"warden-cpi-dev/vol-1", "var/vcap/data"} {
		if fi, err := os.Stat(filepath.Join(root, p)); err != nil || !fi.IsDir() {
			t.Errorf("bind target %s in the root: %v", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "usr/lib/modules")); !os.IsNotExist(err) {
		t.Errorf("a host bind must not be mounted: %v", err)
	}
	var insp container.InspectResponse
	c.want(http.StatusOK, "GET", "/v1.44/containers/c-1/json", nil, &insp)
	if insp.ID != id || insp.Name != "/c-1" || !insp.State.Running || len(insp.HostConfig.Binds) != 3 || insp.Config.Image != "bosh.io/stemcells:img-1" {
		t.Errorf("inspect: id %s name %s state %+v binds %v image %s", insp.ID, insp.Name, insp.State, insp.HostConfig.Binds, insp.Config.Image)
	}

	// Conflicts.
	c.wantError(http.StatusConflict, "POST", "/v1.44/containers/create?name=c-1", map[string]any{"Image": "bosh.io/stemcells:img-1"},
		fmt.Sprintf("Conflict. The container name \"/c-1\" is already in use by container %q. You have to remove (or rename) that container to be able to reuse that name.", id))
	c.wantError(http.StatusConflict, "DELETE", "/v1.44/volumes/vol-1?force=1", nil, "remove vol-1: volume is in use - ["+id+"]")
	c.wantError(http.StatusConflict, "DELETE", "/v1.44/containers/c-1", nil, "You cannot remove a running container "+id+". Stop the container before attempting removal or force remove")
	c.wantError(http.StatusConflict, "POST", "/v1.44/containers/create?name=c-2", map[string]any{"Image": "bosh.io/stemcells:img-1",
		"HostConfig": map[string]any{"Binds": []string{"vol-1:/data"}}},
		"volume vol-1 is in use by container c-1: cpilab's Docker face binds a volume (a fakeiaas disk) into one container at a time")

	// The guest writes onto the volume; kill, remove: the files follow the volume.
	if err := os.WriteFile(filepath.Join(root, "warden-cpi-dev/vol-1/f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.want(http.StatusNoContent, "POST", "/v1.44/containers/c-1/kill?signal=KILL", nil, nil)
	c.wantError(http.StatusConflict, "POST", "/v1.44/containers/c-1/kill?signal=KILL", nil, "Cannot kill container: c-1: Container "+id+" is not running")
	c.want(http.StatusNoContent, "DELETE", "/v1.44/containers/c-1?force=1", nil, nil)
	c.wantError(http.StatusNotFound, "GET", "/v1.44/containers/c-1/json", nil, "No such container: c-1")
	st = env.state(t)
	if len(st.VMs) != 0 || len(st.Disks) != 2 {
		t.Fatalf("after remove: %d VMs, %d disks; want 0 and 2", len(st.VMs), len(st.Disks))
	}
	for _, d := range st.Disks {
		if !d.VMCID.IsZero() {
			t.Errorf("disk %s still attached to %s", d.CID, d.VMCID)
		}
	}
	// A new container gets the volume with its files.
	id2 := env.createContainer(t, "c-2", "bosh.io/stemcells:img-1", "vol-1:/warden-cpi-dev/vol-1")
	vm2, _ := env.face.ContainerVM("c-2")
	if b, err := os.ReadFile(filepath.Join(env.cloud.VMRoot(vm2), "warden-cpi-dev/vol-1/f")); err != nil || string(b) != "kept" {
		t.Errorf("the volume's file in the next container: %q, %v", b, err)
	}
	c.want(http.StatusNoContent, "DELETE", "/v1.44/containers/"+id2+"?force=1", nil, nil)
	c.want(http.StatusNoContent, "DELETE", "/v1.44/volumes/vol-1", nil, nil)
	c.wantError(http.StatusNotFound, "GET", "/v1.44/volumes/vol-1", nil, "get vol-1: no such volume")
	var list struct{ Volumes []struct{ Name string } }
	c.want(http.StatusOK, "GET", "/v1.44/volumes", nil, &list)
	if len(list.Volumes) != 1 || list.Volumes[0].Name != "vol-eph-c-1" {
		t.Errorf("volumes: %+v", list.Volumes)
	}
	var del []map[string]string
	c.want(http.StatusOK, "DELETE", "/v1.44/images/bosh.io/stemcells:img-1?force=1", nil, &del)
	if len(del) != 2 || del[0]["Untagged"] != "bosh.io/stemcells:img-1" || del[1]["Deleted"] != sc.String() {
		t.Errorf("image remove: %v", del)
	}
	if st := env.state(t); len(st.Stemcells) != 0 {
		t.Errorf("stemcells after remove: %+v", st.Stemcells)
	}
}

func TestExecStream(t *testing.T) {
	env := newFaceEnv(t, "memory")
	env.importImage(t, "img:1")
	id := env.createContainer(t, "c-1", "img:1")
	vm, _ := env.face.ContainerVM("c-1")
	root := env.cloud.VMRoot(vm)
	c := env.c

	// Upload as the Docker CPI does: tar -x -f - -C / with the tar on stdin.
	settings := `{"agent_id":"a-1"}`
	out, errOut, code := c.exec("c-1", []string{"tar", "-x", "-f", "-", "-C", "/"}, tarOf(t, file("var/vcap/bosh/warden-cpi-agent-env.json", settings)))
	if code != 0 || out != "" || errOut != "" {
		t.Fatalf("tar -x: exit %d stdout %q stderr %q", code, out, errOut)
	}
	if b, err := os.ReadFile(filepath.Join(root, "var/vcap/bosh/warden-cpi-agent-env.json")); err != nil || string(b) != settings {
		t.Fatalf("the settings file in the root: %q, %v", b, err)
	}
	// Download: tar -c -f - -C DIR -- NAME, the tar on the multiplexed stdout.
	out, errOut, code = c.exec(id, []string{"tar", "-c", "-f", "-", "-C", "/var/vcap/bosh", "--", "warden-cpi-agent-env.json"}, nil)
	if code != 0 || errOut != "" {
		t.Fatalf("tar -c: exit %d stderr %q", code, errOut)
	}
	tr := tar.NewReader(strings.NewReader(out))
	h, err := tr.Next()
	if err != nil || h.Name != "warden-cpi-agent-env.json" {
		t.Fatalf("tar -c output: %v, %v", h, err)
	}
	if b, _ := io.ReadAll(tr); string(b) != settings {
		t.Errorf("tar -c content %q, want %q", b, settings)
	}
	// A missing file: GNU tar's status 2 and its message on stderr.
	_, errOut, code = c.exec("c-1", []string{"tar", "-c", "-f", "-", "-C", "/var/vcap/bosh", "--", "update_settings.json"}, nil)
	if code != 2 || errOut != "tar: update_settings.json: Cannot stat: No such file or directory\ntar: Exiting with failure status due to previous errors\n" {
		t.Errorf("tar -c of a missing file: exit %d stderr %q", code, errOut)
	}
	// chgrp: the file must exist.
	if _, _, code = c.exec("c-1", []string{"bash", "-c", "chgrp vcap /var/vcap/bosh/warden-cpi-agent-env.json"}, nil); code != 0 {
		t.Errorf("chgrp of an existing file: exit %d", code)
	}
	if _, errOut, code = c.exec("c-1", []string{"bash", "-c", "chgrp vcap /nope"}, nil); code != 1 || errOut != "chgrp: cannot access '/nope': No such file or directory\n" {
		t.Errorf("chgrp of a missing file: exit %d stderr %q", code, errOut)
	}
	// Members that would leave the root, links and devices are refused.
	outside := filepath.Join(env.dir, "escaped")
	for _, m := range []*tar.Header{
		file("../../../../../escaped", "x"),
		{Name: "var/link", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"},
		{Name: "var/hard", Typeflag: tar.TypeLink, Linkname: "var/vcap/bosh/warden-cpi-agent-env.json"},
		{Name: "dev/null2", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3},
	} {
		if _, errOut, code := c.exec("c-1", []string{"tar", "-x", "-f", "-", "-C", "/"}, tarOf(t, m)); code != 2 || !strings.HasPrefix(errOut, "tar: "+m.Name+": ") {
			t.Errorf("tar -x of %s (type %q): exit %d stderr %q; want 2 and a tar message", m.Name, m.Typeflag, code, errOut)
		}
	}
	if _, err := os.Lstat(outside); !os.IsNotExist(err) {
		t.Errorf("a member escaped the root: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(root, "var/link")); !os.IsNotExist(err) {
		t.Errorf("a symlink member was extracted: %v", err)
	}
	// A symlink planted in the root does not lead out of it either.
	if err := os.Symlink(env.dir, filepath.Join(root, "out")); err != nil {
		t.Fatal(err)
	}
	if _, _, code := c.exec("c-1", []string{"tar", "-x", "-f", "-", "-C", "/"}, tarOf(t, file("out/escaped", "x"))); code != 2 {
		t.Errorf("tar -x through a symlink out of the root: exit %d, want 2", code)
	}
	if _, err := os.Lstat(outside); !os.IsNotExist(err) {
		t.Errorf("a member escaped the root through a symlink: %v", err)
	}
	// Anything else is refused at exec create.
	for _, cmd := range [][]string{{"ls", "/"}, {"bash", "-c", "rm -rf /"}, {"tar", "-x", "-f", "-", "-C", "../x"}, {"tar", "-c", "-f", "-", "-C", "/", "--", "a/b"}} {
		c.wantError(http.StatusBadRequest, "POST", "/v1.44/containers/c-1/exec", container.ExecCreateRequest{Cmd: cmd, AttachStdout: true},
			fmt.Sprintf("exec %q in container c-1 refused: %v", cmd, dockerapi.ErrExecRefused))
	}
	// A stopped container runs nothing.
	c.want(http.StatusNoContent, "POST", "/v1.44/containers/c-1/kill", nil, nil)
	c.wantError(http.StatusConflict, "POST", "/v1.44/containers/c-1/exec", container.ExecCreateRequest{Cmd: []string{"bash", "-c", "chgrp vcap /out"}},
		"Container "+id+" is not running")
}

// TestRebuildAfterRestart: the face's tables come back from the durable
// cloud: containers, their volumes and images.
func TestRebuildAfterRestart(t *testing.T) {
	env := newFaceEnv(t, "sqlite")
	env.importImage(t, "img:1")
	id := env.createContainer(t, "c-1", "img:1", "vol-1:/warden-cpi-dev/vol-1")
	disk, _ := env.face.VolumeDisk("vol-1")
	var unnamed container.CreateResponse
	env.c.want(http.StatusCreated, "POST", "/v1.44/containers/create", map[string]any{"Image": "img:1"}, &unnamed)
	// Stop the first face and cloud, start new ones on the same data dir.
	env.stop()
	env.start(t, "sqlite")
	var insp container.InspectResponse
	env.c.want(http.StatusOK, "GET", "/v1.44/containers/"+unnamed.ID+"/json", nil, &insp)
	if insp.Name != "/"+unnamed.ID || insp.State.Status != container.StateCreated {
		t.Errorf("the unnamed container after restart: name %s state %+v", insp.Name, insp.State)
	}
	vm, ok := env.face.ContainerVM("c-1")
	if !ok || vm.String() != id {
		t.Fatalf("after restart: container c-1 → %s (%v), want %s", vm, ok, id)
	}
	if d, ok := env.face.VolumeDisk("vol-1"); !ok || d != disk {
		t.Errorf("after restart: vol-1 → %s (%v), want %s", d, ok, disk)
	}
	if _, ok := env.face.ImageStemcell("img:1"); !ok {
		t.Error("after restart: image img:1 is gone")
	}
	env.c.wantError(http.StatusConflict, "DELETE", "/v1.44/volumes/vol-1", nil, "remove vol-1: volume is in use - ["+id+"]")
	env.c.want(http.StatusNoContent, "DELETE", "/v1.44/containers/c-1?force=1", nil, nil)
	env.c.want(http.StatusNoContent, "DELETE", "/v1.44/volumes/vol-1", nil, nil)
}

// bootRecorder is a fakeiaas.VMHooks that records, at each boot, whether
// the VM's root already has a directory at want.
type bootRecorder struct {
	mu    sync.Mutex
	want  string
	boots []string // "<vm cid> <bound|unbound>"
}

func (b *bootRecorder) Boot(bi fakeiaas.BootInfo) error {
	state := "unbound"
	if fi, err := os.Stat(filepath.Join(bi.Root, b.want)); err == nil && fi.IsDir() {
		state = "bound"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.boots = append(b.boots, bi.VMCID+" "+state)
	return nil
}

func (b *bootRecorder) Halt(string) {}

// TestVMBootsAtStartWithVolumesBound: a container's VM boots when the
// container starts (not at create), once its volumes are in the root, so
// an agent never writes under a mount point before the volume is there.
func TestVMBootsAtStartWithVolumesBound(t *testing.T) {
	hooks := &bootRecorder{want: "var/vcap/data"}
	env := newFaceEnvWith(t, fakeiaas.Config{Store: "memory", Hooks: hooks}, dockerapi.Config{})
	face := env.face
	env.importImage(t, "img:1")
	env.c.want(http.StatusCreated, "POST", "/v1.44/containers/create?name=c-1", map[string]any{
		"Image": "img:1", "HostConfig": map[string]any{"Binds": []string{"vol-eph-c-1:/var/vcap/data/"}}}, nil)
	vm, _ := face.ContainerVM("c-1")
	var insp container.InspectResponse
	env.c.want(http.StatusOK, "GET", "/v1.44/containers/c-1/json", nil, &insp)
	if insp.State.Status != container.StateCreated || insp.State.Running {
		t.Errorf("a created container: state %+v, want created", insp.State)
	}
	if st := env.state(t); len(hooks.boots) != 0 || st.VMs[0].Boots != 0 {
		t.Fatalf("booted at create: hooks %v, Boots %d", hooks.boots, st.VMs[0].Boots)
	}
	env.c.want(http.StatusNoContent, "POST", "/v1.44/containers/c-1/start", nil, nil)
	env.c.want(http.StatusNotModified, "POST", "/v1.44/containers/c-1/start", nil, nil)
	if want := []string{vm.String() + " bound"}; !slices.Equal(hooks.boots, want) {
		t.Errorf("boots %v, want %v", hooks.boots, want)
	}
	if st := env.state(t); st.VMs[0].Boots != 1 {
		t.Errorf("Boots %d after start, want 1", st.VMs[0].Boots)
	}
}

// TestFaultsAndHistory: fakeiaas's fault rules fire on the engine
// operations the face makes, answered with Docker's status codes and the
// face's state left whole; the history names each Docker call.
func TestFaultsAndHistory(t *testing.T) {
	env := newFaceEnv(t, "memory")
	ctx := context.Background()
	env.importImage(t, "img:1")
	add := func(line string) {
		t.Helper()
		r, err := fakeiaas.ParseRule(line)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := env.cloud.AddFault(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	add(`op=attach_disk times=1 effect=error type=CloudError message="disk bay jammed"`)
	code, out := env.c.do("POST", "/v1.44/containers/create?name=c-1", map[string]any{"Image": "img:1",
		"HostConfig": map[string]any{"Binds": []string{"vol-1:/warden-cpi-dev/vol-1"}}})
	var e struct{ Message string }
	if err := json.Unmarshal(out, &e); err != nil || code != http.StatusInternalServerError || !strings.Contains(e.Message, "disk bay jammed") {
		t.Fatalf("create with a failing attach: %d %s", code, out)
	}
	env.c.wantError(http.StatusNotFound, "GET", "/v1.44/containers/c-1/json", nil, "No such container: c-1")
	if st := env.state(t); len(st.VMs) != 0 || len(st.Disks) != 1 || !st.Disks[0].VMCID.IsZero() {
		t.Fatalf("after a failed create: VMs %+v disks %+v; want none and one detached volume", st.VMs, st.Disks)
	}
	// The same create now works; a rate limit on delete_vm is a 429 and
	// leaves the container and its bound volume in place.
	env.createContainer(t, "c-1", "img:1", "vol-1:/warden-cpi-dev/vol-1")
	vm, _ := env.face.ContainerVM("c-1")
	add(`op=delete_vm times=1 effect=rate_limit`)
	if code, out := env.c.do("DELETE", "/v1.44/containers/c-1?force=1", nil); code != http.StatusTooManyRequests {
		t.Fatalf("remove under a rate limit: %d %s", code, out)
	}
	if fi, err := os.Stat(filepath.Join(env.cloud.VMRoot(vm), "warden-cpi-dev/vol-1")); err != nil || !fi.IsDir() {
		t.Fatalf("the volume left its mount point after a failed remove: %v", err)
	}
	env.c.want(http.StatusNoContent, "DELETE", "/v1.44/containers/c-1?force=1", nil, nil)
	h, err := env.cloud.History(ctx, fakeiaas.HistoryFilter{RequestID: "docker:container_remove"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	var results []string
	for _, e := range h {
		results = append(results, string(e.Op)+" "+e.Result)
	}
	if want := []string{"delete_vm Bosh::Clouds::CloudError", "delete_vm ok"}; !slices.Equal(results, want) {
		t.Errorf("history of docker:container_remove: %v", results)
	}
}

func TestNetworksAndImages(t *testing.T) {
	env := newFaceEnv(t, "memory")
	c := env.c
	var n struct{ ID string }
	c.want(http.StatusCreated, "POST", "/v1.44/networks/create", map[string]any{"Name": "net-a", "Driver": "bridge",
		"IPAM": map[string]any{"Driver": "default", "Config": []map[string]string{{"Subnet": "10.244.0.0/24"}}}}, &n)
	if len(n.ID) != 64 {
		t.Errorf("network id %q", n.ID)
	}
	// The Docker CPI creates the network on every create_vm and relies on
	// "already exists" (vm/networks.go).
	c.wantError(http.StatusConflict, "POST", "/v1.44/networks/create", map[string]any{"Name": "net-a"}, "network with name net-a already exists")
	_, out := c.do("POST", "/v1.44/networks/create", map[string]any{"Name": "net-b",
		"IPAM": map[string]any{"Config": []map[string]string{{"Subnet": "10.244.0.0/24"}}}})
	if !strings.Contains(string(out), "conflicts with network "+n.ID+" (br-"+n.ID[:12]+"): networks have overlapping IPv4") {
		t.Errorf("an overlapping subnet: %s", out)
	}
	env.importImage(t, "img:1")
	var created container.CreateResponse
	c.want(http.StatusCreated, "POST", "/v1.44/containers/create?name=c-1", map[string]any{"Image": "img:1",
		"NetworkingConfig": map[string]any{"EndpointsConfig": map[string]any{"net-a": map[string]any{"IPAMConfig": map[string]string{"IPv4Address": "10.244.0.5"}}}}}, &created)
	// As Docker: a network is looked up at start, not at create.
	c.want(http.StatusCreated, "POST", "/v1.44/containers/create?name=c-2", map[string]any{"Image": "img:1",
		"NetworkingConfig": map[string]any{"EndpointsConfig": map[string]any{"net-z": map[string]any{}}}}, nil)
	c.wantError(http.StatusNotFound, "POST", "/v1.44/containers/c-2/start", nil, "network net-z not found")
	c.want(http.StatusNoContent, "DELETE", "/v1.44/containers/c-2?force=1", nil, nil)
	c.want(http.StatusOK, "POST", "/v1.44/networks/bridge/connect", map[string]any{"Container": "c-1"}, nil)
	var insp container.InspectResponse
	c.want(http.StatusOK, "GET", "/v1.44/containers/c-1/json", nil, &insp)
	if ep := insp.NetworkSettings.Networks["net-a"]; ep == nil || ep.IPAMConfig == nil || ep.IPAMConfig.IPv4Address.String() != "10.244.0.5" || insp.NetworkSettings.Networks["bridge"] == nil {
		t.Errorf("networks of c-1: %+v", insp.NetworkSettings.Networks)
	}
	// Images: inspect, and a remove refused while a container uses it.
	var img struct {
		ID       string `json:"Id"`
		RepoTags []string
	}
	c.want(http.StatusOK, "GET", "/v1.44/images/img:1/json", nil, &img)
	if sc, _ := env.face.ImageStemcell("img:1"); img.ID != sc.String() || !slices.Equal(img.RepoTags, []string{"img:1"}) {
		t.Errorf("image inspect: %+v", img)
	}
	c.wantError(http.StatusConflict, "DELETE", "/v1.44/images/img:1", nil,
		`conflict: unable to remove repository reference "img:1" (must force) - container `+created.ID+` is using its referenced image `+img.ID)
	c.want(http.StatusOK, "DELETE", "/v1.44/images/img:1?force=1", nil, nil)
	c.wantError(http.StatusNotFound, "GET", "/v1.44/images/img:1/json", nil, "No such image: img:1")
}

// TestExecStdinNeverClosed: a client that keeps stdin open is cut off at
// Config.ExecTimeout, and the exec is finished with tar's failure.
func TestExecStdinNeverClosed(t *testing.T) {
	env := newFaceEnvWith(t, fakeiaas.Config{Store: "memory"}, dockerapi.Config{ExecTimeout: 200 * time.Millisecond})
	env.importImage(t, "img:1")
	env.createContainer(t, "c-1", "img:1")
	var id struct {
		ID string `json:"Id"`
	}
	env.c.want(http.StatusCreated, "POST", "/v1.44/containers/c-1/exec", container.ExecCreateRequest{
		Cmd: []string{"tar", "-x", "-f", "-", "-C", "/"}, AttachStdin: true, AttachStderr: true}, &id)
	conn, err := net.Dial("unix", env.c.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	req, _ := http.NewRequest("POST", "http://docker/v1.44/exec/"+id.ID+"/start", strings.NewReader(`{}`))
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	if err := req.Write(conn); err != nil {
		t.Fatal(err)
	}
	// Half a tar header, then silence: the server must not wait forever.
	if _, err := conn.Write(make([]byte, 100)); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(conn); err != nil {
		t.Fatalf("the server did not end the stream: %v", err)
	}
	var insp container.ExecInspectResponse
	env.c.want(http.StatusOK, "GET", "/v1.44/exec/"+id.ID+"/json", nil, &insp)
	if insp.Running || insp.ExitCode == nil || *insp.ExitCode != 2 {
		t.Errorf("exec after the timeout: running %v exit %v, want finished with 2", insp.Running, insp.ExitCode)
	}
}

// Volume creates reach the cloud together, as on a Docker daemon: a pause
// rule on create_disk holds all of them at once (the face holds no lock
// across the engine's create_disk); two creates of one name make one
// volume.
func TestVolumeCreatesRunInParallel(t *testing.T) {
	env := newFaceEnv(t, "memory")
	ctx := context.Background()
	rule, err := fakeiaas.ParseRule(`op=create_disk effect=pause`)
	if err != nil {
		t.Fatal(err)
	}
	r, err := env.cloud.AddFault(ctx, rule)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	names := []string{"vol-a", "vol-b", "vol-c", "vol-d", "vol-e", "vol-a"} // vol-a twice
	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = env.c.do("POST", "/v1.44/volumes/create", map[string]any{"Name": names[i]})
		}()
	}
	held := 0
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		rules, err := env.cloud.Faults(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range rules {
			if x.Rule.ID == r.ID {
				held = x.Paused
			}
		}
		if held == n-1 {
			break
		}
	}
	if err := env.cloud.RemoveFault(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if held != n-1 {
		t.Errorf("%d create_disk calls held in the cloud at once, want %d (one per distinct volume)", held, n-1)
	}
	for i, c := range codes {
		if c != http.StatusCreated {
			t.Errorf("create %s: %d", names[i], c)
		}
	}
	if st := env.state(t); len(st.Disks) != n-1 {
		t.Errorf("the cloud holds %d disks, want %d", len(st.Disks), n-1)
	}
}
