package suites

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/cpilab/cpilab/internal/termsafe"
)

// The certify report is cpilab's own format (docs/report.md, with a JSON
// Schema in docs/report.schema.json): the verdict, the matrix, every spec
// that ran or was not checked, and why. Ginkgo's raw report is not it.
const (
	// ReportFormat is the "format" of every certify report.
	ReportFormat = "cpilab-certify-report"
	// ReportVersion is the format's version; it grows when a field changes
	// meaning or goes away (new fields keep the version).
	ReportVersion = 1
)

// The verdicts of a certify run.
const (
	VerdictAccepted       = "accepted"
	VerdictRejected       = "rejected"
	VerdictNothingChecked = "nothing-checked"
	VerdictInterrupted    = "interrupted"
)

// The states of one spec in a certify report.
const (
	StatePassed      = "passed"
	StateFailed      = "failed"
	StateNotChecked  = "not-checked"
	StateInterrupted = "interrupted"
)

// CertifyReport is a certify run in cpilab's report format.
type CertifyReport struct {
	// Format is ReportFormat; Version is ReportVersion.
	Format  string `json:"format"`
	Version int    `json:"version"`
	// Tool is the cpilab that made the report.
	Tool ToolInfo `json:"tool"`
	// Title names the certifier ("cpilab certify", "cpilab certify-flex");
	// TargetKind what it certified ("CPI", "FlexVolume driver").
	Title      string `json:"title"`
	TargetKind string `json:"target_kind"`
	// Target is what was certified (a CPI's command line, a driver's path).
	Target string `json:"target"`
	// Command is the certify command line as the user typed it.
	Command []string `json:"command"`
	// Started is when the run started; DurationSeconds how long it took.
	Started         time.Time `json:"started"`
	DurationSeconds float64   `json:"duration_seconds"`
	// Verdict is one of the Verdict constants; VerdictReason says why in a
	// line.
	Verdict       string `json:"verdict"`
	VerdictReason string `json:"verdict_reason"`
	// Partial, when set, says why the run did not cover the whole suite:
	// a filter (--label-filter, --focus, --skip) selected some specs, or
	// --fail-fast stopped it. Its verdict is then about those specs only.
	Partial string `json:"partial,omitempty"`
	// Strict: the run failed, instead of skipping, every spec that could
	// not check its clause (certify --strict, Config.Strict).
	Strict bool `json:"strict"`
	// Counts are the specs by state, and the warnings.
	Counts Counts `json:"counts"`
	// Areas are the matrix's columns, with their legend.
	Areas []AreaDoc `json:"areas"`
	// Matrix is one row per caller profile × version context and per
	// reference-table row.
	Matrix []MatrixRow `json:"matrix"`
	// Specs are the specs that ran or were not checked (never those a
	// label filter or focus left out), in the order they ran.
	Specs []SpecResult `json:"specs"`
	// NotChecked groups the specs not checked by reason.
	NotChecked []NotCheckedReason `json:"not_checked"`
	// Notes say how the run was set up (embedded cloud, real cloud, what is
	// skipped and why).
	Notes []string `json:"notes"`
	// LeftInCloud lists what the run left in the embedded cloud ("vm CID",
	// …); absent on a real cloud, where cpilab cannot see it.
	LeftInCloud []string `json:"left_in_cloud,omitempty"`

	// titles are the suite's clause titles (ReportRun.ClauseTitles).
	titles map[string]string
}

// ToolInfo names the cpilab that made a report.
type ToolInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
	Commit  string `json:"commit"`
}

// Counts are specs by state.
type Counts struct {
	Passed      int `json:"passed"`
	Failed      int `json:"failed"`
	NotChecked  int `json:"not_checked"`
	Interrupted int `json:"interrupted"`
	Warnings    int `json:"warnings"`
	// NotRun are the specs the run selected that never started: an
	// interrupt, the run's time limit or --fail-fast stopped it first.
	// They are neither passes nor failures.
	NotRun int `json:"not_run"`
}

// AreaDoc is one matrix column and what it checks.
type AreaDoc struct {
	ID    string `json:"id"`
	Title string `json:"title"`
}

// MatrixRow is one row of the matrix.
type MatrixRow struct {
	Row   string       `json:"row"`
	Suite string       `json:"suite"`
	Cells []MatrixCell `json:"cells"`
}

