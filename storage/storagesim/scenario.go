package storagesim

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/simulator/scenario"
	"github.com/cpilab/cpilab/storage"
)

// A storage scenario file holds one or more `storage` commands, each a
// whole simulated run, followed by its expected verdict:
//
//	storage profile=fork:budget-reset seed=11 duration=161h tick=1m
//	policy request=10240 limit=204800 buffer=20 window="0 3 * * *" window-duration=2h tz=UTC
//	emergency critical=95 critical-free=1024 exceed-limit=false max-actions=4 reserved=1
//	steps min=2048 max=512000 cooldown=1h hysteresis=20 shrink=false shrink-delay=24h
//	provider latency=10m min-interval=6h max-per-24h=0 max-size=0
//	workload kind=steady rate=120 burst=0 period=0s initial=5000
//	fault director-down@26h0m0s d=2h0m0s
//	----
//	violated: full-while-allowed at 160h34m0s
//
// Every field is written out, so a file replays the same run whatever the
// defaults become. A fault line is in the simulator's fault format
// (Fault.String, ParseFault), as in the disk races' scenarios; the first
// form, fault kind=KIND at=AT for=FOR, is still read. Blank lines and lines
// starting with # are skipped; an error names the file and line.

// Command is the name of the scenario command that is one storage run. A
// file whose first command is Command is a storage scenario file.
const Command = "storage"

// Registry returns the scenario commands of storage runs.
func Registry() *scenario.Registry[*State] {
	r := scenario.NewRegistry[*State]()
	r.Register(Command, "storage profile=reference|fork[:budget-reset,no-cooldown,no-hysteresis] seed=N duration=D tick=D, then policy/emergency/steps/provider/workload/fault lines", runCommand)
	return r
}

// State is shared by the commands of one file (nothing yet: each run stands
// alone).
type State struct{}

func runCommand(_ *State, c *scenario.Command) (string, error) {
	cfg, err := parseCommand(c)
	if err != nil {
		return "", err
	}
	res, err := Run(cfg)
	if err != nil {
		return "", err
	}
	return Verdict(res), nil
}

// ErrInvalidFile is wrapped by CheckFile's error: a file that cannot be
// replayed.
var ErrInvalidFile = scenario.ErrNotReplayable

// CheckFile reports a storage scenario file that a replay must not pass
// (scenario.CheckReplayable of its storage runs).
func CheckFile(path string) error {
	return scenario.CheckReplayable(path, Command, "cpilab replay --rewrite "+path)
}

// Verdict is a run's expected-output line: its first violation or "ok".
func Verdict(res Result) string {
	if len(res.Violations) == 0 {
		return "ok"
	}
	v := res.Violations[0]
	return fmt.Sprintf("violated: %s at %s", v.Invariant, v.At)
}

// ProfileName writes a profile as a scenario names it.
func ProfileName(p storage.Profile) string {
	var knobs []string
	if p.BudgetReset {
		knobs = append(knobs, "budget-reset")
	}
	if p.NoCooldown {
		knobs = append(knobs, "no-cooldown")
	}
	if p.NoHysteresis {
		knobs = append(knobs, "no-hysteresis")
	}
	if len(knobs) == 0 {
		return "reference"
	}
	if len(knobs) == 3 {
		return "fork"
	}
	return "fork:" + strings.Join(knobs, ",")
}

// ParseProfile reads "reference", "fork" or "fork:knob,knob".
func ParseProfile(s string) (storage.Profile, error) {
	switch s {
	case "", "reference":
		return storage.Reference, nil
	case "fork":
		return storage.Fork, nil
	}
	rest, ok := strings.CutPrefix(s, "fork:")
	if !ok {
		return storage.Profile{}, fmt.Errorf("profile %q: want reference, fork or fork:KNOB[,KNOB]", s)
	}
	var p storage.Profile
	for _, k := range strings.Split(rest, ",") {
		switch k {
		case "budget-reset":
			p.BudgetReset = true
		case "no-cooldown":
			p.NoCooldown = true
		case "no-hysteresis":
			p.NoHysteresis = true
		default:
			return p, fmt.Errorf("profile %q: unknown knob %q (budget-reset, no-cooldown, no-hysteresis)", s, k)
		}
	}
	return p, nil
}

