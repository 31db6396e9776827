package main

import (
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"
)

// certifyTimed runs certify once with a JSON report and returns its wall
// time and the CPI processes' own run time over the specs' calls (the
// report's elapsed_seconds summed).
func certifyTimed(b *testing.B, dir string, args ...string) (wall, cpi time.Duration) {
	b.Helper()
	js := filepath.Join(b.TempDir(), "r.json")
	start := time.Now()
	code, stdout, stderr := certify(b, dir, append(args, "--json-report", js)...)
	wall = time.Since(start)
	if code != 0 {
		b.Fatalf("certify %q: exit %d\n%s\n%s", args, code, stdout, stderr)
	}
	rep := readReport(b, js)
	var secs float64
	for _, s := range rep.Specs {
		for _, c := range s.Calls {
			secs += c.ElapsedSeconds
		}
	}
	return wall, time.Duration(secs * float64(time.Second))
}

// benchCertify runs certify b.N times and reports the median wall time
// and the ratio of wall time to CPI process time (how much the harness
// adds: model reads, reports, the embedded cloud).
func benchCertify(b *testing.B, args ...string) {
	dir := buildCPIs(b)
	b.ResetTimer()
	var walls []time.Duration
	var ratios []float64
	for range b.N {
		wall, cpi := certifyTimed(b, dir, args...)
		walls = append(walls, wall)
		if cpi > 0 {
			ratios = append(ratios, wall.Seconds()/cpi.Seconds())
		}
		b.Logf("certify %q: wall %s, CPI processes %s", args, wall.Round(10*time.Millisecond), cpi.Round(10*time.Millisecond))
	}
	b.StopTimer()
	slices.Sort(walls)
	slices.Sort(ratios)
	med := walls[len(walls)/2]
	b.ReportMetric(med.Seconds(), "wall-s")
	if len(ratios) > 0 {
		b.ReportMetric(ratios[len(ratios)/2], "wall/cpi")
	}
	b.Logf("median of %d: wall %s; wall/CPI process time %s", len(walls), med.Round(10*time.Millisecond), ratioText(ratios))
}

func ratioText(r []float64) string {
	if len(r) == 0 {
		return "n/a (no CPI call timed)"
	}
	return strconv.FormatFloat(r[len(r)/2], 'f', 2, 64)
}

// BenchmarkCertifyDefault measures the full default `cpilab certify` (every
// suite, every row, the explore row's seeded budget, the reference CPI on
// the embedded testbed) as a user runs it, one process per run. Target:
// ≤ 8 s wall on 2 cores.
func BenchmarkCertifyDefault(b *testing.B) { benchCertify(b) }

// BenchmarkCertifyExplore2000 measures `cpilab certify --explore
// --explore-steps 2000` (random lifecycles only). Target: ≤ 60 s.
func BenchmarkCertifyExplore2000(b *testing.B) {
	benchCertify(b, "--explore", "--explore-steps", "2000")
}
