package simulator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/cpilab/cpilab/simulator/diskmodel"
	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/simulator/scenario"
	"github.com/cpilab/cpilab/simulator/shrink"
)

// The entry points of `cpilab simulate` and `cpilab replay` (the CLI maps
// its flags onto these config structs and prints what they return).

// SimulateConfig configures SimulateSeed: `cpilab simulate --seed N --steps M
// --profile P --faults SPEC`.
type SimulateConfig struct {
	// Run names the run (RunConfig.RegisterFlags binds the flags).
	Run RunConfig
	// OutDir receives, for a failing run, the minimized trace (seed-N.txt)
	// and porcupine's visualization of its dynamic-disk history
	// (seed-N.html: the illegal part of a linearizability violation, the
	// history's linearization for any other failure). Default ".".
	OutDir string
	// NoShrink skips shrinking: the trace file then lists the whole run.
	NoShrink bool
	// MaxShrinkRuns bounds the runs shrinking makes (default 200).
	MaxShrinkRuns int
	// Trace, when set, receives the run's trace text.
	Trace io.Writer
}

// SimulateResult is what SimulateSeed found.
type SimulateResult struct {
	// Outcome is the run's outcome.
	Outcome *Outcome
	// Failure is the report of a failing run; nil when it passed.
	Failure *FailureReport
	// ShrinkStats says what shrinking did (zero when it did not run).
	ShrinkOps, ShrinkFaults shrink.Stats
}

// String is "PASS seed N: …" or the failure report.
func (r *SimulateResult) String() string {
	if r.Failure != nil {
		return r.Failure.String()
	}
	o := r.Outcome
	return fmt.Sprintf("PASS seed %s (profile %s, %d steps, workload %s, devices %s, faults %s): %d faults fired, trace hash %016x, %d runtime steps, %v virtual\n",
		o.Config.Seed, o.Config.Profile, o.Config.Steps, o.Shape, o.Devices, o.Config.Faults, len(o.Fired), o.Result.TraceHash, o.Result.Steps, o.Result.Elapsed)
}

// SeedConfig is the run `cpilab simulate` makes of run: the seed also
// draws the VMs' device style (DrawDevices), so that a sweep covers every
// resolver and hint the agent supports; tests and scenarios that build a
// SimConfig themselves keep FixtureDevices unless they name one.
func SeedConfig(run RunConfig) SimConfig {
	return SimConfig{RunConfig: run, Devices: DrawDevices(Derive(run.Seed).Workload)}
}

// SimulateSeed runs one seed; on failure it shrinks the run to a minimal
// list of operations and faults, writes it as a scenario file in OutDir and
// returns the failure report (seed, fault schedule, trace path, replay
// commands). The error is for a configuration that cannot run or a file
// that cannot be written.
func SimulateSeed(cfg SimulateConfig) (*SimulateResult, error) {
	cfg.Run = cfg.Run.WithDefaults()
	if err := cfg.Run.Validate(); err != nil {
		return nil, err
	}
	if cfg.OutDir == "" {
		cfg.OutDir = "."
	}
	if cfg.MaxShrinkRuns == 0 {
		cfg.MaxShrinkRuns = 200
	}
	sc := SeedConfig(cfg.Run)
	sc.Trace, sc.OutDir = cfg.Trace, cfg.OutDir
	o := Simulate(sc)
	res := &SimulateResult{Outcome: o}
	if o.Err == nil {
		return res, nil
	}
	if _, ok := AsViolation(o.Err); !ok {
		return res, o.Err // not a finding: the run itself broke
	}
	if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
		return res, err
	}
	min := SimConfig{RunConfig: cfg.Run, Devices: o.Devices, Ops: o.Ops, Schedule: o.Fired, Scripted: true}
	if !cfg.NoShrink {
		min, res.ShrinkOps, res.ShrinkFaults = Shrink(o, cfg.MaxShrinkRuns)
	}
	path := filepath.Join(cfg.OutDir, fmt.Sprintf("seed-%s.txt", cfg.Run.Seed))
	text, err := TraceFile(min, fmt.Sprintf("minimized from: %s", cfg.Run.Command()))
	if err != nil {
		return res, err
	}
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return res, err
	}
	vis := o.Visualization
	if vis == "" {
		vis = filepath.Join(cfg.OutDir, fmt.Sprintf("seed-%s.html", cfg.Run.Seed))
		if err := diskmodel.Visualize(o.History, vis, 10*time.Second); err != nil {
			return res, err
		}
	}
	res.Failure = &FailureReport{Config: cfg.Run, Err: o.Err, TraceHash: o.Result.TraceHash, Faults: o.Fired,
		TraceFile: path, Visualization: vis}
	return res, nil
}

