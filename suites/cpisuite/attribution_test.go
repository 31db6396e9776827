package cpisuite_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/cpisuite"
	"github.com/cpilab/cpilab/testbed"
)

// A run of the suites in a child process of the test binary, for tests
// that need a Ginkgo run of their own: SUITES_CHILD_RUN names the report
// file, SUITES_CHILD_FOCUS an optional focus.
func init() {
	report := os.Getenv("SUITES_CHILD_RUN")
	if report == "" {
		return
	}
	os.Exit(childRun(report, os.Getenv("SUITES_CHILD_FOCUS"), os.Getenv("SUITES_CHILD_CPI"), os.Getenv("SUITES_CHILD_SCENARIO")))
}

// childRun runs the first default context on a testbed without SSH (with
// the label filter SUITES_CHILD_LABELS, if set), in
// one of these scenarios: "broken-setup" (a stemcell image that does not
// exist), "strict" (Config.Strict), "require" (RequireAPIVersion 4).
func childRun(report, focus, cpi, scenario string) int {
	tb, err := testbed.Start(testbed.Config{NoSSH: true})
	if err != nil {
		os.Stderr.WriteString(err.Error())
		return 2
	}
	defer tb.Close()
	cfg, err := tb.SuiteConfig([]string{cpi})
	if err != nil {
		os.Stderr.WriteString(err.Error())
		return 2
	}
	switch scenario {
	case "broken-setup":
		// create_stemcell fails in the setup of every container.
		cfg.Env.Stemcells[2] = cpisuite.Stemcell{ImagePath: filepath.Join(tb.Dir(), "no-such-stemcell.json")}
	case "strict":
		cfg.Strict = true
	case "require":
		cfg.RequireAPIVersion = 4
	}
	cfg.Contexts = cpisuite.DefaultContexts[:1]
	cfg.Rows = []cpisuite.Row{}
	opts := suites.RunOptions{}
	if focus != "" {
		opts.Focus = []string{focus}
	}
	opts.LabelFilter = os.Getenv("SUITES_CHILD_LABELS")
	r, err := cpisuite.Run(cfg, opts)
	if err != nil {
		os.Stderr.WriteString(err.Error())
		return 2
	}
	b, _ := json.Marshal(r)
	if err := os.WriteFile(report, b, 0o600); err != nil {
		return 2
	}
	// What the run left in the fake cloud, for the tests of filtered runs.
	inv, err := cfg.Oracle.Inventory(context.Background())
	if err != nil {
		os.Stderr.WriteString(err.Error())
		return 2
	}
	b, _ = json.Marshal(inv)
	if err := os.WriteFile(report+".left", b, 0o600); err != nil {
		return 2
	}
	return 0
}

func childReport(t *testing.T, cpi, scenario, focus string) types.Report {
	t.Helper()
	r, _ := childReportLeft(t, cpi, scenario, focus)
	return r
}

// childReportLeft is childReport that also returns what the run left in
// the fake cloud.
func childReportLeft(t *testing.T, cpi, scenario, focus string) (types.Report, cpisuite.Inventory) {
	t.Helper()
	report := filepath.Join(t.TempDir(), "r.json")
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), "SUITES_CHILD_RUN="+report, "SUITES_CHILD_FOCUS="+focus, "SUITES_CHILD_CPI="+cpi, "SUITES_CHILD_SCENARIO="+scenario)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child run: %v\n%s", err, out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatal(err)
	}
	var r types.Report
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	var left cpisuite.Inventory
	if b, err = os.ReadFile(report + ".left"); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &left); err != nil {
		t.Fatal(err)
	}
	return r, left
}

