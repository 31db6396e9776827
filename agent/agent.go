package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/vmroot"
)

// Mode selects how the agent behaves, for reproducing races.
type Mode string

// Agent modes.
const (
	// ModeNormal is a current agent (the default).
	ModeNormal Mode = "normal"
	// ModeOld is an agent that predates dynamic disks: it answers
	// add_dynamic_disk, remove_dynamic_disk and dynamic_disk_usage with
	// "unknown message <m>" (race (h), docs/upstream.md).
	ModeOld Mode = "old"
)

// Config configures Start. Durations are on Runtime's clock.
type Config struct {
	// Root is the VM root directory on the host (required). The agent reads
	// and writes only inside it.
	Root string
	// Files is the file system Root is on: nil is the machine's
	// (vmroot.OS); a simulated world gives its memory one (vmroot.Mem).
	Files vmroot.Host
	// VMCID is the VM's CID (required): the key for the metadata service and,
	// unless user-data names another instance, the registry.
	VMCID string
	// AgentID is optional: when empty it comes from the settings; when set it
	// must equal the settings' agent_id.
	AgentID string
	// MetadataURL is the metadata service endpoint, e.g.
	// "http://127.0.0.1:PORT/metadata"; the agent GETs
	// <MetadataURL>/<vm cid>/user-data ("/metadata" is appended to a bare
	// server URL). Used by a v2 agent only.
	MetadataURL string
	// RegistryURL is the registry endpoint as in cpi.json, e.g.
	// "http://127.0.0.1:PORT/registry"; the agent GETs
	// <RegistryURL>/instances/<vm cid>/settings with basic auth. A registry
	// endpoint in user-data takes precedence.
	RegistryURL string
	// RegistryUser and RegistryPassword are the registry's basic-auth
	// credentials (none if both are empty).
	RegistryUser, RegistryPassword string
	// StemcellAPIVersion is the stemcell's api_version: ≥ 2 reads the
	// metadata service first, else the registry only (default 1).
	StemcellAPIVersion int
	// DeviceResolver is identity (the default, and what any unknown value
	// means, as in bosh-agent), virtio, scsi, iscsi or mapped.
	DeviceResolver string
	// DeviceTimeout, when set, bounds every polling resolver (mapped, scsi
	// by id and by lun, iscsi) instead of upstream's 30 s and 50 s;
	// virtio's by-id look-up keeps its 500 ms unless it is shorter.
	DeviceTimeout time.Duration
	// DevicePollInterval is the pause between device look-ups (default
	// 100 ms). The scsi look-up by volume_id makes 30 tries 500 ms apart,
	// or DeviceTimeout/30 apart when DeviceTimeout is set.
	DevicePollInterval time.Duration
	// DiskIDTransformPattern and DiskIDTransformReplacement rewrite a disk
	// CID before virtio's by-id look-up (agent.json
	// Platform.Linux.DiskIDTransform*; see ResolverConfig).
	DiskIDTransformPattern, DiskIDTransformReplacement string
	// LunDeviceSymlinkPath, when set, puts a symlink-LUN resolver before
	// DeviceResolver (agent.json Platform.Linux.LunDeviceSymlinkPath; see
	// ResolverConfig).
	LunDeviceSymlinkPath string
	// SettingsFile, when set, is the guest path of a settings file the CPI
	// writes into the VM, e.g. WardenSettingsFile for the Warden and Docker
	// CPIs (bosh-agent's File settings source). The agent then reads that
	// file only, never the metadata service or the registry, at Start and
	// whenever it reloads its settings. Until the file exists Start fails
	// with an error wrapping ErrNoSettingsFile, and Fleet.Start keeps trying
	// (the CPI writes it after the VM has booted). Default "": the metadata
	// service and the registry.
	SettingsFile string
	// BindMountPersistentDisk says persistent disks are directories of the
	// VM (a Warden or Docker CPI binds a volume at /warden-cpi-dev/<disk>),
	// not block devices: mount_disk binds the resolved directory at the
	// mount point instead of mounting a device, as bosh-agent does with its
	// Platform.Linux options BindMountPersistentDisk and
	// UsePreformattedPersistentDisk (the warden and docker stemcells' agent
	// configuration). Default false: block devices.
	BindMountPersistentDisk bool
	// Knobs restore bosh-agent's behaviour where cpilab deliberately
	// differs (all false: cpilab's behaviour).
	Knobs Knobs
	// Fetcher gets settings over HTTP (default HTTPFetcher(nil)).
	Fetcher Fetcher
	// Transport is the mbus to listen on. When nil the agent connects to the
	// settings' mbus URL over NATS and closes that connection on Stop.
	Transport mbus.Transport
	// Runtime supplies time, randomness and concurrency (default rt.Real(0)).
	Runtime rt.Runtime
	// Mode is ModeNormal (default) or ModeOld.
	Mode Mode
}

