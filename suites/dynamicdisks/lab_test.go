package dynamicdisks_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/director/launch"
	"github.com/cpilab/cpilab/fixtures/directorbugs"
	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/suites/dynamicdisks"
	"github.com/cpilab/cpilab/testbed"
)

// Ginkgo runs one suite per process, so each test runs the suite against a
// fresh lab director in a child process (this test binary, re-executed):
// childEnv names the director profile, reportEnv the file the child writes
// its Summary to.
const (
	childEnv  = "CPILAB_DYNAMICDISKS_CHILD"
	reportEnv = "CPILAB_DYNAMICDISKS_REPORT"
	// filterEnv is a label filter for the child's run ("" : every spec).
	filterEnv = "CPILAB_DYNAMICDISKS_FILTER"
	// exploreEnv is the child's explore budget, "<runs>,<steps>" ("" : the
	// default).
	exploreEnv = "CPILAB_DYNAMICDISKS_EXPLORE"
	// catalogPrefix prefixes a child profile naming a directorbugs entry:
	// the reference director behind that fault.
	catalogPrefix = "catalog:"
)

func TestMain(m *testing.M) {
	if profile := os.Getenv(childEnv); profile != "" {
		if err := child(profile, os.Getenv(reportEnv)); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// labProfiles are the directors the children run the suite against.
var labProfiles = map[string]func() (director.Knobs, error){
	"reference": func() (director.Knobs, error) { return director.Profile(director.ProfileReference) },
	// broken-api is the reference director behind brokenAPI.
	"broken-api": func() (director.Knobs, error) { return director.Profile(director.ProfileReference) },
	"upstream":   func() (director.Knobs, error) { return director.Profile(director.ProfileUpstream) },
	// upstream-workers is upstream with dynamic_disks_workers set, as an
	// operator would run it: the disk queue runs, the other races remain.
	"upstream-workers": func() (director.Knobs, error) {
		k, err := director.Profile(director.ProfileUpstream)
		k.ZeroDynamicDiskWorkers = false
		return k, err
	},
}

// child serves a lab director over HTTPS, runs the suite against it and
// writes the summary to report.
func child(profile, report string) (err error) {
	if profile == "launch" {
		return launchChild(report, false)
	}
	if profile == "cloud" {
		return launchChild(report, true)
	}
	bug := directorbugs.Find(strings.TrimPrefix(profile, catalogPrefix))
	knobsOf, ok := labProfiles[profile]
	if bug.Name != "" && strings.HasPrefix(profile, catalogPrefix) {
		knobsOf, ok = labProfiles["reference"], true
	}
	if !ok {
		return fmt.Errorf("unknown profile %q", profile)
	}
	knobs, err := knobsOf()
	if err != nil {
		return err
	}
	// Beside the report, in the parent's t.TempDir: removed by the parent
	// even when this child is killed.
	dir, err := os.MkdirTemp(filepath.Dir(report), "lab-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	r := rt.Real(1)
	l, err := lab.New(lab.Config{Runtime: r, DataDir: filepath.Join(dir, "lab")})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, l.Close()) }()
	d, err := director.New(director.Config{Runtime: r, CPI: l.CPI, Agents: l.Agents, Inventory: l,
		Knobs: knobs, AgentTimeout: 10 * time.Second, AgentPingTimeout: time.Second, VMLockTimeout: 20 * time.Second})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, d.Close()) }()
	users := append([]director.User{
		{Name: "admin", Password: "admin-pw", Scopes: []string{director.ScopeAdmin}},
		{Name: "csi", Password: "csi-pw", Scopes: director.DiskScopes},
	}, dynamicdisks.ScopeUsers("scope-", "scope-pw")...)
	auth, err := director.NewAuth(director.AuthConfig{Runtime: r, Users: users})
	if err != nil {
		return err
	}
	api, err := director.NewAPI(director.APIConfig{Director: d, Auth: auth, DataDir: filepath.Join(dir, "stemcells")})
	if err != nil {
		return err
	}
	handler := api.Handler()
	if profile == "broken-api" {
		handler = brokenAPI(handler)
	}
	if bug.Name != "" {
		handler = bug.Wrap(handler, "admin", "admin-pw")
	}
	srv, err := director.Serve(director.ServeConfig{Handler: handler})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, srv.Close()) }()
	stemcell, err := filepath.Abs("../../fixtures/director/stemcell-v2")
	if err != nil {
		return err
	}
	oracle, links, gates := dynamicdisks.InProcessCloud(l.Cloud)
	cfg := dynamicdisks.Config{
		URL: srv.URL(), CACertPEM: srv.CACertPEM(),
		Admin:            dynamicdisks.Credentials{Username: "admin", Password: "admin-pw"},
		Disks:            dynamicdisks.Credentials{Username: "csi", Password: "csi-pw"},
		Setup:            dynamicdisks.Setup{StemcellLocation: stemcell},
		ScopeCredentials: dynamicdisks.ScopeCredentialsFor(users),
		Oracle:           oracle, Links: links, Gates: gates,
		// Short: a disk task still queued after 3 s is stuck (every task
		// of the lab takes milliseconds).
		// Settle: a generous wait for the second create_disk of race (a),
		// so a loaded machine does not hide the race.
		Timeouts: dynamicdisks.Timeouts{Task: 3 * time.Second, Deploy: 30 * time.Second, Settle: time.Second},
	}
	if e := os.Getenv(exploreEnv); e != "" {
		if _, err := fmt.Sscanf(e, "%d,%d", &cfg.Explore.Runs, &cfg.Explore.Steps); err != nil {
			return fmt.Errorf("%s=%q: %v", exploreEnv, e, err)
		}
	}
	return runSuite(cfg, report)
}

