package simulator_test

import (
	"context"
	"fmt"
	"time"

	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/simulator"
	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/simulator/simrt"
)

func ExampleRunConfig_Command() {
	spec, _ := faults.ParseSpec("cpi-error=0.05,latency=0.1:10ms..2s")
	cfg := simulator.RunConfig{Seed: 42, Profile: simulator.ProfileUpstream, Faults: spec}
	fmt.Println(cfg.Command())
	// Output: cpilab simulate --seed 42 --steps 200 --profile upstream --faults cpi-error=0.05,latency=0.1:10ms..2s
}

func ExampleSweep() {
	run := func(seed simulator.Seed) simulator.RunReport {
		res := simrt.Run(simrt.Config{Seed: simulator.Derive(seed).Runtime}, func(s *simrt.Sim) {
			q := rt.NewQueue[int](s)
			s.Go("producer", func() { s.Sleep(time.Hour); q.Push(1) })
			q.Pop(0)
		})
		return simulator.RunReport{Steps: res.Steps, TraceHash: res.TraceHash, Err: res.Err}
	}
	res, _ := simulator.Sweep(context.Background(), simulator.SweepConfig{
		Seeds: simulator.SeedRange{From: 1, To: 100},
		Run:   run,
	})
	fmt.Println(res.Runs, "runs,", len(res.Failures), "failures")
	// Output: 100 runs, 0 failures
}

// Two operations, run under the upstream behaviour of race (e) and under the
// reference director: upstream deletes the disk while it is attached.
func ExampleSimulate() {
	ops := []simulator.Op{
		{Client: 0, Kind: simulator.OpProvide, Disk: "data", VM: 0},
		{Client: 0, Kind: simulator.OpDelete, Disk: "data"},
	}
	for _, profile := range []string{"upstream:e", simulator.ProfileReference} {
		o := simulator.Simulate(simulator.SimConfig{RunConfig: simulator.RunConfig{Seed: 1, Profile: profile}, Ops: ops, Scripted: true})
		fmt.Printf("%s: %s\n", profile, simulator.Verdict(o))
	}
	// Output:
	// upstream:e: violated: no-delete-disk-of-attached-disk (after step)
	// reference: ok
}
