package cpiv2_test

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

// infoRequest is the request the runner sends for info under the current
// Director profile, so that the bare fork/exec writes the same stdin.
func infoRequest(b *testing.B) []byte {
	var req []byte
	r := cpiv2.NewRunner(cpiv2.RunnerConfig{Command: []string{testCPI, "serve"},
		DebugLog: func(rec cpiv2.CallRecord) { req = rec.Request }})
	if _, err := r.Info(context.Background()); err != nil {
		b.Fatal(err)
	}
	return req
}

func runnerInfo(b *testing.B, r *cpiv2.Runner) {
	if _, err := r.Info(context.Background()); err != nil {
		b.Fatal(err)
	}
}

func bareInfo(b *testing.B, req []byte) {
	cmd := exec.Command(testCPI, "serve")
	cmd.Stdin = bytes.NewReader(req)
	out, err := cmd.Output()
	if err != nil || len(out) == 0 {
		b.Fatalf("bare exec: %v (%d bytes)", err, len(out))
	}
}

// BenchmarkRunnerInfo is the runner's whole round trip for info against the
// test CPI: encode, spawn in a process group, write stdin, read and strictly
// decode stdout, keep stderr.
func BenchmarkRunnerInfo(b *testing.B) {
	r := cpiv2.NewRunner(cpiv2.RunnerConfig{Command: []string{testCPI, "serve"}})
	for b.Loop() {
		runnerInfo(b, r)
	}
}

// BenchmarkForkExecInfo is a bare os/exec of the same binary writing the
// same request on stdin and reading stdout: the floor for the runner.
func BenchmarkForkExecInfo(b *testing.B) {
	req := infoRequest(b)
	for b.Loop() {
		bareInfo(b, req)
	}
}

// BenchmarkInfoRatio makes one runner call and one bare fork/exec per
// iteration (which goes first alternates), so both see the same machine
// load, and reports the median of the per-pair ratios runner/bare as
// "median-ratio" (target ≤ 1.15).
func BenchmarkInfoRatio(b *testing.B) {
	req := infoRequest(b)
	r := cpiv2.NewRunner(cpiv2.RunnerConfig{Command: []string{testCPI, "serve"}})
	var ratios []float64
	for i := 0; b.Loop(); i++ {
		var runner, bare time.Duration
		for j := range 2 {
			t0 := time.Now()
			if (i+j)%2 == 0 {
				runnerInfo(b, r)
				runner = time.Since(t0)
			} else {
				bareInfo(b, req)
				bare = time.Since(t0)
			}
		}
		ratios = append(ratios, float64(runner)/float64(bare))
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
}
