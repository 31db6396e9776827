package simulator

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/simulator/diskmodel"
	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/simulator/simrt"
	"github.com/cpilab/cpilab/vmroot"
)

func jsonUnmarshal(raw []byte, v any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, v)
}

// SimConfig configures one simulated run: the RunConfig that names it
// (seed, steps, profile, fault spec) and what shapes it.
type SimConfig struct {
	RunConfig
	// Ops, when set, is the exact operation list (replay, shrinking)
	// instead of RunConfig.Steps operations drawn from the seed.
	Ops []Op
	// Schedule, when Scripted, is the exact fault schedule instead of faults
	// drawn under RunConfig.Faults.
	Schedule faults.Schedule
	// Scripted selects Schedule.
	Scripted bool
	// Instances is the number of VMs deployed (default 3).
	Instances int
	// VMType is the instance group's vm_type (default "default").
	VMType string
	// Devices is the VMs' device style (resolver, hint, prefix); zero:
	// FixtureDevices. `cpilab simulate` draws it from the seed
	// (SeedConfig).
	Devices Devices
	// AgentMode is every agent's mode (default normal).
	AgentMode agent.Mode
	// Gates are scripted holds (scenarios).
	Gates []GateSpec
	// Trace receives the run's trace text; nil: only the hash is kept.
	Trace io.Writer
	// OutDir, when set, receives the porcupine visualization of a
	// non-linearizable history.
	OutDir string
	// MaxSteps bounds the runtime's scheduling decisions (default 5e6).
	MaxSteps int64
	// SkipLinearizability skips the porcupine check (faster sweeps).
	SkipLinearizability bool
	// tamper is passed to the world (control tests only).
	tamper tamper
	// files, when set, is the world's file system (WorldConfig.Files):
	// tests run vmroot.OS against the default memory one.
	files vmroot.Host
	// TempDir is where the run's data directory (VM roots, disk files) is
	// made and removed. Default: /dev/shm when it is a writable directory
	// (fakeiaas's many small file operations cost far less on tmpfs), else
	// os.TempDir().
	TempDir string
}

// defaultTempDir is /dev/shm when usable, else "" (os.TempDir()); probed
// once per process.
var defaultTempDir = sync.OnceValue(func() string {
	const shm = "/dev/shm"
	if fi, err := os.Stat(shm); err == nil && fi.IsDir() {
		if f, err := os.CreateTemp(shm, "cpilab-probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return shm
		}
	}
	return ""
})

// Outcome is what a run found.
type Outcome struct {
	// Config is the run's configuration, with defaults filled in.
	Config SimConfig
	// Result is the runtime's result (trace hash, steps, virtual time).
	Result simrt.Result
	// Err is nil when every invariant held, else the first *Violation (or a
	// runtime or set-up error).
	Err error
	// Violations lists every violation found, in order.
	Violations []*Violation
	// Fired is the schedule of faults that fired.
	Fired faults.Schedule
	// Shape is what the workload's shape drew for the seed.
	Shape Shape
	// Devices is the device style the run's VMs had.
	Devices Devices
	// Ops are the operations run.
	Ops []Op
	// History is the dynamic-disk API history.
	History []porcupine.Operation
	// Log has one line per operation: the op and its outcome, in
	// completion order.
	Log []string
	// Visualization is the porcupine HTML file written, if any.
	Visualization string
}

// Report is the run's RunReport, for Sweep.
func (o *Outcome) Report() RunReport {
	return RunReport{Steps: o.Result.Steps, TraceHash: o.Result.TraceHash, Err: o.Err}
}

// livenessWait bounds how long quiescence waits for every task to end
// once faults have healed.
const livenessWait = 30 * time.Minute

