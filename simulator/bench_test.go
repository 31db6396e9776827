package simulator_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/cpilab/cpilab/simulator"
	"github.com/cpilab/cpilab/simulator/faults"
)

// BenchmarkRaceDetection: for each race (a)–(i) (docs/upstream.md), 20 random
// searches under the race's upstream knob, each from its own seed range on
// every core, and the median wall-clock time to the first detection
// (target: ≤ 10 s on 2 cores).
//
//	go test ./simulator -run - -bench RaceDetection -benchtime 1x
func BenchmarkRaceDetection(b *testing.B) {
	for _, r := range simulator.Races {
		b.Run(r.Letter, func(b *testing.B) {
			for range b.N {
				var times []time.Duration
				runs := 0
				for i := range 20 {
					res, err := r.Find(context.Background(), simulator.Seed(1+i*100000), 5000, 100, 0)
					if err != nil {
						b.Fatal(err)
					}
					if !res.Found {
						b.Fatalf("race (%s): search %d found nothing in %d runs", r.Letter, i, res.Runs)
					}
					times = append(times, res.Elapsed)
					runs += res.Runs
				}
				slices.Sort(times)
				median := (times[9] + times[10]) / 2
				b.ReportMetric(median.Seconds(), "s/median-detection")
				b.ReportMetric(times[19].Seconds(), "s/max-detection")
				b.ReportMetric(float64(runs)/20, "runs/detection")
				fmt.Printf("race (%s): median %v, max %v, %.1f runs per detection over 20 searches\n",
					r.Letter, median.Round(time.Millisecond), times[19].Round(time.Millisecond), float64(runs)/20)
			}
		})
	}
}

// BenchmarkWorldSweep measures simulated steps per second (runtime scheduling
// decisions) and seeds per second of the default sweep ('cpilab simulate
// --seeds A..B --faults default --profile reference': 200 workload steps per
// seed, on every core), 100 seeds an iteration.
//
//	go test ./simulator -run - -bench WorldSweep -benchtime 3x
func BenchmarkWorldSweep(b *testing.B) {
	spec, err := faults.ParseSpec(simulator.ReferenceSweepFaults)
	if err != nil {
		b.Fatal(err)
	}
	next := simulator.Seed(1)
	var steps int64
	var runs int
	var elapsed time.Duration
	for range b.N {
		res, err := simulator.Sweep(context.Background(), simulator.SweepConfig{
			Seeds: simulator.SeedRange{From: next, To: next + 99},
			Run: func(seed simulator.Seed) simulator.RunReport {
				c := simulator.SimConfig{RunConfig: simulator.RunConfig{Seed: seed, Steps: 200, Faults: spec}}
				return simulator.Simulate(c).Report()
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
	b.ReportMetric(float64(steps)/elapsed.Seconds(), "steps/s")
	b.ReportMetric(float64(runs)/elapsed.Seconds(), "seeds/s")
	b.ReportMetric(float64(steps)/float64(runs), "steps/seed")
}
