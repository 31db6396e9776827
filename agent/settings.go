package agent

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path"
	"strings"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/internal/httpread"
)

// Settings is the agent's settings.json, as upstream writes it.
type Settings struct {
	// AgentID is the agent's identity on the mbus.
	AgentID string `json:"agent_id"`
	// VM names the VM: {"name": vm_cid}.
	VM VMSettings `json:"vm"`
	// Mbus is the NATS URL the agent listens on.
	Mbus string `json:"mbus"`
	// Networks is kept as given; the agent does not configure networks.
	Networks json.RawMessage `json:"networks,omitempty"`
	// Env is kept as given (bosh env: persistent_disk_fs, …).
	Env json.RawMessage `json:"env,omitempty"`
	// Blobstore is kept as given; the agent fetches no blobs.
	Blobstore json.RawMessage `json:"blobstore,omitempty"`
	// Disks says where the system, ephemeral and persistent disks are.
	Disks DisksSettings `json:"disks"`
}

// VMSettings is the "vm" member of Settings.
type VMSettings struct {
	// Name is the VM CID.
	Name string `json:"name"`
}

// DisksSettings is the "disks" member of Settings.
type DisksSettings struct {
	// System is the root disk's device, e.g. "/dev/sda".
	System string `json:"system,omitempty"`
	// Ephemeral is the ephemeral disk's hint (string or hash), if any.
	Ephemeral *cpiv2.DiskHint `json:"ephemeral,omitempty"`
	// Persistent maps persistent disk CIDs to their hints.
	Persistent map[string]cpiv2.DiskHint `json:"persistent,omitempty"`
}

// userData is the metadata service's user-data: either full settings (it
// has agent_id) or a pointer to the registry.
type userData struct {
	Registry struct {
		Endpoint string `json:"endpoint"`
	} `json:"registry"`
	Server struct {
		Name string `json:"name"`
	} `json:"server"`
}

// BasicAuth is an HTTP basic-auth credential.
type BasicAuth struct {
	// User and Password are sent in the Authorization header.
	User, Password string
}

// ErrNotFound is wrapped by a Fetcher's error for a 404 answer.
var ErrNotFound = errors.New("not found")

// Fetcher gets the body of a URL: the agent's only HTTP use (settings from
// the metadata service and the registry). The simulator serves settings
// through HandlerFetcher, without sockets.
type Fetcher interface {
	// Get returns the body of a 200 answer; a 404 is an error wrapping
	// ErrNotFound, any other status or failure an error. auth may be nil.
	Get(url string, auth *BasicAuth) ([]byte, error)
}

// HTTPFetcher fetches over HTTP with c (nil: a client with a 10 s time-out).
func HTTPFetcher(c *http.Client) Fetcher {
	if c == nil {
		c = &http.Client{Timeout: 10 * time.Second}
	}
	return httpFetcher{c: c}
}

type httpFetcher struct{ c *http.Client }

func (f httpFetcher) Get(u string, auth *BasicAuth) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("agent: GET %s: %w", u, err)
	}
	if auth != nil {
		req.SetBasicAuth(auth.User, auth.Password)
	}
	resp, err := f.c.Do(req)
	if err != nil {
		return nil, fmt.Errorf("agent: GET %s: %w", u, err)
	}
	body, err := httpread.Body(resp, "GET "+u, httpread.Limits{MaxBytes: 16 << 20})
	if err != nil {
		return nil, fmt.Errorf("agent: GET %s: %w", u, err)
	}
	return checkStatus(u, resp.StatusCode, body)
}

// HandlerFetcher serves every Get from h in-process: no sockets, no
// goroutines, so it is deterministic under the simulator.
func HandlerFetcher(h http.Handler) Fetcher { return handlerFetcher{h: h} }

type handlerFetcher struct{ h http.Handler }

func (f handlerFetcher) Get(u string, auth *BasicAuth) ([]byte, error) {
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("agent: GET %s: %w", u, err)
	}
	req.RequestURI = req.URL.RequestURI()
	req.RemoteAddr = "127.0.0.1:0"
	if auth != nil {
		req.SetBasicAuth(auth.User, auth.Password)
	}
	w := &recorder{header: http.Header{}}
	f.h.ServeHTTP(w, req)
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return checkStatus(u, w.code, w.body.Bytes())
}

// recorder is the ResponseWriter of an in-process request.
type recorder struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (w *recorder) Header() http.Header { return w.header }

func (w *recorder) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}

func (w *recorder) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.body.Write(b)
}

func checkStatus(u string, code int, body []byte) ([]byte, error) {
	switch {
	case code == http.StatusOK:
		return body, nil
	case code == http.StatusNotFound:
		return nil, fmt.Errorf("agent: GET %s: %w", u, ErrNotFound)
	default:
		return nil, fmt.Errorf("agent: GET %s: HTTP %d: %s", u, code, strings.TrimSpace(string(body[:min(len(body), 200)])))
	}
}

// Settings sources, as SettingsSource reports them.
const (
	SourceMetadata = "metadata"
	SourceRegistry = "registry"
	SourceCache    = "cache"
)

// metadataURL is the user-data URL of the VM. base is the metadata service
// endpoint; a bare server URL gets "/metadata" appended.
func metadataURL(base, vmCID string) string {
	base = strings.TrimRight(base, "/")
	if !strings.HasSuffix(base, "/metadata") {
		base += "/metadata"
	}
	return base + "/" + url.PathEscape(vmCID) + "/user-data"
}

// registryURL is the settings URL of an instance on a registry endpoint
// (as in cpi.json, e.g. "http://127.0.0.1:PORT/registry").
func registryURL(endpoint, instance string) string {
	return strings.TrimRight(endpoint, "/") + "/instances/" + url.PathEscape(instance) + "/settings"
}

