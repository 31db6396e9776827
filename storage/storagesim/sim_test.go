package storagesim

import (
	"testing"

	"github.com/cpilab/cpilab/storage"
)

func TestReferencePolicyHoldsEveryInvariant(t *testing.T) {
	seeds := uint64(300)
	if testing.Short() {
		seeds = 50
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		cfg := Generate(seed)
		res, err := Run(cfg)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if res.Failed() {
			t.Errorf("seed %d (%s): %v", seed, cfg.Workload, res.Violations)
		}
	}
}

func TestForkKnobsAreFound(t *testing.T) {
	for name, prof := range map[string]storage.Profile{
		"budget-reset":  {BudgetReset: true},
		"no-cooldown":   {NoCooldown: true},
		"no-hysteresis": {NoHysteresis: true},
	} {
		t.Run(name, func(t *testing.T) {
			for seed := uint64(1); seed <= 2000; seed++ {
				cfg := Generate(seed)
				cfg.Profile = prof
				res, err := Run(cfg)
				if err != nil {
					t.Fatal(err)
				}
				if res.Failed() {
					t.Logf("seed %d: %v", seed, res.Violations[0])
					return
				}
			}
			t.Fatalf("no violation in 2000 seeds")
		})
	}
}
