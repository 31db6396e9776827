package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A failing seed prints its replay commands and exits 1; the minimized
// trace it writes replays the same violation.
func TestSimulateReportsAndReplays(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"simulate", "--seed", "7", "--steps", "200", "--profile", "upstream",
		"--faults", "none", "--out", out}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("simulate under upstream exited %d, want 1\n%s%s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{"FAIL seed 7", "violated", "replay: cpilab simulate --seed 7", "replay minimized: cpilab replay"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"replay", filepath.Join(out, "seed-7.txt")}, &stdout, &stderr); code != 0 {
		t.Fatalf("replay of the minimized trace exited %d:\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "violated") {
		t.Errorf("the minimized trace did not reproduce the violation:\n%s", stdout.String())
	}
}

func TestSimulateReferencePassesAndMisuseIsAUsageError(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"simulate", "--seed", "3", "--steps", "100"}, &stdout, &stderr); code != 0 {
		t.Fatalf("reference seed 3 exited %d:\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "PASS seed 3") {
		t.Errorf("want a PASS line, got:\n%s", stdout.String())
	}
	if code := run(context.Background(), []string{"simulate", "--seed", "1", "--seeds", "1..2"}, &stdout, &stderr); code != 2 {
		t.Errorf("--seed with --seeds exited %d, want 2", code)
	}
	if code := run(context.Background(), []string{"replay"}, &stdout, &stderr); code != 2 {
		t.Errorf("replay without FILE exited %d, want 2", code)
	}
}

// Bad numbers are refused before anything runs, naming the flag: --steps 0
// does not quietly mean 200, NaN is not a probability, a think time is not
// negative.
func TestSimulateRefusesBadNumbers(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--steps", "0"}, "-steps"},
		{[]string{"--steps", "-5"}, "-steps"},
		{[]string{"--faults", "cpi-error=NaN"}, "not a number in [0, 1]"},
		{[]string{"--faults", "cpi-error=nan"}, "not a number in [0, 1]"},
		{[]string{"--faults", "latency=Inf"}, "not a number in [0, 1]"},
		{[]string{"--faults", "cpi-error=-Inf"}, "not a number in [0, 1]"},
		{[]string{"--faults", "cpi-error=1.01"}, "not a number in [0, 1]"},
		{[]string{"--max-delay", "-1s"}, "-max-delay"},
		{[]string{"--clients", "-1"}, "-clients"},
		{[]string{"--disks", "-2"}, "-disks"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"simulate", "--seed", "1"}, tc.args...)
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%q exited %d, want 2 (usage error)\n%s%s", tc.args, code, stdout.String(), stderr.String())
			continue
		}
		if !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("%q: stderr %q lacks %q, or something ran (stdout %q)", tc.args, stderr.String(), tc.want, stdout.String())
		}
	}
}

// Replay of a file that is empty, holds no run, or was cut short fails
// with exit status 2 and says what is wrong and where; a whole file passes.
func TestReplayRefusesEmptyAndTruncatedFiles(t *testing.T) {
	whole, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "scenarios", "race-e.txt"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(whole)
	firstOutput := strings.Index(text, "\n----\n") + len("\n----\n")
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text, want string
	}{
		{"empty", "", "holds no run command (empty)"},
		{"comments", "# just a comment\n\n", "holds no run command (only comments"},
		{"cut-before-separator", text[:firstOutput-len("----\n")], `has no "----" line`},
		{"cut-after-separator", text[:firstOutput], "ends without a verdict line"},
		{"cut-inside-output", text[:strings.Index(text[firstOutput:], "\n")+firstOutput+1], "ends without a verdict line"},
	} {
		path := filepath.Join(dir, tc.name+".txt")
		if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"replay", path}, &stdout, &stderr); code != 2 {
			t.Errorf("%s: replay exited %d, want 2\n%s%s", tc.name, code, stdout.String(), stderr.String())
			continue
		}
		if !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), path) {
			t.Errorf("%s: stderr %q lacks %q or the file name", tc.name, stderr.String(), tc.want)
		}
	}
	path := filepath.Join(dir, "whole.txt")
	if err := os.WriteFile(path, whole, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", path}, &stdout, &stderr); code != 0 {
		t.Errorf("the whole file: replay exited %d\n%s%s", code, stdout.String(), stderr.String())
	}
}
