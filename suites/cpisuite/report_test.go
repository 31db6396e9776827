package cpisuite

import (
	"bytes"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/suites"

	"github.com/onsi/ginkgo/v2/types"
)

func spec(row, area, text string, state types.SpecState, msg string, v *suites.Violation) types.SpecReport {
	sr := types.SpecReport{
		ContainerHierarchyTexts:  []string{"CPI contract", row},
		ContainerHierarchyLabels: [][]string{{"suite:contract"}, {"row:" + row}},
		LeafNodeType:             types.NodeTypeIt, LeafNodeText: text,
		LeafNodeLabels: []string{"area:" + area},
		State:          state,
	}
	sr.Failure.Message = msg
	if v != nil {
		sr.ReportEntries = types.ReportEntries{{Name: suites.ReportEntryViolation, Value: types.WrapEntryValue(*v)}}
	}
	return sr
}

func sampleReport() types.Report {
	v := suites.Violation{Clause: ClauseDeleteDisk, Did: "returned CloudError", Method: "delete_disk",
		Request: `{"method":"delete_disk"}`, Response: `{"result":null,"error":{…}}`, ExitCode: 0}
	return types.Report{SuiteDescription: "s", SuiteSucceeded: false, SpecReports: types.SpecReports{
		spec("cli.api2", "errors", ClauseDeleteDisk, types.SpecStateFailed, v.String(), &v),
		spec("cli.api2", "errors", ClauseDetachTwice, types.SpecStatePassed, "", nil),
		spec("director-current.api3", "errors", ClauseDetachTwice, types.SpecStatePassed, "", nil),
		spec("director-current.api3", "iaas", ClauseVMMetadata, types.SpecStateSkipped, "not checked: no oracle", nil),
		spec("director-current.api3", "iaas", "filtered out", types.SpecStateSkipped, "", nil),
	}}
}

// TestReportMatrix: the CPI report's matrix counts the specs that ran
// (not the one a filter left out), shows the contract contexts in
// DefaultContexts order and a skip as a skip, and lists the reason.
func TestReportMatrix(t *testing.T) {
	c := newReport(sampleReport(), suites.ReportRun{})
	if c.Counts.Passed != 2 || c.Counts.Failed != 1 || c.Counts.NotChecked != 1 {
		t.Fatalf("counts %+v, want 2 passed, 1 failed, 1 not checked (the filtered-out spec is not counted)", c.Counts)
	}
	if len(c.Matrix) != 2 || c.Matrix[0].Row != "director-current.api3" || c.Matrix[1].Row != "cli.api2" {
		t.Fatalf("rows %+v, want the contexts in DefaultContexts order", c.Matrix)
	}
	cell := func(r suites.MatrixRow, area string) string {
		for _, m := range r.Cells {
			if m.Area == area {
				return m.Mark()
			}
		}
		return ""
	}
	if m := cell(c.Matrix[1], "errors"); m != "✘ 1/2" {
		t.Errorf("cli errors cell %q", m)
	}
	if m := cell(c.Matrix[0], "iaas"); m != "– 1" {
		t.Errorf("skipped cell %q: a skip must never look like a pass", m)
	}
	if len(c.NotChecked) != 1 || c.NotChecked[0].Reason != "not checked: no oracle" || c.NotChecked[0].Count != 1 {
		t.Errorf("not checked: %+v", c.NotChecked)
	}
	var b bytes.Buffer
	c.WriteMatrixText(&b)
	for _, want := range []string{"errors", "iaas", "✘ 1/2", "1 failed", "1 × not checked: no oracle"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text matrix lacks %q:\n%s", want, b.String())
		}
	}
}

func TestFailuresCarryClauseRequestAndRerun(t *testing.T) {
	fs := suites.Failures(sampleReport(), func(focus string) string { return "cpilab certify --focus '" + focus + "'" })
	if len(fs) != 1 {
		t.Fatalf("%d failures", len(fs))
	}
	f := fs[0]
	if f.Violation.Clause != ClauseDeleteDisk || f.Row != "cli.api2" || !strings.Contains(f.Violation.Request, "delete_disk") {
		t.Fatalf("failure %+v", f)
	}
	if !strings.HasPrefix(f.Rerun, "cpilab certify --focus ' CPI contract cli\\.api2") {
		t.Errorf("rerun %q", f.Rerun)
	}
	// The clause survives a JSON report round trip (what --json-report holds).
	b, err := json.Marshal(sampleReport())
	if err != nil {
		t.Fatal(err)
	}
	var back types.Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := suites.Failures(back, nil); len(got) != 1 || got[0].Violation.Clause != ClauseDeleteDisk {
		t.Fatalf("after JSON: %+v", got)
	}
	var w bytes.Buffer
	f.WriteText(&w)
	for _, want := range []string{ClauseDeleteDisk, "the CPI did instead: returned CloudError", "request:", "response:", "rerun only this spec:"} {
		if !strings.Contains(w.String(), want) {
			t.Errorf("failure text lacks %q:\n%s", want, w.String())
		}
	}
	if cs := suites.Clauses(fs); len(cs) != 1 || cs[0] != ClauseDeleteDisk {
		t.Errorf("clauses %q", cs)
	}
}

