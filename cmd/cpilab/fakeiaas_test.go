package main

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/datadir"
	"github.com/cpilab/cpilab/fakeiaas"
)

func TestFaultsCommandRoundTrip(t *testing.T) {
	srv, err := fakeiaas.Serve(fakeiaas.ServeConfig{DataDir: t.TempDir(), Store: "memory"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx := context.Background()
	cli := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"fakeiaas", "faults"}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	rule := "id=r1 op=attach_disk nth=2 effect=error type=DiskNotFound ok_to_retry=true"
	if code, out, errs := cli("add", "--url", srv.URL(), rule); code != 0 || !strings.Contains(out, "id=r1 op=attach_disk") {
		t.Fatalf("add: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	if code, _, errs := cli("add", "--url", srv.URL(), "op=bogus effect=error"); code != exitUsage || !strings.Contains(errs, `unknown op "bogus"`) {
		t.Fatalf("a bad rule: exit %d, stderr %q; want 2 (a usage error) naming the unknown op", code, errs)
	}
	code, out, _ := cli("list", "--url", srv.URL())
	if code != 0 || !strings.Contains(out, "Bosh::Clouds::DiskNotFound") || strings.Contains(out, "bogus") {
		t.Fatalf("list: exit %d, %q", code, out)
	}
	if code, _, errs := cli("rm", "--url", srv.URL(), "r1"); code != 0 {
		t.Fatalf("rm: exit %d, %q", code, errs)
	}
	if _, out, _ := cli("list", "--url", srv.URL()); !strings.Contains(out, "no fault rules") {
		t.Fatalf("after rm, list says %q", out)
	}
	if code, _, errs := cli("list"); code != exitUsage || !strings.Contains(errs, "--url is required") {
		t.Fatalf("no --url: exit %d, %q", code, errs)
	}
}

func TestFakeIaaSRefusesALockedDataDir(t *testing.T) {
	dir := t.TempDir()
	l, err := datadir.Acquire(dir, "cpilab fakeiaas")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	var out, errb bytes.Buffer
	code := run(context.Background(), []string{"fakeiaas", "--data-dir", dir, "--no-agents"}, &out, &errb)
	want := "data dir " + dir + " is in use by pid " + strconv.Itoa(os.Getpid()) + " (cpilab fakeiaas)"
	if code != exitUsage || !strings.Contains(errb.String(), want) {
		t.Fatalf("exit %d, stderr %q; want %d (a harness error) and %q", code, errb.String(), exitUsage, want)
	}
}

func TestFakeIaaSServesTheDockerFace(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "docker.sock")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"fakeiaas", "--data-dir", filepath.Join(dir, "data"), "--memory", "--no-agents", "--docker-socket", sock}, &out, &errb)
	}()
	client := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := client.Get("http://docker/v1.44/_ping")
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK || string(body) != "OK" {
				t.Fatalf("ping: %s %q", resp.Status, body)
			}
			break
		}
		select {
		case code := <-done:
			t.Fatalf("cpilab fakeiaas exited %d before serving: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Docker face on %s: %v; stderr %s", sock, err, errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "  docker: unix://"+sock+" ") {
		t.Errorf("stdout does not name the socket: %q", out.String())
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("the socket is left behind: %v", err)
	}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A non-loopback --listen is refused before anything is made: no data dir
// is left behind (found by the adversarial campaign).
func TestFakeIaaSRefusesNonLoopbackBeforeCreatingItsDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "new")
	code, _, errb := runArgs("fakeiaas", "--listen", "0.0.0.0:0", "--data-dir", dir)
	if code != exitUsage || !strings.Contains(errb, "loopback") {
		t.Fatalf("exit %d, stderr %q; want 2 and a message about loopback", code, errb)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the refused start left %s: %v", dir, err)
	}
}

// fakeiaas --memory without --data-dir leaves nothing in the user's cache
// (no lock, no SSH key, no state): its files live in a directory of its
// own, gone at exit.
func TestFakeIaaSMemoryLeavesNoCache(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("HOME", cache)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	ctx, cancel := context.WithCancel(context.Background())
	var out, errb lockedBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"fakeiaas", "--memory", "--no-agents"}, &out, &errb) }()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(out.String(), "fakeiaas listening on") {
		select {
		case code := <-done:
			t.Fatalf("cpilab fakeiaas --memory exited %d: %s", code, errb.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("cpilab fakeiaas --memory did not start: %s", errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if code := <-done; code != 0 {
		t.Errorf("exit %d: %s", code, errb.String())
	}
	for _, d := range []string{cache, tmp} {
		if left, _ := os.ReadDir(d); len(left) != 0 {
			t.Errorf("fakeiaas --memory left %d entries in %s (%s)", len(left), d, left[0].Name())
		}
	}
}