// WriteScenario writes cfg as a scenario command with its verdict, after a
// comment.
func WriteScenario(w io.Writer, comment string, cfg Config, res Result) error {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	p := cfg.Policy
	var b strings.Builder
	for _, l := range strings.Split(strings.TrimSpace(comment), "\n") {
		fmt.Fprintf(&b, "# %s\n", l)
	}
	fmt.Fprintf(&b, "storage profile=%s seed=%d duration=%s tick=%s\n", ProfileName(cfg.Profile), cfg.Seed, cfg.Duration, cfg.Tick)
	fmt.Fprintf(&b, "policy request=%d limit=%d buffer=%d window=%q window-duration=%s tz=%s\n", p.RequestMiB, p.LimitMiB, p.TargetBuffer, p.Window.Schedule, p.Window.Duration, p.Window.TimeZone)
	e := p.Emergency
	fmt.Fprintf(&b, "emergency disabled=%t critical=%d critical-free=%d exceed-limit=%t max-actions=%d reserved=%d\n", e.Disabled, e.CriticalThreshold, e.CriticalMinimumFreeMiB, e.ExceedLimit, e.MaxActionsPerDay, e.ReservedForEmergency)
	fmt.Fprintf(&b, "steps min=%d max=%d min-delta=%d cooldown=%s hysteresis=%d shrink=%t shrink-delay=%s\n", p.MinStepMiB, p.MaxStepMiB, p.MinDelta, p.Cooldown, p.Hysteresis, p.AllowShrink, p.ShrinkDelay)
	pr := cfg.Provider
	fmt.Fprintf(&b, "provider latency=%s min-interval=%s max-per-24h=%d max-size=%d\n", pr.Latency, pr.MinInterval, pr.MaxPer24h, pr.MaxSizeMiB)
	wl := cfg.Workload
	fmt.Fprintf(&b, "workload kind=%s rate=%s burst=%s period=%s initial=%s\n", wl.Kind, ftoa(wl.RateMiBPerHour), ftoa(wl.BurstMiB), wl.Period, ftoa(cfg.InitialUsedMiB))
	for _, f := range cfg.Faults {
		fmt.Fprintf(&b, "fault %s\n", f)
	}
	fmt.Fprintf(&b, "%s\n%s\n", scenario.Separator, Verdict(res))
	_, err = io.WriteString(w, b.String())
	return err
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// parseCommand reads a storage command and its lines into a Config.
func parseCommand(c *scenario.Command) (Config, error) {
	var cfg Config
	kv := map[string]string{}
	for _, a := range c.Args {
		if len(a.Vals) != 1 {
			return cfg, fmt.Errorf("%s: argument %q needs one value", c.Pos, a.Key)
		}
		kv[a.Key] = a.Vals[0]
	}
	p := lineParser{pos: c.Pos, kv: kv}
	prof, err := ParseProfile(kv["profile"])
	if err != nil {
		return cfg, fmt.Errorf("%s: %w", c.Pos, err)
	}
	cfg.Profile = prof
	cfg.Seed = uint64(p.int("seed"))
	cfg.Duration, cfg.Tick = p.dur("duration"), p.dur("tick")
	for i, line := range strings.Split(c.Input, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		pos := inputPos(c.Pos, i)
		if word, rest, _ := strings.Cut(line, " "); word == "fault" {
			f, err := ParseFault(rest)
			if err != nil {
				return cfg, fmt.Errorf("%s: %w", pos, err)
			}
			cfg.Faults = append(cfg.Faults, f)
			continue
		}
		words, err := scenario.SplitWords(line)
		if err != nil {
			return cfg, fmt.Errorf("%s: %w", pos, err)
		}
		lp := lineParser{pos: pos, kv: map[string]string{}}
		for _, w := range words[1:] {
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				return cfg, fmt.Errorf("%s: %q is not key=value", lp.pos, w)
			}
			if strings.HasPrefix(v, `"`) {
				if u, err := strconv.Unquote(v); err == nil {
					v = u
				} else {
					return cfg, fmt.Errorf("%s: %s=%s: bad quoting", lp.pos, k, v)
				}
			}
			lp.kv[k] = v
		}
		pol := &cfg.Policy
		switch words[0] {
		case "policy":
			pol.RequestMiB, pol.LimitMiB, pol.TargetBuffer = lp.int("request"), lp.int("limit"), int(lp.int("buffer"))
			pol.Window = storage.Window{Schedule: lp.str("window"), Duration: lp.dur("window-duration"), TimeZone: lp.str("tz")}
		case "emergency":
			pol.Emergency = storage.Emergency{Disabled: lp.bool("disabled"), CriticalThreshold: int(lp.int("critical")),
				CriticalMinimumFreeMiB: lp.int("critical-free"), ExceedLimit: lp.bool("exceed-limit"),
				MaxActionsPerDay: int(lp.int("max-actions")), ReservedForEmergency: int(lp.int("reserved"))}
		case "steps":
			pol.MinStepMiB, pol.MaxStepMiB, pol.MinDelta = lp.int("min"), lp.int("max"), int(lp.int("min-delta"))
			pol.Cooldown, pol.Hysteresis = lp.dur("cooldown"), int(lp.int("hysteresis"))
			pol.AllowShrink, pol.ShrinkDelay = lp.bool("shrink"), lp.dur("shrink-delay")
			if pol.Cooldown == 0 {
				pol.Cooldown = -1 // written as 0s: none
			}
			if pol.ShrinkDelay == 0 {
				pol.ShrinkDelay = -1
			}
		case "provider":
			cfg.Provider = Provider{Latency: lp.dur("latency"), MinInterval: lp.dur("min-interval"), MaxPer24h: int(lp.int("max-per-24h")), MaxSizeMiB: lp.int("max-size")}
		case "workload":
			cfg.Workload = Workload{Kind: lp.str("kind"), RateMiBPerHour: lp.float("rate"), BurstMiB: lp.float("burst"), Period: lp.dur("period")}
			cfg.InitialUsedMiB = lp.float("initial")
		default:
			return cfg, fmt.Errorf("%s: unknown line %q (policy, emergency, steps, provider, workload, fault)", lp.pos, words[0])
		}
		if lp.err != nil {
			return cfg, lp.err
		}
	}
	if p.err != nil {
		return cfg, p.err
	}
	if _, err := cfg.withDefaults(); err != nil {
		return cfg, fmt.Errorf("%s: %w", c.Pos, err)
	}
	return cfg, nil
}

