package simulator

import (
	"context"
	"testing"

	"github.com/cpilab/cpilab/simulator/faults"
)

func TestTmpDefault(t *testing.T) {
	res, _ := Sweep(context.Background(), SweepConfig{Seeds: SeedRange{From: 1, To: 400},
		Run: func(seed Seed) RunReport {
			return Simulate(SimConfig{RunConfig: RunConfig{Seed: seed, Steps: 200, Faults: faults.DefaultSpec()}}).Report()
		}})
	counts := map[string]int{}
	for _, f := range res.Failures {
		v, _ := AsViolation(f.Err)
		k := "other"
		if v != nil {
			k = v.Invariant
		}
		counts[k]++
		if counts[k] == 1 {
			t.Log(f.Seed, f.Err)
		}
	}
	t.Log(res, counts)
}
