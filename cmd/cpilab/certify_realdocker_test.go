package main

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/internal/dockertest"

	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/cpisuite"
	"github.com/cpilab/cpilab/testbed"
)

// realDockerHost is a real Docker daemon for the test (internal/dockertest).
func realDockerHost(t *testing.T) string { return dockertest.Host(t) }

// realDockerRows are the rows the comparison certifies: a whole contract
// row and a reference-table row (the whole suite takes minutes on a real
// daemon; these cover every clause the Docker CPI breaks).
const realDockerRows = "row:director-v2.api2 || row:d2.c2.s2"

// TestCertifyDockerRealDaemon: the upstream Docker CPI certified against a
// real Docker daemon (--docker-host: the oracle reads the daemon) gets the
// verdict it gets on the face serving the daemon's API version
// (--docker-api-version), spec by spec, and neither names
// errors.delete-disk-missing. The specs only the face can check (its
// agents) are the difference, each not checked on the daemon with its
// reason.
func TestCertifyDockerRealDaemon(t *testing.T) {
	cpi := dockerCPIPath(t)
	host := realDockerHost(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	d, err := testbed.DialDocker(ctx, host)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	api := d.CPIAPIVersion()
	dir := buildCPIs(t)
	faceJS, realJS := filepath.Join(t.TempDir(), "face.json"), filepath.Join(t.TempDir(), "real.json")
	code, stdout, stderr := certify(t, dir, "--cpi", cpi, "--cloud", "docker", "--docker-api-version", api,
		"--label-filter", realDockerRows, "--json-report", faceJS)
	if code != exitRejected {
		t.Fatalf("certify on the face at API %s exited %d, want %d\nstdout:\n%s\nstderr:\n%s", api, code, exitRejected, stdout, stderr)
	}
	code, stdout, stderr = certify(t, dir, "--cpi", cpi, "--cloud", "docker", "--docker-host", host,
		"--label-filter", realDockerRows, "--json-report", realJS)
	if code != exitRejected {
		t.Fatalf("certify on the real daemon exited %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitRejected, stdout, stderr)
	}
	if !strings.Contains(stdout, "real Docker daemon") {
		t.Errorf("the run does not say it used the real daemon:\n%s", stdout)
	}
	face, real := readReport(t, faceJS), readReport(t, realJS)

	type key struct{ row, clause, name string }
	states := func(r *suites.CertifyReport) map[key]string {
		m := map[key]string{}
		for _, s := range r.Specs {
			m[key{s.Row, s.Clause, s.Name}] = s.State
		}
		return m
	}
	fs, rs := states(face), states(real)
	checked := func(s string) bool { return s == suites.StatePassed || s == suites.StateFailed }
	both, faceOnly := 0, 0
	for k, f := range fs {
		r, ok := rs[k]
		switch {
		case !ok:
			t.Errorf("spec %q ran on the face but not on the real daemon", k.name)
		case checked(f) && checked(r):
			both++
			if f != r {
				t.Errorf("row %s, clause %s: %s on the face, %s on the real daemon (%s)", k.row, k.clause, f, r, k.name)
			}
		case checked(r):
			t.Errorf("row %s, clause %s: checked on the real daemon (%s) but %s on the face", k.row, k.clause, r, f)
		case checked(f):
			faceOnly++
			if !slices.Contains([]string{cpisuite.ClauseAgentPing, cpisuite.ClauseAgentDisk, cpisuite.ClauseSymlink, cpisuite.ClauseDataMoves}, k.clause) {
				t.Errorf("row %s, clause %s: checked on the face (%s), not on the real daemon; only the agent and VM file steps may differ", k.row, k.clause, f)
			}
		}
	}
	if both < 30 {
		t.Errorf("only %d specs were checked on both: the comparison says too little", both)
	}
	fb, rb := brokenClauses(face), brokenClauses(real)
	for _, c := range rb {
		if !slices.Contains(fb, c) {
			t.Errorf("clause %s broken on the real daemon, not on the face", c)
		}
	}
	for _, r := range []*suites.CertifyReport{face, real} {
		if slices.Contains(brokenClauses(r), cpisuite.ClauseDeleteDisk) {
			t.Errorf("a run names %s: DELETE /volumes/<missing>?force=1 is 204 on Docker", cpisuite.ClauseDeleteDisk)
		}
	}
	t.Logf("API %s (daemon %s %s): %d specs checked on both, the same; %d on the face only (agents); broken on both: %v", api, d.Version, d.APIVersion, both, faceOnly, rb)
}
