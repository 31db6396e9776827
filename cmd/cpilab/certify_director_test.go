package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// certifyDirector runs `cpilab certify-director args…` in its own process
// (Ginkgo runs one suite per process) and returns its exit status and
// stdout.
func certifyDirector(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"certify-director"}, args...)...)
	cmd.Env = append(os.Environ(), "CPILAB_TEST_RUN_MAIN=1")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String()
	} else if err != nil {
		t.Fatalf("running certify-director: %v\n%s", err, errb.String())
	}
	return 0, out.String()
}

// With no --url, certify-director certifies an embedded reference director,
// and its disk-scoped user sees only the disk endpoints.
func TestCertifyDirectorAcceptsTheReferenceDirector(t *testing.T) {
	code, out := certifyDirector(t)
	if code != 0 || !strings.Contains(out, " passed, 0 failed") {
		t.Fatalf("exit %d; want 0 and no failure:\n%s", code, out)
	}
	for _, want := range []string{"embedded reference director (profile reference)", "Not checked (these are not passes)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// A director that cannot be reached fails the run, and says so: never an
// empty pass.
func TestCertifyDirectorFailsOnAnUnreachableDirector(t *testing.T) {
	code, out := certifyDirector(t, "--url", "https://127.0.0.1:1", "--insecure",
		"--admin-user", "a", "--admin-password", "a", "--disk-user", "d", "--disk-password", "d")
	if code == 0 {
		t.Fatalf("exit 0 against a director that is not there:\n%s", out)
	}
}