// MatrixCell counts one row's specs of one area, and names them.
type MatrixCell struct {
	Area        string   `json:"area"`
	Passed      int      `json:"passed"`
	Failed      int      `json:"failed"`
	NotChecked  int      `json:"not_checked"`
	Interrupted int      `json:"interrupted"`
	Specs       []string `json:"specs"`
}

// Mark is the cell as one glyph and counts: "✔ 4", "✘ 1/4", "– 2",
// "✔ 3 –1", "! 1" (interrupted), "".
func (m MatrixCell) Mark() string {
	if m.Interrupted > 0 && m.Failed == 0 {
		return fmt.Sprintf("! %d/%d", m.Interrupted, m.Passed+m.Failed+m.NotChecked+m.Interrupted)
	}
	return Cell{Passed: m.Passed, Failed: m.Failed + m.Interrupted, Skipped: m.NotChecked}.Mark()
}

// SpecResult is one spec.
type SpecResult struct {
	// ID is stable across runs (derived from Name).
	ID string `json:"id"`
	// Name is the spec's full text, as --focus matches it.
	Name   string   `json:"name"`
	Suite  string   `json:"suite"`
	Row    string   `json:"row"`
	Area   string   `json:"area"`
	Labels []string `json:"labels"`
	// Clause is the id (docs/contracts.md) of the clause the spec checks;
	// ClauseTitle says it in a line.
	Clause      string `json:"clause"`
	ClauseTitle string `json:"clause_title"`
	// State is one of the State constants.
	State           string  `json:"state"`
	DurationSeconds float64 `json:"duration_seconds"`
	// Methods are the CPI methods the spec really called; Calls every CPI
	// call it made, with request and response.
	Methods []string     `json:"methods"`
	Calls   []ReportCall `json:"calls"`
	// Violations are the clauses the CPI broke (the first is the spec's
	// own failure); Warnings what it bent in a way callers tolerate.
	Violations []Violation `json:"violations"`
	Warnings   []Warning   `json:"warnings"`
	// Sequence is the shrunk random lifecycle a failed explore spec found
	// (absent elsewhere): its steps, what the last broke, and the command
	// that replays it alone.
	Sequence *Sequence `json:"sequence,omitempty"`
	// Reason is why the spec was not checked, or the failure message.
	Reason string `json:"reason,omitempty"`
	// Focus selects only this spec (certify --focus); Rerun is the command
	// that reruns it.
	Focus string `json:"focus"`
	Rerun string `json:"rerun,omitempty"`
}

// ReportCall is one CPI call in a report: the report's own shape, so that
// the format stays put when the suites record more.
type ReportCall struct {
	Method string `json:"method"`
	// Request is the request as sent; Response the CPI's stdout (both cut
	// to a few hundred bytes); StderrTail the end of its stderr.
	Request    string `json:"request"`
	Response   string `json:"response"`
	StderrTail string `json:"stderr_tail,omitempty"`
	// ExitCode is the exit status, -1 when the process did not exit by
	// itself (killed at the call time-out).
	ExitCode int `json:"exit_code"`
	// Start and End bound the call (wall clock); ElapsedSeconds is the CPI
	// process's own run time.
	Start          time.Time `json:"start"`
	End            time.Time `json:"end"`
	ElapsedSeconds float64   `json:"elapsed_seconds"`
	// Error is the error type the CPI returned, or how the call failed.
	Error string `json:"error,omitempty"`
	// Cleanup marks a call of the clean-up after the spec.
	Cleanup bool `json:"cleanup,omitempty"`
}

func reportCall(c CallRecord) ReportCall {
	return ReportCall{Method: c.Method, Request: c.Request, Response: c.Response, StderrTail: c.StderrTail, ExitCode: c.ExitCode,
		Start: c.Start, End: c.End, ElapsedSeconds: c.Elapsed.Seconds(), Error: c.Error, Cleanup: c.Cleanup}
}

// NotCheckedReason is one reason specs were not checked.
type NotCheckedReason struct {
	Reason string   `json:"reason"`
	Count  int      `json:"count"`
	Specs  []string `json:"specs"`
}

