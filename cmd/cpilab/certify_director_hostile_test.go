package main

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// A hostile director (or a proxy in front of one) answering every endpoint
// with a body that never ends: certify-director stops at its read cap with
// an error naming the endpoint and the cap, exits 2 (no verdict), and its
// peak RSS stays under 100 MB.
func TestCertifyDirectorHostileEndlessAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		chunk := bytes.Repeat([]byte(`{"a":[`), 8<<10)
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name     string
		args     []string
		endpoint string
	}{
		{"login", []string{"--admin-user", "a", "--admin-password", "a", "--disk-user", "d", "--disk-password", "d"}, "POST /oauth/token"},
		{"tokens", []string{"--admin-token", "a", "--disk-token", "d", "--deployment", "dep"}, "GET /deployments/dep/instances"},
		{"own deployment", []string{"--admin-token", "a", "--disk-token", "d", "--stemcell", "/s.tgz"}, "/stemcells"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], append([]string{"certify-director", "--url", srv.URL, "--disk-pool", "p"}, tc.args...)...)
			cmd.Env = append(os.Environ(), "CPILAB_TEST_RUN_MAIN=1")
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			err := cmd.Run()
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != 2 {
				t.Fatalf("%v; want exit 2\nstdout:\n%s\nstderr:\n%s", err, out.String(), errb.String())
			}
			msg := errb.String()
			if !strings.Contains(msg, tc.endpoint) || !strings.Contains(msg, "MiB cap") {
				t.Fatalf("stderr does not name the endpoint %q and the cap:\n%s", tc.endpoint, msg)
			}
			ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage)
			if !ok {
				t.Fatal("no rusage on this platform")
			}
			if mb := ru.Maxrss / 1024; mb >= 100 { // Linux: kilobytes
				t.Fatalf("certify-director peaked at %d MB RSS against endless answers (bound 100 MB)", mb)
			} else {
				t.Logf("peak RSS %d MB; stderr: %s", mb, msg)
			}
			if out.Len() > 64<<10 {
				t.Fatalf("certify-director echoed %d bytes of the hostile answers to stdout", out.Len())
			}
		})
	}
}
