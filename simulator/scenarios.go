package simulator

import (
	"fmt"
	"io"
	"strings"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/simulator/scenario"
)

// Scenario files script simulated runs. Each `run` command is one
// whole simulation: its arguments configure the world, its input lines list
// the operations (one client's in order, clients concurrently), the gates
// that force an interleaving, and the faults to inject; its output is each
// operation's outcome, in completion order, then the verdict:
//
//	# race (a): two concurrent provides of one new name
//	run profile=upstream:a seed=1
//	c0 provide disk=d vm=0
//	c1 provide disk=d vm=1
//	barrier at=cpi:create_disk n=2 timeout=30s
//	----
//	c0 provide disk=d vm=0: failed
//	c1 provide disk=d vm=1: ok
//	violated: no-leaked-disk (at quiescence)
//
// Input lines:
//
//	c<N> <op> [disk=NAME] [vm=I] [delay=D] [after=POINT]   an operation (see Op, OpKinds)
//	c<N> silence vm=I for=D                                 the instance's agent answers nothing for D
//	barrier at=POINT n=N timeout=D                         a gate (see GateSpec)
//	hold at=POINT until=c<N> timeout=D
//	fault <fault>                                          a scripted fault (faults.Fault text)
//
// Arguments of run: seed (default 1), profile (default reference),
// instances (default 3), vm-type (default|restarting), agent-mode
// (normal|old), and, for a random workload instead of listed operations,
// steps, faults (a fault spec), clients, disks and mix.

// Verdict is the last output line of a run: "ok" or "violated: <invariant>
// (<phase>)", or "error: …" for a run that could not be made.
func Verdict(o *Outcome) string {
	if o.Err == nil {
		return "ok"
	}
	if v, ok := AsViolation(o.Err); ok {
		return fmt.Sprintf("violated: %s (%s)", v.Invariant, v.Phase)
	}
	return "error: " + o.Err.Error()
}

// ParseRunCommand turns a scenario `run` command into the configuration it
// runs.
func ParseRunCommand(c *scenario.Command) (SimConfig, error) {
	var cfg SimConfig
	seed, err := c.ValueOr("seed", "1")
	if err != nil {
		return cfg, err
	}
	if cfg.Seed, err = ParseSeed(seed); err != nil {
		return cfg, err
	}
	if cfg.Profile, err = c.ValueOr("profile", ProfileReference); err != nil {
		return cfg, err
	}
	if c.Has("instances") {
		if cfg.Instances, err = c.Int("instances"); err != nil {
			return cfg, err
		}
	}
	if cfg.VMType, err = c.ValueOr("vm-type", ""); err != nil {
		return cfg, err
	}
	mode, err := c.ValueOr("agent-mode", "")
	if err != nil {
		return cfg, err
	}
	cfg.AgentMode = agent.Mode(mode)
	// A scenario names its devices, or has the embedded stemcell's: a
	// file replays the same run whatever the seed would draw.
	cfg.Devices = FixtureDevices
	if c.Has("devices") {
		text, err := c.Value("devices")
		if err != nil {
			return cfg, err
		}
		if cfg.Devices, err = ParseDevices(text); err != nil {
			return cfg, fmt.Errorf("%s: %w", c.Pos, err)
		}
	}
	if c.Has("steps") {
		if cfg.Steps, err = c.Int("steps"); err != nil {
			return cfg, err
		}
		if cfg.Steps < 1 {
			return cfg, fmt.Errorf("%s: steps=%d: want a number of workload steps ≥ 1", c.Pos, cfg.Steps)
		}
	}
	if c.Has("faults") {
		spec, err := c.Value("faults")
		if err != nil {
			return cfg, err
		}
		if cfg.Faults, err = faults.ParseSpec(spec); err != nil {
			return cfg, err
		}
	}
	if c.Has("mix") {
		if cfg.Workload.Mix, err = c.Value("mix"); err != nil {
			return cfg, err
		}
	}
	if c.Has("clients") {
		if cfg.Workload.Clients, err = c.Int("clients"); err != nil {
			return cfg, err
		}
	}
	// A scenario's world is the light shape's unless it names another.
	if cfg.Workload.Shape, err = c.ValueOr("workload", ShapeLight); err != nil {
		return cfg, err
	}
	if c.Has("disk-workers") {
		if cfg.DiskWorkers, err = c.Int("disk-workers"); err != nil {
			return cfg, err
		}
	}
	if c.Has("disks") {
		if cfg.Workload.Disks, err = c.Int("disks"); err != nil {
			return cfg, err
		}
	}
	for n, line := range strings.Split(c.Input, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		word, rest, _ := strings.Cut(line, " ")
		switch {
		case word == "barrier" || word == "hold":
			g, err := ParseGate(line)
			if err != nil {
				return cfg, fmt.Errorf("%s input line %d: %w", c.Pos, n+1, err)
			}
			cfg.Gates = append(cfg.Gates, g)
		case word == "fault":
			f, err := faults.ParseFault(rest)
			if err != nil {
				return cfg, fmt.Errorf("%s input line %d: %w", c.Pos, n+1, err)
			}
			cfg.Schedule = append(cfg.Schedule, f)
			cfg.Scripted = true
		default:
			o, err := ParseOp(line)
			if err != nil {
				return cfg, fmt.Errorf("%s input line %d: %w", c.Pos, n+1, err)
			}
			cfg.Ops = append(cfg.Ops, o)
		}
	}
	if cfg.Ops == nil && cfg.Steps == 0 {
		return cfg, fmt.Errorf("%s: run lists no operations and has no steps=N", c.Pos)
	}
	if cfg.Ops != nil {
		cfg.Steps = len(cfg.Ops)
		if !cfg.Scripted && len(cfg.Faults.Rates) == 0 {
			cfg.Scripted = true // listed operations: only the listed faults
		}
	}
	return cfg, nil
}

