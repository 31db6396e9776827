// Package lab wires a director to a whole fake world, in process. The world
// is fakeiaas with the reference CPI (in process, through a cpiv2.Loopback
// with a Director caller profile), a reference agent booted on every VM, and
// an mbus between the director and the agents. Tests, benchmarks, the
// simulator and `cpilab director` use it, so that each of them runs the real
// pieces. lab is the in-process world; testbed is the process-per-part one
// (docs/seams.md, "Worlds", says which to use when).
//
//	l, err := lab.New(lab.Config{DataDir: dir})
//	if err != nil { … }
//	defer l.Close()
//	d, err := director.New(director.Config{CPI: l.CPI, Agents: l.Agents, Inventory: l})
package lab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/agent/boothook"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/refcpi"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
)

// Config configures New.
type Config struct {
	// Runtime supplies time, randomness and concurrency to every piece.
	// Default rt.Real(0).
	Runtime rt.Runtime
	// DataDir holds fakeiaas's VM roots and disk files (required).
	DataDir string
	// FakeIaaSStore is fakeiaas's store: "memory" (default) or "sqlite"
	// (durable in DataDir).
	FakeIaaSStore string
	// Transport is the mbus. Default mbus.NewMemory(Runtime).
	Transport mbus.Transport
	// CPIProfile is the caller profile the director speaks CPI with.
	// Default cpiv2.ProfileDirectorCurrent.
	CPIProfile cpiv2.Profile
	// CPICommand, when set, runs the CPI as an executable (the reference
	// CPI: bin/fakeiaas-cpi) through cpiv2.Runner, as the Director does: the
	// cloud is then served over HTTP on loopback and a cpi.json is written
	// to DataDir. Default: the reference CPI in process.
	CPICommand []string
	// LenientCPIWire reads CPI output as upstream's Director does (the
	// director knob of that name): duplicate keys and invalid UTF-8
	// accepted, pipes read until they close.
	LenientCPIWire bool
	// CPIMaxAPIVersion caps the reference CPI's api_version
	// (debug.cpi.api_version). Default 3.
	CPIMaxAPIVersion int
	// DirectorUUID names the director on the mbus. Default "director".
	DirectorUUID string
	// AgentTaskPollInterval is the agent client's pause between get_task
	// polls of a long agent action. Default 10 ms (upstream: 1 s).
	AgentTaskPollInterval time.Duration
	// AgentRequestTimeout bounds the agent client's wait for one reply.
	// Default 45 s (mbus.DefaultTimeout).
	AgentRequestTimeout time.Duration
	// BootDelay, when > 0, boots each VM's agent that long (on the
	// runtime's clock) after fakeiaas starts the VM, in a logical goroutine,
	// as a real VM takes time to boot. Default 0: the agent is up when
	// create_vm (or a restarting attach_disk) returns.
	BootDelay time.Duration
	// AgentMode is the mode of agents booted from now on (SetAgentMode
	// changes it). Default agent.ModeNormal.
	AgentMode agent.Mode
}

// Lab is a running fake world.
type Lab struct {
	// Cloud is the fake IaaS (its State is the oracle).
	Cloud *fakeiaas.Cloud
	// CPI is the reference CPI behind a Loopback caller.
	CPI cpiv2.CPI
	// Transport is the mbus.
	Transport mbus.Transport
	// Agents is the director-side agent client.
	Agents *mbus.Client
	// Server serves Cloud over HTTP when Config.CPICommand is set; nil
	// otherwise.
	Server *fakeiaas.Server

	fleet *agent.Fleet
	hooks *boothook.Hooks
}

