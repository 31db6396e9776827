package fakeiaas_test

import (
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/datadir"
	"github.com/cpilab/cpilab/fakeiaas"
)

// TestSecondProcessOnDataDirRefused: a durable fakeiaas serving a data dir
// keeps every other fakeiaas off it, in another process or this one, with
// an error naming the dir and the serving process; kill -9 frees the dir.
func TestSecondProcessOnDataDirRefused(t *testing.T) {
	if testing.Short() {
		t.Skip("starts server processes")
	}
	dir := t.TempDir()
	p := startServerProc(t, dir)
	pid := p.cmd.Process.Pid

	_, err := fakeiaas.New(fakeiaas.Config{DataDir: dir})
	var le *datadir.LockedError
	if !errors.Is(err, datadir.ErrLocked) || !errors.As(err, &le) || le.PID != pid || le.Dir != dir {
		t.Fatalf("New on a served dir = %v, want a *datadir.LockedError naming %s and pid %d", err, dir, pid)
	}

	// A second server process fails to start and says why.
	second := exec.Command(os.Args[0], "-test.run=^$")
	second.Env = append(os.Environ(), "FAKEIAAS_TEST_HELPER=server", "FAKEIAAS_TEST_DIR="+dir)
	out, err := second.CombinedOutput()
	if err == nil {
		t.Fatalf("second server process on %s started: %s", dir, out)
	}
	if !strings.Contains(string(out), "data dir "+dir+" is in use by pid "+strconv.Itoa(pid)) {
		t.Errorf("second server process said %q; want the dir and pid %d", out, pid)
	}

	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = p.cmd.Wait()
	c, err := fakeiaas.New(fakeiaas.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("New after kill -9 of the server: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Close released it.
	c, err = fakeiaas.New(fakeiaas.Config{DataDir: dir})
	if err != nil {
		t.Fatalf("New after Close: %v", err)
	}
	c.Close()
}
