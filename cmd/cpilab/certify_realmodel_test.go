package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/fixtures/buggycpi"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/cpisuite"
	"github.com/cpilab/cpilab/testbed"
)

// realCloudFile writes a cloud file that runs command on the testbed as a
// real cloud: cpilab is not told of the testbed, so it has no oracle;
// withMbus names the testbed's mbus, for the agent checks.
func realCloudFile(t *testing.T, tb *testbed.Testbed, command string, withMbus bool) string {
	t.Helper()
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
timeouts: {call: 30s, agent: 20s}
`, command, cpiJSON, s2)
	if withMbus {
		yml += fmt.Sprintf("mbus_url: %q\n", tb.MbusURL())
	}
	f := filepath.Join(t.TempDir(), "cloud.yml")
	if err := os.WriteFile(f, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestCertifyRealCloudModel: on a cloud without an oracle (the testbed
// played as a real cloud), the contract's model still judges every call
// by what the CPI's own has_vm, has_disk and get_disks show. The
// reference CPI passes with its calls checked; model bugs those reads
// expose are rejected on their own clause, found by the random
// lifecycles; and --no-model-reads turns the reads off, saying so.
//
// The runs wait on one CPI process after another, so they run side by
// side, each on a testbed of its own; the bugs' runs check the verdict and
// the clause only, so they report the failing lifecycle as found
// (--no-shrink: shrinking reran it one CPI process after another, 126-240
// s of wall for one bug on the shared machine).
func TestCertifyRealCloudModel(t *testing.T) {
	dir := buildCPIs(t)
	filter := "row:" + cpisuite.ExploreRow + " || (row:director-current.api3 && (area:setup || area:disks || area:cleanup))"

	t.Run("reference", func(t *testing.T) {
		t.Parallel()
		tb := startTestbed(t)
		cfg := realCloudFile(t, tb, filepath.Join(dir, "fakeiaas-cpi"), false)
		js := filepath.Join(t.TempDir(), "r.json")
		code, stdout, stderr := certify(t, dir, "--config", cfg, "--label-filter", filter, "--json-report", js)
		if code != 0 {
			t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		if !strings.Contains(stdout, "the contract's model checks what the CPI's own has_vm, has_disk and get_disks show") {
			t.Errorf("the run does not say how the model sees this cloud:\n%s", stdout)
		}
		rep := readReport(t, js)
		explored := false
		for _, s := range rep.Specs {
			if s.Row == cpisuite.ExploreRow {
				explored = true
				if s.State != suites.StatePassed {
					t.Errorf("the explore row is %s on a cloud without an oracle, want passed (its view is the CPI's reads): %s", s.State, s.Reason)
				}
			}
		}
		if !explored {
			t.Errorf("no explore row ran:\n%s", stdout)
		}
		code, stdout, _ = certify(t, dir, "--config", cfg, "--label-filter", filter, "--no-model-reads")
		if code != 0 || !strings.Contains(stdout, "--no-model-reads: the contract's model is not checked") {
			t.Errorf("--no-model-reads: exit %d\n%s", code, stdout)
		}
	})

	for _, name := range []string{"detach-also-other-disk", "attach-replaces-attachment", "reboot-drops-disks", "detach-ignores-vm-argument"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tb := startTestbed(t)
			bug, ok := buggycpi.Lookup(name)
			if !ok {
				t.Fatalf("no bug %s in the catalog", name)
			}
			cfg := realCloudFile(t, tb, install(t, dir, bug), false)
			js := filepath.Join(t.TempDir(), "r.json")
			code, stdout, stderr := certify(t, dir, "--config", cfg, "--label-filter", filter, "--json-report", js, "--no-shrink")
			if code != 1 {
				t.Fatalf("exit %d, want 1 (rejected)\nstdout:\n%s\nstderr:\n%s", code, stdout, tail(stderr, 3000))
			}
			rep := readReport(t, js)
			if !slices.Contains(rep.FailedClauses(), bug.Clause) {
				t.Errorf("rejected without naming %s (%s): %v\n%s", bug.Clause, bug.Story, rep.FailedClauses(), stdout)
			}
		})
	}
}

// startTestbed starts a testbed of the test's own, closed when it ends.
func startTestbed(t *testing.T) *testbed.Testbed {
	t.Helper()
	tb, err := testbed.Start(testbed.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	return tb
}
