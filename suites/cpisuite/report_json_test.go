package cpisuite

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/suites"

	"github.com/onsi/ginkgo/v2/types"
)

// withBookkeeping is sampleReport plus what Ginkgo adds around specs: a
// passed BeforeSuite and a reporter node, which no cpilab report shows.
func withBookkeeping() types.Report {
	r := sampleReport()
	r.SpecReports = append(r.SpecReports,
		types.SpecReport{LeafNodeType: types.NodeTypeBeforeSuite, State: types.SpecStatePassed},
		types.SpecReport{LeafNodeType: types.NodeTypeReportAfterSuite, LeafNodeText: "summary", State: types.SpecStatePassed})
	return r
}

func TestCertifyReportCountsVerdictAndMatrix(t *testing.T) {
	c := newReport(withBookkeeping(), suites.ReportRun{Rerun: func(f string) string { return "cpilab certify --focus " + f }})
	if c.Format != suites.ReportFormat || c.Version != suites.ReportVersion {
		t.Fatalf("format %q version %d", c.Format, c.Version)
	}
	if len(c.Specs) != 4 {
		t.Fatalf("%d specs, want 4: the filtered spec and Ginkgo's own nodes are left out", len(c.Specs))
	}
	if c.Counts != (suites.Counts{Passed: 2, Failed: 1, NotChecked: 1}) {
		t.Errorf("counts %+v", c.Counts)
	}
	if c.Verdict != suites.VerdictRejected || !strings.Contains(c.VerdictReason, "1 failed") {
		t.Errorf("verdict %s (%s)", c.Verdict, c.VerdictReason)
	}
	failed := c.Specs[0]
	if failed.State != suites.StateFailed || failed.Clause != ClauseDeleteDisk || len(failed.Violations) != 1 ||
		failed.Violations[0].Request == "" || !strings.HasPrefix(failed.Rerun, "cpilab certify --focus ") || failed.Row != "cli.api2" {
		t.Errorf("failed spec %+v", failed)
	}
	if c.Specs[1].Rerun != "" {
		t.Errorf("a passed spec has a rerun command %q", c.Specs[1].Rerun)
	}
	if len(c.Matrix) != 2 || c.Matrix[0].Row != "director-current.api3" {
		t.Fatalf("matrix %+v", c.Matrix)
	}
	cell := c.Matrix[1].Cells[0]
	if cell.Area != "errors" || cell.Failed != 1 || cell.Passed != 1 || len(cell.Specs) != 2 || c.Spec(cell.Specs[0]) == nil {
		t.Errorf("cli.api2 errors cell %+v", cell)
	}
	if len(c.NotChecked) != 1 || c.NotChecked[0].Count != 1 || c.Spec(c.NotChecked[0].Specs[0]).State != suites.StateNotChecked {
		t.Errorf("not checked %+v", c.NotChecked)
	}
	// Ids are stable: the same report gives the same ids.
	if again := newReport(withBookkeeping(), suites.ReportRun{}); again.Specs[0].ID != failed.ID {
		t.Errorf("spec id changed between two builds: %s, %s", failed.ID, again.Specs[0].ID)
	}
}

func TestCertifyReportVerdicts(t *testing.T) {
	passedOnly := func(states ...types.SpecState) types.Report {
		r := types.Report{SuiteSucceeded: true}
		for i, s := range states {
			msg := ""
			if s == types.SpecStateSkipped {
				msg = "not checked: no oracle"
			}
			r.SpecReports = append(r.SpecReports, spec("cli.api2", "errors", ClauseDetachTwice+string(rune('a'+i)), s, msg, nil))
		}
		return r
	}
	for _, tc := range []struct {
		name        string
		r           types.Report
		strict      bool
		interrupted bool
		want        string
	}{
		{"all passed", passedOnly(types.SpecStatePassed, types.SpecStatePassed), false, false, suites.VerdictAccepted},
		{"passed and not checked", passedOnly(types.SpecStatePassed, types.SpecStateSkipped), false, false, suites.VerdictAccepted},
		{"strict keeps not-applicable skips", passedOnly(types.SpecStatePassed, types.SpecStateSkipped), true, false, suites.VerdictAccepted},
		{"nothing checked", passedOnly(types.SpecStateSkipped), false, false, suites.VerdictNothingChecked},
		{"nothing ran", passedOnly(), false, false, suites.VerdictNothingChecked},
		{"interrupted spec", passedOnly(types.SpecStatePassed, types.SpecStateInterrupted), false, false, suites.VerdictInterrupted},
		{"interrupted run", passedOnly(types.SpecStatePassed), false, true, suites.VerdictInterrupted},
	} {
		c := newReport(tc.r, suites.ReportRun{Strict: tc.strict, Interrupted: tc.interrupted})
		if c.Verdict != tc.want {
			t.Errorf("%s: verdict %s (%s), want %s", tc.name, c.Verdict, c.VerdictReason, tc.want)
		}
	}
}

