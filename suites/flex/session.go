package flex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cpilab/cpilab/flexvolume"
)

// Backends a driver is checked against.
const (
	// BackendBOSH: the driver stores volumes as the Director's dynamic
	// disks; the suite checks the cloud (oracle) and injects Director
	// faults.
	BackendBOSH = "bosh"
	// BackendNone: the driver has a backend of its own (or none, as the
	// Kubernetes dummy samples); cloud and fault checks are not made.
	BackendNone = "none"
)

// Config configures a certification of one driver.
type Config struct {
	// Driver is the driver executable (required).
	Driver string
	// PluginName is the plugin directory's name, "vendor~driver"; the
	// executable is installed as <plugindir>/<PluginName>/<driver>.
	// Default: the name of Driver's directory when it has a "~", else
	// "cpilab~" + the executable's name.
	PluginName string
	// Backend is BackendBOSH (default) or BackendNone.
	Backend string
	// WorkDir holds each node's plugin directory (required).
	WorkDir string
	// CallTimeout bounds each call-out. Default 60 s.
	CallTimeout time.Duration
	// Tag makes the suite's volume names unique among runs sharing an
	// Env. Default "pv".
	Tag string
	// Log receives the calls made, one a line (default: discarded).
	Log io.Writer
	// LenientExit accepts a Failure answered with exit status 0, as
	// kubelet does (it fails the call either way). Default false: the
	// FlexVolume doc's rule, Failure exits non-zero.
	LenientExit bool
	// SharedEnv says other sessions use the Env at the same time: the
	// clean-up after each check detaches only this session's volumes, and
	// counts of the cloud's attachments count only them (a volume's disk
	// is recognised by the name the project's driver gives it,
	// flexvolume.DiskName). Default false: the session has the Env to
	// itself and the clean-up detaches every dynamic disk, whatever a
	// driver named it.
	SharedEnv bool
}

// Violation is one broken clause.
type Violation struct {
	Clause string `json:"clause"`
	// Did says what the driver did instead.
	Did string `json:"did"`
	// Call is the call-out that showed it, with its output.
	Call string `json:"call,omitempty"`
	// Method, Request (the argv after the driver), Response (the combined
	// output) and ExitCode detail that call (ExitCode -1: none, or killed).
	Method   string `json:"method,omitempty"`
	Request  string `json:"request,omitempty"`
	Response string `json:"response,omitempty"`
	ExitCode int    `json:"exit_code"`
}

func (v *Violation) Error() string {
	s := fmt.Sprintf("%s: %s\n  the driver did instead: %s", v.Clause, ClauseTitles[v.Clause], v.Did)
	if v.Call != "" {
		s += "\n  call: " + v.Call
	}
	return s
}

// NotChecked is a check that could not be made, and why.
type NotChecked struct{ Reason string }

func (s *NotChecked) Error() string { return "not checked: " + s.Reason }

func violation(clause string, c *flexvolume.Call, format string, a ...any) *Violation {
	v := &Violation{Clause: clause, Did: fmt.Sprintf(format, a...), ExitCode: -1}
	if c != nil {
		v.Call = c.String()
		if len(c.Args) > 0 {
			v.Method = c.Args[0]
		}
		v.Request = strings.Join(quoteArgs(c.Args), " ")
		v.Response, v.ExitCode = string(c.Output), c.ExitCode
	}
	return v
}

// Session is one driver installed on the Env's nodes and on the
// controller, with a caller for each as kubelet and the attach/detach
// controller.
type Session struct {
	cfg     Config
	env     *Env
	gate    *Gate  // this session's way to the Director
	driver  string // vendor/driver
	exeName string
	ctrl    *flexvolume.Caller
	kubelet map[string]*flexvolume.Caller // by node name
	dirs    map[string]string             // node name (and "controller") → plugin dir
	caps    flexvolume.Capabilities
	initRaw map[string]json.RawMessage

	mu      sync.Mutex
	seq     int
	vols    []string                             // volume names handed out
	history map[string]map[flexvolume.Status]int // call-out → statuses seen
}

