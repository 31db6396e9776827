package cpisuite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/cpilab/cpilab/suites"

	"strings"

	"github.com/cpilab/cpilab/cpimodel"
	"github.com/cpilab/cpilab/cpimodel/explore"
	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// Explore configures the random lifecycles of the contract suite's
// "explore" row: rapid draws sequences of calls over several VMs, disks,
// snapshots and stemcells of each api_version under each caller profile
// (valid and invalid: missing objects, objects attached elsewhere,
// repeats, shrink and grow, reboots and recreates with disks attached,
// calls at the same time on distinct objects), the model is checked over
// the whole cloud after every step, and a failure is shrunk to a minimal
// sequence.
type Explore struct {
	// Seed draws the lifecycles (default DefaultExploreSeed): the same
	// seed, the same sequences.
	Seed uint64
	// Steps is the budget: about how many steps in all (default
	// DefaultExploreSteps); a lifecycle has up to 40 steps after its
	// opening ones.
	Steps int
	// Off leaves the row out.
	Off bool
	// Replay, when set, runs these steps once instead of exploring.
	Replay *explore.Replay
	// ReplayFile is where a shrunk failure is written (default: a file
	// in the temporary directory, named in the failure).
	ReplayFile string
	// NoShrink reports the first failing lifecycle as found, unshrunk
	// (up to the step that broke the model): the same verdict and clause
	// without the reruns shrinking makes.
	NoShrink bool
}

// The default exploration budget: small enough for the default run, seeded
// so that a CI gate is repeatable.
const (
	DefaultExploreSeed  = 1
	DefaultExploreSteps = 120
	exploreMaxSteps     = 40
	// ExploreRow is the name of the explore row.
	ExploreRow = "explore"
)

// exploreDriver makes the lifecycle's calls through the suites' wire (the
// same process handling as every spec) and reads the whole cloud.
type exploreDriver struct {
	w  *wire
	ws WholeState
}

func (d exploreDriver) Call(ctx context.Context, body []byte) ([]byte, error) {
	var req struct {
		Method string `json:"method"`
	}
	_ = json.Unmarshal(body, &req)
	x := &Exchange{Method: req.Method, Request: body, ExitCode: -1}
	ob, _ := d.ws.(*observer)
	if ob != nil {
		ob.calling(x, callNamed)
		ob.calling(x, callRunning)
	}
	d.w.run(ctx, x)
	if ob != nil {
		ob.calling(x, callEnded)
	}
	switch {
	case x.RunErr != nil:
		return nil, x.RunErr
	case x.TimedOut:
		return nil, fmt.Errorf("%s: %s", req.Method, strings.Join(x.Violations, "; "))
	}
	return x.Stdout, nil
}

func (d exploreDriver) State(ctx context.Context) (cpimodel.State, error) {
	return d.ws.ModelState(ctx)
}

// describeExplore registers the explore row.
func describeExplore(cfg *Config) {
	if cfg.Explore.Off {
		return
	}
	st := &state{profile: cpiv2.ProfileDirectorCurrent}
	Context(ExploreRow, Label("row:"+ExploreRow), Ordered, func() {
		BeforeAll(func() {
			st.cfg = cfg.withDefaults()
			st.name = "row " + ExploreRow
		})
		text := ClauseText(ClauseModelEffect) + " (random lifecycles, checked after every step)"
		It(text, labels("explore"), func(ctx SpecContext) {
			st.beginSpec()
			st.explore(ctx)
		})
	})
}

