package dockerapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/types/common"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/internal/strictjson"
	"github.com/cpilab/cpilab/rt"
)

// API versions the face accepts in a /vX.Y/ path prefix; a request
// without a prefix is served as MaxAPIVersion, as the Docker daemon does.
const (
	MinAPIVersion = "1.24"
	MaxAPIVersion = "1.52"
)

// Defaults of Config.
const (
	// DefaultVolumeSizeMiB is the size of the fakeiaas disk behind a Docker
	// volume: Docker volumes have no size, and the disk's backing file is
	// sparse, so it costs nothing until written.
	DefaultVolumeSizeMiB = 1024
	// DefaultMaxExecInput bounds the stdin one exec reads (the tar the
	// Docker CPI streams to write agent settings), in bytes.
	DefaultMaxExecInput = 16 << 20
	// DefaultExecTimeout bounds one hijacked exec stream (reading stdin,
	// running, writing output), as the Docker CPI bounds its own side.
	DefaultExecTimeout = 5 * time.Minute
	// DefaultMaxImageBytes bounds an image import body, in bytes.
	DefaultMaxImageBytes = 256 << 20
	// MaxNetworks bounds how many networks the face holds (they live in
	// its memory only).
	MaxNetworks = 1024
	// MaxExecs bounds how many finished exec instances the face remembers
	// (for exec inspect); the oldest finished ones are forgotten first.
	MaxExecs = 1024
)

// Defect deliberately breaks the face, so that a test can show that an
// interop check catches a cloud that lies. The zero value is DefectNone.
type Defect string

const (
	// DefectNone is the honest face.
	DefectNone Defect = ""
	// DefectUnboundOnRecreate records the volume binds of a container
	// created under the name of one removed earlier (the Docker CPI's
	// attach by recreate), but neither attaches their disks nor lays out
	// their directories.
	DefectUnboundOnRecreate Defect = "unbound_on_recreate"
)

// Config configures a Face.
type Config struct {
	// Cloud is the fakeiaas engine the face serves (required). Containers
	// are its VMs, images its stemcells, volumes its disks; its history,
	// faults and oracle see every call the face makes.
	Cloud *fakeiaas.Cloud
	// Runtime provides the face's locks (default rt.Real(0)).
	Runtime rt.Runtime
	// VolumeSizeMiB is the size of the disk created for each volume
	// (default DefaultVolumeSizeMiB).
	VolumeSizeMiB int
	// MaxExecInput bounds an exec's stdin, in bytes (default
	// DefaultMaxExecInput).
	MaxExecInput int64
	// MaxImageBytes bounds an image import body, in bytes (default
	// DefaultMaxImageBytes).
	MaxImageBytes int64
	// ExecTimeout bounds a hijacked exec stream, wall clock (default
	// DefaultExecTimeout): a client that never closes stdin is cut off.
	ExecTimeout time.Duration
	// Defect, when set, breaks the face on purpose (tests only).
	Defect Defect
	// MinAPIVersion and MaxAPIVersion are the API versions the face
	// serves, as a Docker daemon of that version does (default
	// MinAPIVersion and MaxAPIVersion): a /vX.Y/ prefix outside the range
	// is refused with the daemon's message, a request without one is
	// served as the maximum, and answers whose shape changed between API
	// versions take the shape of the version asked (docs/docker.md).
	// Docker 20.10, for example, serves 1.12 to 1.41.
	MinAPIVersion, MaxAPIVersion string
}

// Face is the Docker Engine API face of a fakeiaas Cloud. Serve its
// Handler on a unix socket (Serve) and point a Docker client at it.
type Face struct {
	cfg   Config
	cloud *fakeiaas.Cloud

	// mu guards everything below. Engine calls are made with it held
	// (the engine never calls back into the face), except a volume
	// create's create_disk (createVolume: creating marks the name).
	mu         rt.Mutex
	containers map[string]*ctr      // by name
	volumes    map[string]*vol      // by name
	images     map[string]*imageRec // by reference ("repo:tag")
	networks   map[string]*netw     // by name
	execs      map[string]*execRec  // by ID
	execOrder  []string             // exec IDs, oldest first
	removed    map[string]bool      // names of removed containers (for DefectUnboundOnRecreate)
	creating   map[string]*rt.Event // volumes being created without the lock, by name: set when done
	seq        uint64               // for exec and network IDs
}

