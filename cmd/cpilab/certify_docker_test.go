package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/fakeiaas/dockerapi"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/cpisuite"
)

// dockerCPIEnv names the BOSH Docker CPI binary the --cloud docker tests
// certify; they skip, saying why, without it.
const dockerCPIEnv = "CPILAB_DOCKER_CPI"

func dockerCPIPath(t *testing.T) string {
	t.Helper()
	p := os.Getenv(dockerCPIEnv)
	if p == "" {
		t.Skipf("the BOSH Docker CPI binary is not given (set %s=PATH, or run make interop CPI=PATH; docs/docker.md says how to build it)", dockerCPIEnv)
	}
	abs, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(abs); err != nil {
		t.Fatalf("%s=%s: %v", dockerCPIEnv, p, err)
	}
	return abs
}

// dockerDeviations are the clauses the upstream BOSH Docker CPI
// (cloudfoundry/bosh-docker-cpi-release @6de0dab7, src/bosh-docker-cpi)
// really breaks on the Docker face, each with the source line that breaks
// it; docs/docker.md explains each. A certify --cloud docker run must fail
// exactly these.
var dockerDeviations = map[string]string{
	"disk.get-disks":                 "cpi/get_disks.go:18 returns nil, nil",
	"snapshot.create-delete":         "cpi/snapshots.go:14 returns an empty snapshot CID and no error",
	"errors.delete-snapshot-missing": "cpi/snapshots.go:14: no snapshot to delete",
	"disk.resize":                    "cpi/disks.go:18 ResizeDisk returns nil and does nothing",
	"disk.create-as-asked":           "disk/factory.go:48 creates the volume with no size",
	"wire.parallel":                  "disk/factory.go:48: every disk has the volume's size, whatever was asked",
	"errors.vm-metadata-missing":     "cpi/set_vm_metadata.go:14: succeeds for a VM that does not exist",
	"vm.reboot":                      "cpi/reboot_vm.go:13 returns nil and restarts nothing",
	"vm.create-retry":                "cpi/create_vm.go:42 wraps every failure into a CloudError, never VMCreationFailed",
	"cleanup.no-leak":                "vm/factory.go:184 returns a failed ContainerCreate without removing the ephemeral volume it made",
	"disk.attach-idempotent":         "vm/container.go:306 binds an attached disk a second time; the recreate fails after vm/container.go:249 removed the container",
	"cleanup.teardown":               "vm/container.go:195 answers detach_disk on a VM that is gone with a plain CloudError, not VMNotFound",
}

