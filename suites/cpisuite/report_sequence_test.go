package cpisuite

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/suites"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/cpilab/cpilab/cpimodel"
	"github.com/cpilab/cpilab/cpimodel/explore"
)

// shrunkFailure is a two-step lifecycle whose second step, run at the same
// time as a third call, broke the model.
func shrunkFailure() *explore.Failure {
	create := explore.Step{Profile: "director-current", Method: "create_disk", Args: []json.RawMessage{json.RawMessage(`1024`), json.RawMessage(`{}`), json.RawMessage(`"$vm:1"`)}}
	resize := explore.Step{Profile: "cli", Method: "resize_disk", Args: []json.RawMessage{json.RawMessage(`"$disk:1"`), json.RawMessage(`2048`)}}
	other := explore.Step{Profile: "cli", Method: "has_vm", Args: []json.RawMessage{json.RawMessage(`"$vm:1"`)}}
	resize.With = &other
	v := cpimodel.Violation{Clause: ClauseModelEffect, Method: "resize_disk", Object: "disk disk-2", Field: "size", Did: "changed another disk"}
	return &explore.Failure{Seed: 7, Steps: []explore.Step{create, resize}, Violation: v, Done: []explore.Done{
		{Step: create, Response: `{"result":"disk-1","error":null}`},
		{Step: resize, Response: `{"result":null,"error":null}`, Violations: []cpimodel.Violation{v}},
		{Step: other, Response: `{"result":true,"error":null}`},
	}}
}

// exploreReport is a run whose explore spec failed with the shrunk
// lifecycle as its entries, as describeExplore records it.
func exploreReport() types.Report {
	seq := sequenceOf(shrunkFailure(), "/tmp/run-replay-7.json")
	v := suites.Violation{Clause: ClauseModelEffect, Did: "seed 7: a lifecycle broke the model; shrunk to 2 steps", ExitCode: -1}
	sr := spec(ExploreRow, "explore", ClauseText(ClauseModelEffect)+" (random lifecycles, checked after every step)", types.SpecStateFailed, v.String(), &v)
	sr.ReportEntries = append(sr.ReportEntries, types.ReportEntry{Name: suites.EntryExploreSequence, Value: types.WrapEntryValue(seq)})
	return types.Report{SuiteDescription: "s", SpecReports: types.SpecReports{sr}}
}

// A shrunk lifecycle is a structured list of steps in the JSON report (and
// the schema checks it), and a list of steps with the replay command in the
// text, JUnit and HTML reports.
func TestShrunkSequenceInEveryReport(t *testing.T) {
	c := newReport(exploreReport(), suites.ReportRun{Target: "bin/cpi",
		Replay: func(file string) string { return "/bin/cpilab certify --cpi /x/cpi --replay " + file }})
	s := c.Specs[0].Sequence
	if s == nil {
		t.Fatal("the failed explore spec has no sequence in the report")
	}
	if len(s.Steps) != 2 || s.Steps[0].N != 1 || s.Steps[1].Method != "resize_disk" || s.Steps[1].Profile != "cli" ||
		s.Steps[1].Concurrent == "" || !strings.Contains(s.Steps[1].Concurrent, "has_vm") {
		t.Errorf("steps %+v", s.Steps)
	}
	// The concurrent call's answer is not taken for the next step's.
	if s.Steps[0].Response != `{"result":"disk-1","error":null}` || s.Steps[1].Response != `{"result":null,"error":null}` {
		t.Errorf("responses %q, %q", s.Steps[0].Response, s.Steps[1].Response)
	}
	if s.Seed != 7 || !strings.Contains(s.Broke, "disk disk-2 (size)") || s.Replay != "/bin/cpilab certify --cpi /x/cpi --replay /tmp/run-replay-7.json" {
		t.Errorf("sequence %+v", s)
	}

	var js bytes.Buffer
	if err := c.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	schema := readSchema(t)
	if err := suites.ValidateJSONSchema(schema, js.Bytes()); err != nil {
		t.Fatalf("a report with a sequence does not match the schema: %v\n%s", err, js.String())
	}
	var m map[string]any
	if err := json.Unmarshal(js.Bytes(), &m); err != nil {
		t.Fatal(err)
	}
	step := m["specs"].([]any)[0].(map[string]any)["sequence"].(map[string]any)["steps"].([]any)[1].(map[string]any)
	if step["method"] != "resize_disk" || len(step["arguments"].([]any)) != 2 {
		t.Errorf("JSON step %v", step)
	}
	delete(step, "method")
	bad, _ := json.Marshal(m)
	if err := suites.ValidateJSONSchema(schema, bad); err == nil {
		t.Error("the schema accepted a sequence step without its method")
	}

	var text bytes.Buffer
	c.WriteFailuresText(&text)
	for _, want := range []string{"shrunk sequence (2 steps):", "  1. director-current create_disk(1024, {}, \"$vm:1\")", "  2. cli resize_disk(", "‖ cli has_vm(", "→ {\"result\":\"disk-1\"",
		"broke: " + ClauseModelEffect, "replay it alone: /bin/cpilab certify --cpi /x/cpi --replay /tmp/run-replay-7.json"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, text.String())
		}
	}

	var junit bytes.Buffer
	if err := c.WriteJUnit(&junit); err != nil {
		t.Fatal(err)
	}
	var j suites.JUnit
	if err := xml.Unmarshal(junit.Bytes(), &j); err != nil {
		t.Fatal(err)
	}
	body := j.TestSuites[0].TestCases[0].Failure.Body
	if !strings.Contains(body, "1. director-current create_disk(") || !strings.Contains(body, "2. cli resize_disk(") || !strings.Contains(body, "replay it alone: /bin/cpilab certify") {
		t.Errorf("JUnit failure body lacks the steps or the replay command:\n%s", body)
	}

	var html bytes.Buffer
	if err := suites.WriteHTML(&html, c); err != nil {
		t.Fatal(err)
	}
	h := html.String()
	if strings.Count(h[strings.Index(h, `<ol class="steps">`):], "<li>") < 2 || !strings.Contains(h, "replay it alone: <code>/bin/cpilab certify --cpi /x/cpi --replay /tmp/run-replay-7.json</code>") {
		t.Errorf("HTML report lacks the steps as a list or the replay command:\n%s", h)
	}
}

// A lifecycle that could not run says so in place of a violation, and a
// run that could not write the replay file prints no replay command.
func TestShrunkSequenceCouldNotRun(t *testing.T) {
	f := shrunkFailure()
	f.Error, f.Violation = "create_disk: exit status 1", cpimodel.Violation{}
	s := sequenceOf(f, "")
	if !strings.HasPrefix(s.Broke, "could not run: create_disk") {
		t.Errorf("broke %q", s.Broke)
	}
	if txt := s.Text(""); strings.Contains(txt, "replay") {
		t.Errorf("a sequence without a replay file offers a replay:\n%s", txt)
	}
}