// Knobs are cpilab's deliberate differences from bosh-agent (@e94765a):
// each field set restores upstream's behaviour. docs/upstream.md lists them.
type Knobs struct {
	// AbsoluteLinks makes a dynamic disk link point at the device's
	// absolute guest path ("/dev/sdc"), as upstream's SetupDynamicDisk
	// does. By default the target is relative to the link
	// ("../../../../dev/sdc"), so that the link leads to the same device
	// inside the root for a process on the host, and cannot be moved to
	// lead elsewhere.
	AbsoluteLinks bool
	// NonAtomicLinks replaces an existing dynamic disk link by removing
	// whatever is there (recursively) and then linking, as bosh-utils'
	// Symlink does. By default the new link is renamed over the old one,
	// so the name is never absent.
	NonAtomicLinks bool
	// LaxNames accepts disk CIDs and hint values as bosh-agent does: a CID
	// is joined into the dynamic_disks path as given (so "a/b" or "../x"
	// name other places, still inside the VM root), hint values may hold
	// glob metacharacters and a hint path need not be clean or absolute. By
	// default such names are refused (ErrUnsafe). Either way no file
	// operation leaves the VM root (package vmroot refuses it).
	LaxNames bool
	// SerialTasks runs long-running actions one at a time, in the order
	// they were asked for, as bosh-agent's async task service does (one
	// worker goroutine: a task waits while an earlier one, say a device
	// look-up polling for 30 s, runs). By default each task runs at once,
	// so one stuck look-up does not hold up the disks of other checks.
	SerialTasks bool
}

// Agent is a running reference agent on one VM root.
type Agent struct {
	cfg      Config
	r        rt.Runtime
	root     *vmroot.Root
	resolver Resolver
	agentID  string

	transport    mbus.Transport
	ownTransport bool
	sub          mbus.Subscription
	stopped      *rt.Event
	running      *rt.Group
	actions      map[string]action

	// diskMu serialises actions that read-modify-write files of the root
	// (hints, mounts, dynamic disk links). Lock order: diskMu before mu.
	diskMu rt.Mutex

	mu       rt.Mutex
	settings Settings         // guarded by mu
	source   string           // guarded by mu
	tasks    map[string]*task // guarded by mu
	lastTask *rt.Event        // guarded by mu; the last task's end (Knobs.SerialTasks)
	stopOnce bool             // guarded by mu
}

// Start reads settings, subscribes to agent.<agent id> and answers
// requests until Stop. Starting again on the same root after Stop keeps
// everything the agent keeps on disk (settings cache, hints, mounts, links).
func Start(cfg Config) (*Agent, error) {
	if cfg.Root == "" {
		return nil, errors.New("agent: Config.Root is required")
	}
	if err := CheckName("VM CID", cfg.VMCID); err != nil {
		return nil, err
	}
	files := vmroot.HostOrOS(cfg.Files)
	if cfg.Files == nil {
		fi, err := os.Stat(cfg.Root)
		if err != nil {
			return nil, fmt.Errorf("agent: VM root: %w", err)
		}
		if !fi.IsDir() {
			return nil, fmt.Errorf("agent: VM root %s is not a directory", cfg.Root)
		}
	}
	if cfg.Runtime == nil {
		cfg.Runtime = rt.Real(0)
	}
	if cfg.Fetcher == nil {
		cfg.Fetcher = HTTPFetcher(nil)
	}
	if cfg.StemcellAPIVersion <= 0 {
		cfg.StemcellAPIVersion = 1
	}
	if cfg.Mode == "" {
		cfg.Mode = ModeNormal
	}
	if cfg.Mode != ModeNormal && cfg.Mode != ModeOld {
		return nil, fmt.Errorf("agent: unknown mode %q (want normal or old)", cfg.Mode)
	}
	if cfg.SettingsFile != "" {
		if err := CheckGuestPath("Config.SettingsFile", cfg.SettingsFile); err != nil {
			return nil, err
		}
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("agent: VM root: %w", err)
	}
	cfg.Root = root
	fsRoot, err := files.Open(root)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return nil, fmt.Errorf("agent: VM root %s is not a directory", cfg.Root)
		}
		return nil, fmt.Errorf("agent: VM root: %w", err)
	}
	a, err := start(cfg, fsRoot)
	if err != nil {
		_ = fsRoot.Close()
		return nil, err
	}
	return a, nil
}

