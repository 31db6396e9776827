package storagesim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/cpilab/cpilab/storage"
)

// Workload kinds.
const (
	Steady      = "steady"       // a constant fill rate
	Bursty      = "bursty"       // a base rate plus random bursts
	SpikeDelete = "spike-delete" // spikes of data, deleted again later
	Oscillating = "oscillating"  // use rises and falls around a level
)

// Workload fills the volume.
type Workload struct {
	Kind string
	// RateMiBPerHour is the base fill rate (steady, bursty).
	RateMiBPerHour float64
	// BurstMiB is the size of a burst, a spike or the oscillation's amplitude.
	BurstMiB float64
	// Period is the mean time between bursts, or the spike / oscillation
	// period.
	Period time.Duration
}

func (wl Workload) String() string {
	return fmt.Sprintf("workload=%s rate=%g burst=%g period=%s", wl.Kind, wl.RateMiBPerHour, wl.BurstMiB, wl.Period)
}

// Config is one simulated run. The zero Config is valid: Defaults fills it in.
type Config struct {
	Seed uint64
	// Duration of virtual time (default 4 weeks).
	Duration time.Duration
	// Tick is the controller's reconcile interval (default 1 min).
	Tick     time.Duration
	Policy   storage.Policy
	Profile  storage.Profile
	Provider Provider
	Workload Workload
	Faults   []Fault
	// InitialUsedMiB is the used space when the disk is first provided.
	InitialUsedMiB float64
}

// Violation is one invariant broken at one moment.
type Violation struct {
	// Invariant is the invariant's id (see Invariants).
	Invariant string
	// At is the virtual time since the start of the run.
	At     time.Duration
	Detail string
}

func (v Violation) String() string { return fmt.Sprintf("%s at %s: %s", v.Invariant, v.At, v.Detail) }

// Result is what a run did.
type Result struct {
	Violations []Violation
	// Actions counts resizes started (refused ones included); Refused the
	// ones the provider refused.
	Actions, Refused int
	// DiskFull counts episodes of a full disk; FullAttribution says, for each,
	// the gate that let it happen.
	DiskFull        int
	FullAttribution map[string]int
	FinalSizeMiB    int64
	FinalUsedMiB    int64
	Simulated       time.Duration
	Ticks           int
}

// Failed reports whether any invariant broke.
func (r Result) Failed() bool { return len(r.Violations) > 0 }

// Run simulates cfg. It is deterministic: the same Config gives the same
// Result. The error is an invalid Config (a policy Validate refuses).
func Run(cfg Config) (Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Result{}, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x5107a6e))
	start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC) // a Monday
	w := &world{start: start, faults: cfg.Faults, provider: cfg.Provider, tasks: map[string]*task{}}
	w.setNow(start)
	st := store{}
	vol := storage.Volume{ID: "db/data", DiskName: "db-data", InstanceID: "db/0", DiskPool: "default", Policy: cfg.Policy}
	newController := func() *storage.Controller {
		c, err := storage.New(storage.Config{Director: director{w}, Usage: usage{w}, Store: st, Profile: cfg.Profile, ProviderMaxMiB: cfg.Provider.MaxSizeMiB})
		if err != nil {
			panic(err) // the three seams are always set here
		}
		return c
	}
	ctrl := newController()
	ck := newChecker(cfg, w, st)
	res := Result{FullAttribution: map[string]int{}}
	ctx := context.Background()
	wasDown := false
	full := false
	for w.now.Sub(start) < cfg.Duration {
		w.setNow(w.now.Add(cfg.Tick))
		res.Ticks++
		w.advance()
		if w.disk != nil {
			if w.disk.usedMiB == 0 && cfg.InitialUsedMiB > 0 && len(w.disk.mods) == 0 && res.Ticks <= 2 {
				w.disk.usedMiB = math.Min(cfg.InitialUsedMiB, float64(w.disk.sizeMiB))
			}
			w.disk.usedMiB += fill(cfg.Workload, w.since(), cfg.Tick, rng)
			w.disk.usedMiB = math.Max(0, w.disk.usedMiB)
			if w.disk.usedMiB >= float64(w.disk.sizeMiB) {
				w.disk.usedMiB = float64(w.disk.sizeMiB)
				if !full {
					full = true
					res.DiskFull++
					res.FullAttribution[ck.attributeFull()]++
				}
			} else {
				full = false
			}
		}
		down := w.faultActive(ControllerDown)
		if down {
			wasDown = true
			ck.controllerDown()
			continue
		}
		if wasDown {
			ctrl, wasDown = newController(), false // a restart: nothing but the store survives
		}
		before := len(w.issued)
		d, err := ctrl.Reconcile(ctx, vol, w.now)
		ck.afterReconcile(d, err, w.issued[before:])
	}
	res.Violations = ck.violations
	for _, is := range w.issued {
		res.Actions++
		if is.refused {
			res.Refused++
		}
	}
	if w.disk != nil {
		res.FinalSizeMiB, res.FinalUsedMiB = w.disk.sizeMiB, int64(w.disk.usedMiB)
	}
	res.Simulated = w.now.Sub(start)
	return res, nil
}