func readSchema(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "report.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The report validates against docs/report.schema.json, and survives a
// round trip through ReadCertifyReport.
func TestCertifyReportMatchesSchema(t *testing.T) {
	c := newReport(withBookkeeping(), suites.ReportRun{Target: "bin/cpi", Started: time.Unix(0, 0).UTC(), Duration: time.Second,
		Rerun: func(f string) string { return "cpilab certify --focus " + f }, LeftInCloud: []string{}})
	c.Specs[0].Calls = []suites.ReportCall{{Method: "delete_disk", Request: "{}", Response: "{}", ExitCode: 0,
		Start: time.Unix(1, 0), End: time.Unix(2, 0), ElapsedSeconds: 1, Error: "DiskNotFound", Cleanup: true, StderrTail: "x"}}
	c.Specs[0].Warnings = []suites.Warning{{Clause: ClauseUnreadResult, Text: "reboot_vm returned \"\""}}
	var b bytes.Buffer
	if err := c.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	if err := suites.ValidateJSONSchema(readSchema(t), b.Bytes()); err != nil {
		t.Fatalf("the report does not match its schema: %v\n%s", err, b.String())
	}
	p := filepath.Join(t.TempDir(), "r.json")
	if err := os.WriteFile(p, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	back, err := suites.ReadCertifyReport(p)
	if err != nil {
		t.Fatal(err)
	}
	if back.Verdict != c.Verdict || len(back.Specs) != len(c.Specs) || back.Specs[0].Violations[0].Clause != ClauseDeleteDisk {
		t.Errorf("round trip: %+v", back)
	}
	if got := back.FailedClauses(); len(got) != 1 || got[0] != ClauseDeleteDisk {
		t.Errorf("failed clauses %q", got)
	}
}

// The validator finds what is wrong: it is not a validator that passes
// everything.
func TestSchemaValidatorRefusesBadReports(t *testing.T) {
	schema := readSchema(t)
	var good bytes.Buffer
	if err := newReport(sampleReport(), suites.ReportRun{}).WriteJSON(&good); err != nil {
		t.Fatal(err)
	}
	for name, mutate := range map[string]func(m map[string]any){
		"missing verdict":  func(m map[string]any) { delete(m, "verdict") },
		"unknown verdict":  func(m map[string]any) { m["verdict"] = "maybe" },
		"extra property":   func(m map[string]any) { m["surprise"] = 1 },
		"wrong version":    func(m map[string]any) { m["version"] = 2 },
		"negative count":   func(m map[string]any) { m["counts"].(map[string]any)["passed"] = -1 },
		"fractional count": func(m map[string]any) { m["counts"].(map[string]any)["failed"] = 1.5 },
		"spec state":       func(m map[string]any) { m["specs"].([]any)[0].(map[string]any)["state"] = "skipped" },
		"violation clause": func(m map[string]any) {
			m["specs"].([]any)[0].(map[string]any)["violations"].([]any)[0].(map[string]any)["clause"] = ""
		},
		"methods not array": func(m map[string]any) { m["specs"].([]any)[0].(map[string]any)["methods"] = "create_vm" },
	} {
		var m map[string]any
		if err := json.Unmarshal(good.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		mutate(m)
		b, _ := json.Marshal(m)
		if err := suites.ValidateJSONSchema(schema, b); err == nil {
			t.Errorf("%s: the validator accepted it", name)
		}
	}
	if err := suites.ValidateJSONSchema([]byte(`{"type":"object","patternProperties":{}}`), []byte(`{}`)); err == nil {
		t.Error("an unsupported keyword must be refused, not ignored")
	}
}

// JUnit: one testsuite per suite and row, failures with clause, evidence
// and rerun command, skips with their reason, nothing else; parsed back
// with encoding/xml.
func TestJUnitGroupsByRowWithEvidence(t *testing.T) {
	c := newReport(withBookkeeping(), suites.ReportRun{Target: "bin/cpi", Rerun: func(f string) string { return "cpilab certify --focus " + f }})
	var b bytes.Buffer
	if err := c.WriteJUnit(&b); err != nil {
		t.Fatal(err)
	}
	var j suites.JUnit
	if err := xml.Unmarshal(b.Bytes(), &j); err != nil {
		t.Fatalf("JUnit does not parse: %v\n%s", err, b.String())
	}
	if j.Tests != 4 || j.Failures != 1 || j.Skipped != 1 {
		t.Errorf("totals tests=%d failures=%d skipped=%d, want 4/1/1 (no filtered spec, no Ginkgo node)", j.Tests, j.Failures, j.Skipped)
	}
	names := map[string]suites.JUnitTestSuite{}
	for _, ts := range j.TestSuites {
		names[ts.Name] = ts
	}
	cli, ok := names["contract cli.api2"]
	if len(j.TestSuites) != 2 || !ok || names["contract director-current.api3"].Tests != 2 {
		t.Fatalf("testsuites %+v", j.TestSuites)
	}
	var f *suites.JUnitFailure
	for _, tc := range cli.TestCases {
		if tc.Classname != "contract.cli.api2" || strings.Contains(tc.Name, "cli.api2") {
			t.Errorf("testcase %q in class %q: the class names the row, the name does not repeat it", tc.Name, tc.Classname)
		}
		if tc.Failure != nil {
			f = tc.Failure
		}
	}
	if f == nil || f.Type != ClauseDeleteDisk || !strings.Contains(f.Message, ClauseDeleteDisk) ||
		!strings.Contains(f.Body, "the CPI did instead: returned CloudError") || !strings.Contains(f.Body, "request:") ||
		!strings.Contains(f.Body, "rerun only this spec: cpilab certify --focus") {
		t.Errorf("failure %+v", f)
	}
	for _, tc := range names["contract director-current.api3"].TestCases {
		if tc.Skipped != nil && tc.Skipped.Message != "not checked: no oracle" {
			t.Errorf("skip reason %q", tc.Skipped.Message)
		}
	}
}

// The text matrix lines up whatever the glyphs' byte lengths.
func TestMatrixTextAligns(t *testing.T) {
	var b bytes.Buffer
	newReport(withBookkeeping(), suites.ReportRun{}).WriteMatrixText(&b)
	lines := strings.Split(b.String(), "\n")
	if !strings.HasPrefix(lines[0], "row ") || !strings.Contains(lines[0], "errors") {
		t.Fatalf("header %q", lines[0])
	}
	col := strings.Index(lines[0], "errors")
	for _, l := range lines[1:3] {
		r := []rune(l)
		if len(r) <= col || (r[col] != '✔' && r[col] != '✘' && r[col] != ' ') {
			t.Errorf("%q: the errors column does not start at rune %d", l, col)
		}
	}
	for _, want := range []string{"✘ 1/2", "– 1", "2 passed, 1 failed, 1 not checked", "1 × not checked: no oracle"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("matrix text lacks %q:\n%s", want, b.String())
		}
	}
}

// The run's time limit is a harness limit: the spec it stopped is
// interrupted, not failed; the specs it kept from starting are counted as
// not run; the verdict is INTERRUPTED, never REJECTED.
func TestCertifyReportTimeLimitIsNotARejection(t *testing.T) {
	r := types.Report{SuiteSucceeded: false, SpecialSuiteFailureReasons: []string{"Suite Timeout Elapsed"},
		PreRunStats: types.PreRunStats{SpecsThatWillRun: 5}}
	stopped := spec("cli.api2", "agent", ClauseAgentDisk, types.SpecStateTimedout, "A suite timeout occurred", nil)
	ownLimit := spec("cli.api2", "agent", ClauseAgentPing, types.SpecStateTimedout, "A node timeout occurred", nil)
	r.SpecReports = types.SpecReports{
		spec("cli.api2", "errors", ClauseDetachTwice, types.SpecStatePassed, "", nil), stopped,
		spec("cli.api2", "errors", "never started", types.SpecStateSkipped, "", nil),
	}
	c := newReport(r, suites.ReportRun{})
	if c.Verdict != suites.VerdictInterrupted || c.Counts.Failed != 0 || c.Counts.Interrupted != 1 || c.Counts.NotRun != 3 ||
		!strings.Contains(c.VerdictReason, "time limit") || !strings.Contains(c.VerdictReason, "3 not run") {
		t.Errorf("verdict %s (%s), counts %+v; want interrupted by the time limit, 1 interrupted, 3 not run", c.Verdict, c.VerdictReason, c.Counts)
	}
	// A spec's own time limit is not the run's: it fails.
	r = types.Report{SuiteSucceeded: false, PreRunStats: types.PreRunStats{SpecsThatWillRun: 1}, SpecReports: types.SpecReports{ownLimit}}
	if c := newReport(r, suites.ReportRun{}); c.Verdict != suites.VerdictRejected || c.Counts.NotRun != 0 {
		t.Errorf("a spec's own time-out: verdict %s, counts %+v; want rejected", c.Verdict, c.Counts)
	}
}

// A run that did not cover its whole suite says so, and why, in its
// verdict line and in every report; a whole run does not.
func TestCertifyReportMarksPartialRuns(t *testing.T) {
	r := types.Report{SuiteSucceeded: true, PreRunStats: types.PreRunStats{TotalSpecs: 10, SpecsThatWillRun: 1},
		SpecReports: types.SpecReports{spec("cli.api2", "errors", ClauseDetachTwice, types.SpecStatePassed, "", nil)}}
	c := newReport(r, suites.ReportRun{Title: "cpilab certify-flex", TargetKind: "FlexVolume driver", Target: "drv",
		Areas: []suites.AreaDoc{{ID: "errors", Title: "its own legend"}}})
	if c.Verdict != suites.VerdictAccepted || c.Partial != "a filter selected 1 of 10 specs" || !strings.Contains(c.VerdictLine(), "ACCEPTED: 1 passed, 0 not checked (PARTIAL: a filter selected 1 of 10 specs)") {
		t.Errorf("filtered run: verdict line %q, partial %q", c.VerdictLine(), c.Partial)
	}
	var html, junit, js bytes.Buffer
	if err := suites.WriteHTML(&html, c); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteJUnit(&junit); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{
		"html":  {"<title>cpilab certify-flex: drv</title>", "FlexVolume driver: <code>drv</code>", "(PARTIAL)", "a filter selected 1 of 10 specs", "its own legend"},
		"junit": {`name="cpilab certify-flex: drv"`, `name="partial" value="a filter selected 1 of 10 specs"`},
		"json":  {`"partial": "a filter selected 1 of 10 specs"`, `"target_kind": "FlexVolume driver"`},
	} {
		got := map[string]string{"html": html.String(), "junit": junit.String(), "json": js.String()}[name]
		for _, w := range want {
			if !strings.Contains(got, w) {
				t.Errorf("%s report lacks %q", name, w)
			}
		}
	}
	if err := suites.ValidateJSONSchema(readSchema(t), js.Bytes()); err != nil {
		t.Errorf("partial report against the schema: %v", err)
	}
	if strings.Contains(html.String(), "reference-table rows") {
		t.Error("the FlexVolume report explains the CPI's rows")
	}
	// --fail-fast that kept specs from running is partial; a whole run is not.
	r.PreRunStats.SpecsThatWillRun, r.PreRunStats.TotalSpecs = 3, 3
	if c := newReport(r, suites.ReportRun{FailFast: true}); !strings.Contains(c.Partial, "--fail-fast stopped it with 2 specs not run") {
		t.Errorf("fail-fast: partial %q", c.Partial)
	}
	r.PreRunStats.SpecsThatWillRun = 1
	r.PreRunStats.TotalSpecs = 1
	if c := newReport(r, suites.ReportRun{FailFast: true}); c.Partial != "" || strings.Contains(c.VerdictLine(), "PARTIAL") {
		t.Errorf("a whole run: partial %q, line %q", c.Partial, c.VerdictLine())
	}
}

// The HTML report says "not checked" once per reason, whether the reason
// names its kind already (the CPI suites) or not (certify-flex's).
func TestHTMLSaysNotCheckedOnce(t *testing.T) {
	r := types.Report{SuiteSucceeded: true, SpecReports: types.SpecReports{
		spec("cli.api2", "errors", ClauseDetachTwice, types.SpecStateSkipped, "not checked: no oracle", nil),
		spec("cli.api2", "errors", ClauseDeleteDisk, types.SpecStateSkipped, "the driver does not declare expansion", nil),
	}}
	var b bytes.Buffer
	if err := suites.WriteHTML(&b, newReport(r, suites.ReportRun{})); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "not checked: not checked") || !strings.Contains(b.String(), "not checked: the driver does not declare expansion") {
		t.Errorf("not-checked reasons in the HTML:\n%s", b.String())
	}
}

// A pending spec (csi-sanity has one) never runs, filter or not: a run
// that selected everything else is not PARTIAL, and --list leaves it out.
func TestPendingSpecIsNotAFilter(t *testing.T) {
	r := sampleReport()
	r.SpecReports = r.SpecReports[:4] // no filtered-out spec
	r.SpecReports = append(r.SpecReports, spec("cli.api2", "errors", "a pending spec", types.SpecStatePending, "", nil))
	r.PreRunStats.TotalSpecs, r.PreRunStats.SpecsThatWillRun = 5, 4
	if c := newReport(r, suites.ReportRun{}); c.Partial != "" {
		t.Errorf("partial %q: a pending spec is not a filter", c.Partial)
	}
	r.PreRunStats.SpecsThatWillRun = 3
	if c := newReport(r, suites.ReportRun{}); !strings.Contains(c.Partial, "a filter selected 3 of 4 specs") {
		t.Errorf("partial %q, want a filter selected 3 of 4", c.Partial)
	}
	for _, s := range suites.SpecInfos(r, ClauseTitles) {
		if s.Text == "CPI contract cli.api2 a pending spec" {
			t.Error("--list lists a pending spec")
		}
	}
}
