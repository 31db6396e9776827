package simulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/refcpi"
	directorfixtures "github.com/cpilab/cpilab/fixtures/director"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/simulator/simrt"
	"github.com/cpilab/cpilab/vmroot"
)

// WorldConfig configures NewWorld. Durations are virtual (the Sim's clock).
type WorldConfig struct {
	// Sim is the deterministic runtime every piece runs on (required).
	Sim *simrt.Sim
	// DataDir holds fakeiaas's VM roots and disk files (required; a fresh
	// temporary directory per run).
	DataDir string
	// Files is the file system the VM roots and disk files are in: nil is a
	// fresh memory one (vmroot.Mem, umask 022), so a run makes no system
	// call for them; vmroot.OS puts them in DataDir on disk. Either gives
	// the same run (vmroot's TestBackendsAgree).
	Files vmroot.Host
	// Profile is the director profile: ProfileReference (default),
	// ProfileUpstream, or "upstream:X" for the one knob behind race X
	// (a–i) (docs/upstream.md).
	Profile string
	// Instances is the number of VMs deployed (default 3).
	Instances int
	// VMType is the instance group's vm_type: "default" or "restarting"
	// (the VM restarts inside every attach_disk). Default "default".
	VMType string
	// Devices is how VMs present attached disks to their agents: the
	// stemcell's resolver, the CPI's hint style, the device prefix
	// (default FixtureDevices).
	Devices Devices
	// AgentMode is the mode of every agent (default agent.ModeNormal).
	AgentMode agent.Mode
	// BootDelay is how long an agent takes to come up after its VM boots
	// (default 2 s).
	BootDelay time.Duration
	// CPILatency bounds the latency of every CPI call, drawn uniformly from
	// [1 ms, CPILatency] on the "world/latency" stream (default 50 ms).
	CPILatency time.Duration
	// LockLease is the director's lock lease (default: the director's,
	// 240 s); the director renews a held lock every LockLease/2 and at
	// each step of its job.
	LockLease time.Duration
	// SlowCPI is the probability that a CPI call takes from LockLease/2 to
	// 3·LockLease/2 instead of its CPILatency draw (default 0: none), so
	// that a job holds its locks over several leases and one call may
	// outlast a lease: the director's timer renewal must keep them.
	SlowCPI float64
	// DiskWorkers is the number of dynamic-disk workers (default: the
	// director's, 2). A profile with ZeroDynamicDiskWorkers (upstream's
	// default) still starts none unless OverrideZeroWorkers.
	DiskWorkers int
	// OverrideZeroWorkers turns ZeroDynamicDiskWorkers off when DiskWorkers
	// is positive, so that the other upstream behaviours can be run past
	// it (`cpilab simulate --disk-workers N`).
	OverrideZeroWorkers bool
	// Faults injects faults once the deployment is set up (VM faults, which
	// are what a VM is rather than events, from the first VM on); nil: none.
	Faults *faults.Injector
	// Gates holds CPI and agent calls for scripted scenarios; nil: none.
	Gates *Gates

	// tamper, for the checkers' control tests only, makes the director lie
	// in its records.
	tamper tamper
}

// tamper holds the control tests' hooks: each may rewrite the director's
// records behind its back, so that a test can show a checker deciding from
// the oracle and the VM roots, not from what the director believes.
type tamper struct {
	// beforeDeleteVM runs inside the director's delete_vm call, before the
	// CPI-seam check.
	beforeDeleteVM func(w *World, vm string)
	// afterOp runs when an operation's task has ended, before the checks
	// that follow it.
	afterOp func(w *World, o Op)
	// api wraps each director generation's HTTP API handler: a Director
	// that answers its users otherwise than its store holds.
	api func(http.Handler) http.Handler
	// beforeCPI runs at the start of every CPI call the director makes.
	beforeCPI func(w *World, method string)
	// attachVM picks the VM the director's attach_disk of disk names.
	attachVM func(w *World, vm, disk string) string
	// perStepLockRenewal runs the director without its timer renewal of
	// lock leases (director.Config.PerStepLockRenewal): a job's lease
	// lapses during a step longer than the lease.
	perStepLockRenewal bool
}

// The world's timing, on the virtual clock.
const (
	agentRequestTimeout = 10 * time.Second
	taskPollInterval    = 500 * time.Millisecond
	directorUser        = "sim"
)

