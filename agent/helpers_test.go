package agent_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
)

// vmRoot is a VM root laid out exactly as docs/seams.md says fakeiaas lays
// one out, for tests that need no cloud (hostile names, fuzzing, actions).
// The resolver tests use roots that fakeiaas itself laid out.
type vmRoot struct {
	dataDir string // <data dir>: holds disks/ and vms/
	vmCID   string
	root    string // <data dir>/vms/<vm cid>/root
}

func newVMRoot(t testing.TB, vmCID string) *vmRoot {
	t.Helper()
	data := t.TempDir()
	v := &vmRoot{dataDir: data, vmCID: vmCID, root: filepath.Join(data, "vms", vmCID, "root")}
	for _, d := range []string{"dev", "dev/disk/by-id", "sys/bus/scsi/devices", "var/vcap/bosh", "var/vcap/data", "var/vcap/store"} {
		mustMkdir(t, filepath.Join(v.root, d))
	}
	mustMkdir(t, filepath.Join(data, "disks"))
	return v
}

func mustMkdir(t testing.TB, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

// attach lays disk diskCID out as <prefix><letter>: the sparse backing file
// (created if needed, sizeMiB), its hard link under dev/, the by-id link
// and the SCSI sys entry on host 2, LUN = letter index.
func (v *vmRoot) attach(t testing.TB, diskCID string, letter byte, prefix string, sizeMiB int) string {
	t.Helper()
	img := filepath.Join(v.dataDir, "disks", diskCID+".img")
	if _, err := os.Stat(img); err != nil {
		f, err := os.Create(img)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(int64(sizeMiB) << 20); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	dev := prefix + string(letter)
	if err := os.Link(img, filepath.Join(v.root, "dev", dev)); err != nil {
		t.Fatal(err)
	}
	id := diskCID
	if len(id) > 20 {
		id = id[:20]
	}
	if err := os.Symlink("../../"+dev, filepath.Join(v.root, "dev/disk/by-id", "virtio-"+id)); err != nil {
		t.Fatal(err)
	}
	lun := int(letter - 'a')
	mustMkdir(t, filepath.Join(v.root, "sys/bus/scsi/devices", "2:0:"+strconv.Itoa(lun)+":0", "block", dev))
	return "/dev/" + dev
}

// detach removes what attach made (not the backing file).
func (v *vmRoot) detach(t testing.TB, diskCID string, letter byte, prefix string) {
	t.Helper()
	dev := prefix + string(letter)
	id := diskCID
	if len(id) > 20 {
		id = id[:20]
	}
	for _, p := range []string{filepath.Join(v.root, "dev", dev), filepath.Join(v.root, "dev/disk/by-id", "virtio-"+id)} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.RemoveAll(filepath.Join(v.root, "sys/bus/scsi/devices", "2:0:"+strconv.Itoa(int(letter-'a'))+":0")); err != nil {
		t.Fatal(err)
	}
}

// settingsServer serves the registry and the metadata service as
// docs/seams.md says fakeiaas does, and counts accesses.
type settingsServer struct {
	srv  *httptest.Server
	user string
	pass string

	mu       sync.Mutex
	registry map[string]string // vm cid → settings JSON
	userData map[string]string // vm cid → user-data JSON
	hits     map[string]int    // "registry" / "metadata" → count
	down     bool
	hold     chan struct{} // when set, requests wait for it to close
	entered  chan struct{} // told (without blocking) that a request waits
}

func newSettingsServer(t testing.TB) *settingsServer {
	s := &settingsServer{user: "reg-user", pass: "reg-pass", registry: map[string]string{}, userData: map[string]string{}, hits: map[string]int{}}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *settingsServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	hold, entered := s.hold, s.entered
	s.mu.Unlock()
	if hold != nil {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-hold
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		http.Error(w, "down", http.StatusServiceUnavailable)
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	switch {
	case len(parts) == 4 && parts[0] == "registry" && parts[1] == "instances" && parts[3] == "settings":
		s.hits["registry"]++
		if u, p, ok := r.BasicAuth(); !ok || u != s.user || p != s.pass {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		settings, ok := s.registry[parts[2]]
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"status":"not_found"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]string{"settings": settings, "status": "ok"})
	case len(parts) == 3 && parts[0] == "metadata" && parts[2] == "user-data":
		s.hits["metadata"]++
		ud, ok := s.userData[parts[1]]
		if !ok {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(ud))
	default:
		http.NotFound(w, r)
	}
}

func (s *settingsServer) setRegistry(vmCID string, settings agent.Settings) {
	b, _ := json.Marshal(settings)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.registry[vmCID] = string(b)
}

func (s *settingsServer) setUserData(vmCID string, v any) {
	b, _ := json.Marshal(v)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.userData[vmCID] = string(b)
}

// holdRequests makes every settings request wait until release is called;
// entered receives once a request waits.
func (s *settingsServer) holdRequests() (entered <-chan struct{}, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hold, s.entered = make(chan struct{}), make(chan struct{}, 1)
	hold := s.hold
	return s.entered, func() {
		s.mu.Lock()
		s.hold = nil
		s.mu.Unlock()
		close(hold)
	}
}

func (s *settingsServer) setDown(down bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.down = down
}

func (s *settingsServer) hitCount(kind string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hits[kind]
}

// registryPointer is the user-data of a VM whose settings are in the registry.
func (s *settingsServer) registryPointer(vmCID string) map[string]any {
	return map[string]any{"registry": map[string]string{"endpoint": s.srv.URL + "/registry"}, "server": map[string]string{"name": vmCID}}
}

func testSettings(agentID, vmCID, mbusURL string) agent.Settings {
	return agent.Settings{AgentID: agentID, VM: agent.VMSettings{Name: vmCID}, Mbus: mbusURL, Disks: agent.DisksSettings{System: "/dev/sda"}}
}

// env is one embedded NATS, one settings server and a director-side client.
type env struct {
	nats     *mbus.Embedded
	settings *settingsServer
	client   *mbus.Client
	r        rt.Runtime
}

func newEnv(t testing.TB) *env {
	t.Helper()
	srv, err := mbus.StartEmbedded(mbus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	tr, err := mbus.Connect(mbus.NATSConfig{URL: srv.URL(), Name: "director"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tr.Close() })
	r := rt.Real(7)
	c, err := mbus.NewClient(mbus.ClientConfig{
		Transport: tr, Runtime: r, DirectorUUID: "director-1",
		Timeout: 5 * time.Second, PingTimeout: 200 * time.Millisecond,
		TaskPollInterval: 5 * time.Millisecond, TaskTimeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return &env{nats: srv, settings: newSettingsServer(t), client: c, r: r}
}

// config is an agent config for v on this env, with settings in the
// registry (a v1 stemcell).
func (e *env) config(v *vmRoot, agentID string) agent.Config {
	e.settings.setRegistry(v.vmCID, testSettings(agentID, v.vmCID, e.nats.URL()))
	return agent.Config{
		Root: v.root, VMCID: v.vmCID,
		MetadataURL: e.settings.srv.URL + "/metadata", RegistryURL: e.settings.srv.URL + "/registry",
		RegistryUser: e.settings.user, RegistryPassword: e.settings.pass,
		StemcellAPIVersion: 1, DeviceResolver: agent.ResolverVirtio,
		DeviceTimeout: 2 * time.Second, DevicePollInterval: 5 * time.Millisecond,
		Runtime: e.r,
	}
}

func startAgent(t testing.TB, cfg agent.Config) *agent.Agent {
	t.Helper()
	a, err := agent.Start(cfg)
	if err != nil {
		t.Fatalf("agent.Start: %v", err)
	}
	t.Cleanup(a.Stop)
	return a
}