// NewSession installs cfg.Driver for env's nodes and the controller.
func NewSession(cfg Config, env *Env) (*Session, error) {
	if cfg.Driver == "" || cfg.WorkDir == "" {
		return nil, errors.New("flex: Config.Driver and Config.WorkDir are required")
	}
	if cfg.Backend == "" {
		cfg.Backend = BackendBOSH
	}
	if cfg.Backend != BackendBOSH && cfg.Backend != BackendNone {
		return nil, fmt.Errorf("flex: Config.Backend must be %q or %q, not %q", BackendBOSH, BackendNone, cfg.Backend)
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 60 * time.Second
	}
	if cfg.Tag == "" {
		cfg.Tag = "pv"
	}
	if cfg.Log == nil {
		cfg.Log = io.Discard
	}
	abs, err := filepath.Abs(cfg.Driver)
	if err != nil {
		return nil, err
	}
	cfg.Driver = abs
	exe := filepath.Base(abs)
	if cfg.PluginName == "" {
		cfg.PluginName = "cpilab~" + exe
		if d := filepath.Base(filepath.Dir(abs)); strings.Contains(d, "~") {
			cfg.PluginName = d
		}
	}
	if i := strings.LastIndex(cfg.PluginName, "~"); i < 0 || i == len(cfg.PluginName)-1 || strings.HasPrefix(cfg.PluginName, ".") {
		return nil, fmt.Errorf("flex: plugin name %q is not vendor~driver", cfg.PluginName)
	}
	s := &Session{cfg: cfg, env: env, driver: strings.ReplaceAll(cfg.PluginName, "~", "/"),
		exeName: cfg.PluginName[strings.LastIndex(cfg.PluginName, "~")+1:], kubelet: map[string]*flexvolume.Caller{},
		dirs: map[string]string{}, history: map[string]map[flexvolume.Status]int{}}
	if s.gate, err = env.NewGate(); err != nil {
		return nil, err
	}
	hosts := []string{"controller"}
	for _, n := range env.Nodes {
		hosts = append(hosts, n.Name)
	}
	for _, h := range hosts {
		pluginDir := filepath.Join(cfg.WorkDir, h, "volume-plugins")
		exe, err := s.install(pluginDir, h)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.dirs[h] = pluginDir
		c := flexvolume.NewCaller(flexvolume.CallerConfig{Executable: exe, Timeout: cfg.CallTimeout})
		if h == "controller" {
			s.ctrl = c
		} else {
			s.kubelet[h] = c
		}
	}
	return s, nil
}

// Close closes the session's gate to the Director.
func (s *Session) Close() { s.gate.Close() }

// SetDirectorDown closes (true) or opens the session's gate: the Director
// is down for this session's driver, for no other.
func (s *Session) SetDirectorDown(down bool) { s.gate.SetDown(down) }

// install copies the driver into pluginDir as the recommended DaemonSet
// does: into a dot directory, then one rename; it writes the driver's
// config beside it.
func (s *Session) install(pluginDir, host string) (string, error) {
	tmp := filepath.Join(pluginDir, ".tmp_"+s.cfg.PluginName)
	final := filepath.Join(pluginDir, s.cfg.PluginName)
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return "", err
	}
	b, err := os.ReadFile(s.cfg.Driver)
	if err != nil {
		return "", fmt.Errorf("flex: reading the driver: %w", err)
	}
	if err := os.WriteFile(filepath.Join(tmp, s.exeName), b, 0o755); err != nil {
		return "", err
	}
	if err := s.writeDriverConfig(filepath.Join(tmp, flexvolume.ConfigFileName), host, s.gate.URL); err != nil {
		return "", err
	}
	_ = os.RemoveAll(final)
	if err := os.Rename(tmp, final); err != nil {
		return "", fmt.Errorf("flex: install: %w", err)
	}
	return filepath.Join(final, s.exeName), nil
}