// runSuite runs the suite and writes its summary to report.
func runSuite(cfg dynamicdisks.Config, report string) error {
	sum, err := dynamicdisks.Run(context.Background(), cfg, dynamicdisks.RunOptions{Timeout: 2 * time.Minute,
		LabelFilter: os.Getenv(filterEnv)})
	if err != nil {
		return err
	}
	b, err := json.Marshal(sum)
	if err != nil {
		return err
	}
	return os.WriteFile(report, b, 0o600)
}

// launchChild runs the suite against `cpilab director` as launch.Run
// serves it (embedded NATS, SQLite, users from its config), knowing only
// its URL, CA certificate and credentials, as for any other director: no
// oracle, links or gates.
//
// With onCloud the director runs on a fake cloud served apart (a testbed:
// `cpilab fakeiaas`), and the suite is given that cloud as --cloud gives
// it: its oracle, its gates, and SFTP onto its VMs.
func launchChild(report string, onCloud bool) error {
	launchUsers := append([]director.User{
		{Name: "admin", Password: "admin-pw", Scopes: []string{director.ScopeAdmin}},
		// The RFC's scope names this time.
		{Name: "csi", Password: "csi-pw", Scopes: director.DiskScopes},
	}, dynamicdisks.ScopeUsers("scope-", "scope-pw")...)
	dir, err := os.MkdirTemp(filepath.Dir(report), "launch-") // in the parent's t.TempDir, as in child
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var cpiConfig string
	var cloud *testbed.Testbed
	if onCloud {
		if cloud, err = testbed.Start(testbed.Config{Dir: filepath.Join(dir, "cloud")}); err != nil {
			return err
		}
		defer cloud.Close()
		if cpiConfig, err = cloud.CPIConfig(testbed.CPISetup{}); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan launch.Info, 1)
	done := make(chan error, 1)
	go func() {
		done <- launch.Run(ctx, launch.Config{DataDir: filepath.Join(dir, "director"), Listen: "127.0.0.1:0", Out: io.Discard,
			CPIConfig: cpiConfig,
			Users:     launchUsers,
			Ready:     func(i launch.Info) { ready <- i }})
	}()
	var info launch.Info
	select {
	case info = <-ready:
	case err := <-done:
		return fmt.Errorf("launch.Run: %v", err)
	}
	ca, err := os.ReadFile(info.CACertPath)
	if err != nil {
		return err
	}
	stemcell, err := filepath.Abs("../../fixtures/director/stemcell-v2")
	if err != nil {
		return err
	}
	cfg := dynamicdisks.Config{
		URL: info.URL, CACertPEM: ca,
		Admin:            dynamicdisks.Credentials{Username: "admin", Password: "admin-pw"},
		Disks:            dynamicdisks.Credentials{Username: "csi", Password: "csi-pw"},
		ScopeCredentials: dynamicdisks.ScopeCredentialsFor(launchUsers),
		Setup:            dynamicdisks.Setup{StemcellLocation: stemcell},
	}
	if cloud != nil {
		cfg.Oracle, cfg.Gates = dynamicdisks.FakeCloud(cloud.URL())
		if cfg.Links, err = dynamicdisks.SFTPLinks(cloud.SSH.Addr(), cloud.SSHKeyPath()); err != nil {
			return err
		}
	}
	err = runSuite(cfg, report)
	cancel()
	return errors.Join(err, <-done)
}