// World is one simulated installation on one Sim: a reference Director, the
// reference CPI in process (through cpiv2.NewLoopback) over fakeiaas with a
// memory store, an agent per VM on an in-memory mbus, and fault injection at
// every seam. Safety checks that need the moment of a call (CPI seam checks)
// run inside the world and are collected in Violations.
//
// A World lives inside one simrt run: NewWorld and every method must be
// called from the Sim's logical goroutines.
type World struct {
	cfg   WorldConfig
	s     *simrt.Sim
	knobs director.Knobs

	// Cloud is the fake IaaS; its State is the oracle.
	Cloud *fakeiaas.Cloud
	// Store is the director's store, which every director generation
	// shares (what a restart recovers from). No checker reads it.
	Store director.Store
	// Instances are the deployment's instance IDs, by index (set up once).
	Instances []string
	// Deployment is the deployment's name.
	Deployment string

	mb      *mbus.Memory
	client  *mbus.Client
	cpi     cpiv2.CPI
	hooks   *vmHooks
	never   *rt.Event  // never set: what a crashed director's calls wait on
	latency *rand.Rand // "world/latency": every CPI call's latency

	// mu guards the fields below; it is a leaf lock never held across a
	// scheduling point, so taking it is not one.
	mu         sync.Mutex
	dir        *director.Director // nil while crashed
	api        http.Handler       // dir's HTTP API; nil while crashed
	apiTasks   *director.API      // dir's API read in process (userview.go); nil while crashed or tampered
	gen        int                // the latest director generation
	liveGen    int                // the generation running (0: crashed)
	faultsOn   bool               // every seam but the VM seam
	vmFaultsOn bool               // the VM seam (from the first VM on)
	excused    map[string]bool    // agent IDs whose agent or messages had a fault
	crashes    int                // director crashes so far
	lostDisks  map[string]bool    // disk CIDs made by a create_disk whose response was lost
	// goneVMs are the VM CIDs a delete_vm removed from the cloud without
	// the Director learning it (its response was lost, or the Director
	// crashed before it returned): the Director still holds them as its
	// instances' VMs, and a later call on one fails with VMNotFound.
	goneVMs     map[string]bool
	vmAgents    map[string]string      // VM CID → the agent ID create_vm was given
	oldAgents   map[string]bool        // agent IDs drawn to run an old agent
	restartVMs  map[string]bool        // agent IDs whose VM restarts on attach
	quirks      map[string]string      // agent ID → what about it explains failures (an old agent, a VM restarting on attach)
	silentUntil map[string]time.Time   // agent ID → until when it answers nothing
	fired       []firedFault           // every fault fired, in order, with when and where
	vmCalls     map[string]vmCall      // VM CID → the disk call in flight on it (vmcalls.go)
	outageUntil time.Time              // the cloud's API is down until then (faults.CPIOutage)
	outage      faults.Fault           // the outage that set outageUntil
	violations  []*Violation           // the seam checks' violations
	lockHolders map[lockKey]lockHolder // who holds each lock, as GET /locks shows it (lapses.go)
	takeovers   []*takeover            // locks taken from a holder whose lease lapsed
	step        int                    // workload steps done, for violations
}

// ParseProfile returns the director knobs of a profile name: "reference",
// "upstream", or "upstream:X" with X one race letter (docs/upstream.md) (a–j),
// which turns on the knob behind that race, with upstream's handling of CPI
// errors (TrustCPIErrors: no call is made again to settle an in-doubt
// outcome), which every upstream race runs with.
func ParseProfile(name string) (director.Knobs, error) {
	if race, ok := strings.CutPrefix(name, ProfileUpstream+":"); ok {
		r, err := RaceByLetter(race)
		if err != nil {
			return director.Knobs{}, fmt.Errorf("profile %q: %w", name, err)
		}
		k := director.Knobs{TrustCPIErrors: true}
		r.Knob(&k)
		return k, nil
	}
	return director.Profile(name)
}

