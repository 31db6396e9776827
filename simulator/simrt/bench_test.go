package simrt_test

import (
	"testing"
	"time"

	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/simulator/simrt"
)

// BenchmarkContextSwitch measures real hand-overs of the run token: two
// goroutines take turns through a Cond, so every decision is a switch.
func BenchmarkContextSwitch(b *testing.B) {
	var res simrt.Result
	start := time.Now()
	res = simrt.Run(simrt.Config{Seed: 1}, func(s *simrt.Sim) {
		mu := s.NewMutex()
		c := s.NewCond(mu)
		turn := 0
		g := rt.NewGroup(s)
		for me := range 2 {
			g.Go("player", func() {
				mu.Lock()
				defer mu.Unlock()
				for i := 0; i < b.N; i++ {
					for turn != me {
						c.Wait()
					}
					turn = 1 - me
					c.Signal()
				}
			})
		}
		g.Wait()
	})
	el := time.Since(start).Seconds()
	if !res.OK() {
		b.Fatal(res.Err)
	}
	b.ReportMetric(float64(res.Switches)/el, "switches/s")
	b.ReportMetric(float64(res.Steps)/el, "steps/s")
}

// BenchmarkDecision measures scheduling decisions that keep the token: one
// goroutine yielding alone.
func BenchmarkDecision(b *testing.B) {
	start := time.Now()
	res := simrt.Run(simrt.Config{Seed: 1}, func(s *simrt.Sim) {
		for i := 0; i < b.N; i++ {
			s.Yield()
		}
	})
	el := time.Since(start).Seconds()
	if !res.OK() {
		b.Fatal(res.Err)
	}
	b.ReportMetric(float64(res.Steps)/el, "steps/s")
}

// BenchmarkWorkload runs the determinism test's workload (queues, locks,
// conds with time-outs, sleeps, 8 goroutines) once per iteration.
func BenchmarkWorkload(b *testing.B) {
	var steps, switches int64
	start := time.Now()
	for i := 0; i < b.N; i++ {
		res := runWorkload(b, uint64(i), nil)
		steps += res.Steps
		switches += res.Switches
	}
	el := time.Since(start).Seconds()
	b.ReportMetric(float64(steps)/el, "steps/s")
	b.ReportMetric(float64(switches)/el, "switches/s")
	b.ReportMetric(float64(b.N)/el, "runs/s")
}
