package explore

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpimodel"
	"pgregory.net/rapid"
)

// Options bound an exploration.
type Options struct {
	// Seed makes the exploration repeatable: the same seed draws the same
	// lifecycles (0: rapid picks one, reported in the result).
	Seed uint64
	// Lifecycles is how many lifecycles to draw, MaxSteps the most steps
	// of each (after its opening steps).
	Lifecycles, MaxSteps int
	// ShrinkTime bounds the shrinking of a failing lifecycle (default 20 s).
	ShrinkTime time.Duration
	// NoShrink returns the first failing lifecycle as drawn, up to the
	// step that broke the model (for a test that asks only whether the
	// budget finds a bug).
	NoShrink bool
	// Log, when set, gets rapid's own lines.
	Log func(string)
}

// Failure is a lifecycle that broke the model, shrunk.
type Failure struct {
	Seed  uint64
	Steps []Step
	// Done is what the shrunk lifecycle did, up to the step that broke
	// the model (the last).
	Done      []Done
	Violation cpimodel.Violation
	// Error is set when the lifecycle could not be run at all (the CPI
	// or the cloud failed), rather than breaking the model.
	Error string
}

// Replay is the failure as a replay file.
func (f *Failure) Replay() Replay {
	return Replay{Seed: f.Seed, Steps: f.Steps, Violation: f.Violation.String()}
}

// Explain writes the shrunk lifecycle step by step, each with its answer,
// and what the last step broke.
func (f *Failure) Explain() string {
	var b strings.Builder
	for i, d := range f.Done {
		fmt.Fprintf(&b, "  step %d: %s\n          → %s\n", i+1, d.Step, excerpt([]byte(d.Response)))
	}
	if f.Error != "" {
		fmt.Fprintf(&b, "  could not run: %s\n", f.Error)
	} else {
		fmt.Fprintf(&b, "  broke %s\n", f.Violation)
	}
	return b.String()
}

// rapidMu: rapid reads its settings from process-wide flags.
var rapidMu sync.Mutex

// Explore draws lifecycles with rapid, runs each against d (cleaning up
// after it) and returns the first one that broke the model, shrunk to a
// minimal sequence; nil when none did. The seed returned is the run's (a
// zero Options.Seed is 1).
func Explore(ctx context.Context, d Driver, env Env, o Options) (*Failure, uint64, error) {
	rapidMu.Lock()
	defer rapidMu.Unlock()
	if err := rapidSettings(o); err != nil {
		return nil, 0, err
	}
	var last *Failure
	if o.Seed == 0 {
		o.Seed = 1
	}
	seed := o.Seed
	tb := &quietTB{log: o.Log}
	rapid.Check(tb, func(t *rapid.T) {
		steps := Draw(t, env, o.MaxSteps)
		r := NewRunner(d, env)
		defer r.Cleanup(context.WithoutCancel(ctx))
		done, failed, err := r.Run(ctx, steps)
		switch {
		case err != nil:
			last = &Failure{Steps: steps[:len(done)+1], Done: done, Error: err.Error()}
			t.Fatalf("%v", err)
		case failed >= 0:
			v := done[len(done)-1].Violations[0]
			last = &Failure{Steps: steps[:failed+1], Done: done, Violation: v}
			t.Fatalf("%v", v)
		}
	})
	if !tb.Failed() {
		return nil, seed, nil
	}
	if last != nil && last.Error == "" && !o.NoShrink {
		last = shrinkSteps(ctx, d, env, last)
	}
	if last != nil {
		// The seed of the failing lifecycle itself: --seed with it draws
		// that lifecycle first.
		last.Seed = tb.seed()
	}
	return last, seed, nil
}

// Replay runs a replay file's steps once and returns the failure, if the
// model broke.
func RunReplay(ctx context.Context, d Driver, env Env, rp Replay) (*Failure, []Done, error) {
	r := NewRunner(d, env)
	defer r.Cleanup(context.WithoutCancel(ctx))
	done, failed, err := r.Run(ctx, rp.Steps)
	if err != nil {
		return &Failure{Seed: rp.Seed, Steps: rp.Steps, Done: done, Error: err.Error()}, done, nil
	}
	if failed < 0 {
		return nil, done, nil
	}
	return &Failure{Seed: rp.Seed, Steps: rp.Steps[:failed+1], Done: done, Violation: done[len(done)-1].Violations[0]}, done, nil
}

