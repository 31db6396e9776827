package agent_test

import (
	"errors"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
)

// An agent whose settings cannot be read yet keeps trying, in the
// background, and comes up once they can: the registry flow, where the CPI
// writes settings after create_vm booted the VM.
func TestFleetStartRetriesUntilSettingsAreReadable(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	cfg := e.config(v, "agent-1")
	e.settings.setDown(true)
	f := agent.NewFleet(e.r)
	defer f.StopAll()

	f.Start(cfg, agent.BootOptions{Retry: 5 * time.Millisecond, Timeout: 10 * time.Second})
	if f.Agent("vm-1") != nil {
		t.Fatal("an agent runs although its settings were unreadable")
	}
	if err := f.LastError("vm-1"); err == nil || errors.Is(err, agent.ErrNotBooted) {
		t.Fatalf("LastError = %v, want the settings fetch failure", err)
	}
	e.settings.setDown(false)
	if err := e.client.WaitUntilReady("agent-1", 5*time.Second); err != nil {
		t.Fatalf("the agent did not come up once its settings were readable: %v", err)
	}
	if err := f.LastError("vm-1"); err != nil {
		t.Fatalf("LastError = %v for a running agent", err)
	}
}

// Halt ends a boot that is still retrying: the VM stays without an agent.
func TestFleetHaltEndsARetryingBoot(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	cfg := e.config(v, "agent-1")
	e.settings.setDown(true)
	f := agent.NewFleet(e.r)

	f.Start(cfg, agent.BootOptions{Retry: 5 * time.Millisecond, Timeout: 10 * time.Second})
	f.Halt("vm-1")
	e.settings.setDown(false)
	f.StopAll() // waits for the background boot to end
	if f.Agent("vm-1") != nil {
		t.Fatal("a halted VM's boot went on and started an agent")
	}
	if err := f.LastError("vm-1"); !errors.Is(err, agent.ErrNotBooted) {
		t.Fatalf("LastError = %v, want ErrNotBooted after Halt", err)
	}
	if err := e.client.Ping("agent-1"); err == nil {
		t.Fatal("a halted VM's agent answers ping")
	}
}

// A boot gives up after its time-out and keeps the reason.
func TestFleetStartGivesUpAfterTimeout(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	cfg := e.config(v, "agent-1")
	e.settings.setDown(true)
	f := agent.NewFleet(e.r)
	defer f.StopAll()
	f.Start(cfg, agent.BootOptions{Retry: 5 * time.Millisecond, Timeout: 30 * time.Millisecond})
	e.r.Sleep(300 * time.Millisecond) // well past the time-out
	e.settings.setDown(false)
	e.r.Sleep(200 * time.Millisecond) // a boot still retrying would start now
	if f.Agent("vm-1") != nil {
		t.Fatal("the boot went on past its time-out")
	}
	if err := f.LastError("vm-1"); err == nil || errors.Is(err, agent.ErrNotBooted) {
		t.Fatalf("LastError = %v, want the last settings failure", err)
	}
}

// Halt waits for a boot in flight: once it returns, the agent that was
// starting has been stopped, so nothing of it writes into the VM's root,
// which the cloud deletes right after a halt (delete_vm).
func TestFleetHaltWaitsForABootInFlight(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	cfg := e.config(v, "agent-1")
	entered, release := e.settings.holdRequests()
	f := agent.NewFleet(e.r)
	defer f.StopAll()

	booted := make(chan error, 1)
	go func() { booted <- f.Boot(cfg) }()
	<-entered // the agent is starting: it waits for its settings
	halted := make(chan struct{})
	go func() {
		f.Halt("vm-1")
		close(halted)
	}()
	select {
	case <-halted:
		release()
		t.Fatal("Halt returned while the VM's agent was still starting")
	case <-time.After(200 * time.Millisecond):
	}
	release()
	<-halted
	<-booted
	if f.Agent("vm-1") != nil {
		t.Fatal("the agent that was starting runs after Halt")
	}
	if err := e.client.Ping("agent-1"); err == nil {
		t.Fatal("a halted VM's agent answers ping")
	}
}