func sampleCertifyReport() *suites.CertifyReport {
	return newReport(sampleReport(), suites.ReportRun{Target: "bin/cpi <x>", Started: time.Unix(0, 0), Duration: time.Second,
		Notes: []string{"no oracle"}, Rerun: func(focus string) string { return "cpilab certify --focus '" + focus + "'" }})
}

func TestWriteHTML(t *testing.T) {
	var b bytes.Buffer
	if err := suites.WriteHTML(&b, sampleCertifyReport()); err != nil {
		t.Fatal(err)
	}
	h := b.String()
	for _, want := range []string{"REJECTED: 1 failed", `class="fail"><a href="#cell-cli-api2-errors">✘ 1/2</a>`, `class="skip"><a href="#cell-director-current-api3-iaas">– 1</a>`,
		`id="cell-cli-api2-errors"`, "cli.api2", "director-current.api3", "errors.delete-disk-missing", "bin/cpi &lt;x&gt;", "no oracle",
		`<dl class="legend"`, AreaDocs["errors"], "rerun: <code>cpilab certify --focus"} {
		if !strings.Contains(h, want) {
			t.Errorf("HTML lacks %q", want)
		}
	}
}

// A spec of a container of steps reruns with the steps before it that ran
// (and only those): its rerun builds what it needs. Any other spec reruns
// alone.
func TestSpecFocusRunsTheStepsBeforeIt(t *testing.T) {
	step := func(row, text string, state types.SpecState) types.SpecReport {
		sr := spec(row, "vm", text, state, "", nil)
		sr.ContainerHierarchyTexts[0] = "Reference table"
		sr.ContainerHierarchyLabels[1] = append(sr.ContainerHierarchyLabels[1], suites.LabelSteps)
		return sr
	}
	r := types.Report{SpecReports: types.SpecReports{
		step("r1", "setup (x)", types.SpecStatePassed),
		step("r2", "step 1 of r2", types.SpecStatePassed),
		step("r1", "step 1", types.SpecStatePassed),
		step("r1", "step 2 (filtered out)", types.SpecStateSkipped),
		step("r1", "step 3", types.SpecStateFailed),
		step("r1", "step 4", types.SpecStateFailed),
		spec("cli.api2", "errors", "alone", types.SpecStateFailed, "x", nil),
	}}
	focus := suites.SpecFocus(r, r.SpecReports[4])
	re := regexp.MustCompile(focus)
	for _, sr := range r.SpecReports {
		text := "suite " + sr.FullText()
		want := sr.ContainerHierarchyTexts[1] == "r1" && sr.LeafNodeText != "step 4" && sr.LeafNodeText != "step 2 (filtered out)"
		if re.MatchString(text) != want {
			t.Errorf("focus %q matches %q: %v, want %v", focus, text, !want, want)
		}
	}
	if got, want := suites.SpecFocus(r, r.SpecReports[6]), regexp.QuoteMeta(" CPI contract cli.api2 alone")+"$"; got != want {
		t.Errorf("a spec outside a container of steps: focus %q, want %q", got, want)
	}
	// The rerun of a step is the same rerun again: its focus is stable.
	var again types.Report
	for _, sr := range r.SpecReports {
		if re.MatchString("suite " + sr.FullText()) {
			again.SpecReports = append(again.SpecReports, sr)
		}
	}
	if got := suites.SpecFocus(again, again.SpecReports[len(again.SpecReports)-1]); got != focus {
		t.Errorf("the rerun's focus %q differs from the run's %q", got, focus)
	}
}

// newReport is the report the CPI certifier builds: run with the CPI
// suites' clauses, areas and row order.
func newReport(r types.Report, run suites.ReportRun) *suites.CertifyReport {
	return suites.NewCertifyReport(r, Book(run))
}
