// Package simulator runs deterministic simulations of a whole dynamic-disk
// installation, checks them from outside, and turns a failure into a
// minimal, replayable scenario file. Its sub-packages hold the
// pieces that need no director:
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
// # The world
//
// NewWorld builds, on one simrt.Sim: the reference Director (package
// director, with the knobs of a profile) on a memory store; the reference
// CPI (fakeiaas/refcpi) in process behind cpiv2.NewLoopback; fakeiaas with a
// memory store and VM roots in a temporary directory; a reference agent per
// VM, booted by fakeiaas's VM hooks BootDelay after the VM and fetching its
// settings through agent.HandlerFetcher; and mbus.Memory between them. Faults
// come from one faults.Injector at every seam: the CPI (typed errors with or
// without ok_to_retry, responses applied but lost, latency), the director
// (crash at a workload step, restart from its store), the agents
// (unresponsive, restarted, old), the VMs (restart on attach) and the mbus
// (messages lost or delayed).
//
// A run (Simulate) deploys the VMs, runs a workload (orchestrator clients
// doing provide, detach, delete across VMs and disk names; an operator doing
// recreate (half of them re-attaching the dynamic disks), restart,
// stop/start, hard stop, VM delete, deployment delete;
// WorkloadConfig sets the mix and size), heals the faults, waits for every
// task to end, and checks. Every dynamic-disk call is recorded for the
// linearizability check.
//
// # Checkers
//
// Against the fakeiaas oracle and the agents' VM roots, never the code
// under test's own records where those can decide:
//
//   - at every CPI call and after every step: a disk is attached to at most
//     one VM; no attach_disk of a disk the IaaS has attached elsewhere; no
//     delete_vm while the IaaS has a dynamic disk attached to that VM; no
//     delete_disk of a disk the IaaS has attached; a provide or attach
//     reported done leaves, on the VM the IaaS attached the answered disk
//     to, a symlink reaching that disk's device;
//   - whenever the workload is idle (every operation answered, every task
//     it was given seen to its end, the Director up), faults or not: the no-leak and
//     records checks below, so that a record a task left wrong is seen
//     before a later operation on the name mends it;
//   - once quiescent: every task ended, both those the API lists and those
//     it gave the workload (liveness); every IaaS disk is listed by the
//     API, as a dynamic disk or an orphan (no leak); the API's list matches
//     the IaaS, and the last OK provide or attach of each name still holds
//     when no other operation on the name was running as it was called
//     (records; a listed disk the IaaS no longer has, or has detached, is
//     allowed only while a failed delete or detach of its name is in
//     doubt, as upstream's jobs keep the record when the CPI call raises,
//     and the next OK delete or detach must settle it; a disk listed
//     attached that the IaaS has detached also while a provide, attach or
//     VM operation that failed on a CPI fault is); and the VM roots'
//     symlinks match the IaaS attachments (each reaching its disk's
//     device);
//   - when a recreate that re-attaches the instance's dynamic disks
//     answers OK: each name whose last provide or attach put its disk on
//     that instance, with no other operation on it since, has that disk
//     attached to the instance's new VM, with its symlink (records);
//   - after every operation: a failed one is explained by a fault on its
//     path, an invalid request or a documented refusal (explain.go); a
//     refusal that names a task whose end the workload had seen (a lock or
//     a disk state left behind) is not;
//   - once liveness holds: every provide or attach with no fault on its
//     path ended within its client's 20-minute wait (progress);
//   - linearizability of the history per disk name (porcupine), with an
//     HTML visualization on a violation.
//
// Every checker decides from what a user can see: the Director's HTTP API
// (served in process; the workload's clients poll their tasks through
// director.API.Task, what GET /tasks/:id encodes, without the round trip
// through JSON), the fake cloud's oracle, the agents' VM roots and the
// workload's own record of what it asked and was told. None reads the
// Director's store.
//
// # Races, scenarios, replay
//
// Races lists the upstream races (a)–(i) (docs/upstream.md), each with the
// director knob behind it ("upstream:X" profiles), the invariant it
// violates, and a workload and fault mix that random search finds it with
// (Race.Find). fixtures/scenarios holds one scenario file per race, each
// failing under the race's upstream behaviour and passing under reference;
// a file is run commands whose input lists operations, gates that force an
// interleaving, and scripted faults (see ScenarioRegistry).
//
// # The CLI's entry points
//
//	// cpilab simulate --seed 42 --steps 200 --profile upstream --faults default
//	var run simulator.RunConfig
//	run.RegisterFlags(fs)
//	res, err := simulator.SimulateSeed(simulator.SimulateConfig{Run: run, OutDir: "."})
//	fmt.Print(res) // PASS …, or the FailureReport: seed, fault schedule,
//	               // minimized trace path, replay commands
//
//	// cpilab simulate --seeds 1..10000 (every core)
//	sweep, first, err := simulator.SweepSeeds(ctx, simulator.SweepRunConfig{Seeds: r, Run: run, OutDir: "."})
//
//	// cpilab simulate --seeds 1..1000000 --shard 3/16 --json-report out-3.json
//	sweep, first, err := simulator.SweepSeeds(ctx, simulator.SweepRunConfig{Seeds: r, Shard: shard, Run: run, KeepGoing: true})
//	rep, err := simulator.NewSweepReport(run, r, shard, true, sweep)
//	err = rep.WriteFile("out-3.json")
//
//	// cpilab simulate merge out-*.json
//	merged, err := simulator.MergeSweepReports(reports, names) // every shard exactly once
//
//	// cpilab replay FILE
//	rep, err := simulator.Replay(simulator.ReplayConfig{Path: file, Out: os.Stdout})
//	if rep.Failed() { os.Exit(1) }
//
// A run has one root Seed. Derive splits it into sub-seeds, one per
// subsystem (runtime, workload, faults), so that the runtime's scheduler, the
// workload and the faults draw from independent streams; RunConfig.Command
// prints the command that replays the run. Sweep runs a range of seeds on
// every core, each run on its own runtime.
package simulator