// brokenAPI serves the reference API with three bugs of the kind the
// suite's auth and input specs are there to catch: GET /dynamic_disks
// without credentials answers 200, a missing scope's 401 becomes 200, and
// a 400 no longer names its property.
func brokenAPI(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		status, body := rec.Code, rec.Body.Bytes()
		switch {
		case status == http.StatusUnauthorized && r.Method == http.MethodGet && r.URL.Path == "/dynamic_disks":
			status, body = http.StatusOK, []byte("[]\n")
		case status == http.StatusUnauthorized && strings.Contains(string(body), `"code":600000`):
			status, body = http.StatusOK, []byte("{}\n")
		case status == http.StatusBadRequest:
			body = []byte(`{"code":400,"description":"bad request"}` + "\n")
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.Header().Del("Content-Length")
		w.WriteHeader(status)
		_, _ = w.Write(body)
	})
}

// runChild runs the suite against a lab director of profile in a child
// process and returns its summary.
func runChild(t *testing.T, profile string) dynamicdisks.Summary {
	t.Helper()
	return runChildFiltered(t, profile, "")
}

// runChildFiltered is runChild running only the specs filter selects
// ("" : all).
func runChildFiltered(t *testing.T, profile, filter string, env ...string) dynamicdisks.Summary {
	t.Helper()
	report := filepath.Join(t.TempDir(), "summary.json")
	start := time.Now()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+profile, reportEnv+"="+report, filterEnv+"="+filter), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the suite against the %s director: %v\n%s", profile, err, out)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		t.Fatalf("the child wrote no summary: %v\n%s", err, out)
	}
	var sum dynamicdisks.Summary
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	sum.WriteText(&text)
	t.Logf("the suite against the %s director, in %s:\n%s", profile, time.Since(start).Round(time.Millisecond), text.String())
	return sum
}

// spec finds the spec carrying label (or whose text starts with prefix).
func spec(t *testing.T, sum dynamicdisks.Summary, label, prefix string) dynamicdisks.SpecResult {
	t.Helper()
	for _, s := range sum.Specs {
		if (label != "" && s.HasLabel(label)) || (prefix != "" && strings.HasPrefix(s.Text, prefix)) {
			return s
		}
	}
	t.Fatalf("no spec labelled %q or starting %q ran", label, prefix)
	return dynamicdisks.SpecResult{}
}

// The reference director passes every spec, none skipped: the lab gives
// the suite an oracle, links and gates.
func TestReferenceDirectorPasses(t *testing.T) {
	t.Parallel()
	sum := runChild(t, "reference")
	if !sum.OK() || sum.Skipped != 0 {
		t.Fatalf("against the reference director: %d passed, %d failed, %d not checked; want every spec to pass",
			sum.Passed, sum.Failed, sum.Skipped)
	}
	if sum.Passed < 20 {
		t.Fatalf("only %d specs ran", sum.Passed)
	}
}

// The upstream director (no dynamic_disks workers, no disk-name lock) fails
// the queue (i) and race (a) specs, while the specs that need no task (auth,
// input) still pass: the suite fails for the right reasons.
func TestUpstreamDirectorFailsQueueAndRace(t *testing.T) {
	t.Parallel()
	sum := runChild(t, "upstream")
	for _, l := range []string{"queue:i", "race:a"} {
		s := spec(t, sum, l, "")
		if !s.Failed() {
			t.Errorf("spec %q %s against the upstream director; want failed", s.Text, s.State)
		} else if !strings.Contains(s.Reason, "no worker") {
			t.Errorf("spec %q failed, but not because the dynamic_disks queue has no worker:\n%s", s.Text, s.Reason)
		}
	}
	// (The disk names spec needs tasks upstream, which takes any name.)
	for _, c := range []string{dynamicdisks.ClauseNoCredentials, dynamicdisks.ClauseScopeOnly, dynamicdisks.ClauseBadBody} {
		if s := spec(t, sum, "", c); s.State != "passed" {
			t.Errorf("spec %q %s against the upstream director; it needs no task and should pass:\n%s", s.Text, s.State, s.Reason)
		}
	}
}

