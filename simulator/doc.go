// Package simulator is the frame of cpilab's deterministic simulations:
// seeds and replay commands, checkers, and the sweep runner. Its
// sub-packages hold the pieces that need no director:
//
//   - simrt: the deterministic rt.Runtime (virtual clock, one logical
//     goroutine at a time, seeded scheduler, trace hash);
//   - faults: faults as values, drawn per run from the seed under a --faults
//     spec, printed and parsed back for replay and shrinking;
//   - scenario: datadriven scenario files with a -rewrite flag;
//   - diskmodel: the porcupine linearizability model of the dynamic-disk
//     API;
//   - shrink: delta debugging of a failing operation list or fault schedule.
//
// A run has one root Seed (STYLE 9). Derive splits it into sub-seeds, one per
// subsystem, so that the runtime's scheduler, the workload and the faults
// draw from independent streams. A RunConfig names a run and prints the
// command that replays it:
//
//	cfg := simulator.RunConfig{Seed: 42, Profile: simulator.ProfileUpstream, Faults: spec}
//	seeds := simulator.Derive(cfg.Seed)
//	sim := simrt.New(simrt.Config{Seed: seeds.Runtime, MaxSteps: 1e7})
//	inj := faults.NewRandom(cfg.Faults, seeds.Faults)
//	…
//	fmt.Println(cfg.Command()) // cpilab simulate --seed 42 --steps 200 --profile upstream --faults …
//
// Checkers (STYLE 12) are invariants over a view of the system taken from
// outside it (the fakeiaas oracle, the VM roots, the director's store read
// directly): safety checks after every step, quiescent checks once faults
// have healed. A violation names the invariant, the step and the seed.
//
// A failing run prints a FailureReport: the seed, the fault schedule, the
// minimized trace's path and the exact replay commands.
//
// Sweep runs a range of seeds on every core, each run on its own runtime,
// and reports the failures with their replay commands:
//
//	res, _ := simulator.Sweep(ctx, simulator.SweepConfig{
//		Seeds:         simulator.SeedRange{From: 1, To: 10000},
//		StopOnFailure: true,
//		Run:           func(s simulator.Seed) simulator.RunReport { … },
//		Replay:        func(s simulator.Seed) string { return simulator.RunConfig{Seed: s}.Command() },
//	})
//	if f := res.First(); f != nil {
//		fmt.Println(f) // seed 1234: invariant "…" violated after step 17 (seed 1234): … replay: cpilab simulate --seed 1234 …
//	}
package simulator
