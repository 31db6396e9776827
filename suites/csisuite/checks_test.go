package csisuite_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cpilab/cpilab/suites/csisuite"
	"github.com/cpilab/cpilab/suites/flex"
)

// startEnv starts the embedded world for a test.
func startEnv(t *testing.T, ctx context.Context) (*flex.Env, string) {
	t.Helper()
	dir, err := os.MkdirTemp("", "csi")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	env, err := flex.StartEnv(ctx, flex.EnvConfig{Dir: filepath.Join(dir, "w"), Nodes: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(env.Close)
	return env, dir
}

// Every BOSH check holds for bosh-csi, expansion included.
func TestChecksAcceptBoshCSI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, dir := startEnv(t, ctx)
	s, err := csisuite.NewSession(ctx, csisuite.Config{WorkDir: filepath.Join(dir, "s")}, env)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, o := range s.RunAll(ctx) {
		if !o.Passed() {
			t.Errorf("%s: violation %v, not checked %v, error %v", o.Clause, o.Violation, o.Skip, o.Err)
		} else {
			t.Logf("%s: passed (%s)", o.Clause, o.Duration.Round(time.Millisecond))
		}
	}
}