// Shrink reduces a failing outcome to a minimal list of operations, then a
// minimal fault schedule, for which a replay (scripted faults) still
// violates the same invariant. runs bounds the replays of each phase.
func Shrink(o *Outcome, runs int) (SimConfig, shrink.Stats, shrink.Stats) {
	v, _ := AsViolation(o.Err)
	base := SimConfig{RunConfig: o.Config.RunConfig, Instances: o.Config.Instances, VMType: o.Config.VMType,
		Devices: o.Devices, AgentMode: o.Config.AgentMode, Scripted: true, SkipLinearizability: v == nil || v.Invariant != InvLinearizable}
	fails := func(ops []Op, sched faults.Schedule) bool {
		c := base
		c.Ops, c.Schedule, c.Steps = ops, sched, len(ops)
		got, ok := AsViolation(Simulate(c).Err)
		return ok && v != nil && got.Invariant == v.Invariant
	}
	ops, sched := o.Ops, o.Fired
	if !fails(ops, sched) {
		// The scripted replay diverged: keep the whole run.
		base.Ops, base.Schedule, base.Steps = ops, sched, len(ops)
		return base, shrink.Stats{}, shrink.Stats{}
	}
	// Faults first: fewer faults leave the operations freer to go. Faults
	// match their operations by name and rank (Fault.Nth), so they survive
	// the removal of unrelated operations.
	sched, faultStats := shrink.Minimize(sched, func(s faults.Schedule) bool { return fails(ops, s) }, shrink.Options{MaxTests: runs / 2})
	ops, opStats := shrink.Minimize(ops, func(c []Op) bool { return fails(c, sched) }, shrink.Options{MaxTests: runs})
	if len(sched) > 0 {
		var again shrink.Stats
		sched, again = shrink.Minimize(sched, func(s faults.Schedule) bool { return fails(ops, s) }, shrink.Options{MaxTests: runs / 2})
		faultStats.Tests += again.Tests
		faultStats.To = again.To
		faultStats.Capped = faultStats.Capped || again.Capped
		// Earlier ranks ("the first detach_disk" rather than the fourth)
		// let the operations that only led up to the fault go too.
		if lowered, tests := lowerRanks(sched, func(s faults.Schedule) bool { return fails(ops, s) }, runs/2); tests > 0 {
			faultStats.Tests += tests
			if !slices.Equal(lowered, sched) {
				sched = lowered
				more, st := shrink.Minimize(ops, func(c []Op) bool { return fails(c, sched) }, shrink.Options{MaxTests: runs})
				ops = more
				opStats.Tests += st.Tests
				opStats.To = st.To
				opStats.Capped = opStats.Capped || st.Capped
			}
		}
	}
	base.Ops, base.Schedule, base.Steps = ops, sched, len(ops)
	base.SkipLinearizability = false
	return base, opStats, faultStats
}

// lowerRanks tries, fault by fault, the smallest rank (Fault.Nth) for which
// the schedule still fails, within budget runs; it returns the schedule and
// the runs made.
func lowerRanks(sched faults.Schedule, fails func(faults.Schedule) bool, budget int) (faults.Schedule, int) {
	out := slices.Clone(sched)
	tests := 0
	// All together first: faults that work as a pair (a lost attach_disk
	// and the failing detach_disk that undoes it) move together.
	low := 0
	for _, f := range out {
		if f.Nth > 0 && (low == 0 || f.Nth < low) {
			low = f.Nth
		}
	}
	for d := low - 1; d >= 1 && tests < budget; d-- {
		cand := slices.Clone(out)
		for i := range cand {
			if cand[i].Nth > 0 {
				cand[i].Nth -= d
			}
		}
		tests++
		if fails(cand) {
			out = cand
			break
		}
	}
	for i := range out {
		for n := 1; n < out[i].Nth && tests < budget; n++ {
			cand := slices.Clone(out)
			cand[i].Nth = n
			tests++
			if fails(cand) {
				out = cand
				break
			}
		}
	}
	return out, tests
}