// NewWorld builds the world and deploys cfg.Instances VMs. Faults start
// only after the deployment is up.
func NewWorld(cfg WorldConfig) (*World, error) {
	if cfg.Sim == nil || cfg.DataDir == "" {
		return nil, errors.New("simulator: WorldConfig needs Sim and DataDir")
	}
	if cfg.Profile == "" {
		cfg.Profile = ProfileReference
	}
	knobs, err := ParseProfile(cfg.Profile)
	if err != nil {
		return nil, err
	}
	if cfg.DiskWorkers > 0 && cfg.OverrideZeroWorkers {
		knobs.ZeroDynamicDiskWorkers = false
	}
	if cfg.Instances <= 0 {
		cfg.Instances = 3
	}
	if cfg.VMType == "" {
		cfg.VMType = "default"
	}
	if cfg.Devices == (Devices{}) {
		cfg.Devices = FixtureDevices
	}
	if cfg.AgentMode == "" {
		cfg.AgentMode = agent.ModeNormal
	}
	if cfg.BootDelay <= 0 {
		cfg.BootDelay = 2 * time.Second
	}
	if cfg.CPILatency <= 0 {
		cfg.CPILatency = 50 * time.Millisecond
	}
	s := cfg.Sim
	w := &World{cfg: cfg, s: s, knobs: knobs, never: rt.NewEvent(s), vmFaultsOn: cfg.Faults != nil,
		latency: s.Rand("world/latency"), excused: map[string]bool{}, lostDisks: map[string]bool{}, goneVMs: map[string]bool{}, vmAgents: map[string]string{},
		oldAgents: map[string]bool{}, restartVMs: map[string]bool{}, quirks: map[string]string{}, silentUntil: map[string]time.Time{}}
	w.mb = mbus.NewMemory(s)
	w.mb.SetFault(w.mbusFault)
	w.hooks = &vmHooks{w: w, agents: map[string]*agent.Agent{}, gen: map[string]int{}, info: map[string]fakeiaas.BootInfo{}}
	if cfg.Files == nil {
		cfg.Files = vmroot.NewMem(0o022)
		w.cfg.Files = cfg.Files
	}
	w.Cloud, err = fakeiaas.New(fakeiaas.Config{DataDir: filepath.Join(cfg.DataDir, "iaas"), Store: "memory", Runtime: s, Hooks: w.hooks,
		Files: cfg.Files})
	if err != nil {
		return nil, fmt.Errorf("simulator: fakeiaas: %w", err)
	}
	w.hooks.fetch = agent.HandlerFetcher(w.Cloud.Handler())
	ref := refcpi.New(refcpi.Config{Registry: w.Cloud, RegistryEndpoint: registryURL, MBus: "memory://", Runtime: s}, w.Cloud)
	w.cpi = cpiv2.NewLoopback(ref, cpiv2.LoopbackConfig{Profile: cpiv2.ProfileDirectorCurrent, MaxAPIVersion: ref.MaxAPIVersion(),
		DirectorUUID: "sim-director"})
	w.client, err = mbus.NewClient(mbus.ClientConfig{Transport: w.mb, Runtime: s, DirectorUUID: "sim-director",
		Timeout: agentRequestTimeout, TaskPollInterval: 100 * time.Millisecond, TaskTimeout: time.Minute})
	if err != nil {
		return nil, err
	}
	w.Store = director.MemoryStore()
	if err := w.startDirector(); err != nil {
		return nil, err
	}
	if err := w.deploy(); err != nil {
		return nil, fmt.Errorf("simulator: setting up the deployment: %w", err)
	}
	w.mu.Lock()
	w.faultsOn = cfg.Faults != nil
	w.mu.Unlock()
	return w, nil
}

// The agents fetch settings through the cloud's handler in process; these
// URLs only carry the paths.
const (
	metadataURL = "http://fakeiaas.invalid/metadata"
	registryURL = "http://fakeiaas.invalid/registry"
)

// startDirector starts a director generation on the world's store.
func (w *World) startDirector() error {
	w.mu.Lock()
	w.gen++
	gen := w.gen
	w.liveGen = gen
	w.mu.Unlock()
	d, err := director.New(director.Config{
		Runtime: w.s, Store: director.GuardedStore(w.Store, func() { w.checkAlive(gen) }), CPI: &faultCPI{w: w, gen: gen},
		Agents: &genAgents{w: w, gen: gen}, Inventory: inventory{w.Cloud}, UUID: fmt.Sprintf("director-%d", gen), Knobs: w.knobs,
		Name:         DirectorName,
		AgentTimeout: 30 * time.Second, AgentPingTimeout: 5 * time.Second, VMLockTimeout: 60 * time.Second,
		LockLease: w.cfg.LockLease, DynamicDiskWorkers: w.cfg.DiskWorkers,
		PerStepLockRenewal: w.cfg.tamper.perStepLockRenewal,
		LockObserver:       func(e director.LockEvent) { w.observeLock(gen, e) },
	})
	if err != nil {
		return fmt.Errorf("simulator: starting director generation %d: %w", gen, err)
	}
	api, h, err := newAPIHandler(w, d)
	if err != nil {
		return fmt.Errorf("simulator: the API of director generation %d: %w", gen, err)
	}
	w.mu.Lock()
	w.dir, w.api, w.apiTasks = d, h, api
	w.mu.Unlock()
	return nil
}

// Director returns the running director, or nil while it is crashed.
func (w *World) Director() *director.Director {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.dir
}

// checkAlive returns if director generation gen is the running one; a call
// from a crashed generation waits forever (a dead process does nothing more).
func (w *World) checkAlive(gen int) {
	w.mu.Lock()
	ok := w.liveGen == gen
	w.mu.Unlock()
	if !ok {
		w.never.Wait(0)
	}
}

// Crash kills the running director (its goroutines never run another step
// that reaches the store, the CPI or the agents) and restarts a new one from
// its store after down. It is what a director-crash fault does.
func (w *World) Crash(down time.Duration) {
	w.mu.Lock()
	if w.dir == nil {
		w.mu.Unlock()
		return
	}
	w.dir, w.api, w.apiTasks = nil, nil, nil
	w.crashes++
	w.liveGen = 0 // the old generation is dead from here on
	w.mu.Unlock()
	simrt.Annotate(w.s, "director crashed")
	w.s.Sleep(down)
	// A supervisor (monit) starts the director again until it comes up: a
	// start whose reconciliation hits a CPI fault fails and is retried.
	for attempt := 1; ; attempt++ {
		err := w.startDirector()
		if err == nil {
			break
		}
		simrt.Annotate(w.s, fmt.Sprintf("director start %d failed", attempt))
		if attempt == maxDirectorStarts {
			w.addViolation(&Violation{Invariant: InvDirectorRestarts, Phase: AfterStep,
				Err: fmt.Errorf("%d starts failed, the last: %w", attempt, err)})
			return
		}
		w.s.Sleep(directorRestartDelay)
	}
	simrt.Annotate(w.s, "director restarted")
}

