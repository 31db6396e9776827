package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// Under a fork knob the sweep finds a violation, shrinks it, writes a
// scenario and prints the replay command; replaying the file gives the same
// verdicts, and a file whose expected verdict is wrong fails the replay.
func TestStorageSimulateFindsShrinksAndReplays(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"storage", "simulate", "--seeds", "7..7", "--profile", "fork:no-cooldown", "--out", out}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("simulate under fork:no-cooldown exited %d, want 1\n%s%s", code, stdout.String(), stderr.String())
	}
	path := filepath.Join(out, "storage-seed-7.txt")
	for _, want := range []string{"seed 7: cooldown", "replay: cpilab storage replay " + path, "1 violations"} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "violated: cooldown") || !strings.Contains(string(b), "profile=reference") {
		t.Fatalf("scenario file lacks the violation or the reference run:\n%s", b)
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"storage", "replay", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("replay exited %d:\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "2 runs, all as expected") {
		t.Errorf("replay output:\n%s", stdout.String())
	}
	lied := regexp.MustCompile(`violated: cooldown at .*`).ReplaceAllString(string(b), "ok")
	if err := os.WriteFile(path, []byte(lied), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"storage", "replay", path}, &stdout, &stderr); code != 1 {
		t.Fatalf("replay of a file expecting ok where the run violates exited %d, want 1:\n%s", code, stdout.String())
	}
	if !strings.Contains(stdout.String(), "violated: cooldown") {
		t.Errorf("the mismatch does not show the actual verdict:\n%s", stdout.String())
	}
}

func TestStorageSimulateReferenceAndUsage(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"storage", "simulate", "--seeds", "1..3", "--duration", "72h", "--out", t.TempDir()}, &stdout, &stderr); code != 0 {
		t.Fatalf("reference seeds 1..3 exited %d:\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "profile reference: 3 runs, 0 violations") || !strings.Contains(stderr.String(), "3/3 seeds") {
		t.Errorf("summary or progress missing:\nstdout %s\nstderr %s", stdout.String(), stderr.String())
	}
	for _, args := range [][]string{
		{"storage"},
		{"storage", "bogus"},
		{"storage", "simulate", "--profile", "fork:nope"},
		{"storage", "simulate", "--seeds", "9..1"},
		{"storage", "replay"},
		{"storage", "run", "--policy", "p.yml"},
		{"storage", "run", "--director", "https://127.0.0.1:1", "--policy", "p.yml", "--nats-url", "nats://127.0.0.1:1", "--interval", "0s"},
	} {
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%q exited %d, want 2 (a usage error)", args, code)
		}
	}
	if code := run(context.Background(), []string{"storage", "-h"}, &stdout, &stderr); code != 0 {
		t.Errorf("storage -h exited %d, want 0", code)
	}
	// A policy file that does not parse is a harness error naming it (exit 2).
	bad := filepath.Join(t.TempDir(), "bad.yml")
	os.WriteFile(bad, []byte("volumes:\n- id: a\n"), 0o644)
	stderr.Reset()
	code := run(context.Background(), []string{"storage", "run", "--director", "https://127.0.0.1:1", "--policy", bad, "--nats-url", "nats://127.0.0.1:1"}, &stdout, &stderr)
	if code != exitUsage || !strings.Contains(stderr.String(), bad) || !strings.Contains(stderr.String(), "diskName is required") {
		t.Errorf("bad policy file: exit %d, stderr %s", code, stderr.String())
	}
}
