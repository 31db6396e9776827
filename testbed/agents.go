package testbed

import (
	"fmt"
	"sync"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/fakeiaas"
)

// agentHooks boots the reference agent on each VM root (fakeiaas.VMHooks).
// Boot returns at once and the agent starts in the background, retrying
// until its settings can be read: a v1 CPI writes the registry only after
// create_vm returned the VM CID, as a real VM's agent keeps polling.
type agentHooks struct {
	cfg Config

	mu   sync.Mutex
	vms  map[string]*bootingAgent // guarded by mu; by VM CID
	boot sync.WaitGroup
}

type bootingAgent struct {
	stop  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	agent *agent.Agent // guarded by mu
	err   error        // guarded by mu: the last start error
}

func newAgentHooks(cfg Config) *agentHooks {
	return &agentHooks{cfg: cfg, vms: map[string]*bootingAgent{}}
}

// Boot starts the VM's agent in the background.
func (h *agentHooks) Boot(bi fakeiaas.BootInfo) error {
	b := &bootingAgent{stop: make(chan struct{})}
	h.mu.Lock()
	if old := h.vms[bi.VMCID]; old != nil {
		old.halt()
	}
	h.vms[bi.VMCID] = b
	h.mu.Unlock()
	h.boot.Add(1)
	go func() { // I/O edge: the testbed wires real processes and goroutines
		defer h.boot.Done()
		h.run(bi, b)
	}()
	return nil
}

func (h *agentHooks) run(bi fakeiaas.BootInfo, b *bootingAgent) {
	deadline := time.Now().Add(h.cfg.AgentBootTimeout)
	wait := 20 * time.Millisecond
	for {
		a, err := agent.Start(agent.Config{
			Root: bi.Root, VMCID: bi.VMCID, AgentID: bi.AgentID,
			MetadataURL: bi.MetadataURL, RegistryURL: bi.RegistryURL,
			RegistryUser: bi.RegistryUser, RegistryPassword: bi.RegistryPassword,
			StemcellAPIVersion: bi.StemcellAPIVersion, DeviceResolver: bi.DeviceResolver,
			DeviceTimeout: h.cfg.AgentDeviceTimeout, DevicePollInterval: 20 * time.Millisecond,
		})
		b.mu.Lock()
		b.err = err
		if err == nil {
			select {
			case <-b.stop:
				b.mu.Unlock()
				a.Stop()
				return
			default:
			}
			b.agent = a
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		if time.Now().After(deadline) {
			fmt.Fprintf(h.cfg.Log, "testbed: the agent of %s did not start within %s: %v\n", bi.VMCID, h.cfg.AgentBootTimeout, err)
			return
		}
		select {
		case <-b.stop:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// Halt stops the VM's agent (or its pending start).
func (h *agentHooks) Halt(vmCID string) {
	h.mu.Lock()
	b := h.vms[vmCID]
	delete(h.vms, vmCID)
	h.mu.Unlock()
	if b != nil {
		b.halt()
	}
}

func (b *bootingAgent) halt() {
	b.once.Do(func() { close(b.stop) })
	b.mu.Lock()
	a := b.agent
	b.agent = nil
	b.mu.Unlock()
	if a != nil {
		a.Stop()
	}
}

// lastError is the last start error of vmCID's agent, for diagnostics.
func (h *agentHooks) lastError(vmCID string) error {
	h.mu.Lock()
	b := h.vms[vmCID]
	h.mu.Unlock()
	if b == nil {
		return fmt.Errorf("no agent was booted on %s", vmCID)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.agent != nil {
		return nil
	}
	return b.err
}

func (h *agentHooks) stopAll() {
	h.mu.Lock()
	all := h.vms
	h.vms = map[string]*bootingAgent{}
	h.mu.Unlock()
	for _, b := range all {
		b.halt()
	}
	h.boot.Wait()
}