// ReportRun is what a certify run knows beyond Ginkgo's report.
type ReportRun struct {
	Tool ToolInfo
	// Title and TargetKind name the certifier and what it certifies
	// (default "cpilab certify" and "CPI"); Areas are its matrix's
	// columns, in order, with their legend.
	Title, TargetKind string
	Areas             []AreaDoc
	// RowRank orders the matrix's rows (nil: the order they first appear
	// in); a row's suite is its specs' "suite:" label.
	RowRank func(row, suite string) int
	// Row is the matrix row of the specs that carry no "row:" label (a
	// suite that is one row); "" leaves them out of the matrix.
	Row string
	// ClauseTitles are the titles of the suite's clauses, by id: a spec
	// whose text starts with a known id checks that clause, and the text
	// reports name a clause with its title.
	ClauseTitles map[string]string
	// FailFast: the run stops at its first failure (--fail-fast).
	FailFast bool
	Target   string
	Command  []string
	Notes    []string
	Started  time.Time
	Duration time.Duration
	Strict   bool
	// StrictNotChecked: under Strict, the report fails the specs that were
	// not checked, for a suite whose specs do not fail them themselves.
	StrictNotChecked bool
	Interrupted      bool
	// Rerun turns a focus regexp into a command line (nil: none).
	Rerun func(focus string) string
	// Replay turns a replay file of a shrunk random lifecycle into the
	// command line that runs it alone (nil: none).
	Replay func(file string) string
	// LeftInCloud is what the embedded cloud still holds (nil: unknown).
	LeftInCloud []string
}

// NewCertifyReport builds a certify report from Ginkgo's report of a Run.
func NewCertifyReport(r types.Report, run ReportRun) *CertifyReport {
	c := &CertifyReport{Format: ReportFormat, Version: ReportVersion, Tool: run.Tool, Target: run.Target,
		Command: nonNil(run.Command), Started: run.Started, DurationSeconds: run.Duration.Seconds(),
		Strict: run.Strict, Notes: nonNil(run.Notes), LeftInCloud: run.LeftInCloud,
		Specs: []SpecResult{}, Matrix: []MatrixRow{}, NotChecked: []NotCheckedReason{}}
	if c.Tool.Name == "" {
		c.Tool.Name = "cpilab"
	}
	c.Title, c.TargetKind, c.Areas = cmp.Or(run.Title, "cpilab certify"), cmp.Or(run.TargetKind, "CPI"), run.Areas
	c.titles = run.ClauseTitles
	interrupted := run.Interrupted || TimedOut(r)
	started := 0
	for _, sr := range r.SpecReports {
		if !Ran(sr) {
			continue // left out by a label filter or focus, or never started
		}
		if sr.LeafNodeType == types.NodeTypeIt {
			started++
		}
		if sr.LeafNodeType != types.NodeTypeIt && !sr.Failed() {
			continue // Ginkgo's bookkeeping: suite set-up and reporters
		}
		s := specResult(r, sr, run)
		if s.Sequence != nil && s.Sequence.ReplayFile != "" && run.Replay != nil {
			s.Sequence.Replay = run.Replay(s.Sequence.ReplayFile)
		}
		if s.Row == "" && sr.LeafNodeType == types.NodeTypeIt {
			s.Row = run.Row
		}
		if run.StrictNotChecked {
			strictFail(&s)
		}
		if s.State == StateInterrupted {
			interrupted = true
		}
		c.Specs = append(c.Specs, s)
	}
	c.fillMatrix(run.RowRank)
	c.Counts.NotRun = max(0, r.PreRunStats.SpecsThatWillRun-started)
	c.decide(r, interrupted)
	c.Partial = partial(r, run.FailFast, c.Counts.NotRun)
	return c
}

// strictFail fails, under --strict, a spec that could not check its
// clause, for a suite whose specs do not do it themselves (the CPI suites
// fail them in the spec: Config.Strict); what does not apply ("not
// applicable: …") or what another part handles ("handled: …") stays not
// checked.
func strictFail(s *SpecResult) {
	if s.State != StateNotChecked || strings.HasPrefix(s.Reason, "not applicable") || strings.HasPrefix(s.Reason, "handled") ||
		strings.HasPrefix(s.Reason, "Spec skipped because") { // Ginkgo's: an earlier spec of its ordered container failed
		return
	}
	s.State = StateFailed
	s.Violations = append(s.Violations, Violation{Clause: cmp.Or(s.Clause, HarnessClause), Did: s.Reason + " (strict mode counts what is not checked as failed)", ExitCode: -1})
}