// ScenarioState is what the commands of one scenario file share.
type ScenarioState struct {
	// OutDir receives porcupine visualizations ("": none).
	OutDir string
	// Outcomes are the outcomes of the file's runs, in order.
	Outcomes []*Outcome
}

// ScenarioRegistry returns the scenario commands: run.
func ScenarioRegistry() *scenario.Registry[*ScenarioState] {
	reg := scenario.NewRegistry[*ScenarioState]()
	reg.Register("run", "run [seed=N] [profile=P] [instances=N] [vm-type=T] [agent-mode=M] [devices=R/H/P] [workload=SHAPE] [disk-workers=N] [steps=N faults=SPEC] + input: ops, gates, faults",
		func(st *ScenarioState, c *scenario.Command) (string, error) {
			cfg, err := ParseRunCommand(c)
			if err != nil {
				return "", err
			}
			cfg.OutDir = st.OutDir
			o := Simulate(cfg)
			st.Outcomes = append(st.Outcomes, o)
			var b strings.Builder
			if cfg.Ops != nil {
				for _, l := range o.Log {
					b.WriteString(l + "\n")
				}
			}
			b.WriteString(Verdict(o))
			return b.String(), nil
		})
	return reg
}

// ReplayConfig configures Replay (`cpilab replay FILE`).
type ReplayConfig struct {
	// Path is the scenario or minimized trace file.
	Path string
	// Rewrite writes the actual outputs into the file instead of comparing.
	Rewrite bool
	// OutDir receives porcupine visualizations ("": none).
	OutDir string
	// Out receives one line per run (its verdict) and every mismatch.
	Out io.Writer
}

// ReplayResult is what Replay found.
type ReplayResult struct {
	// Report is the scenario run's report (mismatches).
	Report *scenario.Report
	// Outcomes are the runs' outcomes, in file order.
	Outcomes []*Outcome
}

// Failed reports whether an output differed from the file's expectation.
func (r *ReplayResult) Failed() bool { return r.Report != nil && len(r.Report.Mismatches) > 0 }

// Violated reports whether a run of the file violated an invariant (as a
// minimized trace or a race file's upstream run is expected to).
func (r *ReplayResult) Violated() bool {
	for _, o := range r.Outcomes {
		if o.Err != nil {
			return true
		}
	}
	return false
}

// Replay runs a scenario or minimized trace file, comparing each run's
// output with the file (or rewriting it). The error is for a file that
// cannot be read or parsed.
func Replay(cfg ReplayConfig) (*ReplayResult, error) {
	if !cfg.Rewrite {
		if err := CheckReplayFile(cfg.Path); err != nil {
			return &ReplayResult{}, err
		}
	}
	st := &ScenarioState{OutDir: cfg.OutDir}
	rep, err := scenario.Run(cfg.Path, ScenarioRegistry(), st, scenario.Options{Rewrite: cfg.Rewrite})
	res := &ReplayResult{Report: rep, Outcomes: st.Outcomes}
	if err != nil {
		return res, fmt.Errorf("%w: %w", ErrInvalidFile, err)
	}
	if cfg.Out != nil {
		for i, o := range st.Outcomes {
			fmt.Fprintf(cfg.Out, "run %d (seed %s, profile %s): %s, trace %016x\n", i+1, o.Config.Seed, o.Config.Profile,
				Verdict(o), o.Result.TraceHash)
		}
		for _, m := range rep.Mismatches {
			fmt.Fprintln(cfg.Out, "MISMATCH "+m.String())
		}
		if rep.Rewritten {
			fmt.Fprintln(cfg.Out, "rewrote "+cfg.Path)
		}
	}
	return res, nil
}

// ErrInvalidFile is wrapped by Replay's error for a file that cannot be
// replayed: unreadable, unparsable, empty, or truncated.
var ErrInvalidFile = scenario.ErrNotReplayable

// CheckReplayFile reports a file that Replay must not pass
// (scenario.CheckReplayable of its run commands).
func CheckReplayFile(path string) error {
	return scenario.CheckReplayable(path, "run", "cpilab replay --rewrite "+path)
}
