package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/xml"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/cpisuite"
	"github.com/cpilab/cpilab/testbed"
)

// TestMain lets the tests run this test binary as the cpilab executable
// (CPILAB_TEST_RUN_MAIN=1): Ginkgo runs one suite per process, so every
// certify run gets its own process, exactly as a user's does.
func TestMain(m *testing.M) {
	if os.Getenv("CPILAB_TEST_RUN_MAIN") == "1" {
		os.Exit(run(context.Background(), os.Args[1:], os.Stdout, os.Stderr))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// buildCPIs builds cpilab, fakeiaas-cpi and buggy-cpi into one directory,
// once: the tests run cpilab as a user does, the binary itself, so that
// every command it prints can be run as printed.
func buildCPIs(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "cpilab-certify-test-")
		if buildErr != nil {
			return
		}
		for name, pkg := range map[string]string{
			"cpilab":       "github.com/cpilab/cpilab/cmd/cpilab",
			"fakeiaas-cpi": "github.com/cpilab/cpilab/cmd/fakeiaas-cpi",
			"buggy-cpi":    "github.com/cpilab/cpilab/fixtures/buggycpi/cmd/buggy-cpi",
		} {
			out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, name), pkg).CombinedOutput()
			if err != nil {
				buildErr = &buildError{pkg: pkg, out: string(out), err: err}
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binDir
}

type buildError struct {
	pkg, out string
	err      error
}

func (e *buildError) Error() string { return "building " + e.pkg + ": " + e.err.Error() + "\n" + e.out }

// certifyCmd returns `dir/cpilab certify args…` with dir first on PATH and
// its own TMPDIR (the CPIs inherit it), so that what a run leaves in /tmp
// is seen and goes when the test ends.
func certifyCmd(t testing.TB, dir, tmp string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(filepath.Join(dir, "cpilab"), append([]string{"certify"}, args...)...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	return cmd
}

// certify runs `cpilab certify args…` in its own process and returns its
// exit status, stdout and stderr.
func certify(t testing.TB, dir string, args ...string) (int, string, string) {
	t.Helper()
	return runCmd(t, certifyCmd(t, dir, t.TempDir(), args...))
}

func runCmd(t testing.TB, cmd *exec.Cmd) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running %s: %v", cmd.Args, err)
	}
	return code, out.String(), errb.String()
}

