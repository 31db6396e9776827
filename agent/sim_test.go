package agent_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/simulator/simrt"
)

// The agent, the client and the Memory transport block only through rt, so
// a run on the simulator's runtime completes on its virtual clock and
// replays exactly: same seed, same trace.
func TestDeterministicUnderSimulation(t *testing.T) {
	v := newVMRoot(t, "vm-1")
	s := newSettingsServer(t)
	run := func(seed uint64) simrt.Result {
		// Each run starts from the same root.
		for _, p := range []string{"dev/sdc", "dev/disk/by-id/virtio-" + diskA[:20], "var/vcap/data/dynamic_disks/" + diskA, "var/vcap/bosh/settings.json"} {
			_ = os.Remove(v.root + "/" + p)
		}
		_ = os.RemoveAll(v.root + "/sys/bus/scsi/devices/2:0:2:0")
		var failure error
		res := simrt.Run(simrt.Config{Seed: seed, MaxTime: time.Hour}, func(sim *simrt.Sim) {
			failure = simScenario(t, sim, v, s)
		})
		if failure != nil {
			t.Fatalf("seed %d: %v", seed, failure)
		}
		if !res.OK() {
			t.Fatalf("seed %d: %v", seed, res)
		}
		return res
	}
	a, b := run(3), run(3)
	if a.TraceHash != b.TraceHash || a.Steps != b.Steps {
		t.Errorf("same seed, different runs: %v vs %v", a, b)
	}
	if a.Elapsed < 2*time.Second {
		t.Errorf("virtual time %s, want ≥ 2s (the device appears after 2s)", a.Elapsed)
	}
}

func simScenario(t *testing.T, sim *simrt.Sim, v *vmRoot, s *settingsServer) error {
	s.setUserData("vm-1", testSettings("agent-1", "vm-1", ""))
	m := mbus.NewMemory(sim)
	defer m.Close()
	a, err := agent.Start(agent.Config{
		Root: v.root, VMCID: "vm-1", StemcellAPIVersion: 2, Transport: m, Runtime: sim,
		MetadataURL: "http://fakeiaas.invalid/metadata", Fetcher: agent.HandlerFetcher(s.srv.Config.Handler),
		DeviceResolver: agent.ResolverVirtio, DeviceTimeout: 10 * time.Second,
	})
	if err != nil {
		return err
	}
	defer a.Stop()
	c, err := mbus.NewClient(mbus.ClientConfig{Transport: m, Runtime: sim, DirectorUUID: "sim", TaskPollInterval: 100 * time.Millisecond})
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.WaitUntilReady("agent-1", time.Minute); err != nil {
		return err
	}
	// The disk shows up 2 s (virtual) after the request: the resolver polls.
	sim.Go("attach", func() {
		sim.Sleep(2 * time.Second)
		v.attach(t, diskA, 'c', "sd", 1)
	})
	if _, err := c.Run("agent-1", "add_dynamic_disk", diskA, map[string]string{"path": "/dev/sdc"}); err != nil {
		return err
	}
	target, err := os.Readlink(v.root + "/var/vcap/data/dynamic_disks/" + diskA)
	if err != nil || target != "../../../../dev/sdc" {
		return errors.New("link missing or wrong: " + target)
	}
	// Dropped requests time out on the virtual clock.
	m.SetFault(func(msg mbus.Message) mbus.FaultAction {
		return mbus.FaultAction{Drop: strings.HasPrefix(msg.Subject, "agent.")}
	})
	if err := c.Ping("agent-1"); !errors.Is(err, mbus.ErrTimeout) {
		return errors.New("ping with requests dropped did not time out")
	}
	m.SetFault(nil)
	return c.Ping("agent-1")
}
