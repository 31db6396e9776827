package dynamicdisks

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"

	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/internal/termsafe"
	"github.com/cpilab/cpilab/suites"
)

// Register adds the dynamic disks suite to the current Ginkgo tree, for
// embedding in someone else's suite (call it at the top level of a _test.go
// file, or inside a Describe). cfg is read when the suite's BeforeAll runs,
// so a BeforeSuite may still fill it in.
func Register(cfg *Config) bool {
	describe(cfg, context.Background())
	return true
}

// Test registers the suite and runs it inside a go test:
//
//	func TestMyDirector(t *testing.T) { dynamicdisks.Test(t, cfg) }
//
// Ginkgo runs one suite per process: call Test (or Run) once. Ginkgo's
// flags (-ginkgo.label-filter, -ginkgo.focus, -ginkgo.v, …) apply.
func Test(t GinkgoTestingT, cfg Config) bool {
	gomega.RegisterFailHandler(Fail)
	Register(&cfg)
	return RunSpecs(t, "cpilab dynamic disks API certification")
}

// RunOptions configure Run: the one shape every cpilab suite takes
// (suites.RunOptions). Its Timeout defaults to 30 min here.
type RunOptions = suites.RunOptions

// Run registers the suite and runs it outside go test (the `cpilab
// certify-director` path), returning the summary. It owns the process's
// Ginkgo state: call it once per process. Cancelling ctx stops the waits of
// the running spec; the remaining specs then fail fast. When the set-up
// failed because an answer broke a read cap (internal/httpread: an endless
// or oversize body), Run returns the summary and an error naming the
// endpoint and the cap: the director cannot be certified.
func Run(ctx context.Context, cfg Config, opts RunOptions) (Summary, error) {
	report, err := RunReport(ctx, cfg, opts)
	var capped *CappedError
	switch {
	case errors.As(err, &capped):
		return Summarize(report), err
	case err != nil:
		return Summary{}, err
	}
	return Summarize(report), nil
}

// Stemcells counts the stemcells the director at cfg.URL holds, as its
// admin sees them (GET /stemcells): a run that deploys its own instances
// needs one, or Setup's stemcell to upload.
func Stemcells(ctx context.Context, cfg Config) (int, error) {
	s, err := newSession(ctx, cfg.withDefaults())
	if err != nil {
		return 0, err
	}
	var list []director.Stemcell
	if err := s.admin.dc.GetJSON(ctx, "/stemcells", &list); err != nil {
		return 0, err
	}
	return len(list), nil
}

// Description is the suite's Ginkgo description.
const Description = "cpilab dynamic disks API certification"

// RunReport is Run returning Ginkgo's report, for a caller that builds
// cpilab's certify report from it (suites.NewCertifyReport). A set-up
// that failed because an answer broke a read cap gives the report and a
// *CappedError.
func RunReport(ctx context.Context, cfg Config, opts RunOptions) (types.Report, error) {
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Minute
	}
	var r *run
	report, err := suites.RunTree(Description, func() { r = describe(&cfg, ctx) }, opts)
	if err != nil || r == nil {
		return report, err
	}
	if p := r.capped.Load(); p != nil {
		return report, &CappedError{Err: *p}
	}
	return report, nil
}

// CappedError is a certify-director run whose set-up met an answer over
// its read cap (internal/httpread: an endless or oversize body): the
// director cannot be certified.
type CappedError struct{ Err error }

func (e *CappedError) Error() string {
	return "the director's answer broke a read cap, so it cannot be certified: " + e.Err.Error()
}

func (e *CappedError) Unwrap() error { return e.Err }

// List returns the specs a run with opts would run, without running
// anything (a Ginkgo dry run).
func List(opts RunOptions) ([]suites.SpecInfo, error) {
	return suites.ListTree(Description, func() { describe(&Config{}, context.Background()) }, opts)
}

// Areas are the report's columns for this suite, in order, with what each
// checks (the legend of its matrix).
var Areas = []suites.AreaDoc{
	{ID: "provide", Title: "provide creates, attaches or refuses a disk as the desired state says, idempotently"},
	{ID: "create", Title: "create makes a disk without attaching it"},
	{ID: "detach", Title: "detach, and detach again, succeed"},
	{ID: "delete", Title: "delete removes a disk, and refuses an attached one"},
	{ID: "input", Title: "malformed requests are refused with a clear status"},
	{ID: "auth", Title: "the disk-scoped user reaches only the disk endpoints; no credentials, no access"},
	{ID: "tasks", Title: "each call is a task whose result and state tell what happened"},
	{ID: "queue", Title: "tasks on one disk run in order; tasks on others do not wait"},
	{ID: "race", Title: "concurrent calls on one disk end in a state the desired-state contract allows"},
	{ID: "iaas", Title: "what the cloud holds matches what the director said"},
	{ID: "metadata", Title: "disk metadata reaches the cloud"},
	{ID: "agent", Title: "the agent on the VM sees the disk where the director said"},
	{ID: "cleanup", Title: "the run leaves nothing behind"},
}