// New builds a lab.
func New(cfg Config) (*Lab, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("lab: Config.DataDir is required")
	}
	if cfg.Runtime == nil {
		cfg.Runtime = rt.Real(0)
	}
	if cfg.FakeIaaSStore == "" {
		cfg.FakeIaaSStore = "memory"
	}
	if cfg.Transport == nil {
		cfg.Transport = mbus.NewMemory(cfg.Runtime)
	}
	if cfg.CPIProfile.Name == "" {
		cfg.CPIProfile = cpiv2.ProfileDirectorCurrent
	}
	if cfg.CPIMaxAPIVersion == 0 {
		cfg.CPIMaxAPIVersion = 3
	}
	if cfg.DirectorUUID == "" {
		cfg.DirectorUUID = "director"
	}
	if cfg.AgentTaskPollInterval <= 0 {
		cfg.AgentTaskPollInterval = 10 * time.Millisecond
	}
	if cfg.AgentMode == "" {
		cfg.AgentMode = agent.ModeNormal
	}
	fleet := agent.NewFleet(cfg.Runtime)
	// The agents fetch settings through the cloud's handler in process (set
	// once the cloud exists, before any VM boots).
	base := agent.Config{MetadataURL: metadataURL, RegistryURL: registryURL, Transport: cfg.Transport,
		Runtime: cfg.Runtime, Mode: cfg.AgentMode}
	var served http.Handler // the cloud's handler, set before any VM can boot
	base.Fetcher = agent.HandlerFetcher(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.ServeHTTP(w, r)
	}))
	hooks := boothook.New(boothook.Config{Fleet: fleet, Base: base,
		Boot: agent.BootOptions{Delay: cfg.BootDelay, Retry: bootRetry, Timeout: bootTimeout}})
	cloud, err := fakeiaas.New(fakeiaas.Config{DataDir: cfg.DataDir, Store: cfg.FakeIaaSStore, Runtime: cfg.Runtime, Hooks: hooks})
	if err != nil {
		return nil, fmt.Errorf("lab: fakeiaas: %w", err)
	}
	served = cloud.Handler()
	// VMs left by a previous run are still running: boot their agents.
	if err := cloud.BootAll(); err != nil {
		_ = cloud.Close()
		return nil, fmt.Errorf("lab: %w", err)
	}
	l := &Lab{Cloud: cloud, Transport: cfg.Transport, fleet: fleet, hooks: hooks}
	if len(cfg.CPICommand) > 0 {
		if err := l.execCPI(cfg); err != nil {
			_ = cloud.Close()
			return nil, err
		}
	} else {
		cpi := refcpi.New(refcpi.Config{MaxAPIVersion: cfg.CPIMaxAPIVersion, Registry: cloud,
			RegistryEndpoint: registryURL, MBus: "memory://", Runtime: cfg.Runtime}, cloud)
		l.CPI = cpiv2.NewLoopback(cpi, cpiv2.LoopbackConfig{Profile: cfg.CPIProfile, LenientJSON: cfg.LenientCPIWire, MaxAPIVersion: cpi.MaxAPIVersion(),
			DirectorUUID: cfg.DirectorUUID})
	}
	client, err := mbus.NewClient(mbus.ClientConfig{Transport: cfg.Transport, Runtime: cfg.Runtime, DirectorUUID: cfg.DirectorUUID,
		TaskPollInterval: cfg.AgentTaskPollInterval, Timeout: cfg.AgentRequestTimeout})
	if err != nil {
		l.closeCloud()
		return nil, fmt.Errorf("lab: mbus client: %w", err)
	}
	l.Agents = client
	return l, nil
}

// execCPI serves the cloud and points a cpiv2.Runner at the CPI command.
func (l *Lab) execCPI(cfg Config) error {
	srv, err := fakeiaas.Serve(fakeiaas.ServeConfig{Cloud: l.Cloud})
	if err != nil {
		return fmt.Errorf("lab: serve fakeiaas: %w", err)
	}
	l.Server = srv
	path := filepath.Join(cfg.DataDir, "cpi.json")
	if err := refcpi.WriteFileConfig(path, refcpi.FileSpec{URL: srv.URL(), RegistryEndpoint: srv.URL() + "/registry",
		MBus: "memory://", APIVersionCap: cfg.CPIMaxAPIVersion}); err != nil {
		_ = srv.Close()
		return fmt.Errorf("lab: %w", err)
	}
	argv := append(append([]string(nil), cfg.CPICommand...), "-configPath", path)
	l.CPI = cpiv2.NewRunner(cpiv2.RunnerConfig{Command: argv, Profile: cfg.CPIProfile, DirectorUUID: cfg.DirectorUUID,
		LenientJSON: cfg.LenientCPIWire, WaitForPipes: cfg.LenientCPIWire})
	return nil
}

func (l *Lab) closeCloud() error {
	var err error
	if l.Server != nil {
		err = l.Server.Close()
	}
	return errors.Join(err, l.Cloud.Close())
}

// The agents fetch settings through the cloud's handler in process; these
// URLs only carry the paths.
const (
	metadataURL = "http://fakeiaas.invalid/metadata"
	registryURL = "http://fakeiaas.invalid/registry"
)

// SetAgentMode sets the mode of agents booted from now on (agent.ModeOld
// reproduces race h).
func (l *Lab) SetAgentMode(m agent.Mode) { l.hooks.SetMode(m) }

// Agent returns the running agent of a VM, if any.
func (l *Lab) Agent(vmCID string) (*agent.Agent, bool) {
	a := l.fleet.Agent(vmCID)
	return a, a != nil
}

// ListDisks, ListVMs and ListStemcells make a Lab the director's
// inventory (director.DiskLister, VMLister, StemcellLister).
func (l *Lab) ListDisks(ctx context.Context) ([]cpiv2.DiskCID, error) {
	return Inventory{l.Cloud}.ListDisks(ctx)
}

// ListVMs: see ListDisks.
func (l *Lab) ListVMs(ctx context.Context) ([]director.ListedVM, error) {
	return Inventory{l.Cloud}.ListVMs(ctx)
}

// ListStemcells: see ListDisks.
func (l *Lab) ListStemcells(ctx context.Context) ([]cpiv2.StemcellCID, error) {
	return Inventory{l.Cloud}.ListStemcells(ctx)
}

// Close stops the agents, the client and the cloud.
func (l *Lab) Close() error {
	l.fleet.StopAll()
	err := l.Agents.Close()
	return errors.Join(err, l.closeCloud())
}

// An agent that cannot fetch its settings yet retries every bootRetry for
// up to bootTimeout (on the lab's clock).
const (
	bootRetry   = 10 * time.Millisecond
	bootTimeout = 10 * time.Second
)
