package storagesim

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cpilab/cpilab/simulator"
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

// BenchmarkStorageSweep runs the storage-sizing sweep as 'cpilab simulate
// --workload storage --seeds A..B' does (reference profile, every core, 100
// seeds an iteration) and reports seeds/s and steps/s, a step being one
// reconcile tick (target: ≥ 50 seeds/s on 2 cores).
//
//	go test ./storage/storagesim -run - -bench StorageSweep -benchtime 3x
func BenchmarkStorageSweep(b *testing.B) {
	next := simulator.Seed(1)
	var steps int64
	var runs int
	var elapsed time.Duration
	for range b.N {
		res, err := simulator.Sweep(context.Background(), simulator.SweepConfig{
			Seeds: simulator.SeedRange{From: next, To: next + 99},
			Run: func(s simulator.Seed) simulator.RunReport {
				res, err := Run(Generate(uint64(s)))
				if err != nil {
					return simulator.RunReport{Err: err}
				}
				if res.Failed() {
					return simulator.RunReport{Steps: int64(res.Ticks), Err: fmt.Errorf("seed %d: %v", s, res.Violations[0])}
				}
				return simulator.RunReport{Steps: int64(res.Ticks)}
			}})
		if err != nil {
			b.Fatal(err)
		}
		if f := res.First(); f != nil {
			b.Fatal(f)
		}
		next += 100
		steps += res.Steps
		runs += res.Runs
		elapsed += res.Elapsed
	}
	b.ReportMetric(float64(runs)/elapsed.Seconds(), "seeds/s")
	b.ReportMetric(float64(steps)/elapsed.Seconds(), "steps/s")
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