// How the supervisor restarts a crashed director.
const (
	maxDirectorStarts    = 100
	directorRestartDelay = 10 * time.Second
)

// Crashes is the number of director crashes so far.
func (w *World) Crashes() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.crashes
}

func (w *World) addViolation(v *Violation) {
	w.mu.Lock()
	v.Step = w.step
	w.violations = append(w.violations, v)
	w.mu.Unlock()
	simrt.Annotate(w.s, "violation: "+v.Invariant)
}

// Violations returns the seam checks' violations so far, in order.
func (w *World) Violations() []*Violation {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.violations)
}

// Heal stops every fault: the injector fires no more, silenced agents
// answer again.
func (w *World) Heal() {
	if w.cfg.Faults != nil {
		w.cfg.Faults.Heal()
	}
	w.mu.Lock()
	w.faultsOn = false
	w.vmFaultsOn = false
	w.silentUntil = map[string]time.Time{}
	w.mu.Unlock()
}

func (w *World) next(seam faults.Seam, name string) []faults.Fault {
	return w.nextOn(seam, name, "", faultSubject{})
}

// firedFault is a fault that fired: when, and the agent it concerns ("" for
// none or unknown).
type firedFault struct {
	f     faults.Fault
	at    time.Time
	agent string
	// on is what a CPI call's fault concerns: its VM CID, disk CID, and
	// for create_disk the disk's name (each "" when the call has none).
	on faultSubject
}

// faultSubject is what a CPI call concerns, for explaining a failure by a
// fault on its path (explain.go faultOnPath).
type faultSubject struct{ vm, disk, name string }

// nextFor is next for an operation that concerns agent agentID.
func (w *World) nextFor(seam faults.Seam, name, agentID string) []faults.Fault {
	return w.nextOn(seam, name, agentID, faultSubject{})
}

// nextOn is next for an operation that concerns agent agentID and the
// CPI call's subject on.
func (w *World) nextOn(seam faults.Seam, name, agentID string, subject faultSubject) []faults.Fault {
	w.mu.Lock()
	on := w.faultsOn || (seam == faults.SeamVM && w.vmFaultsOn)
	w.mu.Unlock()
	if !on {
		return nil
	}
	fs := w.cfg.Faults.Next(seam, name)
	now := w.s.Now()
	for _, f := range fs {
		simrt.Annotate(w.s, "fault "+f.String())
		w.mu.Lock()
		w.fired = append(w.fired, firedFault{f: f, at: now, agent: agentID, on: subject})
		w.mu.Unlock()
	}
	return fs
}

// ---- setup ----

// worldCloudConfig is the world's cloud config, its VM types presenting
// disks as d says (disk_hint, device_prefix).
func worldCloudConfig(d Devices) string {
	return fmt.Sprintf(cloudConfig, fmt.Sprintf("disk_hint: %s, device_prefix: %s", d.Hint, d.Prefix))
}

// cloudConfig is worldCloudConfig's text; %[1]s is the VM types' device
// properties.
const cloudConfig = `azs:
- name: z1
  cloud_properties: {}
vm_types:
- name: default
  cloud_properties: {%[1]s}
- name: restarting
  cloud_properties: {restart_on_attach: true, %[1]s}
disk_types:
- name: small
  disk_size: 4
  cloud_properties: {type: fast, iops: 3000, encrypted: true, tags: {tier: gold}}
- name: large
  disk_size: 8
  cloud_properties: {type: standard, iops: 500, encrypted: false, tags: {tier: bronze}}
networks:
- name: default
  type: dynamic
  subnets:
  - azs: [z1]
    cloud_properties: {}
`

const manifestTemplate = `name: %s
stemcells:
- alias: default
  os: ubuntu-jammy
  version: latest
instance_groups:
- name: worker
  instances: %d
  azs: [z1]
  vm_type: %s
  stemcell: default
  networks:
  - name: default
  jobs: []
`

// DiskPool is the disk pool the workloads provide from for names of
// DiskPoolOf's first kind; LargeDiskPool for the others.
const (
	DiskPool      = "small"
	LargeDiskPool = "large"
)