// readReport reads the JSON report a certify run wrote, checking it
// against docs/report.schema.json first.
func readReport(t testing.TB, path string) *suites.CertifyReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	schema, err := os.ReadFile(filepath.Join("..", "..", "docs", "report.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := suites.ValidateJSONSchema(schema, b); err != nil {
		t.Fatalf("the JSON report %s does not match docs/report.schema.json: %v", path, err)
	}
	r, err := suites.ReadCertifyReport(path)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestCertifyAcceptsReferenceCPI is `make certify`: the default run, every
// suite and every row, against the reference CPI found on PATH, with all
// three report files.
func TestCertifyAcceptsReferenceCPI(t *testing.T) {
	dir := buildCPIs(t)
	out := t.TempDir()
	html, js, junit := filepath.Join(out, "r.html"), filepath.Join(out, "r.json"), filepath.Join(out, "r.xml")
	code, stdout, stderr := certify(t, dir, "--html-report", html, "--json-report", js, "--junit-report", junit)
	if code != 0 {
		t.Fatalf("certify of the reference CPI exited %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if !strings.Contains(stdout, "ACCEPTED") || !strings.Contains(stdout, "left in the embedded fakeiaas after the run: nothing") {
		t.Fatalf("no verdict, or resources left behind:\n%s", stdout)
	}
	for _, row := range cpisuite.ReferenceTable {
		if !strings.Contains(stdout, row.Name) {
			t.Errorf("the summary has no row %s", row.Name)
		}
	}
	r := readReport(t, js)
	if r.Verdict != suites.VerdictAccepted || r.Counts.Failed != 0 || r.Counts.Passed < 200 {
		t.Errorf("report: verdict %s, counts %+v", r.Verdict, r.Counts)
	}
	if len(r.LeftInCloud) != 0 {
		t.Errorf("left in the cloud: %q", r.LeftInCloud)
	}
	for _, nc := range r.NotChecked {
		if !strings.HasPrefix(nc.Reason, "not applicable") {
			t.Errorf("on the embedded testbed nothing but not-applicable specs may be skipped; skipped: %q", nc.Reason)
		}
	}
	for _, s := range r.Specs {
		if !slices.ContainsFunc(r.Areas, func(a suites.AreaDoc) bool { return a.ID == s.Area && a.Title != "" }) {
			t.Errorf("spec %q has area %q, which the legend does not explain", s.Name, s.Area)
		}
		if s.Clause == "" || s.Suite == "contract" && (s.Area == "errors" || s.Area == "shapes") && len(s.Methods) == 0 {
			t.Errorf("spec %q: clause %q, methods %q", s.Name, s.Clause, s.Methods)
		}
	}
	for _, row := range cpisuite.ReferenceTable {
		if !slices.ContainsFunc(r.Matrix, func(m suites.MatrixRow) bool { return m.Row == row.Name }) {
			t.Errorf("the JSON matrix has no row %s", row.Name)
		}
	}
	h, err := os.ReadFile(html)
	if err != nil || !bytes.Contains(h, []byte("ACCEPTED")) || !bytes.Contains(h, []byte("d2.c2.s2")) {
		t.Errorf("HTML report: %v\n%.400s", err, h)
	}
	x, err := os.ReadFile(junit)
	if err != nil {
		t.Fatal(err)
	}
	var j suites.JUnit
	if err := xml.Unmarshal(x, &j); err != nil || j.Tests != len(r.Specs) || j.Failures != 0 || len(j.TestSuites) != len(r.Matrix) {
		t.Errorf("JUnit report: %v; %d tests, %d failures, %d testsuites; want %d tests and one testsuite per row (%d)",
			err, j.Tests, j.Failures, len(j.TestSuites), len(r.Specs), len(r.Matrix))
	}
	t.Run("html in chromium", func(t *testing.T) { checkHTMLInChromium(t, html, r) })
}

// TestCertifySaysWhatItCannotRun checks the usage errors of certify
// itself: each says what was wrong and exits 2 before anything starts.
func TestCertifySaysWhatItCannotRun(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "cpi.sh")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfgFile := filepath.Join(dir, "cloud.yml")
	if err := os.WriteFile(cfgFile, []byte("cpi: {command: [/bin/true]}\nstemcels: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--cpi", filepath.Join(dir, "nope")}, "nope: no such file"},
		{[]string{"--cpi", dir}, "is a directory, not a CPI executable"},
		{[]string{"--cpi", notExec}, "cpi.sh: not executable (mode -rw-r--r--); chmod +x it"},
		{[]string{"--cpi", "x", "--config", "y"}, "exclude each other"},
		{[]string{"--label-filter", "area:errors &&"}, `--label-filter "area:errors &&"`},
		{[]string{"--focus", "("}, `--focus "("`},
		{[]string{"--html-report", filepath.Join(dir, "missing", "r.html")}, "missing does not exist (create it first)"},
		{[]string{"--junit-report", dir}, "is a directory; give a file name"},
		{[]string{"--call-timeout", "0s"}, "must be positive"},
		{[]string{"--ginkgo.no-such-flag"}, "Ginkgo has no such flag"},
		{[]string{"--ginkgo.focus", "x"}, "use certify's own --focus"},
		{[]string{"--config", cfgFile}, "stemcels"},
	} {
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"certify"}, tc.args...), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("certify %q: exit %d, want 2 and %q on stderr; stderr:\n%s", tc.args, code, tc.want, errb.String())
		}
		if out.Len() != 0 {
			t.Errorf("certify %q: a usage error printed on stdout:\n%s", tc.args, out.String())
		}
	}
}

