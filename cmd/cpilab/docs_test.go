package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/suites/cpisuite"
)

// docs/cloud.yml is a real, loadable example that sets every field.
func TestCloudYMLExampleLoads(t *testing.T) {
	rc, err := cpisuite.LoadCloudFile(filepath.Join("..", "..", "docs", "cloud.yml"))
	if err != nil {
		t.Fatalf("docs/cloud.yml: %v", err)
	}
	if rc.CPI.Config == "" || len(rc.Stemcells) == 0 || rc.VMCloudProperties == nil || rc.DiskCloudProperties == nil ||
		rc.Networks == nil || rc.DiskSizeMiB == 0 || rc.MbusURL == "" || rc.SSH == nil || rc.SSH.KnownHostsFile == "" ||
		rc.Timeouts.Call == 0 || rc.Timeouts.Agent == 0 {
		t.Errorf("docs/cloud.yml leaves a field out: %+v", rc)
	}
}

// docs/cli.md documents every command, every flag of certify, and the exit
// statuses; the README points at it.
func TestCLIDocsCoverTheFlags(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "cli.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, c := range allCommands {
		if !strings.Contains(doc, "cpilab "+c) {
			t.Errorf("docs/cli.md does not mention cpilab %s", c)
		}
	}
	fs := flagSetOf("certify")
	for _, name := range []string{"cpi", "config", "label-filter", "focus", "skip", "fail-fast", "list", "strict",
		"junit-report", "json-report", "html-report", "call-timeout", "quiet", "no-color", "version"} {
		if fs.Lookup(name) == nil {
			t.Errorf("certify has no --%s", name)
		}
		if !strings.Contains(doc, "--"+name) {
			t.Errorf("docs/cli.md does not document --%s", name)
		}
	}
	for _, want := range []string{"NO_COLOR", "BOSH_ENVIRONMENT", "BOSH_CLIENT_SECRET", "BOSH_CA_CERT", "--ginkgo.", "| 2 |", "completion bash"} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/cli.md lacks %q", want)
		}
	}
}