// ctr is a container: a fakeiaas VM plus the Docker-side configuration.
type ctr struct {
	Name       string
	VM         cpiv2.VMCID
	Created    string
	Running    bool // started and not stopped or killed since
	Started    bool // started at least once
	Config     *container.Config
	HostConfig *container.HostConfig
	Endpoints  map[string]*network.EndpointSettings
	Bound      []binding // volumes bound into the VM root
}

// binding is a named volume bound at Target (absolute, clean) in a VM root.
type binding struct {
	Volume string
	Target string
}

// vol is a named volume: a fakeiaas disk plus a directory.
type vol struct {
	Name    string
	Disk    cpiv2.DiskCID
	Created string
	Labels  map[string]string
	// BoundTo is the container the volume is bound into ("" when free).
	BoundTo string
}

// image is an imported image: a fakeiaas stemcell.
type imageRec struct {
	Ref      string
	Stemcell cpiv2.StemcellCID
	Created  string
}

// netw is a network; networks are the face's own (not in fakeiaas).
type netw struct {
	ID     string
	Name   string
	Driver string
	Subnet string
	// Gateway is the gateway the IPAM config shows: given with the
	// subnet, or the pool's first address when the face chose the pool
	// (Docker shows none for a subnet given without one).
	Gateway string
}

// Tags the face keeps in the cloud_properties of the engine's objects, so
// that the oracle shows which Docker object each one is, and the face can
// rebuild its tables after a restart.
const (
	containerKey = "docker_container"
	volumeKey    = "docker_volume"
	imageKey     = "docker_image"
)

type containerProps struct {
	Name       string                               `json:"name"`
	Config     *container.Config                    `json:"config"`
	HostConfig *container.HostConfig                `json:"host_config"`
	Endpoints  map[string]*network.EndpointSettings `json:"endpoints,omitempty"`
	Bound      []binding                            `json:"bound,omitempty"`
}