func (st *state) explore(ctx SpecContext) {
	GinkgoHelper()
	e := st.cfg.Explore
	c, _, err := NewClient(ctx, st.cfg, cpiv2.ProfileDirectorCurrent, Switch{})
	if err != nil && c == nil {
		notChecked(fmt.Sprintf("info failed (%v); the contract contexts report it", err))
	}
	ws := modelView(st.cfg, c.w.command)
	if ws == nil {
		notChecked("the oracle cannot read the whole cloud (a Docker face), or the model's reads through the CPI are off: random lifecycles need the model's view after every step")
	}
	env := explore.Env{Stemcells: map[int]explore.StemcellImage{}, MaxAPIVersion: max(c.CPIMax, 1), RunID: st.cfg.RunID + "-explore",
		VMCloudProperties: mustJSON(st.cfg.Env.VMCloudProperties), DiskCloudProperties: mustJSON(st.cfg.Env.DiskCloudProperties),
		Networks: mustJSON(st.cfg.Env.Networks)}
	for v, sc := range st.cfg.Env.Stemcells {
		if sc.ImagePath != "" {
			env.Stemcells[v] = explore.StemcellImage{Path: sc.ImagePath, CloudProperties: mustJSON(sc.CloudProperties)}
		}
	}
	if len(env.Stemcells) == 0 {
		notChecked("no stemcell is configured")
	}
	d := exploreDriver{w: c.w, ws: ws}
	var f *explore.Failure
	var what string
	if e.Replay != nil {
		f, _, err = explore.RunReplay(ctx, d, env, *e.Replay)
		what = fmt.Sprintf("the replay of %d steps", len(e.Replay.Steps))
	} else {
		seed := e.Seed
		if seed == 0 {
			seed = DefaultExploreSeed
		}
		steps := e.Steps
		if steps <= 0 {
			steps = DefaultExploreSteps
		}
		lifecycles := max(1, steps/(exploreMaxSteps*3/4+20))
		f, seed, err = explore.Explore(ctx, d, env, explore.Options{Seed: seed, Lifecycles: lifecycles, MaxSteps: exploreMaxSteps, NoShrink: e.NoShrink})
		what = fmt.Sprintf("seed %d, %d random lifecycles of up to %d steps", seed, lifecycles, exploreMaxSteps)
	}
	AddReportEntry(EntryExplore, what, ReportEntryVisibilityNever)
	if err != nil {
		Fail(fmt.Sprintf("%s: %v", what, err))
	}
	if f == nil {
		return
	}
	file := e.ReplayFile
	if file == "" {
		file = filepath.Join(os.TempDir(), fmt.Sprintf("%s-replay-%d.json", st.cfg.RunID, f.Seed))
	}
	unsaved := ""
	if err := os.WriteFile(file, append(mustJSON(f.Replay()), '\n'), 0o644); err != nil {
		unsaved = fmt.Sprintf("; its replay file could not be written (%v)", err)
		file = ""
	}
	seq := sequenceOf(f, file)
	// A replay runs its own steps, never shrunk.
	seq.Unshrunk = e.NoShrink && e.Replay == nil
	AddReportEntry(suites.EntryExploreSequence, seq, ReportEntryVisibilityNever)
	clause := f.Violation.Clause
	did := fmt.Sprintf("%s: a lifecycle broke the model; shrunk to %d %s (the shrunk sequence follows; cpilab certify --replay FILE runs it alone)%s",
		what, len(f.Steps), suites.Plural(len(f.Steps), "step", "steps"), unsaved)
	if seq.Unshrunk {
		did = fmt.Sprintf("%s: a lifecycle broke the model at its step %d, not shrunk (--no-shrink; the sequence as found follows; cpilab certify --replay FILE runs it alone)%s",
			what, len(f.Steps), unsaved)
	}
	if f.Error != "" {
		clause = ClauseRun
		did = fmt.Sprintf("%s: a lifecycle could not be run (the sequence that met it follows)%s", what, unsaved)
	}
	v := suites.Violation{Clause: clause, Did: did, ExitCode: -1}
	if n := len(f.Done); n > 0 {
		last := f.Done[n-1]
		v.Method, v.Request, v.Response = last.Step.Method, excerpt([]byte(last.Request)), excerpt([]byte(last.Response))
	}
	// The report shows the sequence from its entry; Ginkgo's own failure
	// message (a go test embedding the suite) carries it as text.
	AddReportEntry(suites.ReportEntryViolation, v, ReportEntryVisibilityNever)
	Fail(violationText(v) + "\n" + seq.Text("  "))
}

// EntryExplore is the report entry of the explore row that says what was
// explored (the seed and budget, or the replay); a failure's shrunk steps
// are suites.EntryExploreSequence.
const EntryExplore = "explore"
