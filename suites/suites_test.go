package suites_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/testbed"
)

// TestReferenceCPI certifies the reference CPI (cmd/fakeiaas-cpi) on an
// embedded testbed: every contract spec and every reference-table row must
// pass or say why it was not checked.
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
	suites.Test(t, cfg)
}