// fill is the change of used space over one tick ending at since.
func fill(wl Workload, since, tick time.Duration, rng *rand.Rand) float64 {
	h := tick.Hours()
	switch wl.Kind {
	case Steady:
		return wl.RateMiBPerHour * h
	case Bursty:
		d := wl.RateMiBPerHour * h
		if wl.Period > 0 && rng.Float64() < float64(tick)/float64(wl.Period) {
			d += wl.BurstMiB * (0.5 + rng.Float64())
		}
		return d
	case SpikeDelete:
		if wl.Period <= 0 {
			return 0
		}
		phase := since % wl.Period
		switch {
		case phase < time.Hour: // the spike arrives over an hour
			return wl.BurstMiB * h
		case phase >= wl.Period/2 && phase < wl.Period/2+time.Hour: // and is deleted
			return -wl.BurstMiB * h
		}
		return wl.RateMiBPerHour * h
	case Oscillating:
		if wl.Period <= 0 {
			return 0
		}
		// The derivative of BurstMiB·sin(2πt/P), plus a slow drift.
		x := 2 * math.Pi * float64(since) / float64(wl.Period)
		return wl.BurstMiB*2*math.Pi/wl.Period.Hours()*math.Cos(x)*h + wl.RateMiBPerHour*h
	}
	return 0
}

func (cfg Config) withDefaults() (Config, error) {
	if cfg.Duration <= 0 {
		cfg.Duration = 28 * 24 * time.Hour
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Minute
	}
	if cfg.Policy.RequestMiB == 0 {
		cfg.Policy = storage.Policy{RequestMiB: 10 << 10, LimitMiB: 200 << 10}
	}
	if err := cfg.Policy.Validate(); err != nil {
		return cfg, err
	}
	if cfg.Provider.Latency <= 0 {
		cfg.Provider.Latency = 10 * time.Minute
	}
	if cfg.Workload.Kind == "" {
		cfg.Workload = Workload{Kind: Steady, RateMiBPerHour: 20}
	}
	switch cfg.Workload.Kind {
	case Steady, Bursty, SpikeDelete, Oscillating:
	default:
		return cfg, fmt.Errorf("unknown workload %q (steady, bursty, spike-delete, oscillating)", cfg.Workload.Kind)
	}
	for _, f := range cfg.Faults {
		if !f.Kind.Storage() {
			return cfg, fmt.Errorf("unknown fault %q", f.Kind)
		}
		if f.At < 0 || f.For <= 0 {
			return cfg, fmt.Errorf("fault %s: the time after @ must be ≥ 0 and d > 0", f)
		}
	}
	return cfg, nil
}