func start(cfg Config, fsRoot *vmroot.Root) (*Agent, error) {
	r := cfg.Runtime
	a := &Agent{
		cfg:     cfg,
		r:       r,
		root:    fsRoot,
		stopped: rt.NewEvent(r),
		running: rt.NewGroup(r),
		diskMu:  r.NewMutex(),
		mu:      r.NewMutex(),
		tasks:   map[string]*task{},
	}
	var err error
	a.resolver, err = NewResolver(resolverConfig(cfg, fsRoot, a.stopped))
	if err != nil {
		return nil, err
	}
	for _, d := range []string{"/var/vcap/bosh", storeDir} {
		if d == storeDir && a.isBindLink(d) {
			continue // a directory disk bound there before a restart
		}
		if err := a.root.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("agent: preparing %s: %w", d, err)
		}
	}
	if err := a.prepareDynamicDisksDir(); err != nil {
		return nil, err
	}
	// No other goroutine knows a yet: the guarded fields are set directly.
	a.settings, a.source, err = a.loadSettings()
	if err != nil {
		return nil, err
	}
	a.agentID = a.settings.AgentID
	if cfg.AgentID != "" {
		if a.agentID != "" && a.agentID != cfg.AgentID {
			return nil, fmt.Errorf("agent: configured agent ID %q differs from the settings' agent_id %q", cfg.AgentID, a.agentID)
		}
		a.agentID = cfg.AgentID
	}
	if err := mbus.CheckToken("agent ID", a.agentID); err != nil {
		return nil, fmt.Errorf("agent: settings for %s: %w", cfg.VMCID, err)
	}
	a.actions = a.actionTable()

	a.transport = cfg.Transport
	if a.transport == nil {
		if a.settings.Mbus == "" {
			return nil, fmt.Errorf("agent: no Transport configured and the settings for %s have no mbus URL", cfg.VMCID)
		}
		n, err := mbus.Connect(mbus.NATSConfig{URL: a.settings.Mbus, Name: "agent." + a.agentID})
		if err != nil {
			return nil, err
		}
		a.transport, a.ownTransport = n, true
	}
	a.sub, err = a.transport.Subscribe(mbus.AgentSubject(a.agentID), a.handle)
	if err != nil {
		if a.ownTransport {
			_ = a.transport.Close()
		}
		return nil, err
	}
	return a, nil
}

// Stop stops answering, waits for running tasks to finish (a resolver that
// is polling gives up), and closes the mbus connection the agent opened.
// State on disk stays, so Start on the same root resumes. Stop is
// idempotent.
func (a *Agent) Stop() {
	a.mu.Lock()
	done := a.stopOnce
	a.stopOnce = true
	a.mu.Unlock()
	if done {
		return
	}
	_ = a.sub.Unsubscribe()
	a.stopped.Set()
	a.running.Wait()
	if a.ownTransport {
		_ = a.transport.Close()
	}
	_ = a.root.Close()
}

// Abandon releases what the agent holds on the host, its VM root's open
// directory, without going through the runtime: for a simulation that has
// ended, whose runtime schedules nothing any more, so Stop cannot run. The
// agent must not be used afterwards.
func (a *Agent) Abandon() { _ = a.root.Close() }