// DiskPoolOf is the disk pool the workload asks for disk name: names
// ending in an odd digit come from LargeDiskPool, the others from
// DiskPool, so that a Director that mixes up disk types (their
// cloud_properties) or request sizes makes a disk unlike what was asked.
func DiskPoolOf(name string) string {
	if n := len(name); n > 0 && name[n-1] >= '0' && name[n-1] <= '9' && (name[n-1]-'0')%2 == 1 {
		return LargeDiskPool
	}
	return DiskPool
}

// DiskMiBOf is the size the workload asks for disk name: WorkloadDiskMiB
// from DiskPool, LargeDiskMiB from LargeDiskPool.
func DiskMiBOf(name string) int {
	if DiskPoolOf(name) == LargeDiskPool {
		return LargeDiskMiB
	}
	return WorkloadDiskMiB
}

// WorldAZ is the AZ of the world's instances.
const WorldAZ = "z1"

// DirectorName is the simulated Director's name, which it tags disk
// metadata with.
const DirectorName = "cpilab-sim"

// stemcellImage is the embedded stemcell's image with its agent's device
// path resolver set to resolver.
func stemcellImage(resolver string) ([]byte, error) {
	var img map[string]any
	if err := json.Unmarshal([]byte(directorfixtures.StemcellImage), &img); err != nil {
		return nil, fmt.Errorf("the embedded stemcell image: %w", err)
	}
	agentCfg, _ := img["agent"].(map[string]any)
	if agentCfg == nil {
		agentCfg = map[string]any{}
	}
	agentCfg["device_path_resolution_type"] = resolver
	img["agent"] = agentCfg
	return json.Marshal(img)
}

func (w *World) deploy() error {
	image := filepath.Join(w.cfg.DataDir, "stemcell.img")
	img, err := stemcellImage(w.cfg.Devices.Resolver)
	if err != nil {
		return err
	}
	if err := os.WriteFile(image, img, 0o644); err != nil {
		return err
	}
	d := w.Director()
	w.Deployment = "sim"
	steps := []func() (int64, error){
		func() (int64, error) {
			return d.UploadStemcell(directorUser, []byte(directorfixtures.StemcellMF), image)
		},
		func() (int64, error) {
			return d.UpdateCloudConfig(directorUser, []byte(worldCloudConfig(w.cfg.Devices)))
		},
		func() (int64, error) {
			return d.Deploy(directorUser, fmt.Appendf(nil, manifestTemplate, w.Deployment, w.cfg.Instances, w.cfg.VMType))
		},
	}
	for _, step := range steps {
		id, err := step()
		if err != nil {
			return err
		}
		t, ok := w.WaitTask(id, 10*time.Minute)
		if !ok || t.State != director.TaskDone {
			return fmt.Errorf("task %d (%s) ended %s: %s", id, t.Description, t.State, t.Result)
		}
	}
	insts, err := d.Instances(w.Deployment)
	if err != nil {
		return err
	}
	slices.SortFunc(insts, func(a, b director.Instance) int { return a.Index - b.Index })
	for _, in := range insts {
		w.Instances = append(w.Instances, in.ID)
	}
	return nil
}

// WaitTask polls GET /tasks/:id until the task is final or timeout has
// passed on the virtual clock; ok is false on time-out. While the director
// is down, or the API answers an error, it polls on (as a user's client
// does); t is then the last answer it had.
func (w *World) WaitTask(id int64, timeout time.Duration) (t director.TaskView, ok bool) {
	deadline := w.s.Now().Add(timeout)
	poll := taskPollInterval
	for {
		if got, err := w.Task(id); err == nil {
			t = got
			if t.State.Final() {
				return t, true
			}
		}
		if !w.s.Now().Before(deadline) {
			return t, false
		}
		w.s.Sleep(poll)
		poll = min(2*poll, 30*time.Second)
	}
}

// ---- the director's store, CPI and agents, per generation ----

// genAgents is the director's agent client: gated, and dead with its
// generation.
type genAgents struct {
	w   *World
	gen int
}

func (g *genAgents) WaitUntilReady(agentID string, timeout time.Duration) error {
	g.w.checkAlive(g.gen)
	err := g.w.client.WaitUntilReady(agentID, timeout)
	g.w.checkAlive(g.gen)
	return err
}

func (g *genAgents) Run(agentID, method string, args ...any) (json.RawMessage, error) {
	g.w.checkAlive(g.gen)
	g.w.cfg.Gates.enter("agent:" + method)
	v, err := g.w.client.Run(agentID, method, args...)
	g.w.checkAlive(g.gen)
	return v, err
}

// faultCPI is the director's CPI: the loopback to the reference CPI with
// latency, faults, gates and the CPI-seam safety checks.
type faultCPI struct {
	w   *World
	gen int
}

// call runs one CPI call that concerns no VM or disk.
func (c *faultCPI) call(method string, do func() error) error {
	return c.callOn(method, faultSubject{}, do)
}