// writeDriverConfig writes the config the project's driver (and the
// catalog's drivers) read: the Director through the session's gate, the
// nodes, the vmroot mounter.
func (s *Session) writeDriverConfig(path, host, url string) error {
	node := host
	if host == "controller" {
		node = s.env.Nodes[0].Name
	}
	cfg := flexvolume.Config{
		Director: flexvolume.DirectorConfig{URL: url, CACert: string(s.env.CACertPEM), Client: s.env.Client, ClientSecret: s.env.Secret},
		Nodes:    map[string]flexvolume.Node{}, Node: node, DiskPool: s.env.DiskPool, DiskSizeMiB: 16,
		Mounter: flexvolume.MounterVMRoot, LogFile: filepath.Join(filepath.Dir(filepath.Dir(path)), host+"-"+s.exeName+".log"),
		TaskTimeoutSeconds: int(s.cfg.CallTimeout / time.Second), AttachWaitSeconds: 10, Resize: s.env.Resize,
	}
	for _, n := range s.env.Nodes {
		cfg.Nodes[n.Name] = flexvolume.Node{InstanceID: n.InstanceID, Root: n.Root}
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// node returns the i-th node.
func (s *Session) node(i int) EnvNode { return s.env.Nodes[i] }

// volume returns a fresh volume name.
func (s *Session) volume() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	v := fmt.Sprintf("%s-%d", s.cfg.Tag, s.seq)
	s.vols = append(s.vols, v)
	return v
}

// options are the JSON options kubelet passes for vol (with extra keys).
func (s *Session) options(vol string, extra map[string]string) string {
	o := map[string]string{
		flexvolume.OptionFSType: "ext4", flexvolume.OptionReadWrite: "rw", flexvolume.OptionPVOrVolName: vol,
		"diskPool": s.env.DiskPool, "diskSizeMiB": "16", "cpilab.io/unknown-option": "tolerated",
	}
	for k, v := range extra {
		o[k] = v
	}
	b, _ := json.Marshal(o)
	return string(b)
}

// podOptions are mount's options: pod info and a secret besides.
func (s *Session) podOptions(vol string) string {
	return s.options(vol, map[string]string{flexvolume.OptionPodName: "pod-" + vol, flexvolume.OptionPodNS: "default",
		flexvolume.OptionPodUID: "uid-" + vol, flexvolume.OptionFSGroup: "1000", flexvolume.OptionSecretPre + "token": "s3cret"})
}

// deviceMountPath and podDir are kubelet's paths for vol on a node.
func (s *Session) deviceMountPath(vol string) string {
	return flexvolume.DeviceMountPath("/var/lib/kubelet", s.driver, vol)
}

func (s *Session) podDir(vol string) string {
	return "/var/lib/kubelet/pods/uid-" + vol + "/volumes/" + s.cfg.PluginName + "/" + vol
}

// call runs a call-out through c and turns protocol errors into
// violations; the answer's status is the caller's to judge.
func (s *Session) call(ctx context.Context, c *flexvolume.Caller, args ...string) (flexvolume.Call, error) {
	call := c.RunUncached(ctx, args...)
	fmt.Fprintf(s.cfg.Log, "%s\n", call.String())
	if call.Err == nil && len(args) > 0 {
		s.mu.Lock()
		h := s.history[args[0]]
		if h == nil {
			h = map[flexvolume.Status]int{}
			s.history[args[0]] = h
		}
		h[call.Result.Status]++
		mixed := h[flexvolume.StatusNotSupported] > 0 && len(h) > 1
		s.mu.Unlock()
		if mixed {
			return call, violation(ClauseNotSupportedStable, &call, "%s answered Not supported on some calls and not on others: %v", args[0], h)
		}
	}
	switch {
	case call.Err == nil, s.cfg.LenientExit && errors.Is(call.Err, flexvolume.ErrFailureZeroExit):
		return call, nil
	case errors.Is(call.Err, flexvolume.ErrNotOneJSONObject):
		return call, violation(ClauseOutputOneJSON, &call, "%v", call.Err)
	case errors.Is(call.Err, flexvolume.ErrUnknownStatus):
		return call, violation(ClauseOutputStatus, &call, "%v", call.Err)
	case errors.Is(call.Err, flexvolume.ErrSuccessNonZeroExit), errors.Is(call.Err, flexvolume.ErrFailureZeroExit),
		errors.Is(call.Err, flexvolume.ErrFailureNoMessage):
		return call, violation(ClauseOutputExit, &call, "%v", call.Err)
	case errors.Is(call.Err, flexvolume.ErrMissingField):
		return call, violation(ClauseOutputFields, &call, "%v", call.Err)
	case errors.Is(call.Err, flexvolume.ErrTimeout):
		return call, violation(ClauseTimeout, &call, "%v", call.Err)
	}
	return call, violation(ClauseSetup, &call, "%v", call.Err)
}

// must runs a call-out that must succeed (clause is the one a Failure
// breaks).
func (s *Session) must(ctx context.Context, clause string, c *flexvolume.Caller, args ...string) (flexvolume.Call, error) {
	call, err := s.call(ctx, c, args...)
	if err != nil {
		return call, err
	}
	if call.Result.Status != flexvolume.StatusSuccess {
		return call, violation(clause, &call, "%s answered %s: %s", args[0], call.Result.Status, call.Result.Message)
	}
	return call, nil
}

// statuses lists the statuses each call-out answered, for reports.
func (s *Session) statuses() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for cmd, h := range s.history {
		out = append(out, fmt.Sprintf("%s %v", cmd, h))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}

// quoteArgs shows argv as a shell would read it.
func quoteArgs(args []string) []string {
	out := make([]string, len(args))
	for i, a := range args {
		if a == "" || strings.ContainsAny(a, " \t\"'{}$\\") {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		} else {
			out[i] = a
		}
	}
	return out
}
