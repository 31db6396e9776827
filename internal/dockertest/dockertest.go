// Package dockertest gives tests a real Docker daemon: a private one started
// by scripts/dockerd.sh, or the one CPILAB_REAL_DOCKER_HOST names.
//
// scripts/dockerd.sh installs docker.io from the distribution's packages
// when it is missing and runs the daemon on its own socket, data root and
// bridge, so the tests never touch a daemon the machine already runs. Where
// none can start (no root, no cgroups, -short), Host skips the test and says
// why.
package dockertest

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/internal/checkout"
)

// Host returns the address (unix:///path) of a real Docker daemon for the
// test: CPILAB_REAL_DOCKER_HOST when set, otherwise a private daemon that
// scripts/dockerd.sh starts now and stops when the test ends. It skips the
// test, saying why, when neither can be had.
func Host(t testing.TB) string {
	t.Helper()
	if h := os.Getenv("CPILAB_REAL_DOCKER_HOST"); h != "" {
		if !strings.HasPrefix(h, "unix://") {
			t.Fatalf("CPILAB_REAL_DOCKER_HOST=%q: want unix:///path", h)
		}
		return h
	}
	if testing.Short() {
		t.Skip("-short: not starting a real Docker daemon (scripts/dockerd.sh)")
	}
	script, err := Script()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "cpilab-dockerd-") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if out, err := exec.Command(script, "stop", dir).CombinedOutput(); err != nil {
			t.Errorf("scripts/dockerd.sh stop: %v: %s", err, out)
		}
	})
	var stderr bytes.Buffer
	cmd := exec.Command(script, "start", dir)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Skipf("no real Docker daemon: scripts/dockerd.sh start failed (%v): %s", err, strings.TrimSpace(stderr.String()))
	}
	host := strings.TrimSpace(string(out))
	if !strings.HasPrefix(host, "unix://") {
		t.Fatalf("scripts/dockerd.sh start printed %q, want unix:///path", host)
	}
	return host
}

// Socket is Host without its unix:// scheme: the socket's path.
func Socket(t testing.TB) string {
	t.Helper()
	return strings.TrimPrefix(Host(t), "unix://")
}

// Script is the absolute path of scripts/dockerd.sh in the checkout
// (package checkout).
func Script() (string, error) {
	root, err := checkout.Root()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "scripts", "dockerd.sh"), nil
}
