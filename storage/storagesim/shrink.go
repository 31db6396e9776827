package storagesim

import (
	"slices"
	"strconv"
	"time"

	"github.com/cpilab/cpilab/simulator/shrink"
	"github.com/cpilab/cpilab/storage"
)

// Shrink makes a failing cfg smaller while it still breaks the same
// invariant as its first violation: a shorter run, fewer faults (by
// simulator/shrink, the simulator's shrinker), rounder
// workload numbers, default policy fields. It returns the smallest Config
// found and its Result. cfg must fail.
func Shrink(cfg Config) (Config, Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return cfg, Result{}, err
	}
	res, err := Run(cfg)
	if err != nil || !res.Failed() {
		return cfg, res, err
	}
	want := res.Violations[0].Invariant
	try := func(c Config) bool {
		r, err := Run(c)
		if err != nil || !r.Failed() || r.Violations[0].Invariant != want {
			return false
		}
		cfg, res = c, r
		return true
	}
	// End the run just after the violation.
	c := cfg
	c.Duration = res.Violations[0].At + cfg.Tick
	try(c)
	// Drop faults with the simulator's shrinker (delta debugging), as every
	// failing seed's fault schedule is shrunk, until none can go. Each
	// failing candidate becomes cfg (try), so cfg ends with the 1-minimal
	// list Minimize returns and res with its run.
	shrink.Minimize(cfg.Faults, func(fs []Fault) bool {
		c := cfg
		c.Faults = fs
		return try(c)
	}, shrink.Options{})
	// Rounder numbers.
	for _, f := range []func(*Config){
		func(c *Config) {
			for i := range c.Faults {
				c.Faults[i].At = c.Faults[i].At.Round(time.Minute)
			}
		},
		func(c *Config) { c.Workload.RateMiBPerHour = round2(c.Workload.RateMiBPerHour) },
		func(c *Config) { c.Workload.BurstMiB = round2(c.Workload.BurstMiB) },
		func(c *Config) { c.InitialUsedMiB = round2(c.InitialUsedMiB) },
		func(c *Config) { c.InitialUsedMiB = 0 },
		func(c *Config) { c.Provider.MaxSizeMiB = 0 },
		func(c *Config) { c.Provider.MinInterval, c.Provider.MaxPer24h = 0, 0 },
		func(c *Config) { c.Provider.Latency = 10 * time.Minute },
		func(c *Config) { c.Policy.Window.TimeZone = "UTC" },
		func(c *Config) { c.Policy.Emergency.ExceedLimit = false },
		func(c *Config) { c.Policy.AllowShrink = false },
		func(c *Config) { c.Policy.Window = storage.Window{Schedule: storage.AlwaysOpen} },
	} {
		c := cfg
		c.Faults = slices.Clone(cfg.Faults)
		f(&c)
		try(c)
	}
	// And once more the shortest run.
	c = cfg
	c.Duration = res.Violations[0].At + cfg.Tick
	try(c)
	return cfg, res, nil
}

// round2 keeps two significant digits.
func round2(x float64) float64 {
	if x == 0 {
		return 0
	}
	r, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'g', 2, 64), 64)
	return r
}
