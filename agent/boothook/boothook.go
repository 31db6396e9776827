// Package boothook boots reference agents on fakeiaas VMs. It adapts
// fakeiaas.VMHooks to an agent.Fleet, so that every VM the fake cloud
// creates, reboots or restarts on attach gets its agent, and every VM it
// halts or deletes loses it.
//
//	fleet := agent.NewFleet(r)
//	hooks := boothook.New(boothook.Config{Fleet: fleet, Base: agent.Config{Transport: tr, Runtime: r}})
//	cloud, err := fakeiaas.New(fakeiaas.Config{DataDir: dir, Runtime: r, Hooks: hooks})
//	…
//	err = cloud.BootAll() // VMs kept from a previous run get their agents
//
// It is the one place that turns a fakeiaas.BootInfo into an agent.Config;
// the testbed, the director's lab and the simulator all boot agents here.
package boothook

import (
	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/rt"
)

// Config configures New.
type Config struct {
	// Fleet runs the agents (required).
	Fleet *agent.Fleet
	// Base is every agent's configuration; the VM's own fields (Root,
	// VMCID, AgentID unless Base.SettingsFile is set, StemcellAPIVersion, DeviceResolver, registry
	// credentials, and the metadata and registry URLs) come from the
	// BootInfo. Base's MetadataURL and RegistryURL, when set, replace the
	// BootInfo's: an in-process Fetcher (agent.HandlerFetcher) answers any
	// host.
	Base agent.Config
	// Boot tunes the retrying start (agent.BootOptions defaults).
	Boot agent.BootOptions
	// Runtime guards Mode; default Base.Runtime, else rt.Real(0).
	Runtime rt.Runtime
}

// Hooks implements fakeiaas.VMHooks.
type Hooks struct {
	cfg Config

	mu   rt.Mutex
	mode agent.Mode // guarded by mu: the mode of agents booted from now on
}

var _ fakeiaas.VMHooks = (*Hooks)(nil)

// New returns hooks booting agents into cfg.Fleet.
func New(cfg Config) *Hooks {
	if cfg.Runtime == nil {
		cfg.Runtime = cfg.Base.Runtime
	}
	if cfg.Runtime == nil {
		cfg.Runtime = rt.Real(0)
	}
	mode := cfg.Base.Mode
	if mode == "" {
		mode = agent.ModeNormal
	}
	return &Hooks{cfg: cfg, mu: cfg.Runtime.NewMutex(), mode: mode}
}

// SetMode sets the mode of agents booted from now on (agent.ModeOld
// reproduces race (h)).
func (h *Hooks) SetMode(m agent.Mode) {
	h.mu.Lock()
	h.mode = m
	h.mu.Unlock()
}

// AgentConfig is the agent configuration for a booting VM.
func (h *Hooks) AgentConfig(bi fakeiaas.BootInfo) agent.Config {
	c := h.cfg.Base
	c.Root, c.VMCID = bi.Root, bi.VMCID
	if c.SettingsFile == "" {
		// With a settings file (Base.SettingsFile) the agent ID is the
		// file's: the cloud's agent ID may be its own name for the VM (a
		// Docker container's name).
		c.AgentID = bi.AgentID
	}
	c.StemcellAPIVersion, c.DeviceResolver = bi.StemcellAPIVersion, bi.DeviceResolver
	c.RegistryUser, c.RegistryPassword = bi.RegistryUser, bi.RegistryPassword
	if c.MetadataURL == "" {
		c.MetadataURL = bi.MetadataURL
	}
	if c.RegistryURL == "" {
		c.RegistryURL = bi.RegistryURL
	}
	h.mu.Lock()
	c.Mode = h.mode
	h.mu.Unlock()
	return c
}

// Boot starts the VM's agent (retrying in the background until its
// settings are readable). It never fails the VM's creation: an agent that
// does not come up is what suites and the director must notice.
func (h *Hooks) Boot(bi fakeiaas.BootInfo) error {
	h.cfg.Fleet.Start(h.AgentConfig(bi), h.cfg.Boot)
	return nil
}

// Halt stops the VM's agent.
func (h *Hooks) Halt(vmCID string) { h.cfg.Fleet.Halt(vmCID) }
