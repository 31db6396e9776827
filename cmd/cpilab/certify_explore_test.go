package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/cpimodel/explore"
	"github.com/cpilab/cpilab/fixtures/buggycpi"
	"github.com/cpilab/cpilab/suites"
)

// TestCertifyExploreAndReplay: --explore rejects a bug no spec looks for,
// naming its model clause and the shrunk steps (a numbered list in the
// text, a structured sequence in the JSON report); the same seed writes the
// same steps; the printed replay command, pasted into a shell elsewhere,
// fails the same way alone; the reference CPI passes the replay and an
// exploration.
func TestCertifyExploreAndReplay(t *testing.T) {
	dir := buildCPIs(t)
	bug, _ := buggycpi.Lookup("reboot-loses-metadata")
	link := install(t, dir, bug)
	var steps [2]string
	var file, printed string
	for i := range steps {
		file = filepath.Join(t.TempDir(), "replay.json")
		js := filepath.Join(t.TempDir(), "r.json")
		code, out, stderr := certify(t, dir, "--cpi", link, "--explore", "--seed", "5", "--explore-steps", "60", "--replay-out", file, "--json-report", js)
		if code != 1 || !strings.Contains(out, "model.frame") || !strings.Contains(out, "shrunk to") || !strings.Contains(out, "shrunk sequence (") || !strings.Contains(out, "  1. ") {
			t.Fatalf("--explore exited %d, want a model.frame rejection with its steps:\n%s\n%s", code, out, tail(stderr, 2000))
		}
		for _, l := range strings.Split(out, "\n") {
			if c, ok := strings.CutPrefix(strings.TrimSpace(l), "replay it alone: "); ok {
				printed = c
			}
		}
		var seq *suites.Sequence
		for _, s := range readReport(t, js).Specs {
			if s.Sequence != nil {
				seq = s.Sequence
			}
		}
		if seq == nil || len(seq.Steps) == 0 || seq.ReplayFile != file || seq.Replay != printed || !strings.Contains(seq.Broke, "model.frame") {
			t.Fatalf("the JSON report's sequence %+v, want the steps, %s and the printed replay command %q", seq, file, printed)
		}
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatalf("no replay file: %v", err)
		}
		var rp explore.Replay
		if err := json.Unmarshal(raw, &rp); err != nil || len(rp.Steps) == 0 || !strings.Contains(rp.Violation, "model.frame") {
			t.Fatalf("replay file %s: %v", raw, err)
		}
		b, _ := json.Marshal(rp.Steps)
		steps[i] = string(b)
	}
	if steps[0] != steps[1] {
		t.Fatalf("the same seed gave other steps:\n%s\n%s", steps[0], steps[1])
	}
	if !strings.Contains(printed, filepath.Join(dir, "cpilab")+" certify --cpi "+link) || !strings.HasSuffix(printed, "--replay "+file) {
		t.Fatalf("printed replay command %q: want this cpilab, the CPI and the replay file", printed)
	}
	code, out, _ := runPrinted(t, printed)
	if code != 1 || !strings.Contains(out, "model.frame") || !strings.Contains(out, "the replay of") {
		t.Fatalf("the printed replay command exited %d, want the same rejection:\n%s", code, out)
	}
	code, out, _ = certify(t, dir, "--replay", file)
	if code != 0 || !strings.Contains(out, "ACCEPTED: 1 passed") {
		t.Fatalf("the reference CPI fails the replay (exit %d):\n%s", code, out)
	}
	code, out, _ = certify(t, dir, "--explore", "--explore-steps", "60", "--seed", "5")
	if code != 0 || !strings.Contains(out, "ACCEPTED: 1 passed") || !strings.Contains(out, "seed 5") {
		t.Fatalf("the reference CPI fails an exploration (exit %d):\n%s", code, out)
	}
	if code, _, stderr := certify(t, dir, "--explore", "--replay", file); code != 2 || !strings.Contains(stderr, "exclude each other") {
		t.Fatalf("--explore with --replay exited %d: %s", code, stderr)
	}
}

// TestCertifyExploreNoShrink: --no-shrink rejects the same bug on the same
// clause, reporting the failing lifecycle as found (in the text and in the
// JSON report's sequence) instead of shrinking it; it is refused where no
// lifecycle is drawn.
func TestCertifyExploreNoShrink(t *testing.T) {
	t.Parallel()
	dir := buildCPIs(t)
	bug, _ := buggycpi.Lookup("reboot-loses-metadata")
	link := install(t, dir, bug)
	js := filepath.Join(t.TempDir(), "r.json")
	code, out, stderr := certify(t, dir, "--cpi", link, "--explore", "--seed", "5", "--explore-steps", "60", "--no-shrink",
		"--replay-out", filepath.Join(t.TempDir(), "replay.json"), "--json-report", js)
	if code != 1 || !strings.Contains(out, "model.frame") || !strings.Contains(out, "not shrunk (--no-shrink") ||
		!strings.Contains(out, "sequence as found, unshrunk (") || strings.Contains(out, "shrunk to") {
		t.Fatalf("--no-shrink exited %d, want a model.frame rejection with the sequence as found:\n%s\n%s", code, out, tail(stderr, 2000))
	}
	var seq *suites.Sequence
	for _, s := range readReport(t, js).Specs {
		if s.Sequence != nil {
			seq = s.Sequence
		}
	}
	if seq == nil || !seq.Unshrunk || len(seq.Steps) == 0 || !strings.Contains(seq.Broke, "model.frame") {
		t.Fatalf("the JSON report's sequence %+v, want the unshrunk steps that broke model.frame", seq)
	}
	for _, args := range [][]string{{"--no-shrink", "--no-explore"}, {"--no-shrink", "--replay", js}} {
		if code, _, stderr := certify(t, dir, args...); code != 2 || !strings.Contains(stderr, "--no-shrink applies to random lifecycles") {
			t.Errorf("certify %s exited %d, want a usage error: %s", strings.Join(args, " "), code, stderr)
		}
	}
}
