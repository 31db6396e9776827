package flex

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cpilab/cpilab/flexvolume"
)

// buildDriver builds cmd/bosh-flexvolume into dir.
func buildDriver(t testing.TB, dir string) string {
	t.Helper()
	out := filepath.Join(dir, "bosh-disk")
	cmd := exec.Command("go", "build", "-o", out, "github.com/cpilab/cpilab/cmd/bosh-flexvolume")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

func startEnv(t testing.TB) *Env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := StartEnv(ctx, EnvConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env
}

func TestOwnDriverPassesEveryCheck(t *testing.T) {
	dir := t.TempDir()
	drv := buildDriver(t, dir)
	env := startEnv(t)
	s, err := NewSession(Config{Driver: drv, PluginName: "cpilab~bosh-disk", WorkDir: filepath.Join(dir, "work"), Log: os.Stderr}, env)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	passed := 0
	for _, o := range s.RunAll(ctx) {
		switch {
		case o.Violation != nil:
			t.Errorf("%s: %v", o.Clause, o.Violation)
		case o.Err != nil:
			t.Errorf("%s: harness: %v", o.Clause, o.Err)
		case o.Skip != nil:
			t.Logf("%s: %v", o.Clause, o.Skip)
		default:
			passed++
			t.Logf("%s: passed (%s)", o.Clause, o.Duration.Round(time.Millisecond))
		}
	}
	if passed != len(Checks()) {
		t.Errorf("%d checks passed, want every one (%d), expansion included", passed, len(Checks()))
	}
}

// TestDirectorDownIsPerSession: one session's Director-down fault is no
// other session's, so sessions can share an Env at the same time.
func TestDirectorDownIsPerSession(t *testing.T) {
	dir := t.TempDir()
	drv := buildDriver(t, dir)
	env := startEnv(t)
	ctx := context.Background()
	var ss [2]*Session
	for i := range ss {
		s, err := NewSession(Config{Driver: drv, PluginName: "cpilab~bosh-disk", WorkDir: filepath.Join(dir, "work", strconv.Itoa(i)),
			Tag: "down" + strconv.Itoa(i), SharedEnv: true}, env)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Prepare(ctx); err != nil {
			t.Fatal(err)
		}
		ss[i] = s
	}
	ss[0].SetDirectorDown(true)
	down, err := ss[0].call(ctx, ss[0].ctrl, flexvolume.CmdAttach, ss[0].options(ss[0].volume(), nil), ss[0].node(0).Name)
	if err != nil || down.Result.Status != flexvolume.StatusFailure {
		t.Fatalf("attach through the closed gate: %+v, %v; want Failure", down.Result, err)
	}
	vol := ss[1].volume()
	up, err := ss[1].must(ctx, ClauseAttachDevice, ss[1].ctrl, flexvolume.CmdAttach, ss[1].options(vol, nil), ss[1].node(0).Name)
	if err != nil {
		t.Fatalf("attach through the other session's open gate: %v", err)
	}
	if _, err := ss[1].oracleOn(ClauseAttachDevice, &up, up.Result.Device, 0); err != nil {
		t.Fatal(err)
	}
	// The down session's clean-up leaves the other session's disk alone.
	ss[0].SetDirectorDown(false)
	if err := ss[0].Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := ss[1].attachedCount(ctx); err != nil || n != 1 {
		t.Fatalf("after the other session's clean-up, %d of this session's disks attached (%v), want 1", n, err)
	}
	if err := ss[1].Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := ss[1].attachedCount(ctx); err != nil || n != 0 {
		t.Fatalf("after its own clean-up, %d of this session's disks attached (%v), want 0", n, err)
	}
}