// partial says why a run did not cover its whole suite ("" when it did).
func partial(r types.Report, failFast bool, notRun int) string {
	var why []string
	pending := 0 // a pending spec never runs, whatever the filters (csi-sanity has one)
	for _, sr := range r.SpecReports {
		if sr.LeafNodeType == types.NodeTypeIt && sr.State == types.SpecStatePending {
			pending++
		}
	}
	if n, total := r.PreRunStats.SpecsThatWillRun, r.PreRunStats.TotalSpecs-pending; n < total {
		why = append(why, fmt.Sprintf("a filter selected %d of %d specs", n, total))
	}
	if failFast && notRun > 0 {
		why = append(why, fmt.Sprintf("--fail-fast stopped it with %d specs not run", notRun))
	}
	return strings.Join(why, "; ")
}

// VerdictLine is the verdict as every certifier prints it last: the
// verdict word, PARTIAL when the run did not cover the whole suite, and
// why.
func (c *CertifyReport) VerdictLine() string {
	line := strings.ToUpper(c.Verdict) + ": " + c.VerdictReason
	if c.Partial != "" {
		line += " (PARTIAL: " + c.Partial + ")"
	}
	return line
}

// suiteTimeoutReason is how Ginkgo names a run stopped by its time limit
// (--ginkgo.timeout) in SpecialSuiteFailureReasons.
const suiteTimeoutReason = "Suite Timeout Elapsed"

// TimedOut reports whether the run's time limit (--ginkgo.timeout) stopped
// it: a harness limit, never something the CPI did.
func TimedOut(r types.Report) bool {
	if slices.Contains(r.SpecialSuiteFailureReasons, suiteTimeoutReason) {
		return true
	}
	return slices.ContainsFunc(r.SpecReports, suiteTimedOut)
}

