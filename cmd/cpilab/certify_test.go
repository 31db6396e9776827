package main

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/testbed"
	"github.com/onsi/ginkgo/v2/types"
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

// buildCPIs builds fakeiaas-cpi and buggy-cpi into one directory, once.
func buildCPIs(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "cpilab-certify-test-")
		if buildErr != nil {
			return
		}
		for name, pkg := range map[string]string{
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

// certify runs `cpilab certify args…` in its own process with dir first on
// PATH, and returns its exit status, stdout and stderr.
func certify(t testing.TB, dir string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"certify"}, args...)...)
	// Its own TMPDIR (the CPIs inherit it): what a buggy CPI leaves behind
	// goes when the test ends.
	cmd.Env = append(os.Environ(), "CPILAB_TEST_RUN_MAIN=1", "TMPDIR="+t.TempDir(),
		"PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running certify: %v", err)
	}
	return code, out.String(), errb.String()
}

func readReport(t *testing.T, path string) types.Report {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	var reports []types.Report
	if err := json.Unmarshal(b, &reports); err != nil || len(reports) != 1 {
		t.Fatalf("JSON report %s: %d reports, %v", path, len(reports), err)
	}
	return reports[0]
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
	for _, row := range suites.ReferenceTable {
		if !strings.Contains(stdout, row.Name) {
			t.Errorf("the summary has no row %s", row.Name)
		}
	}
	r := readReport(t, js)
	sum := suites.Summarize(r)
	if sum.Failed != 0 || sum.Passed < 200 {
		t.Errorf("summary: %d passed, %d failed", sum.Passed, sum.Failed)
	}
	for reason := range sum.NotChecked {
		if !strings.HasPrefix(reason, "not applicable") {
			t.Errorf("on the embedded testbed nothing but not-applicable specs may be skipped; skipped: %q", reason)
		}
	}
	h, err := os.ReadFile(html)
	if err != nil || !bytes.Contains(h, []byte("ACCEPTED")) || !bytes.Contains(h, []byte("d2.c2.s2")) {
		t.Errorf("HTML report: %v\n%.400s", err, h)
	}
	x, err := os.ReadFile(junit)
	var suitesXML struct {
		Tests    int `xml:"tests,attr"`
		Failures int `xml:"failures,attr"`
	}
	if err != nil || xml.Unmarshal(x, &suitesXML) != nil || suitesXML.Tests < 200 || suitesXML.Failures != 0 {
		t.Errorf("JUnit report: %v, %+v", err, suitesXML)
	}
}

// TestCertifySaysWhatItCannotRun checks the plain errors of certify itself.
func TestCertifySaysWhatItCannotRun(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"certify", "--cpi", filepath.Join(t.TempDir(), "nope")}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "not an executable file") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	errb.Reset()
	code = run(context.Background(), []string{"certify", "--cpi", "x", "--config", "y"}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "exclude each other") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	cfgFile := filepath.Join(t.TempDir(), "cloud.yml")
	if err := os.WriteFile(cfgFile, []byte("cpi: {command: [/bin/true]}\nstemcels: {}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	code = run(context.Background(), []string{"certify", "--config", cfgFile}, &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "stemcels") {
		t.Fatalf("a misspelt key must be refused: exit %d, stderr %q", code, errb.String())
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
	cpiJSON, err := tb.CPIConfig(testbed.CPISetup{})
	if err != nil {
		t.Fatal(err)
	}
	s2, err := tb.StemcellImage(2)
	if err != nil {
		t.Fatal(err)
	}
	yml := fmt.Sprintf(`cpi:
  command: [%q]
  config: %q
stemcells:
  2: {image: %q}
vm_cloud_properties: {disk_hint: id}
networks:
  default: {type: manual, ip: 10.0.0.10, netmask: 255.255.255.0, gateway: 10.0.0.1}
disk_size_mib: 64
mbus_url: %q
timeouts: {call: 30s, agent: 20s}
`, filepath.Join(dir, "fakeiaas-cpi"), cpiJSON, s2, tb.MbusURL())
	cfgFile := filepath.Join(t.TempDir(), "cloud.yml")
	if err := os.WriteFile(cfgFile, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := certify(t, dir, "--config", cfgFile, "--label-filter", "row:director-current.api3 || row:current.c3.s2 || row:d2.c2.s1")
	t.Logf("stdout:\n%s", stdout)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"ACCEPTED", "the oracle checks", "are skipped", "Not checked (these are not passes)",
		"not checked: IaaS state: no oracle", "no ssh block", "no stemcell of api_version 1 configured"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("the output does not say %q:\n%s", want, stdout)
		}
	}
}

// TestRerunCommandReproducesOneFailure runs the focus a failure prints and
// checks that it reruns exactly that spec, failing again.
func TestRerunCommandReproducesOneFailure(t *testing.T) {
	dir := buildCPIs(t)
	link := filepath.Join(dir, "buggy-get-disks-null")
	if err := os.Symlink(filepath.Join(dir, "buggy-cpi"), link); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	js := filepath.Join(t.TempDir(), "r.json")
	code, stdout, _ := certify(t, dir, "--cpi", link, "--label-filter", "method:get_disks", "--json-report", js)
	fails := suites.Failures(readReport(t, js), nil)
	if code != 1 || len(fails) < 2 {
		t.Fatalf("exit %d, %d failures, want several:\n%s", code, len(fails), stdout)
	}
	js2 := filepath.Join(t.TempDir(), "r2.json")
	code, stdout, stderr := certify(t, dir, "--cpi", link, "--focus", fails[1].Focus, "--json-report", js2)
	again := suites.Failures(readReport(t, js2), nil)
	if code != 1 || !strings.Contains(stderr, "running 1 specs") || len(again) != 1 || again[0].Spec != fails[1].Spec {
		t.Fatalf("rerun of %q: exit %d, failures %+v\nstdout:\n%s\nstderr:\n%s", fails[1].Spec, code, again, stdout, stderr)
	}
}

// BenchmarkCertifyDefault measures the full default `cpilab certify` (every
// suite, every row, the reference CPI on the embedded testbed) as a user
// runs it, one process per run. Target: ≤ 60 s on 2 cores.
func BenchmarkCertifyDefault(b *testing.B) {
	dir := buildCPIs(b)
	b.ResetTimer()
	for range b.N {
		if code, stdout, stderr := certify(b, dir); code != 0 {
			b.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
	}
}
