package certifier

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/cpilab/cpilab/suites"
)

// spec is one spec of a fake suite's report.
func spec(text string, state types.SpecState, msg string) types.SpecReport {
	sr := types.SpecReport{ContainerHierarchyTexts: []string{"fake suite"}, LeafNodeType: types.NodeTypeIt, LeafNodeText: text,
		LeafNodeLabels: []string{"area:one"}, State: state}
	sr.Failure.Message = msg
	if state == types.SpecStateFailed {
		sr.ReportEntries = types.ReportEntries{{Name: suites.ReportEntryViolation,
			Value: types.WrapEntryValue(suites.Violation{Clause: "fake.clause", Did: msg, ExitCode: -1})}}
	}
	return sr
}

// fake is a certifier whose run returns specs as given, and records the
// options it was run with.
func fake(specs ...types.SpecReport) (Certifier, *suites.RunOptions) {
	var got suites.RunOptions
	c := Certifier{Name: "certify-fake", TargetKind: "fake", Areas: []suites.AreaDoc{{ID: "one", Title: "the one area"}}, Row: "fake",
		List: func(opts suites.RunOptions) ([]suites.SpecInfo, error) {
			return []suites.SpecInfo{{Text: "fake suite a", Clause: "fake.clause", Labels: []string{"area:one"}}}, nil
		},
		Run: func(_ context.Context, opts suites.RunOptions, o Output) (*Result, error) {
			got = opts
			r := types.Report{SuiteDescription: "fake", SuiteSucceeded: true, SpecReports: specs}
			r.PreRunStats.TotalSpecs, r.PreRunStats.SpecsThatWillRun = len(specs), len(specs)
			for _, s := range specs {
				if s.State == types.SpecStateFailed {
					r.SuiteSucceeded = false
				}
			}
			return &Result{Report: r, Target: "the target", Notes: []string{"a note"},
				Rerun: func(focus string) string { return "cpilab certify-fake --focus " + focus }}, nil
		}}
	return c, &got
}