// suiteTimedOut reports whether the run's time limit stopped sr (Ginkgo's
// "A suite timeout occurred"), as opposed to a spec's own time limit.
func suiteTimedOut(sr types.SpecReport) bool {
	return sr.State == types.SpecStateTimedout && strings.HasPrefix(sr.Failure.Message, "A suite timeout occurred")
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// specResult turns one Ginkgo spec report into a SpecResult.
func specResult(r types.Report, sr types.SpecReport, run ReportRun) SpecResult {
	s := SpecResult{Name: sr.FullText(), Suite: LabelValue(sr, "suite"), Row: LabelValue(sr, "row"),
		Area: LabelValue(sr, "area"), Labels: nonNil(sr.Labels()), DurationSeconds: sr.RunTime.Seconds(),
		Methods: []string{}, Calls: []ReportCall{}, Violations: []Violation{}, Warnings: []Warning{}}
	if s.Name == "" {
		s.Name = fmt.Sprintf("%s %s", sr.LeafNodeType, sr.LeafNodeText)
	}
	if s.Suite == "" {
		s.Suite = "harness"
	}
	s.ID = SpecID(s.Name)
	for _, e := range sr.ReportEntries {
		switch e.Name {
		case EntryClause:
			var id string
			if entryValue(e, &id) == nil {
				s.Clause = id
			}
		case EntryMethods:
			var ms []string
			if entryValue(e, &ms) == nil {
				s.Methods = append(s.Methods, ms...)
			}
		case EntryCalls:
			var cs []CallRecord
			if entryValue(e, &cs) == nil {
				for _, c := range cs {
					s.Calls = append(s.Calls, reportCall(c))
				}
			}
		case EntryViolation:
			var v Violation
			if entryValue(e, &v) == nil {
				s.Violations = append(s.Violations, v)
			}
		case EntryWarning:
			var w Warning
			if entryValue(e, &w) == nil {
				s.Warnings = append(s.Warnings, w)
			}
		case EntryExploreSequence:
			var q Sequence
			if entryValue(e, &q) == nil {
				s.Sequence = &q
			}
		}
	}
	if s.Clause == "" {
		s.Clause = ClauseIn(sr.LeafNodeText, run.ClauseTitles)
	}
	if s.Clause == "" && len(s.Violations) > 0 {
		s.Clause = s.Violations[0].Clause
	}
	s.ClauseTitle = run.ClauseTitles[s.Clause]
	if len(s.Methods) == 0 {
		for _, c := range s.Calls {
			if !slices.Contains(s.Methods, c.Method) {
				s.Methods = append(s.Methods, c.Method)
			}
		}
		sort.Strings(s.Methods)
	}
	switch {
	case sr.State.Is(types.SpecStatePassed):
		s.State = StatePassed
	case sr.State.Is(types.SpecStateSkipped | types.SpecStatePending):
		s.State, s.Reason = StateNotChecked, sr.Failure.Message
	case sr.State.Is(types.SpecStateInterrupted):
		s.State, s.Reason = StateInterrupted, "interrupted (Ctrl-C or SIGTERM) before the spec ended"
	case suiteTimedOut(sr):
		s.State, s.Reason = StateInterrupted, "the run's time limit (--ginkgo.timeout) ended it before the spec ended"
	default:
		s.State, s.Reason = StateFailed, sr.Failure.Message
		if len(s.Violations) == 0 {
			s.Violations = append(s.Violations, Violation{Clause: HarnessClause, Did: sr.Failure.Message, ExitCode: -1})
		}
	}
	s.Focus = SpecFocus(r, sr)
	if run.Rerun != nil && (s.State == StateFailed || s.State == StateInterrupted) {
		s.Rerun = run.Rerun(s.Focus)
	}
	return s
}

// SpecID is the stable id of the spec whose full text is name, as reports
// and --list show it.
func SpecID(name string) string {
	h := fnv.New64a()
	io.WriteString(h, name)
	return fmt.Sprintf("s%016x", h.Sum64())
}

// entryValue decodes a report entry's value into dst, whether the entry
// holds the Go value (in process) or its JSON (read back from a file).
func entryValue(e types.ReportEntry, dst any) error {
	if raw := e.Value.GetRawValue(); raw != nil {
		if b, err := json.Marshal(raw); err == nil {
			return json.Unmarshal(b, dst)
		}
	}
	if e.Value.AsJSON == "" {
		return errors.New("empty report entry")
	}
	return json.Unmarshal([]byte(e.Value.AsJSON), dst)
}

// fillMatrix counts the specs into rows and cells, and the reasons.
func (c *CertifyReport) fillMatrix(rowRank func(row, suite string) int) {
	rows := map[string]int{}
	reasons := map[string]int{}
	for _, s := range c.Specs {
		switch s.State {
		case StatePassed:
			c.Counts.Passed++
		case StateFailed:
			c.Counts.Failed++
		case StateNotChecked:
			c.Counts.NotChecked++
			i, ok := reasons[s.Reason]
			if !ok {
				i = len(c.NotChecked)
				reasons[s.Reason] = i
				c.NotChecked = append(c.NotChecked, NotCheckedReason{Reason: s.Reason})
			}
			c.NotChecked[i].Count++
			c.NotChecked[i].Specs = append(c.NotChecked[i].Specs, s.ID)
		case StateInterrupted:
			c.Counts.Interrupted++
		}
		c.Counts.Warnings += len(s.Warnings)
		if s.Row == "" {
			continue
		}
		i, ok := rows[s.Row]
		if !ok {
			i = len(c.Matrix)
			rows[s.Row] = i
			c.Matrix = append(c.Matrix, MatrixRow{Row: s.Row, Suite: s.Suite})
		}
		r := &c.Matrix[i]
		j := slices.IndexFunc(r.Cells, func(m MatrixCell) bool { return m.Area == s.Area })
		if j < 0 {
			j = len(r.Cells)
			r.Cells = append(r.Cells, MatrixCell{Area: s.Area})
		}
		cell := &r.Cells[j]
		cell.Specs = append(cell.Specs, s.ID)
		switch s.State {
		case StatePassed:
			cell.Passed++
		case StateNotChecked:
			cell.NotChecked++
		case StateInterrupted:
			cell.Interrupted++
		default:
			cell.Failed++
		}
	}
	for i := range c.Matrix {
		slices.SortStableFunc(c.Matrix[i].Cells, func(a, b MatrixCell) int { return c.areaRank(a.Area) - c.areaRank(b.Area) })
	}
	if rowRank != nil {
		slices.SortStableFunc(c.Matrix, func(a, b MatrixRow) int { return rowRank(a.Row, a.Suite) - rowRank(b.Row, b.Suite) })
	}
	sort.SliceStable(c.NotChecked, func(i, j int) bool { return c.NotChecked[i].Reason < c.NotChecked[j].Reason })
}

// areaRank is a's place among the report's areas (after them all when
// it is none of them).
func (c *CertifyReport) areaRank(a string) int {
	if i := slices.IndexFunc(c.Areas, func(d AreaDoc) bool { return d.ID == a }); i >= 0 {
		return i
	}
	return len(c.Areas)
}

// decide sets the verdict: interrupted, rejected (a failure or a
// suite-level failure), nothing checked, or accepted. Under --strict the
// suites themselves fail what they could not check (Config.Strict); what
// does not apply at all stays not checked.
func (c *CertifyReport) decide(r types.Report, interrupted bool) {
	n := c.Counts
	switch {
	case interrupted:
		c.Verdict = VerdictInterrupted
		by := "interrupted"
		if TimedOut(r) {
			by = "the run's time limit (--ginkgo.timeout) elapsed"
		}
		c.VerdictReason = fmt.Sprintf("%s after %d passed, %d failed, %d not checked, %d not run; nothing is certified", by, n.Passed, n.Failed, n.NotChecked, n.NotRun)
	case n.Failed > 0:
		c.Verdict = VerdictRejected
		c.VerdictReason = fmt.Sprintf("%d failed, %d passed, %d not checked", n.Failed, n.Passed, n.NotChecked)
	case !r.SuiteSucceeded && len(r.SpecReports) > 0:
		c.Verdict = VerdictRejected
		c.VerdictReason = "the suite failed: " + strings.Join(r.SpecialSuiteFailureReasons, "; ")
	case n.Passed == 0:
		c.Verdict = VerdictNothingChecked
		c.VerdictReason = fmt.Sprintf("no spec ran and passed (%d not checked; check --label-filter, --focus and --skip)", n.NotChecked)
	default:
		c.Verdict = VerdictAccepted
		c.VerdictReason = fmt.Sprintf("%d passed, %d not checked", n.Passed, n.NotChecked)
	}
}

// Spec returns the spec with id (nil when none).
func (c *CertifyReport) Spec(id string) *SpecResult {
	for i := range c.Specs {
		if c.Specs[i].ID == id {
			return &c.Specs[i]
		}
	}
	return nil
}

// HarnessClause is the clause of a spec's failure that no check of the
// CPI made (the harness's own assertion, a panic): it never names a CPI bug.
const HarnessClause = "harness"

// FailedClauses returns the distinct clause ids the CPI broke, sorted: each
// failed spec's violations.
func (c *CertifyReport) FailedClauses() []string {
	var out []string
	for _, s := range c.Specs {
		for _, v := range s.Violations {
			if !slices.Contains(out, v.Clause) {
				out = append(out, v.Clause)
			}
		}
	}
	sort.Strings(out)
	return out
}

// WriteJSON writes the report as indented JSON.
func (c *CertifyReport) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(c)
}

