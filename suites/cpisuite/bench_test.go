package cpisuite_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/cpilab/cpilab/suites"
	"github.com/onsi/ginkgo/v2/types"
)

// BenchmarkCertify runs the default `cpilab certify` (the reference CPI on
// the embedded cloud, worker processes as the CLI picks them) and reports
// its wall time and the ratio of wall time to the sum of the CPI processes'
// own run times (below 1: calls overlapped):
//
//	go test ./suites/ -run '^$' -bench Certify -benchtime 1x
func BenchmarkCertify(b *testing.B) {
	dir := b.TempDir()
	for _, pkg := range []string{"cpilab", "fakeiaas-cpi"} {
		out, err := exec.Command("go", "build", "-o", filepath.Join(dir, pkg), "github.com/cpilab/cpilab/cmd/"+pkg).CombinedOutput()
		if err != nil {
			b.Fatalf("building %s: %v\n%s", pkg, err, out)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		report := filepath.Join(dir, "ginkgo.json")
		cmd := exec.Command(filepath.Join(dir, "cpilab"), "certify", "--cpi", filepath.Join(dir, "fakeiaas-cpi"), "--ginkgo.json-report="+report)
		cmd.Dir = dir
		start := time.Now()
		out, err := cmd.CombinedOutput()
		wall := time.Since(start)
		if err != nil {
			b.Fatalf("cpilab certify: %v\n%s", err, out)
		}
		cpi, calls := cpiTime(b, report)
		b.ReportMetric(wall.Seconds(), "s/certify")
		b.ReportMetric(float64(calls), "calls")
		b.ReportMetric(wall.Seconds()/cpi.Seconds(), "wall/cpi-time")
		b.Logf("default certify: %.2f s wall, %d CPI calls, %.2f s of CPI process time, ratio wall/CPI time %.2f", wall.Seconds(), calls, cpi.Seconds(), wall.Seconds()/cpi.Seconds())
	}
}

// cpiTime sums the CPI process time of every call in a Ginkgo JSON report.
func cpiTime(b *testing.B, path string) (time.Duration, int) {
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	var reports []types.Report
	if err := json.Unmarshal(raw, &reports); err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	n := 0
	for _, r := range reports {
		for _, sr := range r.SpecReports {
			for _, e := range sr.ReportEntries {
				if e.Name != suites.EntryCalls {
					continue
				}
				var calls []suites.CallRecord
				if err := suites.DecodeEntry(e, &calls); err != nil {
					b.Fatal(err)
				}
				for _, c := range calls {
					total += c.Elapsed
					n++
				}
			}
		}
	}
	if n == 0 {
		b.Fatal("the report holds no CPI calls")
	}
	return total, n
}