// callOn runs one CPI call: seam checks, gates, faults, then the call; on
// says what the call concerns, for explaining a failure its fault causes.
func (c *faultCPI) callOn(method string, on faultSubject, do func() error) error {
	w := c.w
	w.checkAlive(c.gen)
	if f := w.cfg.tamper.beforeCPI; f != nil {
		f(w, method)
	}
	w.cfg.Gates.enter("cpi:" + method)
	lat := time.Millisecond + time.Duration(w.latency.Int64N(int64(w.cfg.CPILatency)))
	if w.cfg.SlowCPI > 0 && w.cfg.LockLease > 0 && w.latency.Float64() < w.cfg.SlowCPI {
		lat = w.cfg.LockLease/2 + time.Duration(w.latency.Int64N(int64(w.cfg.LockLease)))
	}
	w.s.Sleep(lat)
	var lost bool
	fs := w.nextOn(faults.SeamCPI, method, "", on)
	for _, f := range fs {
		if f.Kind == faults.LockRenewalStall {
			// The Director's lock renewal thread stalls; this call and
			// the rest of the Director go on.
			w.s.Stall(director.LockRenewalGoroutine, f.Duration)
		}
		if f.Kind == faults.CPIOutage {
			w.mu.Lock()
			if end := w.s.Now().Add(f.Duration); end.After(w.outageUntil) {
				w.outageUntil, w.outage = end, f
			}
			w.mu.Unlock()
		}
	}
	w.mu.Lock()
	down, outage := w.faultsOn && w.s.Now().Before(w.outageUntil), w.outage
	w.mu.Unlock()
	if down {
		w.checkAlive(c.gen)
		return &cpiv2.Error{Type: cpiv2.ErrorType(faults.ErrCloudError), Message: "injected: cloud API down (" + outage.String() + ")"}
	}
	for _, f := range fs {
		switch f.Kind {
		case faults.Latency:
			w.s.Sleep(f.Duration)
		case faults.CPIError:
			w.checkAlive(c.gen)
			return &cpiv2.Error{Type: cpiv2.ErrorType(f.ErrType), Message: "injected: " + f.String(), OkToRetry: f.OkToRetry}
		case faults.LostResponse:
			lost = true
		}
	}
	w.checkAlive(c.gen)
	err := do()
	w.checkAlive(c.gen)
	if lost {
		return &cpiv2.InvalidResponseError{Kind: cpiv2.ErrCPITimeout, Method: method, Detail: "injected lost response"}
	}
	return err
}

func (c *faultCPI) CreateStemcell(ctx context.Context, args cpiv2.CreateStemcellArgs) (cid cpiv2.StemcellCID, err error) {
	err = c.call(cpiv2.MethodCreateStemcell, func() (err error) { cid, err = c.w.cpi.CreateStemcell(ctx, args); return err })
	return cid, err
}

func (c *faultCPI) CreateVM(ctx context.Context, args cpiv2.CreateVMArgs) (res cpiv2.CreateVMResult, err error) {
	w := c.w
	for _, f := range w.nextFor(faults.SeamVM, cpiv2.MethodCreateVM, args.AgentID) {
		w.mu.Lock()
		switch f.Kind {
		case faults.AgentOld:
			w.oldAgents[args.AgentID] = true
			w.excused[args.AgentID] = true
		case faults.VMRestartOnAttach:
			w.restartVMs[args.AgentID] = true
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	restart := w.restartVMs[args.AgentID] || w.cfg.VMType == "restarting"
	if restart {
		w.quirks[args.AgentID] = "its VM restarts on attach"
	}
	w.mu.Unlock()
	if restart {
		var props map[string]any
		if err := args.CloudProperties.As(&props); err != nil {
			return res, err
		}
		if props == nil {
			props = map[string]any{}
		}
		props["restart_on_attach"] = true
		args.CloudProperties = cpiv2.MustCloudProps(props)
	}
	err = c.call(cpiv2.MethodCreateVM, func() (err error) { res, err = w.cpi.CreateVM(ctx, args); return err })
	if !res.VMCID.IsZero() {
		w.mu.Lock()
		w.vmAgents[res.VMCID.String()] = args.AgentID
		w.mu.Unlock()
	}
	return res, err
}

func (c *faultCPI) DeleteVM(ctx context.Context, cid cpiv2.VMCID) error {
	defer c.w.enterVMCall(c.gen, cpiv2.MethodDeleteVM, cid.String(), "")()
	w := c.w
	err := c.callOn(cpiv2.MethodDeleteVM, faultSubject{vm: cid.String()}, func() error {
		if f := w.cfg.tamper.beforeDeleteVM; f != nil {
			f(w, cid.String())
		}
		w.checkDeleteVM(cid.String())
		err := w.cpi.DeleteVM(ctx, cid)
		if err == nil {
			w.mu.Lock()
			w.goneVMs[cid.String()] = true // until the Director hears of it
			w.mu.Unlock()
		}
		return err
	})
	if err == nil {
		w.mu.Lock()
		delete(w.goneVMs, cid.String())
		w.mu.Unlock()
	}
	return err
}

func (c *faultCPI) CreateDisk(ctx context.Context, args cpiv2.CreateDiskArgs) (cid cpiv2.DiskCID, err error) {
	var props struct {
		Name string `json:"name"`
	}
	_ = args.CloudProperties.As(&props)
	err = c.callOn(cpiv2.MethodCreateDisk, faultSubject{vm: args.VMCID.String(), name: props.Name},
		func() (err error) { cid, err = c.w.cpi.CreateDisk(ctx, args); return err })
	var ir *cpiv2.InvalidResponseError
	if errors.As(err, &ir) && !cid.IsZero() {
		c.w.mu.Lock()
		c.w.lostDisks[cid.String()] = true
		c.w.mu.Unlock()
	}
	return cid, err
}

func (c *faultCPI) DeleteDisk(ctx context.Context, cid cpiv2.DiskCID) error {
	return c.callOn(cpiv2.MethodDeleteDisk, faultSubject{disk: cid.String()}, func() error {
		c.w.checkDeleteDisk(cid.String())
		return c.w.cpi.DeleteDisk(ctx, cid)
	})
}

func (c *faultCPI) AttachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) (hint cpiv2.DiskHint, err error) {
	if f := c.w.cfg.tamper.attachVM; f != nil {
		vm = cpiv2.MustCID[cpiv2.VMKind](f(c.w, vm.String(), disk.String()))
	}
	defer c.w.enterVMCall(c.gen, cpiv2.MethodAttachDisk, vm.String(), disk.String())()
	err = c.callOn(cpiv2.MethodAttachDisk, faultSubject{vm: vm.String(), disk: disk.String()}, func() (err error) {
		c.w.checkAttach(vm.String(), disk.String())
		hint, err = c.w.cpi.AttachDisk(ctx, vm, disk)
		return err
	})
	return hint, err
}

func (c *faultCPI) DetachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) error {
	defer c.w.enterVMCall(c.gen, cpiv2.MethodDetachDisk, vm.String(), disk.String())()
	return c.callOn(cpiv2.MethodDetachDisk, faultSubject{vm: vm.String(), disk: disk.String()}, func() error { return c.w.cpi.DetachDisk(ctx, vm, disk) })
}

