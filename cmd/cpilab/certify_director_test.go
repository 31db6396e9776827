package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/dynamicdisks/upstreamfixture"
)

// certifyDirector runs `cpilab certify-director args…` in its own process
// (Ginkgo runs one suite per process) and returns its exit status and
// stdout.
func certifyDirector(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"certify-director"}, args...)...)
	cmd.Env = append(os.Environ(), "CPILAB_TEST_RUN_MAIN=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		t.Fatalf("running certify-director: %v\n%s", err, errb.String())
	}
	return 0, out.String()
}

// With no --url, certify-director certifies an embedded reference director,
// and its disk-scoped user sees only the disk endpoints.
func TestCertifyDirectorAcceptsTheReferenceDirector(t *testing.T) {
	t.Parallel() // its own processes, worlds and temporary directories
	dir := t.TempDir()
	js, junit := filepath.Join(dir, "r.json"), filepath.Join(dir, "r.xml")
	code, out := certifyDirector(t, "--json-report", js, "--junit-report", junit)
	if code != 0 || !strings.Contains(out, " passed, 0 failed") || !strings.HasPrefix(lastLine(out), "ACCEPTED: ") {
		t.Fatalf("exit %d; want 0, no failure and the ACCEPTED line:\n%s", code, out)
	}
	// The embedded director's fake cloud runs in this process: the suite
	// reads it, the agents' links and its gates, so nothing is left not
	// checked for want of an oracle.
	for _, want := range []string{"embedded reference director (profile reference)", " 0 not checked"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	// The project's report schema, not Ginkgo's raw JSON; JUnit without
	// Ginkgo's own nodes counted as passes.
	r := readReport(t, js)
	if r.Title != "cpilab certify-director" || r.TargetKind != "Director" || r.Verdict != suites.VerdictAccepted || len(r.Matrix) != 1 {
		t.Errorf("JSON report: title %q, kind %q, verdict %s, matrix %d rows", r.Title, r.TargetKind, r.Verdict, len(r.Matrix))
	}
	var j suites.JUnit
	if b, err := os.ReadFile(junit); err != nil || xml.Unmarshal(b, &j) != nil || bytes.Contains(b, []byte("ReportBeforeSuite")) ||
		j.Tests != r.Counts.Passed+r.Counts.NotChecked {
		t.Errorf("JUnit report: %v, %d tests (want %d), or it counts Ginkgo's own nodes", err, j.Tests, r.Counts.Passed+r.Counts.NotChecked)
	}
}

// certify-director selects specs and prints as the other certifiers do:
// --list [--json] runs nothing, --skip leaves specs out, --quiet keeps the
// verdict line.
func TestCertifyDirectorSelectsAndQuiets(t *testing.T) {
	t.Parallel() // its own processes, worlds and temporary directories
	code, out := certifyDirector(t, "--list", "--json", "--label-filter", "area:auth", "--skip", "invalid. credentials")
	var list struct {
		Specs []struct{ ID, Text string }
		Count int
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || list.Count == 0 || list.Count != len(list.Specs) {
		t.Fatalf("--list --json: exit %d, %v:\n%s", code, err, out)
	}
	for _, s := range list.Specs {
		if strings.Contains(s.Text, "invalid) credentials") {
			t.Errorf("--skip listed %q", s.Text)
		}
	}
	code, out = certifyDirector(t, "--quiet", "--label-filter", "area:auth")
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "ACCEPTED: ") || !strings.Contains(out, "PARTIAL") {
		t.Errorf("--quiet: exit %d, want 0 and only the verdict line, PARTIAL:\n%s", code, out)
	}
}

// A director that cannot be reached is a harness error, not a director
// violation: exit 2, NOT CERTIFIED, never an empty pass.
func TestCertifyDirectorFailsOnAnUnreachableDirector(t *testing.T) {
	code, out := certifyDirector(t, "--url", "https://127.0.0.1:1", "--insecure",
		"--admin-user", "a", "--admin-password", "a", "--disk-user", "d", "--disk-password", "d")
	if code != 2 || !strings.Contains(out, "NOT CERTIFIED: 1 harness errors") {
		t.Fatalf("exit %d against a director that is not there; want 2 and NOT CERTIFIED:\n%s", code, out)
	}
}

// certify-director --url accepts a director that answers exactly as
// upstream's does (the upstream-shaped fixture: 401 bodies, 302 with an
// empty body, upstream's list and task shapes, task errors for unknown
// references, any disk name), and prints its verdict.
func TestCertifyDirectorAcceptsAnUpstreamShapedDirector(t *testing.T) {
	t.Parallel() // its own processes, worlds and temporary directories
	fx := upstreamfixture.New(upstreamfixture.Config{Tokens: map[string][]string{
		"admin-token": {"bosh.admin"},
		"disk-token":  director.DiskScopes,
	}})
	defer fx.Close()
	srv := httptest.NewServer(fx.Handler())
	defer srv.Close()
	code, out := certifyDirector(t, "--url", srv.URL, "--admin-token", "admin-token", "--disk-token", "disk-token",
		"--deployment", "fixture", "--disk-pool", "dynamic")
	if code != 0 || !strings.Contains(out, "ACCEPTED: ") {
		t.Fatalf("exit %d against the upstream-shaped director; want 0 and ACCEPTED:\n%s", code, out)
	}
	t.Logf("certify-director against the upstream-shaped director:\n%s", out)
	// The suite really drove it: create_disk carried the disk's name, and
	// every disk it made was deleted again.
	made, deleted := map[string]bool{}, 0
	for _, c := range fx.Calls() {
		switch c.Method {
		case "create_disk":
			props, _ := c.Args[1].(map[string]any)
			name, _ := props["name"].(string)
			if name == "" {
				t.Errorf("create_disk without the disk name in cloud_properties: %v", c.Args)
			}
			made[name] = true
		case "delete_disk":
			deleted++
		}
	}
	if len(made) < 5 || deleted != len(made) {
		t.Errorf("the suite made %d disks and deleted %d; want several, all deleted", len(made), deleted)
	}
}

// Against cpilab's own director under the upstream profile (no
// dynamic_disks workers, no disk-name lock, …) certify-director rejects,
// naming the race, and each failure prints the command that reruns it with
// the run's flags; pasted into a shell, it fails the same spec again.
func TestCertifyDirectorRejectsTheUpstreamProfile(t *testing.T) {
	// One provide shows it; a short task bound keeps the wait short (the
	// upstream profile's tasks are never started).
	code, out := certifyDirector(t, "--profile", "upstream", "--label-filter", "area:provide", "--task-timeout", "3s")
	if code != 1 || !strings.Contains(out, "REJECTED: ") || !strings.Contains(out, "no worker") {
		t.Fatalf("exit %d against the upstream profile; want 1, REJECTED and the dynamic_disks queue named:\n%s", code, out)
	}
	if strings.Contains(out, "issue 6") || strings.Contains(out, "Config.") {
		t.Errorf("the output speaks of issue numbers or Go field names:\n%s", out)
	}
	printed := printedReruns(out)
	if len(printed) != 1 || !strings.HasPrefix(printed[0], shellWord(os.Args[0])+" certify-director --profile upstream --task-timeout 3s --focus ") {
		t.Fatalf("rerun commands %q: want one, this cpilab with --profile upstream and --task-timeout 3s:\n%s", printed, out)
	}
	t.Setenv("CPILAB_TEST_RUN_MAIN", "1") // the printed cpilab is this test binary
	code, again, errs := runPrinted(t, printed[0])
	if code != 1 || !strings.Contains(again, "no worker") || !strings.Contains(again, "REJECTED: 1 failed") {
		t.Errorf("the printed rerun exited %d; want 1 and the same spec failed alone:\n%s\n%s", code, again, errs)
	}
}

// A rerun command keeps every flag that shaped the run, with local paths
// made absolute, and never prints a credential: it reads it from the
// environment, and asks for it when unset.
func TestDirectorRerunCommandHidesCredentials(t *testing.T) {
	fs := newFlagSet("certify-director", &bytes.Buffer{})
	var f certifyDirectorFlags
	f.register(fs)
	if err := parseFlags(fs, []string{"-e", "10.0.0.6", "--client", "admin", "--client-secret", "s3cret pass", "--disk-token", "tok",
		"--ca-cert", "ca.pem", "-d", "dep", "--insecure", "--quiet", "--json-report", "r.json", "--strict"}); err != nil {
		t.Fatal(err)
	}
	cmd := directorRerunCommand(fs, "/opt/cpilab")("x y")
	abs, _ := filepath.Abs("ca.pem")
	for _, want := range []string{"/opt/cpilab certify-director --url https://10.0.0.6:25555 --ca-cert " + abs + " --insecure --admin-user admin",
		`--admin-password "${CPILAB_ADMIN_PASSWORD:?`, `--disk-token "${CPILAB_DISK_TOKEN:?`, "--deployment dep", "--strict --focus 'x y'"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("rerun %q lacks %q", cmd, want)
		}
	}
	for _, unwanted := range []string{"s3cret", "tok ", "--quiet", "json-report", "--client", " -e ", " -d "} {
		if strings.Contains(cmd, unwanted) {
			t.Errorf("rerun %q holds %q", cmd, unwanted)
		}
	}
	// In a shell with the variables set, the credentials come back.
	sh := exec.Command("sh", "-c", "set -- "+strings.TrimPrefix(cmd, "/opt/cpilab ")+`; for a; do printf '%s\n' "$a"; done`)
	sh.Env = append(os.Environ(), "CPILAB_ADMIN_PASSWORD=s3cret pass", "CPILAB_DISK_TOKEN=tok")
	words, err := sh.Output()
	if err != nil || !strings.Contains(string(words), "\ns3cret pass\n") || !strings.Contains(string(words), "\ntok\n") {
		t.Errorf("the shell read %q (%v)", words, err)
	}
}

