package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/suites/flex"
)

// flexBinaries are the executables the tests build, by installed name.
var flexBinaries = map[string]string{
	"bosh-flexvolume":                            "github.com/cpilab/cpilab/cmd/bosh-flexvolume",
	"cpilab~reformat-always/reformat-always":     "github.com/cpilab/cpilab/fixtures/flexdrivers/cmd/flexdriver",
	"cpilab~no-expansion/no-expansion":           "github.com/cpilab/cpilab/fixtures/flexdrivers/cmd/flexdriver",
	"cpilab~expandvolume-noop/expandvolume-noop": "github.com/cpilab/cpilab/fixtures/flexdrivers/cmd/flexdriver",
}

// buildFlex builds the named flexBinaries into a directory of t's.
func buildFlex(t testing.TB, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		pkg := flexBinaries[name]
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, name), pkg).CombinedOutput()
		if err != nil {
			t.Fatal(&buildError{pkg: pkg, out: string(out), err: err})
		}
	}
	return dir
}

// certifyFlex runs `cpilab certify-flex args…` in its own process with dir
// first on PATH.
func certifyFlex(t *testing.T, dir string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"certify-flex"}, args...)...)
	cmd.Env = append(os.Environ(), "CPILAB_TEST_RUN_MAIN=1", "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return runCmd(t, cmd)
}

