package cpisuite

import (
	"context"
	"fmt"
	"sync"

	"github.com/cpilab/cpilab/suites"

	"github.com/cpilab/cpilab/cpimodel"
	. "github.com/onsi/ginkgo/v2"
)

// The model's clauses (package cpimodel): after every CPI call the whole
// cloud is read and judged against the contract's legal next states.
const (
	ClauseModelEffect     = cpimodel.ClauseEffect
	ClauseModelFrame      = cpimodel.ClauseFrame
	ClauseModelFailedCall = cpimodel.ClauseFailedCall
	ClauseModelAnswers    = cpimodel.ClauseAnswers
	ClauseModelRegistry   = cpimodel.ClauseRegistry
)

// WholeState is implemented by an Oracle that can read the whole cloud at
// one instant (every stemcell, VM, disk, attachment, snapshot, tag,
// metadata and registry entry), as the contract's model sees it. With it,
// every CPI call of every spec is checked against the model; without it
// (a Docker face, a real cloud) the model is not checked and the reports
// say so.
type WholeState interface {
	ModelState(ctx context.Context) (cpimodel.State, error)
}

// ModelCheck is what the model made of one call.
type ModelCheck struct {
	Violations []cpimodel.Violation
	// NotChecked says why the call was not judged ("" when it was).
	NotChecked string
}

// framer reads the whole cloud around each call of a process's clients.
// A call that overlaps another in time is not judged (what changed cannot
// be told apart): the specs that run calls in parallel are judged by their
// own clauses.
type framer struct {
	o        WholeState
	mu       sync.Mutex
	inflight map[*frameCall]bool
}

type frameCall struct {
	before     cpimodel.State
	err        error
	overlapped bool
}

var (
	framersMu sync.Mutex
	framers   = map[WholeState]*framer{}
)

// framerFor returns the process's framer of cfg's cloud: the oracle's
// whole cloud, or on a cloud without an oracle what the CPI's own read
// methods show (an observer); nil when the oracle cannot read the whole
// cloud, or the model's reads are off.
func framerFor(cfg Config, argv []string) *framer {
	ws := modelView(cfg, argv)
	if ws == nil {
		return nil
	}
	framersMu.Lock()
	defer framersMu.Unlock()
	f := framers[ws]
	if f == nil {
		f = &framer{o: ws, inflight: map[*frameCall]bool{}}
		framers[ws] = f
	}
	return f
}

func (f *framer) begin(ctx context.Context, x *Exchange) *frameCall {
	fc := &frameCall{}
	if ob, ok := f.o.(*observer); ok {
		ob.calling(x, callNamed)
		defer ob.calling(x, callRunning)
	}
	f.mu.Lock()
	if len(f.inflight) > 0 {
		fc.overlapped = true
		for o := range f.inflight {
			o.overlapped = true
		}
	}
	f.inflight[fc] = true
	f.mu.Unlock()
	fc.before, fc.err = f.o.ModelState(ctx)
	return fc
}

func (f *framer) end(ctx context.Context, fc *frameCall, x *Exchange) *ModelCheck {
	if ob, ok := f.o.(*observer); ok {
		ob.calling(x, callEnded)
	}
	after, err := f.o.ModelState(ctx)
	f.mu.Lock()
	delete(f.inflight, fc)
	overlapped := fc.overlapped
	f.mu.Unlock()
	switch {
	case overlapped:
		return &ModelCheck{NotChecked: "the call ran at the same time as another"}
	case fc.err != nil || err != nil:
		return &ModelCheck{NotChecked: fmt.Sprintf("the cloud could not be read: %v", errorsJoin(fc.err, err))}
	case x.RunErr != nil || x.TimedOut || len(x.Violations) > 0:
		return &ModelCheck{NotChecked: "the call broke the wire protocol"}
	}
	c, err := cpimodel.ParseRequest(x.Request)
	if err != nil {
		return &ModelCheck{NotChecked: err.Error()}
	}
	r := cpimodel.Result{Value: x.Response.Result}
	if x.Response.Error != nil {
		r.ErrType = string(x.Response.Error.Type)
	}
	vs, why := cpimodel.Check(fc.before, c, r, after)
	return &ModelCheck{Violations: vs, NotChecked: why}
}

// modelView is what the model reads of cfg's cloud (nil: nothing).
func modelView(cfg Config, argv []string) WholeState {
	if cfg.Oracle == nil {
		if cfg.NoModelReads {
			return nil
		}
		return observerFor(argv, cfg.Timeouts)
	}
	ws, _ := cfg.Oracle.(WholeState)
	return ws
}

func errorsJoin(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// reportModel adds the model's verdict on the spec's calls to the report
// and fails the spec with the first violation (after the spec's own
// checks, which name their own clauses first).
func (r *recorder) reportModel() {
	GinkgoHelper()
	r.mu.Lock()
	calls := append([]*Exchange(nil), r.calls...)
	r.mu.Unlock()
	checked, unchecked := 0, map[string]int{}
	var first *suites.Violation
	for _, x := range calls {
		m := x.Model
		if m == nil {
			unchecked["the oracle cannot read the whole cloud"]++
			continue
		}
		if m.NotChecked != "" {
			unchecked[m.NotChecked]++
			continue
		}
		checked++
		for _, v := range m.Violations {
			vv := violation(v.Clause, modelDid(v), x)
			AddReportEntry(suites.ReportEntryViolation, vv, ReportEntryVisibilityNever)
			if first == nil {
				first = &vv
			}
		}
	}
	if len(calls) > 0 {
		s := fmt.Sprintf("%d of %d calls checked against the contract's model", checked, len(calls))
		for why, n := range unchecked {
			s += fmt.Sprintf("; %d not checked: %s", n, why)
		}
		AddReportEntry(EntryModel, s, ReportEntryVisibilityNever)
	}
	if first != nil {
		Fail(violationText(*first))
	}
}

// EntryModel is the report entry saying how many of a spec's calls the
// model checked.
const EntryModel = "model"

func modelDid(v cpimodel.Violation) string {
	s := v.Object
	if v.Field != "" {
		s += " (" + v.Field + ")"
	}
	return s + ": " + v.Did
}
