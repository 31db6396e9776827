package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/suites/csisuite"
	"github.com/cpilab/cpilab/suites/flex"
)

// certifyCSI runs `cpilab certify-csi args…` in its own process (Ginkgo
// runs once per process) with only path on PATH (empty: an empty
// directory, so the driver is the bosh-csi built into cpilab).
func certifyCSI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	return certifyCSIWithPath(t, t.TempDir(), args...)
}

func certifyCSIWithPath(t *testing.T, path string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"certify-csi"}, args...)...)
	cmd.Env = append(os.Environ(), "CPILAB_TEST_RUN_MAIN=1", "PATH="+path)
	return runCmd(t, cmd)
}

// With no flags, certify-csi certifies the bosh-csi executable it finds
// on PATH (started as processes, with configs it writes) on the embedded
// world: csi-sanity and every BOSH check pass, and the reports carry the
// clauses.
func TestCertifyCSIAcceptsBoshCSI(t *testing.T) {
	t.Parallel() // its own processes, worlds and temporary directories
	bin := t.TempDir()
	if out, err := exec.Command("go", "build", "-o", filepath.Join(bin, "bosh-csi"), "github.com/cpilab/cpilab/cmd/bosh-csi").CombinedOutput(); err != nil {
		t.Fatalf("go build bosh-csi: %v\n%s", err, out)
	}
	rep := t.TempDir()
	js, junit := filepath.Join(rep, "r.json"), filepath.Join(rep, "r.xml")
	code, out, errs := certifyCSIWithPath(t, bin, "--json-report", js, "--junit-report", junit)
	if !strings.Contains(out, "certifying CSI driver "+filepath.Join(bin, "bosh-csi")) {
		t.Errorf("the driver certified is not the executable on PATH:\n%s", out)
	}
	if code != 0 || !strings.Contains(out, "ACCEPTED: ") {
		t.Fatalf("exit %d; want 0 and ACCEPTED:\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"✔ csi.sanity: Node Service should work", "✔ csi.publish.node:", "✔ csi.fault.director-down:", "✔ csi.token.disk-scopes:", "✔ csi.expand:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for p, want := range map[string]string{js: `"clause": "csi.sanity"`, junit: "csi.data.moves"} {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte(want)) {
			t.Errorf("report %s: %v, or it lacks %q", filepath.Base(p), err, want)
		}
	}
}

// A catalog driver whose unpublish leaves the disk attached is rejected
// by a default run naming its clause, with a command rerunning it alone;
// that command, pasted into a shell in another directory, fails the same
// way.
func TestCertifyCSIRejectsADriverThatKeepsDisksAttached(t *testing.T) {
	t.Parallel() // its own processes, worlds and temporary directories
	path := t.TempDir()
	code, out, errs := certifyCSIWithPath(t, path, "--catalog-driver", "unpublish-keeps-attached")
	if code != 1 || !strings.HasPrefix(lastLine(out), "REJECTED: ") || !strings.Contains(out, "broke: csi.unpublish.detached") {
		t.Fatalf("exit %d; want 1, REJECTED and the clause broken:\n%s\n%s", code, out, errs)
	}
	var rerun string
	for _, p := range printedReruns(out) {
		if strings.Contains(p, `csi\.unpublish\.detached`) {
			rerun = p
		}
	}
	if !strings.HasPrefix(rerun, shellWord(os.Args[0])+" certify-csi --catalog-driver unpublish-keeps-attached --focus ") {
		t.Fatalf("rerun command %q of csi.unpublish.detached: want this cpilab with the run's flags:\n%s", rerun, out)
	}
	sh := exec.Command("sh", "-c", rerun)
	sh.Dir = t.TempDir()
	sh.Env = append(os.Environ(), "CPILAB_TEST_RUN_MAIN=1", "PATH="+path+":"+os.Getenv("PATH"))
	code, again, errs := runCmd(t, sh)
	if code != 1 || !strings.Contains(again, "broke: csi.unpublish.detached") || !strings.Contains(again, "(PARTIAL: a filter selected") {
		t.Fatalf("%s: exit %d, want 1, the same clause broken and PARTIAL:\n%s\n%s", rerun, code, again, errs)
	}
}

// Flags that cannot work together are usage errors (exit 2); --list
// --json with a label filter and --skip lists the BOSH checks selected,
// without starting anything.
func TestCertifyCSIUsage(t *testing.T) {
	code, out, errs := certifyCSI(t, "--list", "--json", "--label-filter", "!area:sanity", "--skip", `csi\.expand`)
	var list struct {
		Specs []struct{ Clause string }
		Count int
	}
	if err := json.Unmarshal([]byte(out), &list); code != 0 || err != nil || list.Count == 0 || list.Count != len(list.Specs) {
		t.Fatalf("--list --json --label-filter --skip: exit %d, %v:\n%s\n%s", code, err, out, errs)
	}
	for _, s := range list.Specs {
		if !strings.HasPrefix(s.Clause, "csi.") || s.Clause == csisuite.ClauseSanity || s.Clause == csisuite.ClauseExpand {
			t.Errorf("listed clause %q: want the BOSH checks but csi.expand", s.Clause)
		}
	}
	for _, args := range [][]string{
		{"--endpoint", "unix:///nowhere.sock", "--backend", "bosh"},
		{"--node-endpoint", "unix:///nowhere.sock"},
		{"--backend", "nfs"},
		{"--catalog-driver", "no-such-driver"},
	} {
		if code, out, errs := certifyCSI(t, args...); code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s\n%s", args, code, out, errs)
		}
	}
}