// Upstream with dynamic_disks workers: exactly the race (a) and race (e)
// specs fail, each for its own reason: concurrent provides made two IaaS
// disks (one leaked), and DELETE of an attached disk called delete_disk on
// it. Everything else, the queue spec included, passes.
func TestUpstreamWithWorkersFailsRacesAAndE(t *testing.T) {
	t.Parallel()
	sum := runChild(t, "upstream-workers")
	want := map[string]string{"race:a": "leaked", "race:e": "is attached to VM"}
	for _, s := range sum.Specs {
		label := ""
		for l := range want {
			if s.HasLabel(l) {
				label = l
			}
		}
		switch {
		case label == "" && s.State != "passed":
			t.Errorf("spec %q %s against upstream with workers; want passed:\n%s", s.Text, s.State, s.Reason)
		case label != "" && !s.Failed():
			t.Errorf("spec %q %s against upstream with workers; want failed", s.Text, s.State)
		case label != "" && (len(s.Violations) == 0 || !strings.Contains(s.Violations[0].Did, want[label])):
			t.Errorf("spec %q failed, but not by finding %q: %+v", s.Text, want[label], s.Violations)
		}
	}
	spec(t, sum, "race:a", "")
	spec(t, sum, "race:e", "")
}

// Against `cpilab director` known only by URL, CA and credentials (the
// RFC's scope names for the disk user), the specs that need an oracle,
// links or gates are reported as not checked, with their reasons, and
// every other spec passes.
func TestLaunchedDirectorWithoutOracle(t *testing.T) {
	t.Parallel()
	sum := runChild(t, "launch")
	if sum.Failed != 0 || sum.SuiteFailure != "" {
		t.Fatalf("against cpilab director: %d failed; want none", sum.Failed)
	}
	for _, l := range []string{"cap:oracle", "cap:links", "cap:gates"} {
		for _, s := range sum.Specs {
			if s.HasLabel(l) && (s.State != "skipped" || !strings.HasPrefix(s.Reason, "not checked: ")) {
				t.Errorf("spec %q (%s) %s without the capability; want skipped with a reason, got %q", s.Text, l, s.State, s.Reason)
			}
		}
	}
	if sum.Skipped != 4 || len(sum.NotChecked) != 3 {
		t.Errorf("%d specs not checked for %d reasons %v; want 4 for 3", sum.Skipped, len(sum.NotChecked), sum.NotChecked)
	}
	if s := spec(t, sum, "race:a", ""); s.State != "passed" {
		t.Errorf("race (a) judged by the API alone: %s; want passed", s.State)
	}
}

// --explore's random lifecycles find a bug no scripted step was written
// for here (detach of an unknown name succeeding), and rapid shrinks the
// lifecycle to the one request that shows it, with the seed that replays
// it.
func TestExploreFindsAndShrinks(t *testing.T) {
	t.Parallel()
	sum := runChildFiltered(t, catalogPrefix+"detach-unknown-succeeds", "area:explore", exploreEnv+"=5,20")
	s := spec(t, sum, "area:explore", "")
	if !s.Failed() || !strings.Contains(s.Reason, "[rapid] failed") || !strings.Contains(s.Reason, dynamicdisks.ClauseDetachUnknown) ||
		!strings.Contains(s.Reason, "rapid.seed=") || sum.Violated != 1 {
		t.Fatalf("explore against detach-unknown-succeeds: %s; want a shrunk rapid failure citing the detach clause and a seed:\n%s", s.State, s.Reason)
	}
}

// Against `cpilab director` on a fake cloud served apart, given that cloud
// as certify-director --cloud gives it (oracle, gates, SFTP links), the
// specs that need the cloud run and pass: none is not checked for want of
// an oracle.
func TestLaunchedDirectorOnACloud(t *testing.T) {
	t.Parallel()
	sum := runChildFiltered(t, "cloud", "cap:oracle || cap:links || cap:gates")
	if !sum.OK() || sum.Skipped != 0 || sum.Passed < 4 {
		t.Fatalf("against cpilab director on a fake cloud: %d passed, %d failed, %d not checked %v; want the 4 cloud specs passed",
			sum.Passed, sum.Failed, sum.Skipped, sum.NotChecked)
	}
}