func output() (Output, *bytes.Buffer, *bytes.Buffer) {
	var out, errb bytes.Buffer
	clock := time.Unix(1000, 0)
	return Output{Out: &out, Err: &errb, Command: []string{"cpilab", "certify-fake"}, Tool: suites.ToolInfo{Name: "cpilab", Version: "v1"},
		Now: func() time.Time { clock = clock.Add(time.Second); return clock }}, &out, &errb
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// An accepted run: exit 0, the spec list and counts, the notes, the
// verdict line last; --report-dir holds the three reports and the log,
// and the JSON report is the shared schema's, titled for the certifier.
func TestRunAcceptedWritesEveryReportIntoTheDirectory(t *testing.T) {
	c, _ := fake(spec("a", types.SpecStatePassed, ""), spec("b", types.SpecStateSkipped, "not applicable: nothing to see"))
	o, out, _ := output()
	dir := filepath.Join(t.TempDir(), "results", "run1")
	code, err := Run(context.Background(), c, Flags{Reports: Reports{Dir: dir}}, o)
	if err != nil || code != ExitAccepted {
		t.Fatalf("exit %d, %v\n%s", code, err, out)
	}
	for _, want := range []string{"✔ a\n", "– b\n", "1 passed, 0 failed, 1 not checked", "note: a note"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if l := lastLine(out.String()); !strings.HasPrefix(l, "ACCEPTED: 1 passed, 1 not checked (1s)") {
		t.Errorf("last line %q", l)
	}
	for _, f := range []string{DirJSON, DirJUnit, DirHTML, DirLog} {
		if fi, err := os.Stat(filepath.Join(dir, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	log, _ := os.ReadFile(filepath.Join(dir, DirLog))
	if !strings.Contains(string(log), "ACCEPTED: ") {
		t.Errorf("the log lacks the verdict:\n%s", log)
	}
	rep, err := suites.ReadCertifyReport(filepath.Join(dir, DirJSON))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Title != "cpilab certify-fake" || rep.TargetKind != "fake" || rep.Target != "the target" || len(rep.Areas) != 1 ||
		len(rep.Matrix) != 1 || rep.Matrix[0].Row != "fake" || rep.Tool.Version != "v1" {
		t.Errorf("report %+v", rep)
	}
}

// A failure: exit 1, its violation and rerun command in the text, REJECTED
// last; the options carry the filters, --fail-fast and -v.
func TestRunRejectedShowsTheFailureAndPassesTheSelection(t *testing.T) {
	c, got := fake(spec("a", types.SpecStatePassed, ""), spec("b", types.SpecStateFailed, "it broke"))
	o, out, _ := output()
	code, err := Run(context.Background(), c, Flags{LabelFilter: "area:one", Focus: "fake", Skip: "c", FailFast: true, Verbose: true}, o)
	if err != nil || code != ExitRejected {
		t.Fatalf("exit %d, %v\n%s", code, err, out)
	}
	if got.LabelFilter != "area:one" || len(got.Focus) != 1 || len(got.Skip) != 1 || !got.FailFast || !got.Verbose || got.Output == nil {
		t.Errorf("options %+v", *got)
	}
	for _, want := range []string{"Failures (1):", "✘ fake suite b", "broke: fake.clause", "the fake did instead: it broke", "rerun only this spec: cpilab certify-fake --focus "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, out)
		}
	}
	if l := lastLine(out.String()); !strings.HasPrefix(l, "REJECTED: 1 failed, 1 passed") {
		t.Errorf("last line %q", l)
	}
}

// --strict fails what a suite could not check (when the suite does not do
// it itself); what does not apply stays not checked. A suite that fails
// them itself (StrictInSuite) is left as it reported.
func TestRunStrict(t *testing.T) {
	specs := []types.SpecReport{spec("a", types.SpecStatePassed, ""), spec("b", types.SpecStateSkipped, "no oracle here"),
		spec("c", types.SpecStateSkipped, "not applicable: below api_version 2")}
	c, _ := fake(specs...)
	o, out, _ := output()
	code, _ := Run(context.Background(), c, Flags{Strict: true}, o)
	if code != ExitRejected || !strings.Contains(out.String(), "strict mode counts what is not checked as failed") ||
		!strings.HasPrefix(lastLine(out.String()), "REJECTED: 1 failed, 1 passed, 1 not checked") {
		t.Errorf("--strict: exit %d\n%s", code, out)
	}
	c.StrictInSuite = true
	o, out, _ = output()
	if code, _ := Run(context.Background(), c, Flags{Strict: true}, o); code != ExitAccepted {
		t.Errorf("a suite that is strict itself: exit %d\n%s", code, out)
	}
}

// A filtered run says PARTIAL on its verdict line; --quiet prints the
// verdict line alone.
func TestRunPartialAndQuiet(t *testing.T) {
	c, _ := fake(spec("a", types.SpecStatePassed, ""))
	inner := c.Run
	c.Run = func(ctx context.Context, opts suites.RunOptions, o Output) (*Result, error) {
		r, err := inner(ctx, opts, o)
		r.Report.PreRunStats.TotalSpecs = 5
		return r, err
	}
	o, out, _ := output()
	o.Quiet = true
	code, err := Run(context.Background(), c, Flags{Focus: "a"}, o)
	if err != nil || code != ExitAccepted || strings.Count(out.String(), "\n") != 1 ||
		!strings.Contains(out.String(), "(PARTIAL: a filter selected 1 of 5 specs)") {
		t.Errorf("exit %d, %v:\n%s", code, err, out)
	}
}

// A harness limit is exit 2 and never a verdict on the target: a run
// interrupted before it started, a target that could not be reached, a
// run that failed to start.
func TestRunHarnessLimitsExit2(t *testing.T) {
	c, _ := fake()
	c.Run = func(context.Context, suites.RunOptions, Output) (*Result, error) { return nil, ErrNotStarted }
	o, out, _ := output()
	if code, err := Run(context.Background(), c, Flags{}, o); code != ExitHarness || err != nil || !strings.HasPrefix(out.String(), "INTERRUPTED: before any spec ran") {
		t.Errorf("not started: exit %d, %v\n%s", code, err, out)
	}
	c, _ = fake(spec("a", types.SpecStateFailed, "no answer"))
	inner := c.Run
	c.Run = func(ctx context.Context, opts suites.RunOptions, o Output) (*Result, error) {
		r, err := inner(ctx, opts, o)
		r.HarnessOnly = "1 harness errors (no answer)"
		return r, err
	}
	o, out, _ = output()
	if code, _ := Run(context.Background(), c, Flags{}, o); code != ExitHarness || !strings.HasPrefix(lastLine(out.String()), "NOT CERTIFIED: 1 harness errors") ||
		strings.Contains(out.String(), "REJECTED") {
		t.Errorf("harness only: exit %d\n%s", code, out)
	}
	c.Run = func(context.Context, suites.RunOptions, Output) (*Result, error) { return nil, errors.New("no driver") }
	o, _, _ = output()
	if code, err := Run(context.Background(), c, Flags{}, o); code != ExitHarness || err == nil {
		t.Errorf("a run that could not start: exit %d, %v", code, err)
	}
}

// "-" sends a report to Stdout alone; --list --json lists for a program;
// misused flags are usage errors naming the flag.
func TestRunStdoutListAndUsage(t *testing.T) {
	c, _ := fake(spec("a", types.SpecStatePassed, ""))
	o, out, _ := output()
	var stdout bytes.Buffer
	o.Stdout = &stdout
	if code, err := Run(context.Background(), c, Flags{Reports: Reports{JSON: Stdout}}, o); code != ExitAccepted || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	var m map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &m); err != nil || m["format"] != suites.ReportFormat || !strings.Contains(out.String(), "ACCEPTED") {
		t.Errorf("stdout is not the report alone (%v):\n%s", err, stdout.String())
	}
	o, out, _ = output()
	if code, err := Run(context.Background(), c, Flags{List: true, ListJSON: true}, o); code != ExitAccepted || err != nil ||
		!strings.Contains(out.String(), `"count": 1`) {
		t.Errorf("--list --json: exit %d, %v\n%s", code, err, out)
	}
	for flags, want := range map[*Flags]string{
		{ListJSON: true}:      "--json goes with --list",
		{Focus: "("}:          "--focus",
		{LabelFilter: "a &&"}: "--label-filter",
		{Reports: Reports{JSON: Stdout, HTML: "-"}}: "only one report can go to stdout",
		{Reports: Reports{JUnit: "/no/such/dir/j"}}: "does not exist",
		{Reports: Reports{Dir: "/dev/null/x.tgz"}}:  "--report-dir",
	} {
		o, _, _ := output()
		var usage *UsageError
		if _, err := Run(context.Background(), c, *flags, o); !errors.As(err, &usage) || !strings.Contains(usage.Msg, want) {
			t.Errorf("%+v: %v, want a usage error saying %q", *flags, err, want)
		}
	}
}

// --report-dir NAME.tar.gz: the reports and the log packed into one
// archive under NAME/, and no directory left behind.
func TestRunReportDirArchive(t *testing.T) {
	c, _ := fake(spec("a", types.SpecStatePassed, ""))
	o, _, _ := output()
	archive := filepath.Join(t.TempDir(), "results.tar.gz")
	if code, err := Run(context.Background(), c, Flags{Reports: Reports{Dir: archive}}, o); code != ExitAccepted || err != nil {
		t.Fatalf("exit %d, %v", code, err)
	}
	if _, err := os.Stat(archive + ".d"); !os.IsNotExist(err) {
		t.Errorf("the staging directory is left: %v", err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if strings.Join(names, ",") != "results/cpilab.log,results/junit.xml,results/report.html,results/report.json" {
		t.Errorf("archive holds %q", names)
	}
}
