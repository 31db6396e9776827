package agent

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/cpilab/cpilab/rt"
)

// Fleet runs one agent per VM, keyed by VM CID: what a cloud's boot and
// halt hooks need (package agent/boothook adapts fakeiaas.VMHooks to it).
// It is safe for concurrent use.
//
// Lock order: a VM's boot lock, then Fleet.mu; Fleet.mu is never held
// across Start or Stop of an agent.
type Fleet struct {
	r       rt.Runtime
	pending *rt.Group // boots retrying in the background

	mu     rt.Mutex
	agents map[string]*Agent   // guarded by mu; by VM CID
	gen    map[string]int      // guarded by mu; by VM CID: bumped by every Boot, Start and Halt
	errs   map[string]error    // guarded by mu; by VM CID: why the agent is not running
	boots  map[string]rt.Mutex // guarded by mu; by VM CID: held by an attempt while it starts an agent
}

// BootOptions tune Fleet.Start. Zero fields take the defaults.
type BootOptions struct {
	// Delay postpones the first attempt, on the fleet's clock, as a real VM
	// takes time to boot. Default 0: the first attempt is made before Start
	// returns.
	Delay time.Duration
	// Retry is the pause between attempts while the agent cannot start yet,
	// typically because its settings are not readable (in the registry flow
	// the CPI writes them after create_vm has booted the VM). Default 20 ms.
	Retry time.Duration
	// Timeout bounds the retrying, on the fleet's clock. Default 30 s; the
	// last error is then kept for LastError.
	Timeout time.Duration
}

// Defaults of BootOptions.
const (
	DefaultBootRetry   = 20 * time.Millisecond
	DefaultBootTimeout = 30 * time.Second
)

// NewFleet returns an empty fleet on r (rt.Real(0) if nil). Background
// boots run and wait on r.
func NewFleet(r rt.Runtime) *Fleet {
	if r == nil {
		r = rt.Real(0)
	}
	return &Fleet{r: r, pending: rt.NewGroup(r), mu: r.NewMutex(),
		agents: map[string]*Agent{}, gen: map[string]int{}, errs: map[string]error{}, boots: map[string]rt.Mutex{}}
}

// Boot starts an agent for cfg.VMCID now, first stopping the one already
// running for that VM (a reboot or a restart on attach). It fails at once
// if the agent cannot start; Start retries instead.
func (f *Fleet) Boot(cfg Config) error {
	gen := f.bump(cfg.VMCID)
	return f.attempt(cfg, gen)
}

// Start boots cfg.VMCID's agent as a VM's agent comes up: a first attempt
// now (unless opts.Delay), then, while the agent cannot start, another
// every opts.Retry on the fleet's clock until it starts, the VM is halted
// or booted again, or opts.Timeout passes. It never blocks on the retries;
// LastError says why an agent is not running.
func (f *Fleet) Start(cfg Config, opts BootOptions) {
	if opts.Retry <= 0 {
		opts.Retry = DefaultBootRetry
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultBootTimeout
	}
	gen := f.bump(cfg.VMCID)
	if opts.Delay <= 0 && f.attempt(cfg, gen) == nil {
		return
	}
	// The time-out runs from Start, not from when the retry goroutine
	// first gets to run.
	deadline := f.r.Now().Add(opts.Delay + opts.Timeout)
	f.pending.Go("agent/boot/"+cfg.VMCID, func() {
		f.r.Sleep(opts.Delay)
		// No attempt after the deadline, however late this goroutine ran.
		for f.current(cfg.VMCID, gen) && f.r.Now().Before(deadline) {
			if f.attempt(cfg, gen) == nil {
				return
			}
			f.r.Sleep(opts.Retry)
		}
	})
}

// attempt starts the agent unless the VM was halted or booted again since
// generation gen, and records the outcome.
func (f *Fleet) attempt(cfg Config, gen int) error {
	boot := f.bootLock(cfg.VMCID)
	boot.Lock()
	defer boot.Unlock()
	if !f.current(cfg.VMCID, gen) { // halted or booted again before this attempt began
		return nil
	}
	a, err := Start(cfg)
	f.mu.Lock()
	if f.gen[cfg.VMCID] != gen { // halted or booted again meanwhile
		f.mu.Unlock()
		if a != nil {
			a.Stop()
		}
		return nil
	}
	if err != nil {
		err = fmt.Errorf("agent: booting VM %s: %w", cfg.VMCID, err)
		f.errs[cfg.VMCID] = err
		f.mu.Unlock()
		return err
	}
	old := f.agents[cfg.VMCID]
	f.agents[cfg.VMCID] = a
	delete(f.errs, cfg.VMCID)
	f.mu.Unlock()
	if old != nil {
		old.Stop()
	}
	return nil
}

// bump starts a new generation for vmCID, stopping its running agent.
func (f *Fleet) bump(vmCID string) int {
	f.mu.Lock()
	f.gen[vmCID]++
	gen := f.gen[vmCID]
	a := f.agents[vmCID]
	delete(f.agents, vmCID)
	delete(f.errs, vmCID)
	f.mu.Unlock()
	if a != nil {
		a.Stop()
	}
	return gen
}

func (f *Fleet) current(vmCID string, gen int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.gen[vmCID] == gen
}

// Halt stops the VM's agent, if any, and any boot still retrying, and
// waits for an agent that was starting to stop, so that nothing writes into
// the VM's root once Halt returns (the cloud deletes it after a halt). Its
// state on disk stays.
func (f *Fleet) Halt(vmCID string) {
	f.bump(vmCID)
	boot := f.bootLock(vmCID)
	boot.Lock()
	boot.Unlock() //nolint:staticcheck // an empty critical section: waiting for the attempt in flight
}

// bootLock is vmCID's boot lock.
func (f *Fleet) bootLock(vmCID string) rt.Mutex {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.boots[vmCID]
	if !ok {
		m = f.r.NewMutex()
		f.boots[vmCID] = m
	}
	return m
}

// Agent returns the VM's running agent, or nil.
func (f *Fleet) Agent(vmCID string) *Agent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.agents[vmCID]
}

// ErrNotBooted is wrapped by LastError for a VM the fleet never booted.
var ErrNotBooted = errors.New("no agent was booted on this VM")

// LastError is nil when vmCID's agent runs, the last start error while it
// does not, and ErrNotBooted (wrapped) when it was never booted or halted.
func (f *Fleet) LastError(vmCID string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.agents[vmCID] != nil {
		return nil
	}
	if err := f.errs[vmCID]; err != nil {
		return err
	}
	return fmt.Errorf("agent on %s: %w", vmCID, ErrNotBooted)
}

// VMs lists the VM CIDs with a running agent, sorted.
func (f *Fleet) VMs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.agents))
	for v := range f.agents {
		out = append(out, v)
	}
	sort.Strings(out)
	return out
}

// StopAll halts every agent, ends every boot still retrying, and waits for
// them.
func (f *Fleet) StopAll() {
	f.mu.Lock()
	vms := make([]string, 0, len(f.gen))
	for v := range f.gen {
		vms = append(vms, v)
	}
	f.mu.Unlock()
	sort.Strings(vms)
	for _, v := range vms {
		f.Halt(v)
	}
	f.pending.Wait()
}