// ReadCertifyReport reads a report a certify run wrote (--json-report),
// refusing another format or a newer version.
func ReadCertifyReport(path string) (*CertifyReport, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var c CertifyReport
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("%s: not a certify report: %w", path, err)
	}
	if c.Format != ReportFormat {
		return nil, fmt.Errorf("%s: format %q, want %q", path, c.Format, ReportFormat)
	}
	if c.Version > ReportVersion {
		return nil, fmt.Errorf("%s: report version %d is newer than this cpilab reads (%d)", path, c.Version, ReportVersion)
	}
	return &c, nil
}

// WriteFailuresText writes each failed or interrupted spec for a terminal:
// the spec, the clause it broke, what the CPI did (request, response,
// stderr), further violations, and the command that reruns it.
func (c *CertifyReport) WriteFailuresText(w io.Writer) {
	w = termsafe.NewWriter(w) // untrusted text (a CPI's, a driver's) shown escaped
	var failed []SpecResult
	for _, s := range c.Specs {
		if s.State == StateFailed {
			failed = append(failed, s)
		}
	}
	if len(failed) == 0 {
		return
	}
	fmt.Fprintf(w, "\nFailures (%d):\n\n", len(failed))
	for _, s := range failed {
		fmt.Fprintf(w, "✘ %s\n", s.Name)
		for i, v := range s.Violations {
			if i == 0 {
				fmt.Fprintf(w, "  broke: %s\n%s\n", c.ClauseText(v.Clause), v.DetailsOf(c.TargetKind))
				continue
			}
			fmt.Fprintf(w, "  also broke: %s\n  %s\n", c.ClauseText(v.Clause), strings.ReplaceAll(v.DetailsOf(c.TargetKind), "\n", "\n  "))
		}
		if s.Sequence != nil {
			s.Sequence.writeText(w, "  ")
		}
		if s.Rerun != "" {
			fmt.Fprintf(w, "  rerun only this spec: %s\n", s.Rerun)
		}
		fmt.Fprintln(w)
	}
}

