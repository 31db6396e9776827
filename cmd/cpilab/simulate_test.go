package main

import (
	"bytes"
	"context"
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