// TestSetupFailureIsItsOwnSpec: a context whose setup fails reports the
// failure on its setup spec (not on the first spec), every other spec of
// the context as not checked because of it, the teardown and leak check
// as not checked when the setup created nothing, and focusing the failed spec (the rerun command) reproduces
// the failure.
func TestSetupFailureIsItsOwnSpec(t *testing.T) {
	cpi := buildReferenceCPI(t)
	r := childReport(t, cpi, "broken-setup", "")
	fs := suites.Failures(r, nil)
	if len(fs) != 1 {
		t.Fatalf("%d failures, want 1 (the setup): %+v", len(fs), fs)
	}
	f := fs[0]
	if !strings.Contains(f.Spec, cpisuite.ClauseSetup+":") || f.Violation.Clause != cpisuite.ClauseStemcell {
		t.Fatalf("failure on %q naming %q; want the setup spec naming %s", f.Spec, f.Violation.Clause, cpisuite.ClauseStemcell)
	}
	ran := map[string]types.SpecState{}
	for _, sr := range r.SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt {
			continue
		}
		if slices.Contains(sr.ContainerHierarchyTexts, cpisuite.ExploreRow) {
			continue // its own lifecycles, with a setup of their own
		}
		clause := cpisuite.ClauseOf(sr.LeafNodeText)
		ran[clause] = sr.State
		switch clause {
		case cpisuite.ClauseSetup:
		case cpisuite.ClauseTeardown, cpisuite.ClauseNoLeak:
			// The setup failed at its first create_stemcell: there is
			// nothing to clean up, and clean-up of nothing is no pass.
			if sr.State != types.SpecStateSkipped || !strings.Contains(sr.Failure.Message, "before it created anything to clean up") {
				t.Errorf("%s: %s (%s), want not checked: the setup created nothing to clean up", sr.LeafNodeText, sr.State, sr.Failure.Message)
			}
		default:
			if sr.State != types.SpecStateSkipped || !strings.Contains(sr.Failure.Message, "setup of this context failed") {
				t.Errorf("%s: %s %q, want not checked because of the setup", sr.LeafNodeText, sr.State, sr.Failure.Message)
			}
		}
	}
	if ran[cpisuite.ClauseSetup] != types.SpecStateFailed {
		t.Fatalf("setup spec state %s", ran[cpisuite.ClauseSetup])
	}
	// The rerun: only the failed spec, and it fails the same way.
	again := suites.Failures(childReport(t, cpi, "broken-setup", f.Focus), nil)
	if len(again) != 1 || again[0].Spec != f.Spec || again[0].Violation.Clause != f.Violation.Clause {
		t.Fatalf("rerun with focus %q gave %+v", f.Focus, again)
	}
}

func buildReferenceCPI(t *testing.T) string {
	t.Helper()
	cpi := filepath.Join(t.TempDir(), "fakeiaas-cpi")
	if out, err := exec.Command("go", "build", "-o", cpi, "github.com/cpilab/cpilab/cmd/fakeiaas-cpi").CombinedOutput(); err != nil {
		t.Fatalf("building the reference CPI: %v\n%s", err, out)
	}
	return cpi
}

// TestStrictAndRequiredVersion: with Config.Strict a spec that cannot check
// its clause (no SFTP here) fails under its own clause, saying so; with
// RequireAPIVersion above what the CPI reports, the setup fails with
// version.required.
func TestStrictAndRequiredVersion(t *testing.T) {
	cpi := buildReferenceCPI(t)
	fs := suites.Failures(childReport(t, cpi, "strict", ""), nil)
	if len(fs) == 0 {
		t.Fatal("strict run without SFTP: no failure")
	}
	for _, f := range fs {
		if !strings.Contains(f.Violation.Did, "strict mode") {
			t.Errorf("strict failure %q: %q", f.Spec, f.Violation.Did)
		}
		if !strings.Contains(f.Spec, f.Violation.Clause+":") {
			t.Errorf("strict failure on %q names clause %q, not the spec's own", f.Spec, f.Violation.Clause)
		}
	}
	fs = suites.Failures(childReport(t, cpi, "require", ""), nil)
	if len(fs) != 1 || fs[0].Violation.Clause != cpisuite.ClauseRequiredVersion || !strings.Contains(fs[0].Spec, cpisuite.ClauseSetup+":") {
		t.Fatalf("RequireAPIVersion 4: failures %+v, want one, on the setup, naming %s", fs, cpisuite.ClauseRequiredVersion)
	}
}
