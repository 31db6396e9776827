package cpisuite

import (
	"slices"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/suites"
)

// A worker's CPI processes get the worker's own TMPDIR (each worker judges
// its own cloud); outside a worker they get the caller's.
func TestWorkerGivesItsCPIsTheirOwnTmpdir(t *testing.T) {
	t.Setenv("TMPDIR", "/caller-tmp")
	t.Setenv(suites.WorkerTmpEnv, "")
	if env := cpiEnv(); env != nil {
		t.Fatalf("outside a worker: cpiEnv() = %q, want nil (the scrubbed environment)", env)
	}
	t.Setenv(suites.WorkerTmpEnv, "/worker-tmp")
	var tmp []string
	for _, kv := range cpiEnv() {
		if strings.HasPrefix(kv, "TMPDIR=") {
			tmp = append(tmp, kv)
		}
	}
	if !slices.Equal(tmp, []string{"TMPDIR=/worker-tmp"}) {
		t.Fatalf("in a worker: TMPDIR entries %q, want only the worker's", tmp)
	}
}
