package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// certifyCSI runs `cpilab certify-csi args…` in its own process (Ginkgo
// runs once per process) with an empty PATH: the driver is the bosh-csi
// built into cpilab.
func certifyCSI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"certify-csi"}, args...)...)
	cmd.Env = append(os.Environ(), "CPILAB_TEST_RUN_MAIN=1", "PATH="+t.TempDir())
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatalf("running certify-csi: %v\n%s", err, errb.String())
	}
	return 0, out.String(), errb.String()
}

// With no flags, certify-csi certifies bosh-csi on the embedded world:
// csi-sanity and every BOSH check pass, and the reports carry the clauses.
func TestCertifyCSIAcceptsBoshCSI(t *testing.T) {
	rep := t.TempDir()
	js, junit := filepath.Join(rep, "r.json"), filepath.Join(rep, "r.xml")
	code, out, errs := certifyCSI(t, "--json-report", js, "--junit-report", junit)
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
// by a default run naming its clause, with a command rerunning it alone.
func TestCertifyCSIRejectsADriverThatKeepsDisksAttached(t *testing.T) {
	code, out, errs := certifyCSI(t, "--catalog-driver", "unpublish-keeps-attached")
	if code != 1 || !strings.Contains(out, "REJECTED: ") {
		t.Fatalf("exit %d; want 1 and REJECTED:\n%s\n%s", code, out, errs)
	}
	verdict := out[strings.LastIndex(out, "REJECTED: "):]
	for _, want := range []string{"csi.unpublish.detached"} {
		if !strings.Contains(verdict, want) {
			t.Errorf("verdict %q does not name %s", verdict, want)
		}
	}
	if !strings.Contains(out, "cpilab certify-csi --catalog-driver unpublish-keeps-attached --focus ") {
		t.Errorf("no rerun command:\n%s", out)
	}
}

// Flags that cannot work together are usage errors (exit 2).
func TestCertifyCSIUsage(t *testing.T) {
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