// fetchSettings reads settings as the configured stemcell's agent would:
// from Config.SettingsFile when set (the Warden and Docker CPIs), else a
// v2 agent tries the metadata service and uses it when it holds agent_id,
// else it follows the registry pointer; a v1 agent asks the registry only.
func (a *Agent) fetchSettings() (Settings, string, error) {
	if a.cfg.SettingsFile != "" {
		s, err := a.readSettingsFile()
		if err != nil {
			return Settings{}, "", err
		}
		return s, SourceFile, nil
	}
	endpoint, instance := a.cfg.RegistryURL, a.cfg.VMCID
	var errs []error
	if a.cfg.StemcellAPIVersion >= 2 && a.cfg.MetadataURL != "" {
		body, err := a.cfg.Fetcher.Get(metadataURL(a.cfg.MetadataURL, a.cfg.VMCID), nil)
		if err == nil {
			s, full, perr := parseUserData(body)
			switch {
			case perr != nil:
				errs = append(errs, perr)
			case full != nil:
				return *full, SourceMetadata, nil
			default:
				if s.Registry.Endpoint != "" {
					endpoint = s.Registry.Endpoint
				}
				if s.Server.Name != "" {
					instance = s.Server.Name
				}
			}
		} else {
			errs = append(errs, err)
		}
	}
	if endpoint == "" {
		errs = append(errs, errors.New("agent: no registry endpoint to fall back to"))
		return Settings{}, "", errors.Join(errs...)
	}
	var auth *BasicAuth
	if a.cfg.RegistryUser != "" || a.cfg.RegistryPassword != "" {
		auth = &BasicAuth{User: a.cfg.RegistryUser, Password: a.cfg.RegistryPassword}
	}
	body, err := a.cfg.Fetcher.Get(registryURL(endpoint, instance), auth)
	if err != nil {
		return Settings{}, "", errors.Join(append(errs, err)...)
	}
	s, err := parseRegistry(body)
	if err != nil {
		return Settings{}, "", errors.Join(append(errs, err)...)
	}
	return s, SourceRegistry, nil
}

// parseUserData decodes user-data; full is non-nil when it holds agent_id.
func parseUserData(body []byte) (userData, *Settings, error) {
	var probe struct {
		AgentID string `json:"agent_id"`
	}
	if err := json.Unmarshal(body, &probe); err != nil {
		return userData{}, nil, fmt.Errorf("agent: user-data is not a JSON object: %w", err)
	}
	if probe.AgentID != "" {
		var s Settings
		if err := json.Unmarshal(body, &s); err != nil {
			return userData{}, nil, fmt.Errorf("agent: settings in user-data: %w", err)
		}
		return userData{}, &s, nil
	}
	var u userData
	if err := json.Unmarshal(body, &u); err != nil {
		return userData{}, nil, fmt.Errorf("agent: user-data: %w", err)
	}
	return u, nil, nil
}

// parseRegistry decodes the registry's {"settings": "<JSON>", "status": "ok"}.
func parseRegistry(body []byte) (Settings, error) {
	var r struct {
		Settings string `json:"settings"`
		Status   string `json:"status"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return Settings{}, fmt.Errorf("agent: registry answer: %w", err)
	}
	if r.Status != "ok" {
		return Settings{}, fmt.Errorf("agent: registry answered status %q", r.Status)
	}
	var s Settings
	if err := json.Unmarshal([]byte(r.Settings), &s); err != nil {
		return Settings{}, fmt.Errorf("agent: settings in registry: %w", err)
	}
	if s.AgentID == "" {
		return Settings{}, errors.New("agent: settings in registry have no agent_id")
	}
	return s, nil
}

// Paths inside the VM root (guest paths).
const (
	settingsPath    = "/var/vcap/bosh/settings.json"
	hintsPath       = "/var/vcap/bosh/persistent_disk_hints.json"
	mountsPath      = "/var/vcap/bosh/mounts.json"
	dynamicDisksDir = "/var/vcap/data/dynamic_disks"
	storeDir        = "/var/vcap/store"
	migrationDir    = "/var/vcap/store_migration_target"
)

// loadSettings fetches settings and caches them in settings.json, or falls
// back to the cache when the fetch fails.
func (a *Agent) loadSettings() (Settings, string, error) {
	s, src, err := a.fetchSettings()
	if err == nil {
		if werr := a.writeJSON(settingsPath, s); werr != nil {
			return Settings{}, "", werr
		}
		return s, src, nil
	}
	var cached Settings
	found, cerr := a.readJSON(settingsPath, &cached)
	if cerr != nil {
		return Settings{}, "", errors.Join(err, cerr)
	}
	if !found {
		return Settings{}, "", fmt.Errorf("agent: fetching settings for %s failed and there is no cached settings.json: %w", a.cfg.VMCID, err)
	}
	return cached, SourceCache, nil
}

// readJSON decodes the guest file p into v; found is false if it is absent.
func (a *Agent) readJSON(p string, v any) (found bool, err error) {
	b, err := a.root.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("agent: reading %s: %w", p, err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return true, fmt.Errorf("agent: decoding %s: %w", p, err)
	}
	return true, nil
}

// writeJSON writes v to the guest file p atomically: a fresh p.tmp renamed
// over p, never written through a link (vmroot.WriteFileAtomic).
func (a *Agent) writeJSON(p string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("agent: encoding %s: %w", p, err)
	}
	if err := a.root.MkdirAll(path.Dir(p), 0o755); err != nil {
		return fmt.Errorf("agent: writing %s: %w", p, err)
	}
	if err := a.root.WriteFileAtomic(p, b, 0o600); err != nil {
		return fmt.Errorf("agent: writing %s: %w", p, err)
	}
	return nil
}
