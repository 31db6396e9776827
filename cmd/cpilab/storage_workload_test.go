package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/simulator"
)

// wallClockFigures matches the parts of a storage sweep's output that are
// wall-clock measurements.
var wallClockFigures = regexp.MustCompile(`found after [^:]*:|simulated in .*`)

// `cpilab simulate --workload storage` is `cpilab storage simulate`: the
// same flags, the same output and the same scenario file, under both forms
// of the flag.
func TestSimulateWorkloadStorageIsStorageSimulate(t *testing.T) {
	spellings := [][]string{
		{"storage", "simulate"},
		{"simulate", "--workload", "storage"},
		{"simulate", "--workload=storage"},
	}
	var outputs, files []string
	for _, sp := range spellings {
		out := t.TempDir()
		var stdout, stderr bytes.Buffer
		args := append(append([]string{}, sp...), "--seeds", "7", "--profile", "fork:no-cooldown", "--out", out, "--quiet")
		if code := run(context.Background(), args, &stdout, &stderr); code != 1 {
			t.Fatalf("%q exited %d, want 1 (a violation)\n%s%s", args, code, stdout.String(), stderr.String())
		}
		b, err := os.ReadFile(filepath.Join(out, "storage-seed-7.txt"))
		if err != nil {
			t.Fatalf("%q wrote no scenario: %v", args, err)
		}
		outputs = append(outputs, wallClockFigures.ReplaceAllString(strings.ReplaceAll(stdout.String(), out, "OUT"), "…"))
		files = append(files, string(b))
	}
	for i := 1; i < len(spellings); i++ {
		if outputs[i] != outputs[0] {
			t.Errorf("%q printed\n%s\nbut %q printed\n%s", spellings[i], outputs[i], spellings[0], outputs[0])
		}
		if files[i] != files[0] {
			t.Errorf("%q wrote a different scenario file than %q", spellings[i], spellings[0])
		}
	}
	if !strings.Contains(outputs[0], "seed 7: cooldown") || !strings.Contains(outputs[0], "profile fork:no-cooldown: 1 runs, 1 violations") {
		t.Errorf("output:\n%s", outputs[0])
	}
}

// A workload that does not exist, or a --workload without its value, is a
// usage error (exit 2) that names what is accepted.
func TestSimulateBadWorkloadIsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"simulate", "--workload", "tape"},
		{"simulate", "-workload=Storage"},
		{"simulate", "--seeds", "1..2", "--workload"},
		{"simulate", "--workload", "storage", "--workload", "disks"},
		{"simulate", "--workload", "storage", "--steps", "10"}, // a flag of the disk workload
		{"simulate", "--workload", "storage", "--seeds", "5..1"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != exitUsage {
			t.Errorf("%q exited %d, want 2\n%s%s", args, code, stdout.String(), stderr.String())
		}
		if stderr.Len() == 0 {
			t.Errorf("%q: nothing said on stderr", args)
		}
	}
	var stdout, stderr bytes.Buffer
	run(context.Background(), []string{"simulate", "--workload", "tape"}, &stdout, &stderr)
	if !strings.Contains(stderr.String(), `"tape"`) || !strings.Contains(stderr.String(), "want disks, storage") ||
		!strings.Contains(stderr.String(), simulator.ShapeVMOps) {
		t.Errorf("stderr does not name the bad workload and the good ones: %s", stderr.String())
	}
	// --workload disks is the default, spelled out.
	stdout.Reset()
	if code := run(context.Background(), []string{"simulate", "--workload", "disks", "--seed", "3", "--steps", "20"}, &stdout, &stderr); code != 0 ||
		!strings.HasPrefix(stdout.String(), "PASS seed 3") {
		t.Errorf("--workload disks: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
	// A shape of the disk workload runs that shape, and says so.
	stdout.Reset()
	if code := run(context.Background(), []string{"simulate", "--workload", simulator.ShapeBurst, "--seed", "3", "--steps", "20"}, &stdout, &stderr); code != 0 ||
		!strings.Contains(stdout.String(), "workload burst: 8 clients, bursts") {
		t.Errorf("--workload burst: exit %d\n%s%s", code, stdout.String(), stderr.String())
	}
}

// The help of both spellings lists the storage flags; simulate's own help
// and the completion script list --workload.
func TestSimulateWorkloadHelpAndCompletion(t *testing.T) {
	for _, args := range [][]string{{"simulate", "--workload", "storage", "--help"}, {"storage", "simulate", "-h"}} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("%q exited %d", args, code)
		}
		for _, want := range []string{"simulate --workload storage", "--profile", "--parallel", "--keep-going", "Exit status"} {
			if !strings.Contains(stdout.String(), want) {
				t.Errorf("%q: help lacks %q:\n%s", args, want, stdout.String())
			}
		}
	}
	for sub, flag := range map[string]string{"run": "--policy FILE", "replay": "--rewrite"} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"storage", sub, "--help"}, &stdout, &stderr); code != 0 || stderr.Len() > 0 {
			t.Errorf("storage %s --help: exit %d, stderr %q", sub, code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "Usage:\n  cpilab storage "+sub) || !strings.Contains(stdout.String(), "  "+flag) {
			t.Errorf("storage %s --help lacks its usage or %s:\n%s", sub, flag, stdout.String())
		}
	}
	var stdout, stderr bytes.Buffer
	run(context.Background(), []string{"simulate", "--help"}, &stdout, &stderr)
	if !strings.Contains(stdout.String(), "--workload") {
		t.Errorf("simulate --help lacks --workload:\n%s", stdout.String())
	}
	stdout.Reset()
	run(context.Background(), []string{"help", "storage"}, &stdout, &stderr)
	if !strings.Contains(stdout.String(), "storage simulate") || !strings.Contains(stdout.String(), "storage replay") {
		t.Errorf("help storage:\n%s", stdout.String())
	}
	stdout.Reset()
	run(context.Background(), []string{"completion", "bash"}, &stdout, &stderr)
	var line string
	for _, l := range strings.Split(stdout.String(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "simulate)") {
			line = l
		}
	}
	if !strings.Contains(line, "--workload") {
		t.Errorf("the completion of simulate lacks --workload: %q", line)
	}
}

