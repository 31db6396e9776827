package storagesim

import (
	"testing"
	"time"

	"github.com/cpilab/cpilab/storage"
)

// BenchmarkFourWeeks runs one volume for four virtual weeks (1-minute
// reconcile ticks) and reports simulated time per wall second.
func BenchmarkFourWeeks(b *testing.B) {
	var sim time.Duration
	start := time.Now()
	for i := 0; i < b.N; i++ {
		res, err := Run(Generate(uint64(i + 1)))
		if err != nil {
			b.Fatal(err)
		}
		sim += res.Simulated
	}
	wall := time.Since(start)
	b.ReportMetric(float64(sim)/float64(wall), "sim/wall")
}

// BenchmarkDecide measures the controller's decision alone.
func BenchmarkDecide(b *testing.B) {
	p := storage.Policy{RequestMiB: 10240, LimitMiB: 1 << 20}
	if err := p.Validate(); err != nil {
		b.Fatal(err)
	}
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	var st storage.Status
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o := storage.Observation{At: at.Add(time.Duration(i) * time.Minute), Known: true, SizeMiB: 20480, UsedMiB: int64(15000 + i%3000)}
		storage.Decide(p, st, o, storage.Reference)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}