// brokenClauses are the clause ids a run names: each failed spec's own and
// each of its violations' (a spec may break another clause on the way,
// e.g. its clean-up).
func brokenClauses(r *suites.CertifyReport) []string {
	set := map[string]bool{}
	for _, c := range r.FailedClauses() {
		set[c] = true
	}
	for _, s := range r.Specs {
		if s.State == suites.StateFailed {
			set[s.Clause] = true
		}
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// specState is the state of the spec with clause in row ("" when none ran).
func specState(r *suites.CertifyReport, row, clause string) string {
	for _, s := range r.Specs {
		if s.Row == row && s.Clause == clause {
			return s.State
		}
	}
	return ""
}

// TestCertifyDockerCPI is the acceptance run: the upstream Docker CPI,
// the whole suite, on the Docker face with the oracle. It is rejected for
// exactly the documented deviations, and what the CPI does right passes:
// its agents boot from the file it writes, come back after every attach,
// resolve the directory disk, link it, and the data moves between VMs.
func TestCertifyDockerCPI(t *testing.T) {
	cpi := dockerCPIPath(t)
	dir := buildCPIs(t)
	js := filepath.Join(t.TempDir(), "r.json")
	code, stdout, stderr := certify(t, dir, "--cpi", cpi, "--cloud", "docker", "--json-report", js)
	if code != exitRejected {
		t.Fatalf("certify --cloud docker exited %d, want %d (rejected for the documented deviations)\nstdout:\n%s\nstderr:\n%s", code, exitRejected, stdout, stderr)
	}
	r := readReport(t, js)
	var want []string
	for c := range dockerDeviations {
		want = append(want, c)
	}
	sort.Strings(want)
	if got := brokenClauses(r); !slices.Equal(got, want) {
		for _, c := range got {
			if _, ok := dockerDeviations[c]; !ok {
				t.Errorf("clause %s failed and is no documented deviation of the Docker CPI: a bug in cpilab, or a new finding to document", c)
			}
		}
		for _, c := range want {
			if !slices.Contains(got, c) {
				t.Errorf("documented deviation %s (upstream %s) did not show: has upstream fixed it?", c, dockerDeviations[c])
			}
		}
	}
	for _, row := range []string{"current.c2.s2", "d2.c2.s2", "cli.c2.s2"} {
		for _, c := range []string{cpisuite.ClauseAgentPing, cpisuite.ClauseAgentDisk, cpisuite.ClauseSymlink, cpisuite.ClauseDataMoves} {
			if st := specState(r, row, c); st != "passed" {
				t.Errorf("row %s, clause %s: %q, want passed", row, c, st)
			}
		}
	}
	if !strings.Contains(stdout, "Docker Engine API face at unix://") {
		t.Errorf("the run does not say it used the Docker face:\n%s", stdout)
	}
}

// TestCertifyDockerBrokenFace: the same CPI on a face that does not bind
// volumes into a recreated container (dockerapi.DefectUnboundOnRecreate,
// the Docker CPI's attach) is rejected for the attach itself: the oracle
// sees no attachment and the agent finds no disk.
func TestCertifyDockerBrokenFace(t *testing.T) {
	cpi := dockerCPIPath(t)
	dir := buildCPIs(t)
	js := filepath.Join(t.TempDir(), "r.json")
	cmd := certifyCmd(t, dir, t.TempDir(), "--cpi", cpi, "--cloud", "docker", "--json-report", js,
		"--label-filter", "row:director-current.api3 || row:current.c2.s2")
	cmd.Env = append(cmd.Env, dockerDefectEnv+"="+string(dockerapi.DefectUnboundOnRecreate))
	code, stdout, stderr := runCmd(t, cmd)
	if code != exitRejected {
		t.Fatalf("certify on a broken face exited %d, want %d\nstdout:\n%s\nstderr:\n%s", code, exitRejected, stdout, stderr)
	}
	r := readReport(t, js)
	for _, c := range []string{cpisuite.ClauseHintDevice, cpisuite.ClauseAgentDisk} {
		if !slices.Contains(brokenClauses(r), c) {
			t.Errorf("the broken face passed clause %s; failed: %v", c, brokenClauses(r))
		}
	}
	if st := specState(r, "current.c2.s2", cpisuite.ClauseAgentDisk); st != "failed" {
		t.Errorf("row current.c2.s2 %s: %q, want failed", cpisuite.ClauseAgentDisk, st)
	}
}

// --cloud takes fakeiaas or docker; anything else, or docker where it
// cannot work, is a usage error naming the choices.
func TestCertifyCloudFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  string
		want string
	}{
		{args: []string{"--cloud", "aws"}, want: `--cloud "aws": want one of fakeiaas, docker`},
		{args: []string{"--cloud", "docker", "--config", "cloud.yml"}, want: "--cloud docker and --config exclude each other"},
		{args: []string{"--cloud", "docker"}, want: "--cloud docker needs --cpi PATH"},
		{args: []string{"--cloud", "docker", "--cpi", "/bin/true"}, env: "sideways", want: dockerDefectEnv + `="sideways"`},
		{args: []string{"--docker-host", "unix:///x.sock"}, want: "--docker-host and --docker-api-version need --cloud docker"},
		{args: []string{"--cloud", "docker", "--cpi", "/bin/true", "--docker-host", "tcp://127.0.0.1:2375"}, want: `--docker-host "tcp://127.0.0.1:2375": want unix:///PATH`},
		{args: []string{"--cloud", "docker", "--cpi", "/bin/true", "--docker-api-version", "latest"}, want: `--docker-api-version "latest": want MAJOR.MINOR`},
	} {
		t.Setenv(dockerDefectEnv, tc.env)
		var out, errb bytes.Buffer
		code := run(context.Background(), append([]string{"certify"}, tc.args...), &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("certify %q: exit %d, want 2 and %q on stderr; stderr:\n%s", tc.args, code, tc.want, errb.String())
		}
	}
	f := certifyFlags{cloud: cloudDocker, cpi: "/x/cpi", set: map[string]bool{}}
	if cmd := rerunCommand(f, "cpilab")("x"); !strings.Contains(cmd, "--cloud docker") {
		t.Errorf("the rerun command drops --cloud docker: %s", cmd)
	}
}