// With no flags, certify-flex certifies the project's driver (found on
// PATH) against the embedded director, agents and fake cloud, and writes
// the three reports.
func TestCertifyFlexAcceptsTheProjectDriver(t *testing.T) {
	t.Parallel() // its own processes, worlds and temporary directories
	dir := buildFlex(t, "bosh-flexvolume")
	rep := t.TempDir()
	junit, js, html := filepath.Join(rep, "r.xml"), filepath.Join(rep, "r.json"), filepath.Join(rep, "r.html")
	code, out, errs := certifyFlex(t, dir, "--junit-report", junit, "--json-report", js, "--html-report", html)
	if code != 0 || !strings.Contains(out, "ACCEPTED: 17 passed, 0 not checked") {
		t.Fatalf("exit %d; want 0 and ACCEPTED:\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"✔ flex.data.moves:", "✔ flex.fault.director-down:", "✔ flex.expand:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for p, wants := range map[string][]string{
		junit: {"flex.attach.exclusive", `name="cpilab certify-flex: `},
		js:    {`"clause": "flex.attach.exclusive"`, `"clause_title": "` + flex.ClauseTitles[flex.ClauseAttachExclusive], `"title": "cpilab certify-flex"`},
		// Its own title, what it certified, and its own areas as columns.
		html: {"ACCEPTED", "<title>cpilab certify-flex: ", "<h1>cpilab certify-flex</h1>", "FlexVolume driver: <code>", `<th title="` + flex.Areas[6].Title + `">expand</th>`},
	} {
		b, err := os.ReadFile(p)
		for _, want := range wants {
			if err != nil || !bytes.Contains(b, []byte(want)) {
				t.Errorf("report %s: %v, or it lacks %q", filepath.Base(p), err, want)
			}
		}
	}
	r := readReport(t, js)
	if r.Tool.Version == "" || r.Tool.Commit == "" || r.TargetKind != "FlexVolume driver" || len(r.Matrix) != 1 || len(r.Matrix[0].Cells) != len(flex.Areas) {
		t.Errorf("JSON report: tool %+v, target kind %q, matrix %+v; want a version, the driver, a cell per area", r.Tool, r.TargetKind, r.Matrix)
	}
}

// certify-flex selects specs as certify does: --skip, and --list [--json]
// that runs nothing.
func TestCertifyFlexListAndSkip(t *testing.T) {
	dir := t.TempDir()
	code, out, errs := certifyFlex(t, dir, "--list", "--json", "--label-filter", "area:attach || area:expand", "--skip", "exclusive")
	var list struct {
		Specs []struct{ ID, Text, Clause string }
		Count int
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil {
		t.Fatalf("--list --json: exit %d, %v:\n%s\n%s", code, err, out, errs)
	}
	var clauses []string
	for _, s := range list.Specs {
		clauses = append(clauses, s.Clause)
	}
	slices.Sort(clauses)
	want := []string{flex.ClauseAttachDevice, flex.ClauseAttachNode, flex.ClauseDetach, flex.ClauseExpand}
	slices.Sort(want)
	if list.Count != len(list.Specs) || !slices.Equal(clauses, want) {
		t.Errorf("--list --json --skip exclusive: clauses %q (count %d), want %q", clauses, list.Count, want)
	}
	if code, _, errs := certifyFlex(t, dir, "--skip", "("); code != 2 || !strings.Contains(errs, "--skip") {
		t.Errorf("--skip '(': exit %d, stderr %q; want a usage error", code, errs)
	}
}

// A catalog driver that re-formats a disk with data is rejected with its
// clause, and the failure's rerun command, pasted into a shell in another
// directory, fails the same spec again (the cpilab binary itself runs, as
// a user's does).
func TestCertifyFlexRejectsAReformattingDriver(t *testing.T) {
	t.Parallel() // its own processes, worlds and temporary directories
	dir := buildFlex(t, "cpilab~reformat-always/reformat-always")
	drv := filepath.Join(dir, "cpilab~reformat-always", "reformat-always")
	cpilab := filepath.Join(buildCPIs(t), "cpilab")
	cmd := exec.Command(cpilab, "certify-flex", "--driver", drv, "--label-filter", "area:data", "--call-timeout", "50s")
	cmd.Dir = dir
	code, out, errs := runCmd(t, cmd)
	if code != 1 || !strings.Contains(out, "REJECTED:") {
		t.Fatalf("exit %d; want 1 and REJECTED:\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"✘ flex.format.blank-only:", "the file written before is gone", cpilab + " certify-flex --driver '" + drv + "' --call-timeout 50s --focus"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	printed := printedReruns(out)
	if len(printed) == 0 {
		t.Fatalf("no rerun command printed:\n%s", out)
	}
	code, out, errs = runPrinted(t, printed[0])
	if code != 1 || !strings.Contains(out, "✘ flex.format.blank-only:") || !strings.Contains(out, "REJECTED: 1 failed, 0 passed") {
		t.Fatalf("rerun %s: exit %d; want 1 and the same spec failed alone:\n%s\n%s", printed[0], code, out, errs)
	}
	// --fail-fast stops at that failure: the specs after it are not run,
	// and the verdict says PARTIAL.
	code, out, errs = runCmd(t, exec.Command(cpilab, "certify-flex", "--driver", drv, "--fail-fast"))
	if code != 1 || !strings.Contains(out, "not run: the run stopped before they started") ||
		!strings.Contains(lastLine(out), "(PARTIAL: --fail-fast stopped it with ") {
		t.Fatalf("--fail-fast: exit %d; want 1, specs not run and PARTIAL:\n%s\n%s", code, out, errs)
	}
}

// Expansion: a driver that does not declare it is accepted with the check
// reported as not checked, and why (and rejected under --strict, which
// fails what could not be checked); one that answers expandvolume without
// growing the disk is rejected.
func TestCertifyFlexExpansion(t *testing.T) {
	t.Parallel() // its own processes, worlds and temporary directories
	dir := buildFlex(t, "cpilab~no-expansion/no-expansion", "cpilab~expandvolume-noop/expandvolume-noop")
	code, out, errs := certifyFlex(t, dir, "--driver", filepath.Join(dir, "cpilab~no-expansion", "no-expansion"), "--label-filter", "area:install || area:expand")
	if code != 0 || !strings.Contains(out, "ACCEPTED: 2 passed, 1 not checked") {
		t.Fatalf("no-expansion: exit %d; want 0 and ACCEPTED with expansion not checked:\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"– flex.expand:", "Not checked (these are not passes)", "the driver does not declare expansion"} {
		if !strings.Contains(out, want) {
			t.Errorf("no-expansion: output lacks %q:\n%s", want, out)
		}
	}
	code, out, errs = certifyFlex(t, dir, "--driver", filepath.Join(dir, "cpilab~no-expansion", "no-expansion"), "--label-filter", "area:expand", "--strict")
	if code != 1 || !strings.Contains(out, "strict mode counts what is not checked as failed") || !strings.Contains(lastLine(out), "REJECTED: 1 failed, 0 passed, 0 not checked") {
		t.Fatalf("no-expansion --strict: exit %d; want 1 and flex.expand failed:\n%s\n%s", code, out, errs)
	}
	code, out, errs = certifyFlex(t, dir, "--driver", filepath.Join(dir, "cpilab~expandvolume-noop", "expandvolume-noop"), "--label-filter", "area:expand")
	if code != 1 || !strings.Contains(out, "✘ flex.expand:") || !strings.Contains(out, "were asked") {
		t.Fatalf("expandvolume-noop: exit %d; want 1 and flex.expand broken:\n%s\n%s", code, out, errs)
	}
}

// Misuse is a usage error that names the flag.
func TestCertifyFlexUsageErrors(t *testing.T) {
	dir := t.TempDir()
	if code, _, errs := certifyFlex(t, dir, "--backend", "nfs"); code != 2 || !strings.Contains(errs, "--backend must be") {
		t.Errorf("--backend nfs: exit %d, stderr %q", code, errs)
	}
	if code, _, errs := certifyFlex(t, dir, "--driver", filepath.Join(dir, "no-such-driver")); code == 0 || !strings.Contains(errs, "--driver") {
		t.Errorf("--driver missing: exit %d, stderr %q", code, errs)
	}
	// A report that could not be written after the run is refused before it.
	if code, _, errs := certifyFlex(t, dir, "--html-report", filepath.Join(dir, "missing", "r.html")); code != 2 || !strings.Contains(errs, "missing does not exist (create it first)") {
		t.Errorf("--html-report into a missing directory: exit %d, stderr %q", code, errs)
	}
}
