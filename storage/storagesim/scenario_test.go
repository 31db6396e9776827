package storagesim

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/simulator/scenario"
	"github.com/cpilab/cpilab/storage"
)

func TestScenarioRoundTrip(t *testing.T) {
	for _, seed := range []uint64{1, 2, 3, 11, 16} {
		cfg := Generate(seed)
		cfg.Duration = 72 * 3600e9
		cfg.Profile = storage.Fork
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := WriteScenario(&buf, "round trip", cfg, res); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "s.txt")
		if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		rep, err := scenario.Run(path, Registry(), &State{}, scenario.Options{})
		if err != nil {
			t.Fatalf("seed %d: %v\n%s", seed, err, buf.String())
		}
		if len(rep.Mismatches) > 0 {
			t.Fatalf("seed %d: the written scenario replays differently: %s", seed, rep.Mismatches[0])
		}
	}
}

func TestShrinkKeepsTheViolation(t *testing.T) {
	cfg := Generate(11)
	cfg.Profile = storage.Profile{BudgetReset: true}
	res, _ := Run(cfg)
	if !res.Failed() {
		t.Skip("seed 11 no longer fails under budget-reset; pick another in TestForkKnobsAreFound's log")
	}
	small, sres, err := Shrink(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !sres.Failed() || sres.Violations[0].Invariant != res.Violations[0].Invariant {
		t.Fatalf("shrunk run: %v, want %s", sres.Violations, res.Violations[0].Invariant)
	}
	if small.Duration >= 28*24*time.Hour || len(small.Faults) > len(cfg.Faults) {
		t.Fatalf("not smaller: %s/%d faults from 4 weeks/%d", small.Duration, len(small.Faults), len(cfg.Faults))
	}
}

func TestBadScenarioLinesAreRefused(t *testing.T) {
	for _, body := range []string{
		"storage profile=fork:nope seed=1 duration=1h tick=1m\n----\nok\n",
		"storage profile=reference seed=1 duration=1h tick=1m\npolicy request=x limit=2\n----\nok\n",
		"storage profile=reference seed=1 duration=1h tick=1m\nworkload kind=flood rate=1\n----\nok\n",
		"storage profile=reference seed=1 duration=1h tick=1m\nfault kind=meteor at=1h for=1h\n----\nok\n",
		"storage profile=reference seed=1 duration=1h tick=1m\nworkload kind=steady rate=NaN\n----\nok\n",
		"storage profile=reference seed=1 duration=1h tick=1m\npolicy request=100 limit=50 buffer=20\n----\nok\n",
	} {
		path := filepath.Join(t.TempDir(), "bad.txt")
		os.WriteFile(path, []byte(body), 0o644)
		rep, err := scenario.Run(path, Registry(), &State{}, scenario.Options{})
		if err == nil && (rep == nil || len(rep.Mismatches) == 0) {
			t.Errorf("accepted:\n%s", body)
		} else if rep != nil && len(rep.Mismatches) > 0 && !strings.Contains(rep.Mismatches[0].Actual, "error") {
			t.Logf("refused as a mismatch: %s", rep.Mismatches[0].Actual)
		}
	}
}

// TestScenarioFiles replays every storage scenario in fixtures: each fork
// divergence still breaks its invariant, and the reference policy still
// holds on the same run. go test ./storage/storagesim -args -rewrite updates
// the expected output.
func TestScenarioFiles(t *testing.T) {
	files, err := scenario.Files(filepath.Join("..", "..", "fixtures", "scenarios", "storage"))
	if err != nil || len(files) < 3 {
		t.Fatalf("storage scenarios: %v (%d files)", err, len(files))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			scenario.RunTest(t, f, Registry(), func() *State { return &State{} })
		})
	}
}
