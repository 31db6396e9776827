package simulator

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/internal/shellword"
	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/simulator/faults"
)

// Seed is a run's root seed. Every random choice of the run
// derives from it through named sub-seeds, so one number replays the run.
type Seed uint64

// String is the seed in decimal, as commands print it.
func (s Seed) String() string { return strconv.FormatUint(uint64(s), 10) }

// ParseSeed reads a seed in decimal or 0x-prefixed hexadecimal.
func ParseSeed(text string) (Seed, error) {
	v, err := strconv.ParseUint(strings.TrimSpace(text), 0, 64)
	if err != nil {
		return 0, fmt.Errorf("seed %q: want a non-negative integer (decimal or 0x…)", text)
	}
	return Seed(v), nil
}

// Set parses text into s, so a *Seed is a flag.Value.
func (s *Seed) Set(text string) error {
	v, err := ParseSeed(text)
	if err == nil {
		*s = v
	}
	return err
}

// Sub derives the sub-seed named name: rt.StreamSeed(root, name).
func (s Seed) Sub(name string) uint64 { return rt.StreamSeed(uint64(s), name) }

// The sub-seed names, one per subsystem of a run.
const (
	// SubRuntime seeds the deterministic runtime (simrt.Config.Seed): the
	// scheduler and every rt.Runtime.Rand stream of director, agents and
	// fakeiaas.
	SubRuntime = "runtime"
	// SubWorkload seeds the workload generator (orchestrator and operator
	// operations).
	SubWorkload = "workload"
	// SubFaults seeds the fault injector (faults.NewRandom).
	SubFaults = "faults"
)

// Seeds are the sub-seeds of one run.
type Seeds struct {
	// Root is the seed they derive from.
	Root Seed
	// Runtime, Workload and Faults are Root.Sub(SubRuntime), … .
	Runtime, Workload, Faults uint64
}

// Derive returns the sub-seeds of root. Changing how one subsystem draws
// never changes another's draws.
func Derive(root Seed) Seeds {
	return Seeds{Root: root, Runtime: root.Sub(SubRuntime), Workload: root.Sub(SubWorkload), Faults: root.Sub(SubFaults)}
}

// SeedRange is an inclusive range of seeds, written "A..B" (or "N" for one).
type SeedRange struct {
	// From is the first seed of the range.
	From Seed
	// To is the last seed of the range (inclusive).
	To Seed
}

// ParseSeedRange reads "A..B" or "N".
func ParseSeedRange(text string) (SeedRange, error) {
	lo, hi, isRange := strings.Cut(text, "..")
	a, err := ParseSeed(lo)
	if err != nil {
		return SeedRange{}, fmt.Errorf("seed range %q: %w", text, err)
	}
	b := a
	if isRange {
		if b, err = ParseSeed(hi); err != nil {
			return SeedRange{}, fmt.Errorf("seed range %q: %w", text, err)
		}
	}
	if b < a {
		return SeedRange{}, fmt.Errorf("seed range %q: the end is below the start", text)
	}
	return SeedRange{From: a, To: b}, nil
}

// String is "A..B".
func (r SeedRange) String() string { return r.From.String() + ".." + r.To.String() }

// Set parses text into r, so a *SeedRange is a flag.Value.
func (r *SeedRange) Set(text string) error {
	v, err := ParseSeedRange(text)
	if err == nil {
		*r = v
	}
	return err
}

// Len is the number of seeds in the range (0 when it holds all 2^64).
func (r SeedRange) Len() uint64 { return uint64(r.To-r.From) + 1 }

// Profiles are the director profiles a run can use.
const (
	// ProfileReference is cpilab's reference Director, with the races fixed.
	ProfileReference = "reference"
	// ProfileUpstream reproduces the upstream Director's behaviour.
	ProfileUpstream = "upstream"
)

// DefaultSteps is RunConfig.Steps when not set.
const DefaultSteps = 200

// RunConfig identifies a simulation run; it maps one-to-one onto the flags
// of `cpilab simulate`, so Command prints the exact command that replays it.
type RunConfig struct {
	// Seed is the root seed.
	Seed Seed
	// Steps is the number of workload steps (default DefaultSteps).
	Steps int
	// Profile is the director profile: ProfileReference (default),
	// ProfileUpstream, or "upstream:X" (only the knob of race X, a–j).
	Profile string
	// Faults is the fault spec the run draws its faults under (default:
	// none).
	Faults faults.Spec
	// Workload shapes the random workload (shape, clients, disk names, mix).
	Workload WorkloadConfig
	// DiskWorkers, when positive, is the director's dynamic-disk worker
	// count, over the workload shape's; under a profile with upstream's zero
	// dedicated workers it runs that many instead (WorldConfig.DiskWorkers).
	DiskWorkers int
}

// WithDefaults fills unset fields with their defaults.
func (c RunConfig) WithDefaults() RunConfig {
	if c.Steps == 0 {
		c.Steps = DefaultSteps
	}
	if c.Profile == "" {
		c.Profile = ProfileReference
	}
	return c
}

