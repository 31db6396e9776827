package cpisuite_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/cpisuite"
	"github.com/cpilab/cpilab/testbed"
	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
)

// TestReferenceCPI certifies the reference CPI (cmd/fakeiaas-cpi) on an
// embedded testbed: every contract spec and every reference-table row must
// pass or say why it was not checked. It also checks that each spec's
// method labels are the methods it really called, and that each spec
// carries its clause, methods and calls as report entries.
func TestReferenceCPI(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "fakeiaas-cpi")
	build := exec.Command("go", "build", "-o", bin, "github.com/cpilab/cpilab/cmd/fakeiaas-cpi")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		t.Fatalf("building the reference CPI: %v", err)
	}
	tb, err := testbed.Start(testbed.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer tb.Close()
	cfg, err := tb.SuiteConfig([]string{bin})
	if err != nil {
		t.Fatal(err)
	}
	cfg.CPI.HonoursAPIVersionCap = true
	// The id hint ({"id": disk cid, "path": "/dev/sdX"}) makes the agent's
	// virtio resolver go through /dev/disk/by-id; `cpilab certify` uses the
	// default path hint, so make test covers both.
	cfg.Env.VMCloudProperties = cpiv2.MustCloudProps(map[string]string{"disk_hint": "id"})
	cpisuite.Test(t, cfg)
	finished.Lock()
	defer finished.Unlock()
	if len(finished.specs) == 0 {
		t.Fatal("no spec report reached the check")
	}
	for _, sr := range finished.specs {
		if msg := labelsMatchCalls(sr); msg != "" {
			t.Error(msg)
		}
	}
}

var finished struct {
	sync.Mutex
	specs []types.SpecReport
}

var _ = ReportAfterEach(func(sr types.SpecReport) {
	if sr.LeafNodeType != types.NodeTypeIt || !sr.State.Is(types.SpecStatePassed) {
		return
	}
	finished.Lock()
	defer finished.Unlock()
	finished.specs = append(finished.specs, sr)
})

// labelsMatchCalls compares a passed spec's "method:" labels with the
// methods it recorded calling, and checks its clause entry.
func labelsMatchCalls(sr types.SpecReport) string {
	var declared []string
	for _, l := range sr.Labels() {
		if m, ok := strings.CutPrefix(l, "method:"); ok && !slices.Contains(declared, m) {
			declared = append(declared, m)
		}
	}
	slices.Sort(declared)
	var called []string
	var clause string
	var calls []suites.CallRecord
	seen := map[string]bool{}
	for _, e := range sr.ReportEntries {
		seen[e.Name] = true
		switch e.Name {
		case suites.EntryMethods:
			_ = suites.DecodeEntry(e, &called)
		case suites.EntryClause:
			_ = suites.DecodeEntry(e, &clause)
		case suites.EntryCalls:
			_ = suites.DecodeEntry(e, &calls)
		}
	}
	switch {
	case !seen[suites.EntryMethods] || !seen[suites.EntryClause] || !seen[suites.EntryCalls]:
		return fmt.Sprintf("%s: missing report entries (have %v)", sr.FullText(), seen)
	case clause == "" || !strings.HasPrefix(sr.LeafNodeText, clause+":"):
		return fmt.Sprintf("%s: clause entry %q does not match the spec", sr.FullText(), clause)
	case !slices.Equal(declared, called):
		return fmt.Sprintf("%s: labelled with methods %v, called %v", sr.FullText(), declared, called)
	}
	for _, c := range calls {
		if c.Start.IsZero() || c.End.Before(c.Start) || c.Request == "" {
			return fmt.Sprintf("%s: call record without times or request: %+v", sr.FullText(), c)
		}
	}
	return ""
}