// --endpoint certifies a driver already running (here bosh-csi on an
// embedded world this test starts, its node plugin on node-0's VM root):
// csi-sanity passes, the BOSH checks are reported as not checked.
func TestCertifyCSIEndpointRunsSanityOnly(t *testing.T) {
	t.Parallel() // its own processes, worlds and temporary directories
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "csie")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	env, err := flex.StartEnv(ctx, flex.EnvConfig{Dir: filepath.Join(dir, "w"), Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	drv, err := csisuite.StartDriver(ctx, env, csisuite.Launch{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	code, out, errs := certifyCSI(t, "--endpoint", drv.Controller, "--node-endpoint", drv.Nodes[0], "--node-root", env.Nodes[0].Root,
		"--params", "diskPool="+env.DiskPool)
	if code != 0 || !strings.Contains(out, "ACCEPTED: ") {
		t.Fatalf("exit %d; want 0 and ACCEPTED:\n%s\n%s", code, out, errs)
	}
	if !strings.Contains(out, "✔ csi.sanity: Node Service should work") || !strings.Contains(out, "– csi.publish.node:") {
		t.Errorf("want csi-sanity passed and the BOSH checks not checked:\n%s", out)
	}
}

// --endpoint --world: a driver someone else started on an embedded world
// (here bosh-csi on a world this test starts and describes in a world
// file) gets csi-sanity and the BOSH checks; the Director outage check is
// not made, as certify-csi cannot cut a Director the driver reaches
// directly.
func TestCertifyCSIEndpointWithWorldMakesTheBOSHChecks(t *testing.T) {
	t.Parallel() // its own processes, worlds and temporary directories
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "csiw")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	env, err := flex.StartEnv(ctx, flex.EnvConfig{Dir: filepath.Join(dir, "w"), Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	world := filepath.Join(dir, "world.json")
	if err := csisuite.WriteWorld(world, env); err != nil {
		t.Fatal(err)
	}
	drv, err := csisuite.StartDriver(ctx, env, csisuite.Launch{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer drv.Close()
	code, out, errs := certifyCSI(t, "--endpoint", drv.Controller, "--node-endpoint", strings.Join(drv.Nodes, ","), "--world", world)
	if code != 0 || !strings.Contains(out, "ACCEPTED: ") {
		t.Fatalf("exit %d; want 0 and ACCEPTED:\n%s\n%s", code, out, errs)
	}
	for _, want := range []string{"✔ csi.sanity: Node Service should work", "✔ csi.publish.node:", "✔ csi.data.moves:", "✔ csi.token.disk-scopes:", "– csi.fault.director-down:"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