// Validate reports a config no run can use.
func (c RunConfig) Validate() error {
	c = c.WithDefaults()
	if c.Steps < 0 {
		return fmt.Errorf("steps %d: must be positive", c.Steps)
	}
	if c.Workload.MaxDelay < 0 {
		return fmt.Errorf("workload: max delay %v must not be negative", c.Workload.MaxDelay)
	}
	if c.Workload.Shape != "" && !slices.Contains(Shapes, c.Workload.Shape) {
		return fmt.Errorf("workload %q: want one of %s", c.Workload.Shape, strings.Join(Shapes, ", "))
	}
	if c.DiskWorkers < 0 {
		return fmt.Errorf("disk workers %d must not be negative", c.DiskWorkers)
	}
	if c.Workload.Mix != "" {
		if _, _, err := parseMix(c.Workload.Mix); err != nil {
			return err
		}
	}
	if c.Workload.Clients < 0 || c.Workload.Disks < 0 {
		return fmt.Errorf("workload: clients %d and disks %d must not be negative", c.Workload.Clients, c.Workload.Disks)
	}
	if _, err := ParseProfile(c.Profile); err != nil {
		return fmt.Errorf("profile %q: want %s, %s or %s:<race letter a–j>", c.Profile, ProfileReference, ProfileUpstream, ProfileUpstream)
	}
	return nil
}

// RegisterFlags binds c's fields to --seed, --steps, --profile and --faults
// on fs, with the defaults as flag defaults.
func (c *RunConfig) RegisterFlags(fs *flag.FlagSet) {
	*c = c.WithDefaults()
	fs.Var(&c.Seed, "seed", "root seed of the run (decimal or 0x…)")
	fs.Var(intFlag{p: &c.Steps, min: 1, what: "a number of workload steps ≥ 1"}, "steps", "number of workload steps (≥ 1)")
	fs.StringVar(&c.Profile, "profile", c.Profile, "director profile: reference or upstream")
	fs.Var(&c.Faults, "faults", `fault spec, e.g. "cpi-error=0.05,lost-response=0.02,latency=0.1:1ms..2s", "default" or "none"`)
	fs.Var(intFlag{p: &c.Workload.Clients, min: 0, what: "a number of clients ≥ 0 (0: the workload's)"}, "clients",
		"concurrent workload clients (0: the workload's: 1 to 16 drawn per seed, 3 for light)")
	fs.Var(intFlag{p: &c.DiskWorkers, min: 0, what: "a number of workers ≥ 0 (0: the director's)"}, "disk-workers",
		"the director's dynamic-disk workers (0: its default, 2, or none under --profile upstream)")
	fs.Var(intFlag{p: &c.Workload.Disks, min: 0, what: "a number of disk names ≥ 0 (0: 3)"}, "disks", "disk names the workload uses (0: 3)")
	fs.Var(durationFlag{p: &c.Workload.MaxDelay}, "max-delay", "bound of each operation's think time, virtual, ≥ 0 (0: 5s)")
	fs.StringVar(&c.Workload.Mix, "mix", c.Workload.Mix, "operation mix, kind=weight,… (empty: "+DefaultMix+")")
}

// Args are the arguments of the `cpilab simulate` command that replays
// the run, starting with "simulate".
func (c RunConfig) Args() []string {
	c = c.WithDefaults()
	args := []string{"simulate", "--seed", c.Seed.String(), "--steps", strconv.Itoa(c.Steps),
		"--profile", c.Profile, "--faults", c.Faults.String()}
	if c.Workload.Shape != "" && c.Workload.Shape != ShapeMixed {
		args = append(args, "--workload", c.Workload.Shape)
	}
	if c.Workload.Clients != 0 {
		args = append(args, "--clients", strconv.Itoa(c.Workload.Clients))
	}
	if c.DiskWorkers != 0 {
		args = append(args, "--disk-workers", strconv.Itoa(c.DiskWorkers))
	}
	if c.Workload.Disks != 0 {
		args = append(args, "--disks", strconv.Itoa(c.Workload.Disks))
	}
	if c.Workload.MaxDelay != 0 {
		args = append(args, "--max-delay", c.Workload.MaxDelay.String())
	}
	if c.Workload.Mix != "" {
		args = append(args, "--mix", c.Workload.Mix)
	}
	return args
}

// Command is the shell command that replays the run:
//
//	cpilab simulate --seed 42 --steps 200 --profile upstream --faults cpi-error=0.05
func (c RunConfig) Command() string {
	return shellCommand(append([]string{Program}, c.Args()...))
}

// Program starts cpilab in the commands the simulator prints (Command,
// ReplayCommand). cpilab sets it to the running binary as the user can
// run it again, so that every printed command works as printed; it is
// "cpilab" for other callers.
var Program = "cpilab"

// ReplayCommand is the shell command that replays a scenario or minimized
// trace file: cpilab replay FILE.
func ReplayCommand(file string) string { return shellCommand([]string{Program, "replay", file}) }

func shellCommand(args []string) string { return shellword.Join(args) }

// intFlag is an int flag that refuses values below min: `--steps 0` must
// not quietly mean the default.
type intFlag struct {
	p    *int
	min  int
	what string
}

func (f intFlag) String() string {
	if f.p == nil {
		return "0"
	}
	return strconv.Itoa(*f.p)
}

func (f intFlag) Set(text string) error {
	n, err := strconv.Atoi(strings.TrimSpace(text))
	if err != nil || n < f.min {
		return fmt.Errorf("%q: want %s", text, f.what)
	}
	*f.p = n
	return nil
}

// durationFlag is a duration flag that refuses negative durations.
type durationFlag struct{ p *time.Duration }

func (f durationFlag) String() string {
	if f.p == nil {
		return "0s"
	}
	return f.p.String()
}

func (f durationFlag) Set(text string) error {
	d, err := time.ParseDuration(strings.TrimSpace(text))
	if err != nil || d < 0 {
		return fmt.Errorf("%q: want a duration ≥ 0 such as 500ms or 5s", text)
	}
	*f.p = d
	return nil
}