func rapidSettings(o Options) error {
	// rapid asks testing.Short(), which needs the testing flags registered
	// and the command line parsed: certify parses its own flag set, never
	// the process-wide one, and a test binary's child process (a worker, a
	// suite run in a subprocess) may not have run testing's init either.
	// testing.Init does nothing when it already ran.
	testing.Init()
	if !flag.Parsed() {
		_ = flag.CommandLine.Parse([]string{})
	}
	shrink := o.ShrinkTime
	switch {
	case o.NoShrink:
		shrink = time.Nanosecond
	case shrink <= 0:
		shrink = 20 * time.Second
	}
	checks := max(1, o.Lifecycles)
	if testing.Short() {
		// rapid runs a fifth of its checks under -short; the budget asked
		// is the budget run (the same seed, the same lifecycles).
		checks *= 5
	}
	for name, v := range map[string]string{
		"rapid.seed": strconv.FormatUint(o.Seed, 10), "rapid.checks": strconv.Itoa(checks),
		"rapid.nofailfile": "true", "rapid.shrinktime": shrink.String(),
	} {
		if err := flag.Set(name, v); err != nil {
			return fmt.Errorf("explore: setting %s: %w", name, err)
		}
	}
	return nil
}

// quietTB is the testing.TB rapid reports to: it keeps the seed rapid
// names and whether the property failed.
type quietTB struct {
	mu     sync.Mutex
	log    func(string)
	failed bool
	lines  []string
}

func (t *quietTB) Helper()      {}
func (t *quietTB) Name() string { return "explore" }
func (t *quietTB) Logf(format string, args ...any) {
	t.add(fmt.Sprintf(format, args...))
}
func (t *quietTB) Log(args ...any) { t.add(fmt.Sprint(args...)) }
func (t *quietTB) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines = append(t.lines, s)
	if t.log != nil {
		t.log(s)
	}
}
func (t *quietTB) Skipf(format string, args ...any) { t.Logf(format, args...) }
func (t *quietTB) Skip(args ...any)                 { t.Log(args...) }
func (t *quietTB) SkipNow()                         {}
func (t *quietTB) Errorf(format string, args ...any) {
	t.fail()
	t.Logf(format, args...)
}
func (t *quietTB) Error(args ...any)                 { t.fail(); t.Log(args...) }
func (t *quietTB) Fatalf(format string, args ...any) { t.Errorf(format, args...) }
func (t *quietTB) Fatal(args ...any)                 { t.Error(args...) }
func (t *quietTB) FailNow()                          { t.fail() }
func (t *quietTB) Fail()                             { t.fail() }
func (t *quietTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}
func (t *quietTB) fail() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.failed = true
}