// SpecResult is one spec as the summary shows it.
type SpecResult struct {
	// Text is the It text: the clause it checks.
	Text   string   `json:"text"`
	Labels []string `json:"labels"`
	// State is "passed", "failed", "skipped" (not checked, with Reason) or
	// another Ginkgo state ("panicked", "timedout", "interrupted", …).
	State string `json:"state"`
	// Reason is a skip's reason, or a failure's message.
	Reason string `json:"reason,omitempty"`
	// Violations are the broken clauses with the exchange that showed
	// each.
	Violations []Violation `json:"violations,omitempty"`
	// Harness are failures of the suite's side (the director could not be
	// reached): the spec checked nothing.
	Harness  []HarnessError     `json:"harness,omitempty"`
	Duration time.Duration      `json:"duration"`
	Location types.CodeLocation `json:"-"`
}

// Failed reports whether the spec failed (in any way).
func (s SpecResult) Failed() bool {
	return s.State != types.SpecStatePassed.String() && s.State != types.SpecStateSkipped.String()
}

// HasLabel reports whether the spec carries label l.
func (s SpecResult) HasLabel(l string) bool {
	for _, x := range s.Labels {
		if x == l {
			return true
		}
	}
	return false
}

// Summary is the outcome of a run.
type Summary struct {
	Passed, Failed, Skipped int
	// Specs are the specs that ran, in run order.
	Specs []SpecResult `json:"specs"`
	// NotChecked counts the specs skipped for each reason.
	NotChecked map[string]int `json:"not_checked,omitempty"`
	// SuiteFailure is a failure outside any spec (set-up, clean-up).
	SuiteFailure string `json:"suite_failure,omitempty"`
	// HarnessErrors counts the failures (of specs, set-up or clean-up)
	// that were the suite's own: the director could not be reached.
	HarnessErrors int `json:"harness_errors,omitempty"`
	// Violated counts the failed specs that are no harness error.
	Violated int `json:"violated,omitempty"`
}

// OK reports whether nothing failed and at least one spec passed.
func (s Summary) OK() bool {
	return s.Failed == 0 && s.Passed > 0 && s.SuiteFailure == "" && s.HarnessErrors == 0
}

// HarnessOnly reports whether the run failed only for harness errors: it
// could not certify, and found no violation (certify-director exits 2).
func (s Summary) HarnessOnly() bool { return s.HarnessErrors > 0 && s.Violated == 0 }

// Summarize builds a Summary from a Ginkgo report (of Run, or of a suite
// that embeds Register).
func Summarize(r types.Report) Summary {
	s := Summary{NotChecked: map[string]int{}}
	for _, sr := range r.SpecReports {
		if !suites.Ran(sr) {
			continue
		}
		if sr.LeafNodeType != types.NodeTypeIt {
			if sr.Failed() {
				s.SuiteFailure = strings.TrimSpace(s.SuiteFailure + "\n" + sr.LeafNodeType.String() + ": " + sr.Failure.Message)
				if len(specResult(sr).Harness) > 0 {
					s.HarnessErrors++
				} else {
					s.Violated++
				}
			}
			continue
		}
		res := specResult(sr)
		if res.Failed() {
			if len(res.Harness) > 0 {
				s.HarnessErrors++
			} else if !strings.Contains(res.Reason, "harness error") {
				s.Violated++
			}
		}
		s.Specs = append(s.Specs, res)
		switch {
		case res.State == types.SpecStatePassed.String():
			s.Passed++
		case res.State == types.SpecStateSkipped.String():
			s.Skipped++
			s.NotChecked[res.Reason]++
		default:
			s.Failed++
		}
	}
	return s
}

// ran is false for specs filtered out (skipped without a message).
func specResult(sr types.SpecReport) SpecResult {
	res := SpecResult{Text: sr.LeafNodeText, Labels: sr.Labels(), State: sr.State.String(),
		Duration: sr.RunTime, Location: sr.LeafNodeLocation}
	if sr.State != types.SpecStatePassed {
		res.Reason = sr.Failure.Message
	}
	for _, e := range sr.ReportEntries {
		if v, ok := e.Value.GetRawValue().(Violation); ok && e.Name == ReportEntryViolation {
			res.Violations = append(res.Violations, v)
		}
		if h, ok := e.Value.GetRawValue().(HarnessError); ok && e.Name == ReportEntryHarness {
			res.Harness = append(res.Harness, h)
		}
	}
	return res
}

// WriteText writes the summary for a terminal: each failure with its
// clause, what the director did and the exchange, then the counts and the
// not-checked reasons.
func (s Summary) WriteText(w io.Writer) {
	w = termsafe.NewWriter(w) // a Director's answers shown escaped
	for _, sp := range s.Specs {
		mark := "✔"
		switch {
		case sp.State == types.SpecStateSkipped.String():
			mark = "–"
		case sp.Failed():
			mark = "✘"
		}
		fmt.Fprintf(w, "%s %s\n", mark, sp.Text)
		if sp.Failed() {
			fmt.Fprintf(w, "  %s\n", strings.ReplaceAll(strings.TrimSpace(sp.Reason), "\n", "\n  "))
		}
	}
	if s.SuiteFailure != "" {
		fmt.Fprintf(w, "✘ outside the specs: %s\n", s.SuiteFailure)
	}
	suites.WriteCounts(w, s.Passed, s.Failed, s.Skipped, s.NotChecked)
}