// `cpilab replay` of a storage scenario is `cpilab storage replay`; a disk
// scenario replays as before; a cut storage file is refused (exit 2).
func TestReplayDispatchesStorageScenarios(t *testing.T) {
	fixture := filepath.Join("..", "..", "fixtures", "scenarios", "storage", "fork-no-cooldown.txt")
	var a, b, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", fixture}, &a, &stderr); code != 0 {
		t.Fatalf("replay of a storage scenario exited %d\n%s%s", code, a.String(), stderr.String())
	}
	run(context.Background(), []string{"storage", "replay", fixture}, &b, &stderr)
	if a.String() != b.String() || !strings.Contains(a.String(), "2 runs, all as expected") {
		t.Errorf("replay printed\n%s\nstorage replay printed\n%s", a.String(), b.String())
	}
	// The file's verdict, changed, is a mismatch under either spelling.
	text, err := os.ReadFile(fixture)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	lied := filepath.Join(dir, "lied.txt")
	os.WriteFile(lied, []byte(regexp.MustCompile(`violated: cooldown at .*`).ReplaceAllString(string(text), "ok")), 0o644)
	a.Reset()
	if code := run(context.Background(), []string{"replay", lied}, &a, &stderr); code != 1 || !strings.Contains(a.String(), "violated: cooldown") {
		t.Errorf("replay of a wrong verdict: exit %d\n%s", code, a.String())
	}
	// Cut short: refused, naming the file.
	cut := filepath.Join(dir, "cut.txt")
	os.WriteFile(cut, []byte(text[:strings.Index(string(text), "----\n")+len("----\n")]), 0o644)
	for _, args := range [][]string{{"replay", cut}, {"storage", "replay", cut}, {"replay", "--out", dir, fixture}} {
		stderr.Reset()
		if code := run(context.Background(), args, &a, &stderr); code != exitUsage || !strings.Contains(stderr.String(), args[len(args)-1]) && !strings.Contains(stderr.String(), "--out") {
			t.Errorf("%q: exit %d, stderr %s", args, code, stderr.String())
		}
	}
	if !strings.Contains(stderr.String(), "--out") {
		t.Errorf("replay --out of a storage scenario: %s", stderr.String())
	}
	// A disk scenario still goes to the disk replayer.
	a.Reset()
	if code := run(context.Background(), []string{"replay", filepath.Join("..", "..", "fixtures", "scenarios", "race-c.txt")}, &a, &stderr); code != 0 ||
		!strings.Contains(a.String(), "profile upstream") {
		t.Errorf("replay of a disk scenario: exit %d\n%s%s", code, a.String(), stderr.String())
	}
}

// A sweep gives the same violations and scenario files on one core as on
// several: every run has its own model, and the output is in seed order.
func TestStorageSweepIsTheSameOnEveryCore(t *testing.T) {
	var outputs []string
	var files [][]string
	for _, par := range []string{"1", "3"} {
		out := t.TempDir()
		var stdout, stderr bytes.Buffer
		args := []string{"storage", "simulate", "--seeds", "1..20", "--profile", "fork", "--keep-going", "--duration", "72h", "--parallel", par, "--out", out, "--quiet"}
		if code := run(context.Background(), args, &stdout, &stderr); code != 1 {
			t.Fatalf("%q exited %d, want 1\n%s%s", args, code, stdout.String(), stderr.String())
		}
		o := wallClockFigures.ReplaceAllString(strings.ReplaceAll(stdout.String(), out, "OUT"), "…")
		outputs = append(outputs, regexp.MustCompile(`on \d+ cores.*`).ReplaceAllString(o, ""))
		ents, _ := os.ReadDir(out)
		var fs []string
		for _, e := range ents {
			b, _ := os.ReadFile(filepath.Join(out, e.Name()))
			fs = append(fs, e.Name()+"\n"+string(b))
		}
		files = append(files, fs)
	}
	if outputs[0] != outputs[1] {
		t.Errorf("one core printed\n%s\nthree printed\n%s", outputs[0], outputs[1])
	}
	if n := len(regexp.MustCompile(`(?m)^seed \d+: `).FindAllString(outputs[0], -1)); n < 2 || len(files[0]) != n {
		t.Fatalf("want several violations under the fork profile, got:\n%s", outputs[0])
	}
	if strings.Join(files[0], "\x00") != strings.Join(files[1], "\x00") {
		t.Errorf("the scenario files differ between one core and three")
	}
}