func (c *faultCPI) SetDiskMetadata(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) error {
	return c.callOn(cpiv2.MethodSetDiskMetadata, faultSubject{disk: cid.String()}, func() error { return c.w.cpi.SetDiskMetadata(ctx, cid, meta) })
}

func (c *faultCPI) GetDisks(ctx context.Context, vm cpiv2.VMCID) (cids []cpiv2.DiskCID, err error) {
	err = c.callOn(cpiv2.MethodGetDisks, faultSubject{vm: vm.String()}, func() (err error) { cids, err = c.w.cpi.GetDisks(ctx, vm); return err })
	return cids, err
}

func (c *faultCPI) HasDisk(ctx context.Context, cid cpiv2.DiskCID) (ok bool, err error) {
	err = c.callOn(cpiv2.MethodHasDisk, faultSubject{disk: cid.String()}, func() (err error) { ok, err = c.w.cpi.HasDisk(ctx, cid); return err })
	return ok, err
}

var _ director.CPI = (*faultCPI)(nil)

// inventory lists every IaaS disk for the director's restart reconciliation
// (director.DiskLister), as an IaaS console would. Only disks: the
// simulated Director does not reconcile VMs or stemcells at restart.
type inventory struct{ cloud *fakeiaas.Cloud }

func (i inventory) ListDisks(ctx context.Context) ([]cpiv2.DiskCID, error) {
	return lab.Inventory{Oracle: i.cloud}.ListDisks(ctx)
}

// ---- mbus and agent faults ----

// mbusFault decides each delivery: agent faults on requests to an agent,
// then mbus faults on every message. It runs on the publisher's goroutine.
func (w *World) mbusFault(m mbus.Message) mbus.FaultAction {
	agentID, method := "", ""
	if id, ok := strings.CutPrefix(m.Subject, "agent."); ok {
		agentID = id
		var req struct {
			Method string `json:"method"`
		}
		_ = json.Unmarshal(m.Data, &req)
		method = req.Method
		w.mu.Lock()
		until, silent := w.silentUntil[agentID]
		w.mu.Unlock()
		if silent && w.s.Now().Before(until) {
			return mbus.FaultAction{Drop: true}
		}
		for _, f := range w.nextFor(faults.SeamAgent, method, agentID) {
			w.excuse(agentID)
			switch f.Kind {
			case faults.AgentUnresponsive:
				w.mu.Lock()
				w.silentUntil[agentID] = w.s.Now().Add(f.Duration)
				w.mu.Unlock()
				return mbus.FaultAction{Drop: true}
			case faults.AgentRestart:
				w.hooks.restart(agentID, f.Duration)
				return mbus.FaultAction{Drop: true}
			}
		}
	} else if rest, ok := strings.CutPrefix(m.Subject, "director."); ok {
		// director.<uuid>.<agent id>.<request id>
		if parts := strings.Split(rest, "."); len(parts) == 3 {
			agentID = parts[1]
		}
		method = "reply"
	}
	for _, f := range w.nextFor(faults.SeamMbus, method, agentID) {
		w.excuse(agentID)
		switch f.Kind {
		case faults.MbusLost:
			return mbus.FaultAction{Drop: true}
		case faults.MbusDelay:
			return mbus.FaultAction{Delay: f.Duration}
		}
	}
	return mbus.FaultAction{}
}

