package simulator_test

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/simulator"
)

// A forged shard report is refused on reading, naming the file: a key
// twice (the lenient reader kept the last, so "fail" then "pass" merged as
// PASS), a key spelled twice in different cases, negative or overflowing
// counts.
func TestReadSweepReportRefusesForgedReports(t *testing.T) {
	dir := t.TempDir()
	four := shardReports(t, dir, simulator.RunConfig{Steps: 50}, simulator.SeedRange{From: 1, To: 100}, 4, 5)
	good, err := os.ReadFile(four[0])
	if err != nil {
		t.Fatal(err)
	}
	g := string(good)
	steps := regexp.MustCompile(`"steps": [0-9]+`)
	elapsed := regexp.MustCompile(`"elapsed_seconds": [0-9.e+-]+`)
	for name, text := range map[string]string{
		"verdict twice":         strings.Replace(g, `"verdict": "fail"`, `"verdict": "fail", "verdict": "pass"`, 1),
		"Verdict beside":        strings.Replace(g, `"verdict": "fail"`, `"verdict": "fail", "Verdict": "pass"`, 1),
		"failure seed twice":    strings.Replace(g, `"seed": "5"`, `"seed": "5", "seed": "6"`, 1),
		"negative steps":        steps.ReplaceAllString(g, `"steps": -1000`),
		"negative elapsed":      elapsed.ReplaceAllString(g, `"elapsed_seconds": -3.5`),
		"steps beyond int64":    steps.ReplaceAllString(g, `"steps": 9223372036854775808`),
		"elapsed beyond double": elapsed.ReplaceAllString(g, `"elapsed_seconds": 1e999`),
	} {
		if text == g {
			t.Fatalf("%s: the forgery changed nothing", name)
		}
		p := filepath.Join(dir, "forged.json")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := simulator.ReadSweepReport(p); !errors.Is(err, simulator.ErrBadReport) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v; want ErrBadReport naming the file", name, err)
		}
	}
}

// Merge checks every count it adds, also of reports built in memory.
func TestMergeRefusesNegativeAndOverflowingCounts(t *testing.T) {
	dir := t.TempDir()
	paths := shardReports(t, dir, simulator.RunConfig{Steps: 50}, simulator.SeedRange{From: 1, To: 100}, 2)
	for name, forge := range map[string]func(r []simulator.SweepReport){
		"negative steps":   func(r []simulator.SweepReport) { r[1].Steps = -5 },
		"negative elapsed": func(r []simulator.SweepReport) { r[0].ElapsedSeconds = -1 },
		"overflow":         func(r []simulator.SweepReport) { r[0].Steps, r[1].Steps = 1<<62, 1<<62 },
		"elapsed overflow": func(r []simulator.SweepReport) { r[0].ElapsedSeconds, r[1].ElapsedSeconds = 1e308, 1e308 },
	} {
		reps := readAll(t, paths)
		forge(reps)
		if m, err := simulator.MergeSweepReports(reps, paths); !errors.Is(err, simulator.ErrBadReport) {
			t.Errorf("%s: merged to %d steps, %v s (%v); want ErrBadReport", name, m.Steps, m.ElapsedSeconds, err)
		}
	}
}

// A forged report's replay command and error text are printed escaped:
// they reach a terminal, and a terminal obeys escape sequences.
func TestSweepReportTextEscapesForgedText(t *testing.T) {
	dir := t.TempDir()
	paths := shardReports(t, dir, simulator.RunConfig{Steps: 50}, simulator.SeedRange{From: 1, To: 100}, 1, 5)
	r := readAll(t, paths)[0]
	r.Failures[0].Error = "leak\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J"
	r.Failures[0].Replay = "cpilab simulate --seed 5\rrm -rf ~\x00"
	text := r.String()
	if strings.ContainsAny(text, "\x1b\x07\r\x00") {
		t.Fatalf("raw control characters in the text: %q", text)
	}
	if !strings.Contains(text, `leak\x1b]52;c;cm0gLXJmIH4=\x07\x1b[2J`) || !strings.Contains(text, `--seed 5\x0drm -rf ~\x00`) {
		t.Fatalf("escapes not shown:\n%s", text)
	}
}