// New returns a face over cfg.Cloud, its tables rebuilt from the cloud's
// state (so a restarted cloud keeps its containers, volumes and images).
func New(cfg Config) (*Face, error) {
	if cfg.Cloud == nil {
		return nil, errors.New("dockerapi: Config.Cloud is nil")
	}
	if cfg.Runtime == nil {
		cfg.Runtime = rt.Real(0)
	}
	if cfg.VolumeSizeMiB <= 0 {
		cfg.VolumeSizeMiB = DefaultVolumeSizeMiB
	}
	if cfg.MaxExecInput <= 0 {
		cfg.MaxExecInput = DefaultMaxExecInput
	}
	if cfg.MaxImageBytes <= 0 {
		cfg.MaxImageBytes = DefaultMaxImageBytes
	}
	if cfg.ExecTimeout <= 0 {
		cfg.ExecTimeout = DefaultExecTimeout
	}
	if cfg.MinAPIVersion == "" {
		cfg.MinAPIVersion = MinAPIVersion
	}
	if cfg.MaxAPIVersion == "" {
		cfg.MaxAPIVersion = MaxAPIVersion
	}
	for _, v := range []string{cfg.MinAPIVersion, cfg.MaxAPIVersion} {
		if !apiVersion.MatchString(v) {
			return nil, fmt.Errorf("dockerapi: API version %q: want MAJOR.MINOR (such as 1.41)", v)
		}
	}
	if versionLess(cfg.MaxAPIVersion, cfg.MinAPIVersion) {
		return nil, fmt.Errorf("dockerapi: MaxAPIVersion %s is below MinAPIVersion %s", cfg.MaxAPIVersion, cfg.MinAPIVersion)
	}
	f := &Face{
		cfg: cfg, cloud: cfg.Cloud, mu: cfg.Runtime.NewMutex(),
		containers: map[string]*ctr{}, volumes: map[string]*vol{}, images: map[string]*imageRec{},
		networks: map[string]*netw{}, execs: map[string]*execRec{}, removed: map[string]bool{},
		creating: map[string]*rt.Event{},
	}
	f.networks["bridge"] = &netw{ID: netID("bridge"), Name: "bridge", Driver: "bridge"}
	if err := f.rebuild(context.Background()); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *Face) rebuild(ctx context.Context) error {
	st, err := f.cloud.State(ctx)
	if err != nil {
		return fmt.Errorf("dockerapi: reading the cloud's state: %w", err)
	}
	for _, s := range st.Stemcells {
		var p map[string]struct {
			Ref string `json:"ref"`
		}
		if json.Unmarshal(s.CloudProperties, &p) == nil && p[imageKey].Ref != "" {
			f.images[p[imageKey].Ref] = &imageRec{Ref: p[imageKey].Ref, Stemcell: s.CID, Created: s.Created.UTC().Format(timeLayout)}
		}
	}
	for _, d := range st.Disks {
		var p map[string]struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		}
		if json.Unmarshal(d.CloudProperties, &p) == nil && p[volumeKey].Name != "" {
			f.volumes[p[volumeKey].Name] = &vol{Name: p[volumeKey].Name, Disk: d.CID, Labels: p[volumeKey].Labels, Created: d.Created.UTC().Format(timeLayout)}
		}
	}
	for _, v := range st.VMs {
		var p map[string]containerProps
		if json.Unmarshal(v.CloudProperties, &p) != nil {
			continue
		}
		cp, ok := p[containerKey]
		if !ok {
			continue
		}
		if cp.Name == "" { // created without a name: Docker's name is its ID
			cp.Name = v.CID.String()
		}
		c := &ctr{Name: cp.Name, VM: v.CID, Created: v.Created.UTC().Format(timeLayout), Running: v.Boots > 0, Started: v.Boots > 0,
			Config: cp.Config, HostConfig: cp.HostConfig, Endpoints: cp.Endpoints, Bound: cp.Bound}
		for _, b := range c.Bound {
			if vl := f.volumes[b.Volume]; vl != nil {
				vl.BoundTo = c.Name
			}
		}
		for name := range c.Endpoints {
			if f.networks[name] == nil {
				f.networks[name] = &netw{ID: netID(name), Name: name, Driver: "bridge"}
			}
		}
		f.containers[c.Name] = c
	}
	// The live state of the running containers' endpoints (addresses) is
	// the face's memory only: give it back, in name order.
	for _, name := range sortedKeys(f.containers) {
		if c := f.containers[name]; c.Running {
			if eps, err := f.connectLocked(c); err == nil {
				c.Endpoints = eps
			}
		}
	}
	return nil
}

const timeLayout = "2006-01-02T15:04:05.000000000Z"

// ContainerVM returns the fakeiaas VM behind the container called name
// (a Docker CPI's VM CID), for oracle checks.
func (f *Face) ContainerVM(name string) (cpiv2.VMCID, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.lookupContainerLocked(name)
	if c == nil {
		return cpiv2.VMCID{}, false
	}
	return c.VM, true
}

// VolumeDisk returns the fakeiaas disk behind the volume called name (a
// Docker CPI's disk CID), for oracle checks.
func (f *Face) VolumeDisk(name string) (cpiv2.DiskCID, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.volumes[name]
	if v == nil {
		return cpiv2.DiskCID{}, false
	}
	return v.Disk, true
}

// ImageStemcell returns the fakeiaas stemcell behind the image reference
// ref (a Docker CPI's stemcell CID), for oracle checks.
func (f *Face) ImageStemcell(ref string) (cpiv2.StemcellCID, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	im := f.lookupImageLocked(ref)
	if im == nil {
		return cpiv2.StemcellCID{}, false
	}
	return im.Stemcell, true
}

// volumeDir is where the files of the volume with disk d live while it is
// bound to no container: <data dir>/docker/volumes/<disk cid>. While bound,
// the directory is moved to its bind target inside the VM root.
func (f *Face) volumeDir(d cpiv2.DiskCID) string {
	return filepath.Join(f.cloud.DataDir(), "docker", "volumes", d.String())
}

// ---- HTTP plumbing ----

// apiError is an error with the HTTP status Docker answers it with.
type apiError struct {
	Status int
	Msg    string
}

func (e *apiError) Error() string { return e.Msg }

func errorf(status int, format string, args ...any) *apiError {
	return &apiError{Status: status, Msg: fmt.Sprintf(format, args...)}
}