// resolverConfig maps the agent's config onto its resolver's.
func resolverConfig(cfg Config, fsRoot *vmroot.Root, stopped *rt.Event) ResolverConfig {
	rc := ResolverConfig{
		Type: cfg.DeviceResolver, Root: cfg.Root, FS: fsRoot, Runtime: cfg.Runtime,
		PollInterval:           cfg.DevicePollInterval,
		LaxNames:               cfg.Knobs.LaxNames,
		DiskIDTransformPattern: cfg.DiskIDTransformPattern, DiskIDTransformReplacement: cfg.DiskIDTransformReplacement,
		LunDeviceSymlinkPath: cfg.LunDeviceSymlinkPath,
		Stopped:              stopped,
	}
	if t := cfg.DeviceTimeout; t > 0 {
		rc.Timeout, rc.SCSIIDTimeout, rc.SCSILunTimeout, rc.ISCSITimeout, rc.SymlinkLunTimeout = t, t, t, t, t
		rc.VirtioIDWait = min(t, DefaultVirtioIDTimeout)
		rc.SCSIVolumeIDWait = max(t/DefaultSCSIVolumeIDRetries, time.Millisecond)
	}
	return rc
}

// AgentID is the agent's ID on the mbus.
func (a *Agent) AgentID() string { return a.agentID }

// DeviceResolver is the device path resolver type the agent was started
// with (Config.DeviceResolver; "" is identity).
func (a *Agent) DeviceResolver() string { return a.cfg.DeviceResolver }

// Settings returns the agent's current settings (read at Start, refreshed
// by mount_disk).
func (a *Agent) Settings() Settings {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.settings
}

// SettingsSource says where the current settings came from: SourceMetadata,
// SourceRegistry, SourceFile or SourceCache.
func (a *Agent) SettingsSource() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.source
}

// reloadSettingsLocked fetches the settings again, as upstream's mount_disk
// and add_dynamic_disk do (LoadSettings): in the v1 flow the CPI adds a
// persistent disk to the registry at attach time. A failed fetch falls back
// to the cached settings.json; only when both fail is it an error, and the
// agent keeps what it has. diskMu is held.
func (a *Agent) reloadSettingsLocked() error {
	s, src, err := a.loadSettings()
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.settings, a.source = s, src
	a.mu.Unlock()
	return nil
}

// handle answers one request. Requests without reply_to are dropped, as
// upstream drops them.
func (a *Agent) handle(_ string, data []byte) {
	if a.stopped.IsSet() {
		return
	}
	var req mbus.Request
	if err := json.Unmarshal(data, &req); err != nil || req.ReplyTo == "" {
		return
	}
	reply := a.dispatch(req.Method, req.Arguments)
	b, err := json.Marshal(reply)
	if err != nil {
		b, _ = json.Marshal(mbus.ExceptionReply("encoding reply: " + err.Error()))
	}
	_ = a.transport.Publish(req.ReplyTo, b)
}

// Dispatch runs one action as a request would and returns its reply:
// synchronous actions' results, a running task's state for long actions.
func (a *Agent) Dispatch(method string, args []json.RawMessage) mbus.Reply {
	return a.dispatch(method, args)
}

func (a *Agent) dispatch(method string, args []json.RawMessage) mbus.Reply {
	act, ok := a.actions[method]
	if !ok {
		return mbus.ExceptionReply(mbus.UnknownMessage(method))
	}
	if !act.async {
		v, err := act.run(args)
		if err != nil {
			// Upstream's action dispatcher wraps every synchronous
			// action's error (a failed task's too, through get_task).
			err = fmt.Errorf("Action Failed %s: %w", method, err)
		}
		return result(v, err)
	}
	t, ok := a.startTask(method, func() (any, error) { return act.run(args) })
	if !ok {
		return mbus.ExceptionReply(fmt.Sprintf("Action Failed %s: %v", method, ErrStopped))
	}
	return result(mbus.TaskState{AgentTaskID: t, State: mbus.TaskRunning}, nil)
}

func result(v any, err error) mbus.Reply {
	if err != nil {
		return mbus.ExceptionReply(err.Error())
	}
	r, err := mbus.ValueReply(v)
	if err != nil {
		return mbus.ExceptionReply(err.Error())
	}
	return r
}
