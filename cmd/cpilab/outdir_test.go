package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// --out is checked before any seed runs: a directory that cannot be
// written is a usage error (exit 2) at once, naming it.
func TestSimulateChecksOutBeforeTheWork(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, out := range []string{"/proc/nope", file, filepath.Join(file, "sub")} {
		var stdout, stderr bytes.Buffer
		start := time.Now()
		code := run(t.Context(), []string{"simulate", "--seeds", "1..100000", "--out", out}, &stdout, &stderr)
		if code != 2 || !strings.Contains(stderr.String(), "--out "+out) {
			t.Errorf("--out %s: exit %d, stderr %q; want 2 naming --out", out, code, stderr.String())
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("--out %s: refused after %v: the sweep ran first", out, d)
		}
	}
	dir := filepath.Join(t.TempDir(), "new", "dir")
	if err := checkOutDir(dir); err != nil {
		t.Fatalf("a directory still to be made under a writable one: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "..")); err == nil {
		t.Fatal("the check made directories")
	}
}