// Missing credentials for --url are a usage error (exit 2) naming the flags,
// never Go field names.
func TestCertifyDirectorUsageNamesFlags(t *testing.T) {
	cmd := exec.Command(os.Args[0], "certify-director", "--url", "https://127.0.0.1:1", "--admin-user", "a")
	cmd.Env = append(os.Environ(), "CPILAB_TEST_RUN_MAIN=1")
	out, err := cmd.CombinedOutput()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), "--admin-token (or --admin-user and --admin-password)") ||
		!strings.Contains(string(out), "--disk-token") || strings.Contains(string(out), "Config.") {
		t.Fatalf("%v: %s; want exit 2 naming the missing flags", err, out)
	}
}

// A director with no stemcell, a run that deploys its own instances and no
// --stemcell: a usage error asking for --stemcell, before anything runs.
func TestCertifyDirectorAsksForAStemcell(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && r.URL.Path == "/stemcells" {
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte("[]"))
			return
		}
		http.NotFound(w, r)
	}))
	defer srv.Close()
	cmd := exec.Command(os.Args[0], "certify-director", "--url", srv.URL, "--admin-token", "a", "--disk-token", "d")
	cmd.Env = append(os.Environ(), "CPILAB_TEST_RUN_MAIN=1")
	code, out, errs := runCmd(t, cmd)
	if code != exitUsage || !strings.Contains(errs, "has no stemcell") || !strings.Contains(errs, "--stemcell PATH") || strings.Contains(out, "REJECTED") {
		t.Errorf("exit %d, stderr %q; want 2 and a usage error asking for --stemcell\n%s", code, errs, out)
	}
}
