package flex

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
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
	if passed < len(Checks())-1 {
		t.Errorf("%d checks passed, want all but expansion (%d)", passed, len(Checks())-1)
	}
}