// Simulate runs one seed: it builds the world, runs the workload with
// faults, heals, checks liveness and the quiescent invariants, then the
// linearizability of the history.
func Simulate(cfg SimConfig) *Outcome {
	cfg.RunConfig = cfg.RunConfig.WithDefaults()
	if cfg.MaxSteps == 0 {
		cfg.MaxSteps = 5e6
	}
	out := &Outcome{Config: cfg}
	if err := cfg.Validate(); err != nil {
		out.Err = err
		return out
	}
	seeds := Derive(cfg.Seed)
	var inj *faults.Injector
	if cfg.Scripted {
		inj = faults.NewScripted(cfg.Schedule)
	} else if len(cfg.Faults.Rates) > 0 {
		inj = faults.NewRandom(cfg.Faults, seeds.Faults)
	}
	instances := cfg.Instances
	if instances <= 0 {
		instances = 3
	}
	shape, err := DrawShape(cfg.Workload, seeds.Workload)
	if err != nil {
		out.Err = err
		return out
	}
	out.Shape = shape
	out.Devices = cmp.Or(cfg.Devices, FixtureDevices)
	ops := cfg.Ops
	if ops == nil {
		var err error
		if ops, err = GenerateOps(cfg.Workload, seeds.Workload, cfg.Steps, instances); err != nil {
			out.Err = err
			return out
		}
	}
	out.Ops = ops
	tmp := cfg.TempDir
	if tmp == "" {
		tmp = defaultTempDir()
	}
	dir, err := os.MkdirTemp(tmp, "cpilab-sim-")
	if err != nil {
		out.Err = err
		return out
	}
	defer os.RemoveAll(dir)

	var rec diskmodel.Recorder
	var violations []*Violation
	var setupErr error
	var world *World
	// The agents still running at the end hold their VM roots open: a
	// sweep of many seeds in one process would run out of descriptors.
	defer func() {
		if world != nil {
			world.hooks.abandonAll()
		}
	}()
	out.Result = simrt.Run(simrt.Config{Seed: seeds.Runtime, MaxSteps: cfg.MaxSteps, MaxTime: 1000 * time.Hour, Trace: cfg.Trace}, func(s *simrt.Sim) {
		var gates *Gates
		if len(cfg.Gates) > 0 {
			gates = NewGates(s, cfg.Gates)
		}
		w, err := NewWorld(WorldConfig{Sim: s, DataDir: dir, Profile: cfg.Profile, Instances: instances, VMType: cfg.VMType, Devices: cfg.Devices,
			AgentMode: cfg.AgentMode, Faults: inj, Gates: gates, tamper: cfg.tamper, Files: cfg.files,
			LockLease: shape.LockLease, SlowCPI: shape.SlowCPI, DiskWorkers: cmp.Or(cfg.DiskWorkers, shape.DiskWorkers), OverrideZeroWorkers: cfg.DiskWorkers > 0})
		if err != nil {
			setupErr = err
			return
		}
		world = w
		checkers := &Checkers[View]{Seed: cfg.Seed, Safety: SafetyCheckers, Quiescent: QuiescentCheckers, Idle: IdleCheckers}
		wr := &workloadRun{w: w, ops: ops, disks: diskNames(ops), history: &rec, checkers: checkers,
			log: func(line string) { out.Log = append(out.Log, line) }}
		wr.run()
		w.Heal()
		// Liveness: every task ends once faults heal.
		deadline := s.Now().Add(livenessWait)
		for w.tasksOpen() && s.Now().Before(deadline) {
			s.Sleep(5 * time.Second)
		}
		violations = append(violations, w.Violations()...)
		steps := len(ops)
		live := w.livenessView(wr.givenTasks())
		if err := checkLiveness(live); err != nil {
			err = fmt.Errorf("%w (%s after faults healed)", err, livenessWait)
			if w.knobs.ZeroDynamicDiskWorkers {
				r, _ := RaceByLetter("i")
				err = fmt.Errorf("%w: upstream race (i), %s; --disk-workers N runs N workers to get past it", err, r.Title)
			}
			violations = append(violations, &Violation{Invariant: InvLiveness, Phase: AtQuiescence, Step: steps, Seed: cfg.Seed, Err: err})
			return
		}
		if err := wr.progressViolation(); err != nil {
			violations = append(violations, &Violation{Invariant: InvProgress, Phase: AtQuiescence, Step: steps, Seed: cfg.Seed, Err: err})
		}
		if err := w.lostLockViolation(); err != nil {
			violations = append(violations, &Violation{Invariant: InvLostLockHonoured, Phase: AtQuiescence, Step: steps, Seed: cfg.Seed, Err: err})
		}
		if err := checkers.AtQuiescence(steps, w.QuiescentView(rec.History(), live.Given)); err != nil {
			violations = append(violations, err.(*Violation))
		}
	})
	for _, v := range violations {
		v.Seed = cfg.Seed
	}
	if inj != nil {
		out.Fired = inj.Fired()
	}
	out.History = rec.History()
	switch {
	case setupErr != nil:
		out.Err = setupErr
	case out.Result.Err != nil:
		out.Err = out.Result.Err
	}
	if out.Err == nil && len(violations) == 0 && !cfg.SkipLinearizability {
		opts := diskmodel.Options{Timeout: 10 * time.Second}
		if cfg.OutDir != "" {
			if err := os.MkdirAll(cfg.OutDir, 0o755); err != nil {
				out.Err = err
				return out
			}
			opts.Visualization = filepath.Join(cfg.OutDir, fmt.Sprintf("seed-%s.html", cfg.Seed))
		}
		lin, err := diskmodel.Check(out.History, opts)
		if err != nil {
			out.Err = err
		} else if !lin.Linearizable() {
			out.Visualization = lin.Visualization
			violations = append(violations, &Violation{Invariant: InvLinearizable, Phase: AtQuiescence, Step: len(ops), Seed: cfg.Seed,
				Err: fmt.Errorf("disks %v: no linearization of the history:\n%s", lin.Illegal, diskmodel.Describe(out.History))})
		}
	}
	out.Violations = violations
	if out.Err == nil && len(violations) > 0 {
		out.Err = violations[0]
	}
	return out
}

func diskNames(ops []Op) []string {
	var names []string
	for _, o := range ops {
		if o.Kind.hasDisk() && !slices.Contains(names, o.Disk) {
			names = append(names, o.Disk)
		}
	}
	slices.Sort(names)
	return names
}
