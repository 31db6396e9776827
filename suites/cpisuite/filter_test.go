package cpisuite_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/cpilab/cpilab/cpimodel"
	"github.com/cpilab/cpilab/fixtures/buggycpi"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/cpisuite"
)

// TestFilteredRunsCleanUp: a label filter or a focus that cuts a context
// (its teardown and leak specs filtered out, the last spec that runs
// making resources of its own) still tears the context down after that
// spec's own clean-up, reports no leak the filter caused, and leaves
// nothing in the fake cloud.
func TestFilteredRunsCleanUp(t *testing.T) {
	cpi := buildReferenceCPI(t)
	for _, c := range []struct{ name, labels, focus string }{
		// Cut in the middle: the last spec that runs creates a VM and disks.
		{name: "label on one method", labels: "method:get_disks"},
		// Only the setup spec: the teardown follows it at once.
		{name: "setup only", labels: "area:setup"},
		// A focus on one spec: the setup runs before it, unfiltered.
		{name: "focus inside a context", focus: `disk\.get-disks`},
		// Several specs of one area, the last one creating a snapshot.
		{name: "label on an area", labels: "method:snapshot_disk"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv("SUITES_CHILD_LABELS", c.labels)
			r, left := childReportLeft(t, cpi, "", c.focus)
			if fs := suites.Failures(r, nil); len(fs) != 0 {
				t.Fatalf("%d failures, want none (ACCEPTED): first on %q: %s: %s", len(fs), fs[0].Spec, fs[0].Violation.Clause, fs[0].Violation.Did)
			}
			passed := 0
			for _, sr := range r.SpecReports {
				if sr.LeafNodeType == types.NodeTypeIt && sr.State == types.SpecStatePassed {
					passed++
				}
			}
			if passed == 0 {
				t.Fatal("no spec ran and passed: the filter selects nothing")
			}
			if n := len(left.VMs) + len(left.Disks) + len(left.Stemcells) + len(left.Snapshots); n != 0 {
				t.Fatalf("the run left %d things in the fake cloud: %+v", n, left)
			}
		})
	}
}

// TestCleanupAsTheDirector: a CPI whose detach_disk answers success but
// leaves the disk attached to the context's shared VM is rejected for
// disk.detach alone: the spec's clean-up cannot delete the disk while the
// VM holds it, and, as the Director deletes disks after VMs, the teardown
// deletes it once the shared VM is gone. No cleanup.teardown or
// cleanup.no-leak failure, nothing left in the fake cloud.
func TestCleanupAsTheDirector(t *testing.T) {
	dir := t.TempDir()
	for _, pkg := range []string{"cmd/fakeiaas-cpi", "fixtures/buggycpi/cmd/buggy-cpi"} {
		if out, err := exec.Command("go", "build", "-o", dir, "github.com/cpilab/cpilab/"+pkg).CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
	bug, ok := buggycpi.Lookup("detach-noop")
	if !ok {
		t.Fatal("no detach-noop bug in the catalog")
	}
	cpi, err := bug.Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, left := childReportLeft(t, cpi, "", "")
	fs := suites.Failures(r, nil)
	if len(fs) == 0 {
		t.Fatal("the detach that does not detach was accepted")
	}
	for _, f := range fs {
		// The contract's model names the same bug from the call itself: a
		// detach_disk that succeeded and left the disk attached (an explore
		// failure names the call that broke in Method, its steps in the
		// report's sequence).
		byModel := f.Violation.Clause == cpimodel.ClauseEffect && (f.Violation.Method == "detach_disk" || strings.Contains(f.Violation.Did, "detach_disk"))
		if f.Violation.Clause != cpisuite.ClauseDetach && !byModel {
			t.Errorf("failure on %q names %s (%s); want only %s (or the model's %s on detach_disk)", f.Spec, f.Violation.Clause, f.Violation.Did, cpisuite.ClauseDetach, cpimodel.ClauseEffect)
		}
	}
	if n := len(left.VMs) + len(left.Disks) + len(left.Stemcells) + len(left.Snapshots); n != 0 {
		t.Fatalf("the run left %d things in the fake cloud: %+v", n, left)
	}
}