// seed is the seed rapid printed ("-rapid.seed=N"), 0 when none.
func (t *quietTB) seed() uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, l := range t.lines {
		if i := strings.Index(l, "-rapid.seed="); i >= 0 {
			f := strings.FieldsFunc(l[i+len("-rapid.seed="):], func(r rune) bool { return r < '0' || r > '9' })
			if len(f) > 0 {
				n, _ := strconv.ParseUint(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// shrinkSteps goes on where rapid's shrinking stops: it drops one step at a
// time, last first, while the lifecycle still breaks the same clause in a
// call of the same method.
func shrinkSteps(ctx context.Context, d Driver, env Env, f *Failure) *Failure {
	same := func(v cpimodel.Violation) bool {
		return v.Clause == f.Violation.Clause && v.Method == f.Violation.Method
	}
	for i := len(f.Steps) - 2; i >= 0; i-- {
		try := without(f.Steps, i)
		g, _, err := RunReplay(ctx, d, env, Replay{Steps: try})
		if err == nil && g != nil && g.Error == "" && same(g.Violation) {
			f = g
			i = min(i, len(f.Steps)-1)
		}
	}
	return f
}

// without returns steps without step i; references to what step i
// created become references to a missing object, later ones are
// renumbered.
func without(steps []Step, i int) []Step {
	kind := map[string]string{"create_stemcell": "stemcell", "create_vm": "vm", "create_disk": "disk", "snapshot_disk": "snapshot"}[steps[i].Method]
	n := 0
	for _, s := range steps[:i+1] {
		if map[string]string{"create_stemcell": "stemcell", "create_vm": "vm", "create_disk": "disk", "snapshot_disk": "snapshot"}[s.Method] == kind {
			n++
		}
	}
	out := make([]Step, 0, len(steps)-1)
	for j, s := range steps {
		if j == i {
			continue
		}
		if kind != "" {
			s = renumber(s, kind, n)
		}
		out = append(out, s)
	}
	return out
}

func renumber(s Step, kind string, gone int) Step {
	fix := func(ref string) string {
		k, num, ok := strings.Cut(strings.TrimPrefix(ref, "$"), ":")
		n, err := strconv.Atoi(num)
		if !ok || !strings.HasPrefix(ref, "$") || k != kind || err != nil {
			return ref
		}
		switch {
		case n == gone:
			return "$" + kind + ":missing"
		case n > gone:
			return fmt.Sprintf("$%s:%d", kind, n-1)
		}
		return ref
	}
	args := make([]json.RawMessage, len(s.Args))
	for i, a := range s.Args {
		var str string
		var arr []string
		switch {
		case !strings.Contains(string(a), `"$`):
			args[i] = a
		case json.Unmarshal(a, &str) == nil:
			args[i], _ = json.Marshal(fix(str))
		case json.Unmarshal(a, &arr) == nil:
			for j := range arr {
				arr[j] = fix(arr[j])
			}
			args[i], _ = json.Marshal(arr)
		default:
			args[i] = a
		}
	}
	s.Args = args
	if s.With != nil {
		w := renumber(*s.With, kind, gone)
		s.With = &w
	}
	return s
}

// ShownStep is one step of a shrunk lifecycle as a report shows it: the
// method, the arguments as sent (references resolved to CIDs), and what
// the CPI answered.
type ShownStep struct {
	Method  string            `json:"method"`
	Profile string            `json:"profile"`
	Args    []json.RawMessage `json:"arguments"`
	// Result is the result member (null on error); Error "type: message"
	// when the CPI answered an error object.
	Result json.RawMessage `json:"result,omitempty"`
	Error  string          `json:"error,omitempty"`
	// Violations are what the step broke (the last step's, in a failure).
	Violations []cpimodel.Violation `json:"violations,omitempty"`
	// NotChecked says why the model could not judge the step.
	NotChecked string `json:"not_checked,omitempty"`
}

// Shown returns the steps the shrunk lifecycle ran, each with what the CPI
// answered: the structured form of Explain, for reports.
func (f *Failure) Shown() []ShownStep {
	out := make([]ShownStep, 0, len(f.Done))
	for _, d := range f.Done {
		s := ShownStep{Method: d.Step.Method, Profile: d.Step.Profile, Args: d.Step.Args, Violations: d.Violations, NotChecked: d.NotChecked}
		var req struct {
			Arguments []json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal([]byte(d.Request), &req) == nil && req.Arguments != nil {
			s.Args = req.Arguments
		}
		var resp struct {
			Result json.RawMessage `json:"result"`
			Error  *struct {
				Type    string `json:"type"`
				Message string `json:"message"`
			} `json:"error"`
		}
		if json.Unmarshal([]byte(d.Response), &resp) == nil {
			s.Result = resp.Result
			if resp.Error != nil {
				s.Error = resp.Error.Type + ": " + resp.Error.Message
			}
		} else {
			s.NotChecked = "the response is not a CPI response: " + excerpt([]byte(d.Response))
		}
		out = append(out, s)
	}
	return out
}