// The suite catches a director whose auth and input handling are broken
// (brokenAPI): exactly the 401, scope and bad-body specs fail, and each says
// what the director answered instead.
func TestBrokenAPIFailsAuthAndInputSpecs(t *testing.T) {
	t.Parallel()
	sum := runChild(t, "broken-api")
	want := map[string]string{
		dynamicdisks.ClauseNoCredentials: "answered HTTP 200, not 401",
		dynamicdisks.ClauseScopeOnly:     "answered HTTP 200 to the disk-scoped credentials, not 401",
		dynamicdisks.ClauseBadBody:       "does not name the property",
		// A token lacking the list scope gets 200 instead of its 401.
		dynamicdisks.ClauseScopeMatrix: "want 401: the route needs",
	}
	for _, s := range sum.Specs {
		did, broken := want[s.Text]
		switch {
		case !broken && s.State != "passed":
			t.Errorf("spec %q %s against the broken API; want passed:\n%s", s.Text, s.State, s.Reason)
		case broken && !s.Failed():
			t.Errorf("spec %q %s against the broken API; want failed", s.Text, s.State)
		case broken && (len(s.Violations) == 0 || !strings.Contains(s.Violations[0].Did, did) || s.Violations[0].Request == ""):
			t.Errorf("spec %q failed, but its violation %+v does not say %q with the request", s.Text, s.Violations, did)
		}
		delete(want, s.Text)
	}
	if len(want) > 0 {
		t.Errorf("specs did not run: %v", want)
	}
}

// Every bug of the director catalog is rejected, by a violation (never a
// harness error), and every legal variant accepted. A bug runs only the
// specs its entry names (a default run runs them all); a variant runs the
// whole suite, since any spec could raise a false alarm. Set
// CPILAB_CATALOG_FULL=1 to run every bug with the whole suite too. The
// children run eight at a time: each mostly waits on its director.
func TestDirectorBugCatalog(t *testing.T) {
	t.Parallel()
	full := os.Getenv("CPILAB_CATALOG_FULL") != ""
	bugs, legal := 0, 0
	type outcome struct {
		sum dynamicdisks.Summary
		err error
	}
	out := make([]outcome, len(directorbugs.Catalog))
	dir := t.TempDir()
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, e := range directorbugs.Catalog {
		if e.Legal {
			legal++
		} else {
			bugs++
		}
		filter := e.Catches
		if e.Legal || full {
			filter = ""
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i].sum, out[i].err = childSummary(filepath.Join(dir, e.Name+".json"), catalogPrefix+e.Name, filter)
		})
	}
	wg.Wait()
	for i, e := range directorbugs.Catalog {
		sum, err := out[i].sum, out[i].err
		var text strings.Builder
		sum.WriteText(&text)
		switch {
		case err != nil:
			t.Errorf("%s: %v", e.Name, err)
		case e.Legal && !sum.OK():
			t.Errorf("the legal variant %q (%s) is rejected:\n%s", e.Name, e.Story, text.String())
		case !e.Legal && sum.OK():
			t.Errorf("the bug %q (%s) is accepted:\n%s", e.Name, e.Story, text.String())
		case !e.Legal && (sum.Violated == 0 || sum.HarnessErrors > 0):
			t.Errorf("the bug %q is rejected for a harness error, not a violation:\n%s", e.Name, text.String())
		case !e.Legal && !cites(sum, e.Clauses):
			t.Errorf("the bug %q is rejected, but no violation cites its clauses %q:\n%s", e.Name, e.Clauses, text.String())
		default:
			t.Logf("%s (legal %v): %d passed, %d failed, %d not checked", e.Name, e.Legal, sum.Passed, sum.Failed, sum.Skipped)
		}
	}
	if bugs < 12 || legal < 4 {
		t.Errorf("the catalog holds %d bugs and %d legal variants; want at least 12 and 4", bugs, legal)
	}
}

// cites reports whether a violation of sum cites one of clauses.
func cites(sum dynamicdisks.Summary, clauses []string) bool {
	for _, sp := range sum.Specs {
		for _, v := range sp.Violations {
			if slices.Contains(clauses, v.Clause) {
				return true
			}
		}
	}
	return false
}

// childSummary runs the suite against a lab director of profile in a child
// process, writing its summary to report, and returns the summary.
func childSummary(report, profile, filter string) (dynamicdisks.Summary, error) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+profile, reportEnv+"="+report, filterEnv+"="+filter)
	var sum dynamicdisks.Summary
	if b, err := cmd.CombinedOutput(); err != nil {
		return sum, fmt.Errorf("the suite against the %s director: %v\n%s", profile, err, b)
	}
	b, err := os.ReadFile(report)
	if err != nil {
		return sum, err
	}
	return sum, json.Unmarshal(b, &sum)
}