// inputPos is "file:line" of input line i (from 0) of the command at
// cmdPos ("file:line" of the command line; the input follows it).
func inputPos(cmdPos string, i int) string {
	if j := strings.LastIndexByte(cmdPos, ':'); j >= 0 {
		if n, err := strconv.Atoi(cmdPos[j+1:]); err == nil {
			return cmdPos[:j+1] + strconv.Itoa(n+1+i)
		}
	}
	return fmt.Sprintf("%s+%d", cmdPos, i+1)
}

// lineParser reads typed values, keeping the first error.
type lineParser struct {
	pos string
	kv  map[string]string
	err error
}

func (p *lineParser) str(k string) string { return p.kv[k] }

func (p *lineParser) fail(k, v string, err error) {
	if p.err == nil {
		p.err = fmt.Errorf("%s: %s=%q: %v", p.pos, k, v, err)
	}
}

func (p *lineParser) int(k string) int64 {
	v, ok := p.kv[k]
	if !ok {
		return 0
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		p.fail(k, v, err)
	}
	return n
}

func (p *lineParser) float(k string) float64 {
	v, ok := p.kv[k]
	if !ok {
		return 0
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f != f || f > 1e15 || f < -1e15 {
		p.fail(k, v, fmt.Errorf("not a finite number"))
	}
	return f
}

func (p *lineParser) bool(k string) bool {
	v, ok := p.kv[k]
	if !ok {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.fail(k, v, err)
	}
	return b
}

func (p *lineParser) dur(k string) time.Duration {
	v, ok := p.kv[k]
	if !ok {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		p.fail(k, v, fmt.Errorf("not a non-negative duration"))
	}
	return d
}