// WriteWarningsText writes the warnings: what a CPI bent in a way callers
// tolerate, once per clause and text, with how many specs saw it.
func (c *CertifyReport) WriteWarningsText(w io.Writer) {
	w = termsafe.NewWriter(w) // untrusted text (a CPI's, a driver's) shown escaped
	type key struct{ clause, text string }
	counts := map[key]int{}
	var order []key
	for _, s := range c.Specs {
		for _, wn := range s.Warnings {
			k := key{wn.Clause, wn.Text}
			if counts[k] == 0 {
				order = append(order, k)
			}
			counts[k]++
		}
	}
	if len(order) == 0 {
		return
	}
	fmt.Fprintf(w, "\nWarnings (not failures):\n")
	for _, k := range order {
		fmt.Fprintf(w, "  %3d × %s: %s\n", counts[k], k.clause, k.text)
	}
}

// WriteMatrixText writes the matrix for a terminal: a row per context and
// reference-table row, a column per area that has specs, then the legend
// of the marks, the counts and every reason specs were not checked.
func (c *CertifyReport) WriteMatrixText(w io.Writer) {
	w = termsafe.NewWriter(w) // untrusted text (a CPI's, a driver's) shown escaped
	var cols []string
	for _, d := range c.Areas {
		a := d.ID
		if slices.ContainsFunc(c.Matrix, func(r MatrixRow) bool {
			return slices.ContainsFunc(r.Cells, func(m MatrixCell) bool { return m.Area == a })
		}) {
			cols = append(cols, a)
		}
	}
	width := 16
	for _, r := range c.Matrix {
		width = max(width, len(r.Row)+1)
	}
	fmt.Fprintf(w, "%-*s", width, "row")
	for _, a := range cols {
		fmt.Fprintf(w, " %-9s", a)
	}
	fmt.Fprintln(w)
	for _, r := range c.Matrix {
		line := fmt.Sprintf("%-*s", width, r.Row)
		for _, a := range cols {
			var m MatrixCell
			if i := slices.IndexFunc(r.Cells, func(m MatrixCell) bool { return m.Area == a }); i >= 0 {
				m = r.Cells[i]
			}
			mark := m.Mark() // padded by runes: glyphs are one column, whatever their bytes
			line += " " + mark + strings.Repeat(" ", max(0, 9-utf8.RuneCountInString(mark)))
		}
		fmt.Fprintln(w, strings.TrimRight(line, " "))
	}
	fmt.Fprintln(w, "\nrows: contract contexts <caller profile>.<api version>; reference-table rows d<Director>.c<CPI>.s<stemcell>")
	fmt.Fprintln(w, "cells: ✔ passed · ✘ failed/total · – not checked (never a pass) · ! interrupted")
	reasons := map[string]int{}
	for _, n := range c.NotChecked {
		reasons[n.Reason] = n.Count
	}
	WriteCounts(w, c.Counts.Passed, c.Counts.Failed, c.Counts.NotChecked, reasons)
	if c.Counts.Interrupted > 0 {
		fmt.Fprintf(w, "%d interrupted\n", c.Counts.Interrupted)
	}
	if c.Counts.NotRun > 0 {
		fmt.Fprintf(w, "%d not run: the run stopped before they started (neither passes nor failures)\n", c.Counts.NotRun)
	}
}