// TraceFile renders cfg (listed operations and scripted faults) as a
// scenario file with one run command, its expected output filled in by
// running it once. comment heads the file.
func TraceFile(cfg SimConfig, comment string) (string, error) {
	// The faults as they fire in this run, so that their indices (At) are
	// this run's, not the original's.
	// The devices as the seed drew them, so that the file replays them.
	o := Simulate(cfg)
	if fired := o.Fired; cfg.Scripted && len(fired) == len(cfg.Schedule) {
		cfg.Schedule = fired
	}
	cfg.Devices = o.Devices
	var b strings.Builder
	for _, l := range strings.Split(comment, "\n") {
		b.WriteString("# " + l + "\n")
	}
	b.WriteString("# replay: cpilab replay FILE\n\n")
	fmt.Fprintf(&b, "run seed=%s profile=%s", cfg.Seed, cfg.Profile)
	if cfg.Instances > 0 {
		fmt.Fprintf(&b, " instances=%d", cfg.Instances)
	}
	if cfg.VMType != "" {
		b.WriteString(" vm-type=" + cfg.VMType)
	}
	if cfg.AgentMode != "" {
		b.WriteString(" agent-mode=" + string(cfg.AgentMode))
	}
	if cfg.Devices != FixtureDevices {
		b.WriteString(" devices=" + cfg.Devices.String())
	}
	b.WriteString(" workload=" + cmp.Or(cfg.Workload.Shape, ShapeMixed))
	if cfg.DiskWorkers > 0 {
		fmt.Fprintf(&b, " disk-workers=%d", cfg.DiskWorkers)
	}
	b.WriteString("\n")
	for _, o := range cfg.Ops {
		b.WriteString(o.String() + "\n")
	}
	for _, g := range cfg.Gates {
		b.WriteString(g.String() + "\n")
	}
	for _, f := range cfg.Schedule.Sorted() {
		b.WriteString("fault " + f.String() + "\n")
	}
	b.WriteString(scenario.Separator + "\n")
	// Fill in the expected output by running the file once.
	tmp, err := os.CreateTemp("", "cpilab-trace-*.txt")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(b.String()); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	if _, err := Replay(ReplayConfig{Path: tmp.Name(), Rewrite: true}); err != nil {
		return "", err
	}
	out, err := os.ReadFile(tmp.Name())
	return string(out), err
}

// SweepRunConfig configures SweepSeeds: `cpilab simulate --seeds A..B
// [--shard K/N]`.
type SweepRunConfig struct {
	// Seeds is the range of root seeds.
	Seeds SeedRange
	// Shard, when set, runs only that shard's block of Seeds (Shard.Of);
	// zero: the whole range.
	Shard Shard
	// OnRun, when set, is told of every finished run (concurrently), for a
	// progress display.
	OnRun func(seed Seed, rep RunReport)
	// Run is the template run: its Seed is replaced by each seed.
	Run RunConfig
	// Parallelism is the number of runs at once (default GOMAXPROCS: every
	// core).
	Parallelism int
	// KeepGoing runs every seed instead of stopping at the lowest failing
	// one.
	KeepGoing bool
	// SkipLinearizability skips porcupine (faster; the other checks run).
	SkipLinearizability bool
	// OutDir, NoShrink and MaxShrinkRuns are as in SimulateConfig, for the
	// first failure.
	OutDir        string
	NoShrink      bool
	MaxShrinkRuns int
}

// SweepSeeds runs every seed of the range on every core and, when a seed
// fails, reruns the lowest failing one through SimulateSeed (shrinking it,
// writing its trace and report).
func SweepSeeds(ctx context.Context, cfg SweepRunConfig) (SweepResult, *SimulateResult, error) {
	run := func(seed Seed) SimConfig {
		r := cfg.Run
		r.Seed = seed
		c := SeedConfig(r)
		c.SkipLinearizability = cfg.SkipLinearizability
		return c
	}
	block, err := cfg.Shard.Of(cfg.Seeds)
	if err != nil {
		return SweepResult{}, nil, err
	}
	if err := cfg.Run.Validate(); err != nil {
		return SweepResult{}, nil, err
	}
	res, err := Sweep(ctx, SweepConfig{Seeds: block, Parallelism: cfg.Parallelism, StopOnFailure: !cfg.KeepGoing,
		Run:    func(seed Seed) RunReport { return Simulate(run(seed)).Report() },
		Replay: func(seed Seed) string { return run(seed).Command() }, OnRun: cfg.OnRun})
	if err != nil || res.First() == nil {
		return res, nil, err
	}
	first := res.First()
	if _, ok := AsViolation(first.Err); !ok {
		return res, nil, fmt.Errorf("seed %s: %w", first.Seed, first.Err)
	}
	c := cfg.Run
	c.Seed = first.Seed
	sr, err := SimulateSeed(SimulateConfig{Run: c, OutDir: cfg.OutDir, NoShrink: cfg.NoShrink, MaxShrinkRuns: cfg.MaxShrinkRuns})
	if err == nil && sr.Failure == nil {
		err = errors.New("the failing seed passed when run again: the simulation is not deterministic")
	}
	return res, sr, err
}
