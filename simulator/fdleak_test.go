//go:build linux

package simulator_test

import (
	"os"
	"testing"

	"github.com/cpilab/cpilab/simulator"
)

// A run leaves no descriptor open: the agents still running at its end
// held their VM roots open, three descriptors a seed, so a long sweep in
// one process ran out of them (found by the adversarial campaign).
func TestRunsLeaveNoDescriptorOpen(t *testing.T) {
	count := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	run := func(seed uint64) {
		c := simulator.RunConfig{Seed: simulator.Seed(seed), Steps: 20}
		if o := simulator.Simulate(simulator.SimConfig{RunConfig: c, SkipLinearizability: true}); o.Err != nil {
			t.Fatalf("seed %d: %v", seed, o.Err)
		}
	}
	run(1) // whatever is opened once per process
	before := count()
	for seed := uint64(2); seed < 6; seed++ {
		run(seed)
	}
	if after := count(); after > before {
		t.Fatalf("%d open descriptors after 4 more runs, %d before", after, before)
	}
}