// TestCertifyRealCloudConfig certifies the reference CPI through --config,
// as a real cloud: the testbed plays the cloud but cpilab is not told, so
// no oracle, no faults, one CPI config. It must accept, and say plainly
// what it did not check.
func TestCertifyRealCloudConfig(t *testing.T) {
	dir := buildCPIs(t)
	tb, err := testbed.Start(testbed.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	cfgFile := realCloudFile(t, tb, filepath.Join(dir, "fakeiaas-cpi"), true)
	code, stdout, stderr := certify(t, dir, "--config", cfgFile, "--label-filter", "row:director-current.api3 || row:current.c3.s2 || row:d2.c2.s1")
	t.Logf("stdout:\n%s", stdout)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"ACCEPTED", "the oracle checks", "are not checked", "Not checked (these are not passes)",
		"not checked: IaaS state: no oracle", "no ssh block", "no stemcell of api_version 1 configured"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the output does not say %q:\n%s", want, stdout)
		}
	}
	// --strict: what cannot be checked on this cloud fails instead.
	code, stdout, stderr = certify(t, dir, "--config", cfgFile, "--strict", "--label-filter", "row:director-current.api3")
	if code != exitRejected || !strings.HasPrefix(lastLine(stdout), "REJECTED: ") || !strings.Contains(stdout, "no oracle") {
		t.Errorf("--strict on a cloud without oracle: exit %d, want 1 and REJECTED naming what could not be checked\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestRerunCommandReproducesOneFailure runs, through a shell and from
// another directory, the rerun command a failing run printed, and checks
// that it reruns exactly that spec, with the run's flags kept, and that
// the spec fails again.
func TestRerunCommandReproducesOneFailure(t *testing.T) {
	dir := buildCPIs(t)
	link := filepath.Join(dir, "buggy-get-disks-null")
	if err := os.Symlink(filepath.Join(dir, "buggy-cpi"), link); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	js, html := filepath.Join(t.TempDir(), "r.json"), filepath.Join(t.TempDir(), "r.html")
	code, stdout, _ := certify(t, dir, "--cpi", link, "--label-filter", "method:get_disks", "--call-timeout", "41s", "--json-report", js, "--html-report", html)
	r := readReport(t, js)
	t.Run("html in chromium", func(t *testing.T) { checkHTMLInChromium(t, html, r) })
	var failed []suites.SpecResult
	for _, s := range r.Specs {
		if s.State == suites.StateFailed {
			failed = append(failed, s)
		}
	}
	if code != 1 || len(failed) < 2 {
		t.Fatalf("exit %d, %d failures, want several:\n%s", code, len(failed), stdout)
	}
	var printed []string
	for _, l := range strings.Split(stdout, "\n") {
		if c, ok := strings.CutPrefix(strings.TrimSpace(l), "rerun only this spec: "); ok {
			printed = append(printed, c)
		}
	}
	if len(printed) != len(failed) || printed[1] != failed[1].Rerun {
		t.Fatalf("printed rerun commands %q, want one per failure, as in the report", printed)
	}
	cmdline := printed[1]
	for _, want := range []string{filepath.Join(dir, "cpilab") + " certify ", "--cpi " + link, "--call-timeout 41s", "--focus "} {
		if !strings.Contains(cmdline, want) {
			t.Errorf("rerun command %q lacks %q", cmdline, want)
		}
	}
	js2 := filepath.Join(t.TempDir(), "r2.json")
	sh := exec.Command("sh", "-c", cmdline+" --json-report "+js2)
	sh.Dir = t.TempDir() // not where the first run ran
	sh.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	code, stdout, stderr := runCmd(t, sh)
	again := readReport(t, js2)
	if code != 1 || !strings.Contains(stderr, "running 1 spec\n") || len(again.Specs) != 1 ||
		again.Specs[0].Name != failed[1].Name || again.Specs[0].State != suites.StateFailed {
		t.Fatalf("rerun %s: exit %d, specs %+v\nstdout:\n%s\nstderr:\n%s", cmdline, code, again.Specs, stdout, stderr)
	}
	if got, want := again.Specs[0].Violations[0].Clause, failed[1].Violations[0].Clause; got != want {
		t.Errorf("the rerun broke %q first, the first run %q", got, want)
	}
}

// printedReruns returns the rerun commands a certifier printed.
func printedReruns(stdout string) []string {
	var printed []string
	for _, l := range strings.Split(stdout, "\n") {
		if c, ok := strings.CutPrefix(strings.TrimSpace(l), "rerun only this spec: "); ok {
			printed = append(printed, c)
		}
	}
	return printed
}

// runPrinted runs a printed command line through a shell, from a
// directory that is not the one it was printed in, with extra appended.
func runPrinted(t *testing.T, cmdline string, extra ...string) (int, string, string) {
	t.Helper()
	for _, e := range extra {
		cmdline += " " + shellWord(e)
	}
	sh := exec.Command("sh", "-c", cmdline)
	sh.Dir = t.TempDir()
	sh.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	return runCmd(t, sh)
}

// A reference-table step needs what the steps before it made: the printed
// rerun of step 4 runs steps 1 to 4 of its row and fails step 4 again,
// not NOTHING-CHECKED for want of step 1's VM.
func TestRerunCommandReproducesATableStep(t *testing.T) {
	dir := buildCPIs(t)
	link := filepath.Join(dir, "buggy-hint-off-by-one")
	if err := os.Symlink(filepath.Join(dir, "buggy-cpi"), link); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	js := filepath.Join(t.TempDir(), "r.json")
	code, stdout, _ := certify(t, dir, "--cpi", link, "--label-filter", "row:current.c2.s2", "--json-report", js)
	r := readReport(t, js)
	var failed []suites.SpecResult
	for _, s := range r.Specs {
		if s.State == suites.StateFailed {
			failed = append(failed, s)
		}
	}
	printed := printedReruns(stdout)
	if code != 1 || len(failed) != 1 || !strings.Contains(failed[0].Name, "(step 4") || len(printed) != 1 || printed[0] != failed[0].Rerun {
		t.Fatalf("exit %d, failures %d, printed reruns %q; want step 4 of the row failed, with its rerun printed as in the report:\n%s", code, len(failed), printed, stdout)
	}
	js2 := filepath.Join(t.TempDir(), "r2.json")
	code, stdout, stderr := runPrinted(t, printed[0], "--json-report", js2)
	again := readReport(t, js2)
	var ran []string
	var clause string
	for _, s := range again.Specs {
		ran = append(ran, s.ID)
		if s.Name == failed[0].Name && s.State == suites.StateFailed {
			clause = s.Violations[0].Clause
		}
	}
	if code != 1 || again.Verdict != suites.VerdictRejected || clause != failed[0].Violations[0].Clause || again.Counts.Passed < 2 {
		t.Fatalf("rerun %s: exit %d, verdict %s, step 4 broke %q (want %q), specs %q\nstdout:\n%s\nstderr:\n%s",
			printed[0], code, again.Verdict, clause, failed[0].Violations[0].Clause, ran, stdout, stderr)
	}
	if !strings.Contains(stdout, "left in the embedded fakeiaas after the run: nothing") {
		t.Errorf("the rerun left resources behind:\n%s", stdout)
	}
}

// Harness limits are exit status 2, never a clause failure: the run's time
// limit (--ginkgo.timeout) ends INTERRUPTED with the specs it kept from
// starting counted as not run, and what the stopped specs made is deleted;
// a report that cannot be written is exit status 2. A report named "-" is
// stdout (the text goes to stderr), and a report into a pipe whose reader
// leaves does not keep the run from ending.
func TestCertifyHarnessLimitsAndReportsToStdout(t *testing.T) {
	dir := buildCPIs(t)
	code, stdout, stderr := certify(t, dir, "--ginkgo.timeout", "1s", "--json-report", "-")
	js := filepath.Join(t.TempDir(), "r.json")
	if err := os.WriteFile(js, []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	r := readReport(t, js)
	if code != exitUsage || r.Verdict != suites.VerdictInterrupted || r.Counts.Failed != 0 || r.Counts.NotRun == 0 ||
		!strings.HasPrefix(lastLine(stderr), "INTERRUPTED: the run's time limit") ||
		!strings.Contains(stderr, "left in the embedded fakeiaas after the run: nothing") {
		t.Errorf("--ginkgo.timeout 1s: exit %d, verdict %s (%s), counts %+v; want 2, interrupted, no failure, specs not run, nothing left\nstderr:\n%s",
			code, r.Verdict, r.VerdictReason, r.Counts, tail(stderr, 3000))
	}
	code, _, stderr = certify(t, dir, "--label-filter", "row:cli.api2 && area:setup", "--json-report", "/dev/full")
	if code != exitUsage || !strings.Contains(stderr, "/dev/full") {
		t.Errorf("a report that cannot be written: exit %d, want 2 naming it\nstderr:\n%s", code, tail(stderr, 2000))
	}
	sh := exec.Command("sh", "-c", shellWord(filepath.Join(dir, "cpilab"))+" certify --label-filter 'row:cli.api2' --json-report /dev/stdout | head -c 300")
	sh.Env = append(os.Environ(), "TMPDIR="+t.TempDir())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if code, out, _ := runCmd(t, sh); code != 0 || len(out) != 300 {
			t.Errorf("certify --json-report /dev/stdout | head -c 300: exit %d, %d bytes", code, len(out))
		}
	}()
	select {
	case <-done:
	case <-time.After(90 * time.Second):
		_ = sh.Process.Kill()
		<-done
		t.Fatal("certify --json-report /dev/stdout | head -c 300 did not end")
	}
}

// --report-dir DIR writes every report and the run's log (stdout and
// stderr, without colour) into one directory, made if missing.
func TestCertifyReportDir(t *testing.T) {
	dir := buildCPIs(t)
	out := filepath.Join(t.TempDir(), "results", "run-1")
	code, stdout, stderr := certify(t, dir, "--label-filter", "row:cli.api2 && area:setup", "--report-dir", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	r := readReport(t, filepath.Join(out, "report.json"))
	for _, name := range []string{"junit.xml", "report.html", "cpilab.log"} {
		if fi, err := os.Stat(filepath.Join(out, name)); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
	log, err := os.ReadFile(filepath.Join(out, "cpilab.log"))
	if err != nil {
		t.Fatal(err)
	}
	if lastLine(string(log)) != lastLine(stdout) || !strings.Contains(string(log), "running 1 spec") || r.Verdict != suites.VerdictAccepted {
		t.Errorf("the log does not hold the run's output (verdict %s):\n%s", r.Verdict, log)
	}
}

// --report-dir NAME.tar.gz packs the reports and the log into that archive
// and leaves no directory behind.
func TestCertifyReportDirArchive(t *testing.T) {
	dir := buildCPIs(t)
	base := t.TempDir()
	archive := filepath.Join(base, "run-1.tar.gz")
	code, stdout, stderr := certify(t, dir, "--label-filter", "row:cli.api2 && area:setup", "--report-dir", archive)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
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
	slices.Sort(names)
	want := []string{"run-1/cpilab.log", "run-1/junit.xml", "run-1/report.html", "run-1/report.json"}
	if !slices.Equal(names, want) {
		t.Errorf("archive holds %v, want %v", names, want)
	}
	if entries, _ := os.ReadDir(base); len(entries) != 1 {
		t.Errorf("beside the archive: %v, want the archive alone", entries)
	}
}

// A CPI that always exits 1: every context's setup fails, the clean-up of
// contexts that made nothing is not checked (no pass that checked
// nothing), and a setup failure's printed rerun, pasted into a shell,
// fails that setup again.
func TestCertifyBrokenCPIEarnsNoPassAndItsSetupRerunReproduces(t *testing.T) {
	dir := buildCPIs(t)
	cpi := filepath.Join(t.TempDir(), "exit-1-cpi")
	if err := os.WriteFile(cpi, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	js := filepath.Join(t.TempDir(), "r.json")
	code, stdout, stderr := certify(t, dir, "--cpi", cpi, "--json-report", js)
	r := readReport(t, js)
	if code != exitRejected || r.Counts.Passed != 0 || r.Counts.Failed == 0 {
		t.Fatalf("exit %d, counts %+v; want 1 and not one pass\n%s\n%s", code, r.Counts, tail(stdout, 3000), tail(stderr, 2000))
	}
	printed := printedReruns(stdout)
	if len(printed) == 0 {
		t.Fatalf("no rerun printed:\n%s", stdout)
	}
	js2 := filepath.Join(t.TempDir(), "r2.json")
	code, stdout, stderr = runPrinted(t, printed[0], "--json-report", js2)
	again := readReport(t, js2)
	if code != exitRejected || again.Counts.Failed != 1 || !strings.Contains(again.Specs[0].Name, cpisuite.ClauseSetup+":") {
		t.Errorf("rerun %s: exit %d, counts %+v; want the setup failed again\n%s\n%s", printed[0], code, again.Counts, stdout, stderr)
	}
}