// engineErr turns a fakeiaas error into Docker's status codes.
func engineErr(what string, err error) *apiError {
	status := http.StatusInternalServerError
	var fe *fakeiaas.Error
	if errors.As(err, &fe) {
		switch fe.Code {
		case fakeiaas.CodeNotFound:
			status = http.StatusNotFound
		case fakeiaas.CodeConflict, fakeiaas.CodeExists:
			status = http.StatusConflict
		case fakeiaas.CodeInvalid, fakeiaas.CodeTooLarge:
			status = http.StatusBadRequest
		case fakeiaas.CodeRateLimited:
			status = http.StatusTooManyRequests
		}
	}
	return errorf(status, "%s: %v", what, err)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, err error) {
	var ae *apiError
	if !errors.As(err, &ae) {
		ae = &apiError{Status: http.StatusInternalServerError, Msg: err.Error()}
	}
	writeJSON(w, ae.Status, common.ErrorResponse{Message: ae.Msg})
}

var (
	versionPrefix = regexp.MustCompile(`^/v([0-9]+)\.([0-9]+)(/.*)$`)
	apiVersion    = regexp.MustCompile(`^[0-9]+\.[0-9]+$`)
)

// apiVersionKey is the request context key of the API version asked.
type apiVersionKey struct{}

// requestVersion is the API version a request asked for (its /vX.Y/
// prefix, else the face's maximum).
func requestVersion(r *http.Request) string {
	v, _ := r.Context().Value(apiVersionKey{}).(string)
	return v
}

func versionLess(a, b string) bool {
	am, an, _ := strings.Cut(a, ".")
	bm, bn, _ := strings.Cut(b, ".")
	ai, _ := strconv.Atoi(am)
	bi, _ := strconv.Atoi(bm)
	if ai != bi {
		return ai < bi
	}
	aj, _ := strconv.Atoi(an)
	bj, _ := strconv.Atoi(bn)
	return aj < bj
}

// Handler serves the Docker Engine API subset the BOSH Docker CPI uses
// (docs/docker.md lists it), under /vX.Y/ prefixes or none.
func (f *Face) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, h func(http.ResponseWriter, *http.Request) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := h(w, r); err != nil {
				writeErr(w, err)
			}
		})
	}
	route("GET /_ping", f.ping)
	route("HEAD /_ping", f.ping)
	route("GET /version", f.version)
	route("POST /images/create", f.imageCreate)
	route("GET /images/{name...}", f.imageInspect)
	route("DELETE /images/{name...}", f.imageRemove)
	route("POST /containers/create", f.containerCreate)
	route("GET /containers/json", f.containerList)
	route("GET /images/json", f.imageList)
	route("GET /containers/{name}/json", f.containerInspect)
	route("POST /containers/{name}/start", f.containerStart)
	route("POST /containers/{name}/kill", f.containerKill)
	route("POST /containers/{name}/stop", f.containerStop)
	route("DELETE /containers/{name}", f.containerRemove)
	route("POST /containers/{name}/exec", f.execCreate)
	route("POST /exec/{id}/start", f.execStart)
	route("GET /exec/{id}/json", f.execInspect)
	route("GET /volumes", f.volumeList)
	route("POST /volumes/create", f.volumeCreate)
	route("GET /volumes/{name}", f.volumeInspect)
	route("DELETE /volumes/{name}", f.volumeRemove)
	route("POST /networks/create", f.networkCreate)
	route("GET /networks/{name}", f.networkInspect)
	route("POST /networks/{name}/connect", f.networkConnect)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		maxV, minV := f.cfg.MaxAPIVersion, f.cfg.MinAPIVersion
		version := maxV
		if m := versionPrefix.FindStringSubmatch(r.URL.Path); m != nil {
			version = m[1] + "." + m[2]
			r.URL.Path = m[3]
			r.URL.RawPath = ""
		}
		w.Header().Set("Api-Version", maxV)
		w.Header().Set("Server", "cpilab-fakeiaas-docker/"+maxV)
		if versionLess(maxV, version) {
			writeErr(w, errorf(http.StatusBadRequest, "client version %s is too new. Maximum supported API version is %s", version, maxV))
			return
		}
		if versionLess(version, minV) {
			writeErr(w, errorf(http.StatusBadRequest, "client version %s is too old. Minimum supported API version is %s, please upgrade your client to a newer version", version, minV))
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), apiVersionKey{}, version))
		if _, pattern := mux.Handler(r); pattern == "" {
			writeErr(w, errorf(http.StatusNotFound, "page not found: cpilab's Docker face does not serve %s %s (docs/docker.md lists what it serves)", r.Method, r.URL.Path))
			return
		}
		mux.ServeHTTP(w, r)
	})
}