func (w *World) excuse(agentID string) {
	if agentID == "" {
		return
	}
	w.mu.Lock()
	w.excused[agentID] = true
	w.mu.Unlock()
}

// vmHooks boots a reference agent on every VM fakeiaas boots, BootDelay
// later, in old mode when the world or a fault says so.
type vmHooks struct {
	w     *World
	fetch agent.Fetcher

	mu     sync.Mutex                   // a leaf lock, never held across a scheduling point
	agents map[string]*agent.Agent      // guarded by mu; by VM CID
	gen    map[string]int               // guarded by mu; by VM CID: bumped by Halt
	info   map[string]fakeiaas.BootInfo // guarded by mu; by VM CID, while the VM runs
}

func (h *vmHooks) Boot(bi fakeiaas.BootInfo) error {
	h.mu.Lock()
	gen := h.gen[bi.VMCID]
	h.info[bi.VMCID] = bi
	h.mu.Unlock()
	h.w.s.Go("agent-boot/"+bi.VMCID, func() {
		h.w.s.Sleep(h.w.cfg.BootDelay)
		h.boot(bi, gen)
	})
	return nil
}

func (h *vmHooks) boot(bi fakeiaas.BootInfo, gen int) {
	w := h.w
	mode := w.cfg.AgentMode
	w.mu.Lock()
	if w.oldAgents[bi.AgentID] {
		mode = agent.ModeOld
	}
	if mode == agent.ModeOld {
		w.excused[bi.AgentID] = true // an old agent explains missing links
		w.quirks[bi.AgentID] = "it runs an agent without dynamic disks"
	}
	w.mu.Unlock()
	h.mu.Lock()
	stale := h.gen[bi.VMCID] != gen
	h.mu.Unlock()
	if stale {
		return
	}
	a, err := agent.Start(agent.Config{
		Root: bi.Root, Files: w.Cloud.Files(), VMCID: bi.VMCID, AgentID: bi.AgentID, MetadataURL: metadataURL, RegistryURL: registryURL,
		StemcellAPIVersion: bi.StemcellAPIVersion, DeviceResolver: bi.DeviceResolver,
		DeviceTimeout: 5 * time.Second, Fetcher: h.fetch, Transport: w.mb, Runtime: w.s, Mode: mode,
	})
	if err != nil {
		w.addViolation(&Violation{Invariant: InvAgentBoots, Phase: AfterStep, Err: fmt.Errorf("VM %s: %w", bi.VMCID, err)})
		return
	}
	h.mu.Lock()
	if h.gen[bi.VMCID] != gen {
		h.mu.Unlock()
		a.Stop()
		return
	}
	old := h.agents[bi.VMCID]
	h.agents[bi.VMCID] = a
	h.mu.Unlock()
	if old != nil {
		old.Stop()
	}
}

func (h *vmHooks) Halt(vmCID string) {
	h.mu.Lock()
	a := h.agents[vmCID]
	delete(h.agents, vmCID)
	delete(h.info, vmCID)
	h.gen[vmCID]++
	h.mu.Unlock()
	if a != nil {
		a.Stop()
	}
}

// abandonAll releases the host resources of the agents still running when
// a simulation ends (their VM roots' open directories): outside the
// simulation, without the runtime.
func (h *vmHooks) abandonAll() {
	h.mu.Lock()
	agents := h.agents
	h.agents = map[string]*agent.Agent{}
	h.mu.Unlock()
	for _, a := range agents {
		a.Abandon()
	}
}

// restart stops the agent with agentID and boots it again after down.
func (h *vmHooks) restart(agentID string, down time.Duration) {
	h.mu.Lock()
	var vm string
	for cid, bi := range h.info {
		if bi.AgentID == agentID {
			vm = cid
		}
	}
	a := h.agents[vm]
	delete(h.agents, vm)
	bi := h.info[vm]
	h.gen[vm]++
	gen := h.gen[vm]
	h.mu.Unlock()
	if vm == "" {
		return
	}
	h.w.s.Go("agent-restart/"+vm, func() {
		if a != nil {
			a.Stop()
		}
		h.w.s.Sleep(down)
		h.boot(bi, gen)
	})
}

// running reports the VM CIDs with a running agent, sorted.
func (h *vmHooks) running() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(h.agents))
	for v := range h.agents {
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}
