package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/realagent"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/cpisuite"
)

// realAgentOrSkip skips unless the upstream agent's box can run: a binary
// (realagent.FindAgent), root for the private Docker daemon.
func realAgentOrSkip(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: not starting the upstream agent's box")
	}
	co, err := realagent.Checkout()
	if err == nil {
		_, err = realagent.FindAgent(co)
	}
	if errors.Is(err, realagent.ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
}

// skipIfNoBox skips when the run says the box could not start here.
func skipIfNoBox(t *testing.T, stdout string) {
	t.Helper()
	for _, l := range strings.Split(stdout, "\n") {
		if strings.Contains(l, "the upstream agent cannot run here") {
			t.Skip(strings.TrimSpace(l))
		}
	}
}

var hostedCalls = regexp.MustCompile(`the upstream agent answered (\d+) add_dynamic_disk`)

// certify --agent real ACCEPTS the reference CPI on the rows the box hosts
// (identity d2.c1.s2, virtio d2.c2.s2): the upstream agent's links carry the
// data checks; a scsi row is not checked there, saying why, never passed.
func TestCertifyAgentRealAcceptsReferenceCPI(t *testing.T) {
	realAgentOrSkip(t)
	dir := buildCPIs(t)
	js := filepath.Join(t.TempDir(), "r.json")
	code, stdout, stderr := certify(t, dir, "--agent", "real", "--json-report", js,
		"--label-filter", "row:d2.c2.s2 || row:d2.c1.s2 || row:d1.c2.s2")
	skipIfNoBox(t, stdout)
	if code != 0 {
		t.Fatalf("certify --agent real of the reference CPI exited %d, want 0 (accepted)\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	n := 0
	if m := hostedCalls.FindStringSubmatch(stdout); m != nil {
		n, _ = strconv.Atoi(m[1])
	}
	if n < 4 {
		t.Errorf("the run does not say the upstream agent made the links of two rows (an add and a remove each):\n%s", stdout)
	}
	r := readReport(t, js)
	for _, row := range []string{"d2.c2.s2", "d2.c1.s2"} {
		for _, c := range []string{cpisuite.ClauseAgentDisk, cpisuite.ClauseSymlink, cpisuite.ClauseDataMoves} {
			if st := specState(r, row, c); st != suites.StatePassed {
				t.Errorf("row %s, clause %s: %q, want passed (the upstream agent's link)", row, c, st)
			}
		}
	}
	found := false
	for _, s := range r.Specs {
		if s.Row == "d1.c2.s2" && s.Clause == cpisuite.ClauseAgentDisk {
			found = true
			if s.State != suites.StateNotChecked || !strings.Contains(s.Reason, "uses scsi") {
				t.Errorf("row d1.c2.s2 (scsi) %s: %s %q; want not checked, saying the box does not host scsi", s.Clause, s.State, s.Reason)
			}
		}
	}
	if !found {
		t.Errorf("row d1.c2.s2 has no %s spec in the report", cpisuite.ClauseAgentDisk)
	}
}

// certify --agent real REJECTS a CPI whose hint names the other disk of
// the VM (fixtures/buggycpi hint-of-other-disk).
func TestCertifyAgentRealRejectsHintOfOtherDisk(t *testing.T) {
	realAgentOrSkip(t)
	dir := buildCPIs(t)
	link := filepath.Join(dir, "buggy-hint-of-other-disk")
	if err := os.Symlink(filepath.Join(dir, "buggy-cpi"), link); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	js := filepath.Join(t.TempDir(), "r.json")
	code, stdout, stderr := certify(t, dir, "--agent", "real", "--cpi", link, "--json-report", js,
		"--label-filter", "row:d2.c2.s2 || (row:cli.api2 && area:hints)")
	skipIfNoBox(t, stdout)
	if code != exitRejected {
		t.Fatalf("certify --agent real of hint-of-other-disk exited %d, want %d (rejected)\nstdout:\n%s\nstderr:\n%s", code, exitRejected, stdout, stderr)
	}
	if got := brokenClauses(readReport(t, js)); !slices.Contains(got, cpisuite.ClauseHintDevice) {
		t.Errorf("rejected for %v, want %s among them", got, cpisuite.ClauseHintDevice)
	}
}