func (f *Face) ping(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache, no-store, must-revalidate")
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write([]byte("OK"))
	}
	return nil
}

func (f *Face) nextIDLocked(kind string) string {
	f.seq++
	return fmt.Sprintf("%s%016x", kind, f.seq)
}

// decodeBody reads a JSON request body as Docker does: a body needs
// Content-Type application/json (moby httputils.CheckForJSON), and an
// empty one is refused with Docker's words.
func decodeBody(r *http.Request, max int64, v any) error {
	ct := r.Header.Get("Content-Type")
	if !(ct == "" && r.ContentLength == 0) {
		if mt, _, _ := strings.Cut(ct, ";"); strings.TrimSpace(mt) != "application/json" {
			return errorf(http.StatusBadRequest, "Content-Type specified (%s) must be 'application/json'", ct)
		}
	}
	return decodeJSON(r, max, v)
}

// decodeJSON reads a JSON request body whatever its Content-Type (exec
// start: Docker does not check it there), refusing duplicate keys as every
// decoder of untrusted input does (strictjson).
func decodeJSON(r *http.Request, max int64, v any) error {
	b, err := io.ReadAll(http.MaxBytesReader(nil, r.Body, max))
	if err == nil && len(bytes.TrimSpace(b)) == 0 {
		return errorf(http.StatusBadRequest, "got EOF while reading request body")
	}
	if err == nil {
		err = strictjson.Unmarshal(b, v)
		var je *strictjson.Error
		if errors.As(err, &je) && je.Cause != nil {
			err = je.Cause // encoding/json's own words for syntax and type errors
		}
	}
	if err != nil {
		return errorf(http.StatusBadRequest, "%s %s: invalid JSON body: %v", r.Method, r.URL.Path, err)
	}
	return nil
}

func boolParam(r *http.Request, name string) bool {
	v := r.URL.Query().Get(name)
	b, err := strconv.ParseBool(v)
	return err == nil && b
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func reqCtx(r *http.Request, op string) context.Context {
	return fakeiaas.WithRequestID(r.Context(), "docker:"+op)
}

// View is the face's tables at one moment: each Docker object with the
// fakeiaas object behind it, for an oracle that speaks the Docker CPI's
// CIDs (container names, volume names, image references).
type View struct {
	// Containers maps container names to their fakeiaas VMs.
	Containers map[string]cpiv2.VMCID
	// Volumes maps volume names to their disks and binds.
	Volumes map[string]VolumeView
	// Images maps image references ("repo:tag") to their stemcells.
	Images map[string]cpiv2.StemcellCID
}

// VolumeView is one volume in a View.
type VolumeView struct {
	// Disk is the fakeiaas disk behind the volume.
	Disk cpiv2.DiskCID
	// BoundTo is the container the volume is bound into ("" when free),
	// Target where (an absolute path in the container).
	BoundTo, Target string
}

// View returns a copy of the face's tables.
func (f *Face) View() View {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := View{Containers: map[string]cpiv2.VMCID{}, Volumes: map[string]VolumeView{}, Images: map[string]cpiv2.StemcellCID{}}
	for n, c := range f.containers {
		v.Containers[n] = c.VM
	}
	for n, vl := range f.volumes {
		vv := VolumeView{Disk: vl.Disk, BoundTo: vl.BoundTo}
		if c := f.containers[vl.BoundTo]; c != nil {
			for _, b := range c.Bound {
				if b.Volume == n {
					vv.Target = b.Target
				}
			}
		}
		v.Volumes[n] = vv
	}
	for ref, im := range f.images {
		v.Images[ref] = im.Stemcell
	}
	return v
}
