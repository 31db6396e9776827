package simulator

import (
	"context"
	"fmt"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// RunReport is what one simulation reports to Sweep.
type RunReport struct {
	// Steps is the number of simulated steps the run took.
	Steps int64
	// TraceHash is the run's trace hash (simrt.Result.TraceHash).
	TraceHash uint64
	// Err is nil when the run passed; a *Violation, a simrt error, … when
	// it failed.
	Err error
}

// SweepConfig configures Sweep.
type SweepConfig struct {
	// Seeds is the range of root seeds to run.
	Seeds SeedRange
	// Parallelism is the number of runs at once (default
	// runtime.GOMAXPROCS(0)). Each run has its own runtime, so runs share
	// nothing.
	Parallelism int
	// StopOnFailure stops starting seeds above the lowest failing one. Seeds
	// below it still run, so First is the lowest failing seed of the range
	// whatever the timing.
	StopOnFailure bool
	// Run runs one seed. It is called from several goroutines at once.
	Run func(seed Seed) RunReport
	// Replay returns the command that replays a failing seed (typically
	// RunConfig{Seed: seed, …}.Command()). nil: Failure.Replay is empty.
	Replay func(seed Seed) string
	// OnRun, when set, is told of every finished run (from the goroutine
	// that ran it, so concurrently): what a progress display counts.
	OnRun func(seed Seed, rep RunReport)
}

// Failure is a failing seed.
type Failure struct {
	// Seed is the root seed.
	Seed Seed
	// Err is what the run reported (or the panic of the run function).
	Err error
	// TraceHash is the run's trace hash.
	TraceHash uint64
	// Replay is the command that replays it.
	Replay string
}

// String is the seed and the error, then the replay command.
func (f Failure) String() string {
	if f.Replay == "" {
		return fmt.Sprintf("seed %s: %v", f.Seed, f.Err)
	}
	return fmt.Sprintf("seed %s: %v\nreplay: %s", f.Seed, f.Err, f.Replay)
}

// SweepResult sums up a sweep.
type SweepResult struct {
	// Runs counts the seeds run.
	Runs int
	// Steps sums the runs' steps.
	Steps int64
	// Failures lists the failing seeds, by seed.
	Failures []Failure
	// Stopped reports that seeds were left unrun (StopOnFailure, or the
	// context was cancelled).
	Stopped bool
	// Elapsed is the sweep's wall-clock time (for the figures only; runs
	// themselves see only their virtual clocks).
	Elapsed time.Duration
}

// First is the lowest failing seed, or nil.
func (r SweepResult) First() *Failure {
	if len(r.Failures) == 0 {
		return nil
	}
	return &r.Failures[0]
}

// SeedsPerSecond is Runs per wall-clock second.
func (r SweepResult) SeedsPerSecond() float64 { return float64(r.Runs) / r.Elapsed.Seconds() }

// StepsPerSecond is Steps per wall-clock second.
func (r SweepResult) StepsPerSecond() float64 { return float64(r.Steps) / r.Elapsed.Seconds() }

// ErrPanicked wraps the panic of a run function.
type ErrPanicked struct {
	// Value is what was passed to panic.
	Value any
	// Stack is the run function's stack at the panic.
	Stack []byte
}

// Error gives the panic value and the stack.
func (e *ErrPanicked) Error() string { return fmt.Sprintf("run panicked: %v\n%s", e.Value, e.Stack) }

// sweepGCPercent is the garbage collector's target while a sweep runs: a
// run allocates a whole world that is garbage when it ends, and collecting
// at the default 100% spent about a fifth of a sweep's CPU on the collector
// and on preempting the runs for it. A higher GOGC set by the user is kept.
const sweepGCPercent = 400

var (
	sweepGCMu    sync.Mutex
	sweepGCDepth int // sweeps running; guarded by sweepGCMu
	sweepGCPrev  int // the target before the first of them; guarded by sweepGCMu
)

// raiseGC raises the collector's target to sweepGCPercent for one sweep and
// returns the function that restores it when the last running sweep ends.
func raiseGC() (restore func()) {
	sweepGCMu.Lock()
	defer sweepGCMu.Unlock()
	if sweepGCDepth == 0 {
		sweepGCPrev = debug.SetGCPercent(sweepGCPercent)
		if sweepGCPrev < 0 || sweepGCPrev > sweepGCPercent {
			debug.SetGCPercent(sweepGCPrev) // off, or higher: the user's choice
		}
	}
	sweepGCDepth++
	return func() {
		sweepGCMu.Lock()
		defer sweepGCMu.Unlock()
		if sweepGCDepth--; sweepGCDepth == 0 {
			debug.SetGCPercent(sweepGCPrev)
		}
	}
}

// Sweep runs every seed of cfg.Seeds, cfg.Parallelism at a time, and
// collects the failures. Cancelling ctx stops starting new seeds. While it
// runs, the garbage collector's target is at least sweepGCPercent.
func Sweep(ctx context.Context, cfg SweepConfig) (SweepResult, error) {
	if cfg.Run == nil {
		return SweepResult{}, fmt.Errorf("sweep: no Run function")
	}
	defer raiseGC()()
	n := cfg.Seeds.Len()
	if n == 0 {
		return SweepResult{}, fmt.Errorf("sweep: the range %s is too large", cfg.Seeds)
	}
	par := cfg.Parallelism
	if par <= 0 {
		par = runtime.GOMAXPROCS(0)
	}
	par = int(min(uint64(par), n))
	start := time.Now()
	var (
		next  atomic.Uint64 // offset of the next seed to start
		bound atomic.Uint64 // offsets above it are not started
		runs  atomic.Int64
		steps atomic.Int64
		mu    sync.Mutex
		fails []Failure // guarded by mu
		wg    sync.WaitGroup
	)
	bound.Store(n)
	for range par {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= n || i > bound.Load() || ctx.Err() != nil {
					return
				}
				seed := cfg.Seeds.From + Seed(i)
				rep := runOne(cfg.Run, seed)
				runs.Add(1)
				steps.Add(rep.Steps)
				if cfg.OnRun != nil {
					cfg.OnRun(seed, rep)
				}
				if rep.Err == nil {
					continue
				}
				f := Failure{Seed: seed, Err: rep.Err, TraceHash: rep.TraceHash}
				if cfg.Replay != nil {
					f.Replay = cfg.Replay(seed)
				}
				mu.Lock()
				fails = append(fails, f)
				mu.Unlock()
				if cfg.StopOnFailure {
					for {
						b := bound.Load()
						if i >= b || bound.CompareAndSwap(b, i) {
							break
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	slices.SortFunc(fails, func(a, b Failure) int {
		if a.Seed < b.Seed {
			return -1
		}
		if a.Seed > b.Seed {
			return 1
		}
		return 0
	})
	res := SweepResult{Runs: int(runs.Load()), Steps: steps.Load(), Failures: fails, Elapsed: time.Since(start)}
	res.Stopped = uint64(res.Runs) < n
	return res, nil
}

func runOne(run func(Seed) RunReport, seed Seed) (rep RunReport) {
	defer func() {
		if p := recover(); p != nil {
			rep = RunReport{Err: &ErrPanicked{Value: p, Stack: debug.Stack()}}
		}
	}()
	return run(seed)
}

// String sums the sweep up in one line: runs, steps, rates, failures.
func (r SweepResult) String() string {
	s := fmt.Sprintf("%d seeds, %d steps in %v: %.0f steps/s, %.1f seeds/s, %d failing", r.Runs, r.Steps,
		r.Elapsed.Round(time.Millisecond), r.StepsPerSecond(), r.SeedsPerSecond(), len(r.Failures))
	if r.Stopped {
		s += " (stopped early)"
	}
	return s
}
