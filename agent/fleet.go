package agent

import (
	"fmt"
	"sort"

	"github.com/cpilab/cpilab/rt"
)

// Fleet runs one agent per VM, keyed by VM CID: what a cloud's boot and
// halt hooks need (fakeiaas.VMHooks is adapted to it in the wiring, since
// agent does not import fakeiaas). It is safe for concurrent use.
type Fleet struct {
	mu     rt.Mutex
	agents map[string]*Agent // guarded by mu; by VM CID
}

// NewFleet returns an empty fleet whose lock comes from r (rt.Real(0) if nil).
func NewFleet(r rt.Runtime) *Fleet {
	if r == nil {
		r = rt.Real(0)
	}
	return &Fleet{mu: r.NewMutex(), agents: map[string]*Agent{}}
}

// Boot starts an agent for cfg.VMCID, first stopping the one already
// running for that VM (a reboot or a restart on attach).
func (f *Fleet) Boot(cfg Config) error {
	f.Halt(cfg.VMCID)
	a, err := Start(cfg)
	if err != nil {
		return fmt.Errorf("agent: booting VM %s: %w", cfg.VMCID, err)
	}
	f.mu.Lock()
	old := f.agents[cfg.VMCID]
	f.agents[cfg.VMCID] = a
	f.mu.Unlock()
	if old != nil {
		old.Stop() // a concurrent Boot of the same VM won the race
	}
	return nil
}

// Halt stops the VM's agent, if any. Its state on disk stays.
func (f *Fleet) Halt(vmCID string) {
	f.mu.Lock()
	a := f.agents[vmCID]
	delete(f.agents, vmCID)
	f.mu.Unlock()
	if a != nil {
		a.Stop()
	}
}

// Agent returns the VM's running agent, or nil.
func (f *Fleet) Agent(vmCID string) *Agent {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.agents[vmCID]
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

// StopAll halts every agent.
func (f *Fleet) StopAll() {
	for _, v := range f.VMs() {
		f.Halt(v)
	}
}
