package simulator

import (
	"fmt"
	"strings"

	"github.com/cpilab/cpilab/simulator/faults"
)

// FailureReport is what a failing run prints: the seed, the
// fault schedule, where the minimized trace is, and the exact commands that
// replay the run and the minimized trace.
type FailureReport struct {
	// Config identifies the run.
	Config RunConfig
	// Err is why it failed (a *Violation, a simrt error, …).
	Err error
	// TraceHash is the run's trace hash.
	TraceHash uint64
	// Faults is the schedule of faults that fired.
	Faults faults.Schedule
	// TraceFile is the minimized trace or scenario file; "" if none.
	TraceFile string
	// Visualization is porcupine's HTML visualization of the run's
	// dynamic-disk history; "" if none.
	Visualization string
}

// String is the multi-line report:
//
//	FAIL seed 42 (profile upstream, 200 steps, faults cpi-error=0.05): invariant …
//	trace hash: 00c0ffee00c0ffee
//	fault schedule (1 fault):
//	  cpi-error@12 on=attach_disk type=Bosh::Clouds::CloudError
//	minimized trace: out/seed-42.txt
//	history visualization: out/seed-42.html
//	replay: cpilab simulate --seed 42 --steps 200 --profile upstream --faults cpi-error=0.05
//	replay minimized: cpilab replay out/seed-42.txt
func (r FailureReport) String() string {
	c := r.Config.WithDefaults()
	var b strings.Builder
	fmt.Fprintf(&b, "FAIL seed %s (profile %s, %d steps, faults %s): %v\n", c.Seed, c.Profile, c.Steps, c.Faults, r.Err)
	if race, ok := namedRace(c.Profile, r.Err); ok {
		fmt.Fprintf(&b, "race: upstream race (%s), %s\n", race.Letter, race.Title)
	}
	fmt.Fprintf(&b, "trace hash: %016x\n", r.TraceHash)
	noun := "faults"
	if len(r.Faults) == 1 {
		noun = "fault"
	}
	fmt.Fprintf(&b, "fault schedule (%d %s):\n", len(r.Faults), noun)
	for _, line := range strings.Split(strings.TrimSuffix(r.Faults.String(), "\n"), "\n") {
		if line != "" {
			b.WriteString("  " + line + "\n")
		}
	}
	if r.TraceFile != "" {
		fmt.Fprintf(&b, "minimized trace: %s\n", r.TraceFile)
	}
	if r.Visualization != "" {
		fmt.Fprintf(&b, "history visualization: %s\n", r.Visualization)
	}
	fmt.Fprintf(&b, "replay: %s\n", c.Command())
	if r.TraceFile != "" {
		fmt.Fprintf(&b, "replay minimized: %s\n", ReplayCommand(r.TraceFile))
	}
	return b.String()
}

// namedRace is the upstream race a failure under profile shows: the race of
// an "upstream:X" profile when the violation is one of its invariants.
func namedRace(profile string, err error) (Race, bool) {
	letter, ok := strings.CutPrefix(profile, ProfileUpstream+":")
	if !ok {
		return Race{}, false
	}
	r, rerr := RaceByLetter(letter)
	if rerr != nil || !r.Detects(err) {
		return Race{}, false
	}
	return r, true
}
