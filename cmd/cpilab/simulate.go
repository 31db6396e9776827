package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpilab/cpilab/internal/termsafe"
	"github.com/cpilab/cpilab/simulator"
)

func init() {
	commands["simulate"] = command{summary: "deterministic simulation of director + agents + cloud (--workload storage: the storage controller) from a seed, a sweep of seeds, or a merge of sweep shards", run: runSimulate}
	commands["replay"] = command{summary: "replay a scenario (disk or storage) or minimized trace file and compare its expected output", run: runReplay}
}

// The workloads `cpilab simulate --workload` runs.
const (
	workloadDisks   = "disks"   // the director's dynamic disks: lifecycle races (package simulator)
	workloadStorage = "storage" // the storage-sizing controller (package storage/storagesim)
)

func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	workload, args, err := cutWorkloadFlag(args)
	if err != nil {
		fmt.Fprintf(stderr, "cpilab simulate: %v\nRun 'cpilab simulate --help' for usage.\n", err)
		return exitError(exitUsage)
	}
	shape := ""
	switch {
	case workload == workloadDisks:
	case workload == workloadStorage:
		return runStorageSimulate(ctx, "simulate --workload storage", args, stdout, stderr)
	case slices.Contains(simulator.Shapes, workload):
		shape = workload
	default:
		fmt.Fprintf(stderr, "cpilab simulate: --workload %q: want %s, %s, or one of the disk workload shapes %s\nRun 'cpilab simulate --help' for usage.\n",
			workload, workloadDisks, workloadStorage, strings.Join(simulator.Shapes, ", "))
		return exitError(exitUsage)
	}
	if len(args) > 0 && args[0] == "merge" {
		return runSimulateMerge(args[1:], stdout, stderr)
	}
	fs := newFlagSet("simulate", stderr)
	fs.String("workload", workloadDisks, "what to simulate: "+workloadDisks+" (the director's dynamic disks, the "+simulator.ShapeMixed+
		" shape), one shape of that workload ("+strings.Join(simulator.Shapes[1:], ", ")+"), or "+workloadStorage+
		" (the storage-sizing controller, the flags of 'cpilab storage simulate')")
	var run simulator.RunConfig
	run.RegisterFlags(fs)
	run.Workload.Shape = shape
	seeds := fs.String("seeds", "", "sweep a seed range A..B on every core instead of one --seed")
	var shard simulator.Shard
	fs.Var(&shard, "shard", "with --seeds: run only shard K/N, the K-th of N contiguous blocks of the range (see docs/simulate-report.md)")
	jsonReport := fs.String("json-report", "", "with --seeds: write the sweep's verdict and failing seeds as JSON to this file")
	outDir := fs.String("out", ".", "where a failing run's minimized trace (seed-N.txt) and porcupine's visualization of its history (seed-N.html) go")
	noShrink := fs.Bool("no-shrink", false, "write the whole failing run instead of shrinking it")
	keepGoing := fs.Bool("keep-going", false, "with --seeds: run every seed instead of stopping at the first failure")
	parallel := fs.Int("parallel", 0, "with --seeds: runs at once (0: every core)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := checkOutDir(*outDir); err != nil { // before the work: a failing seed must have somewhere to go
		return usageErrorf(fs, "--out %s: %v", *outDir, err)
	}
	if *seeds == "" {
		for _, name := range []string{"shard", "json-report", "keep-going", "parallel"} {
			if isSet(fs, name) {
				return usageErrorf(fs, "--%s needs --seeds A..B", name)
			}
		}
		res, err := simulator.SimulateSeed(simulator.SimulateConfig{Run: run, OutDir: *outDir, NoShrink: *noShrink})
		if res != nil {
			fmt.Fprint(stdout, res)
		}
		if err != nil {
			return err
		}
		if res.Failure != nil {
			return exitError(1)
		}
		return nil
	}
	if isSet(fs, "seed") {
		return usageErrorf(fs, "--seed and --seeds exclude each other")
	}
	if *parallel < 0 {
		return usageErrorf(fs, "--parallel %d: want a number of runs at once ≥ 1, or 0 for every core", *parallel)
	}
	rng, err := simulator.ParseSeedRange(*seeds)
	if err != nil {
		return usageErrorf(fs, "--seeds: %v", err)
	}
	block, err := shard.Of(rng)
	if err != nil {
		return usageErrorf(fs, "--shard: %v", err)
	}
	if err := run.Validate(); err != nil {
		return usageErrorf(fs, "%v", err)
	}
	var prog *sweepProgress
	if !newUI(fs, stdout, stderr).quiet {
		prog = newSweepProgress(stderr, block.Len())
		prog.start()
	}
	cfg := simulator.SweepRunConfig{Seeds: rng, Shard: shard, Run: run, Parallelism: *parallel,
		KeepGoing: *keepGoing, OutDir: *outDir, NoShrink: *noShrink}
	if prog != nil {
		cfg.OnRun = prog.ran
	}
	sweep, first, err := simulator.SweepSeeds(ctx, cfg)
	if prog != nil {
		prog.stop()
	}
	fmt.Fprintln(stdout, sweep)
	if first != nil {
		fmt.Fprint(stdout, first)
	}
	if err != nil {
		return err
	}
	rep, rerr := simulator.NewSweepReport(run, rng, shard, *keepGoing, sweep)
	if rerr != nil {
		return rerr
	}
	if *jsonReport != "" {
		if err := rep.WriteFile(*jsonReport); err != nil {
			return err
		}
	}
	if rep.Verdict != simulator.VerdictPass {
		return exitError(1)
	}
	return nil
}

// runSimulateMerge is `cpilab simulate merge [--json-report OUT] REPORT...`.
func runSimulateMerge(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("simulate merge", stderr)
	jsonReport := fs.String("json-report", "", "write the merged report as JSON to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return exitError(2)
	}
	if fs.NArg() == 0 {
		return usageErrorf(fs, "want the JSON report of every shard (REPORT...)")
	}
	var reports []simulator.SweepReport
	for _, path := range fs.Args() {
		r, err := simulator.ReadSweepReport(path)
		if err != nil {
			fmt.Fprintf(stderr, "cpilab simulate merge: %s\n", termsafe.String(err.Error()))
			return exitError(2)
		}
		reports = append(reports, r)
	}
	merged, err := simulator.MergeSweepReports(reports, fs.Args())
	if err != nil {
		fmt.Fprintf(stderr, "cpilab simulate merge: %s\n", termsafe.String(err.Error()))
		return exitError(2)
	}
	fmt.Fprint(stdout, merged)
	if *jsonReport != "" {
		if err := merged.WriteFile(*jsonReport); err != nil {
			return err
		}
	}
	if merged.Verdict != simulator.VerdictPass {
		return exitError(1)
	}
	return nil
}

// sweepProgress prints a sweep's progress on stderr (I/O-edge code: it reads
// the wall clock): seeds done, failing seeds, rate and time left. On a
// terminal it rewrites one line at most 4 times a second; elsewhere (CI
// logs) it prints a line every 10 s. The last line is printed when the
// sweep ends.
type sweepProgress struct {
	w     io.Writer
	total uint64
	tty   bool
	every time.Duration
	now   func() time.Time

	began        time.Time
	done, failed atomic.Uint64
	quit         chan struct{}
	wg           sync.WaitGroup

	mu      sync.Mutex // guards lastLen and writes to w
	lastLen int
}

func newSweepProgress(w io.Writer, total uint64) *sweepProgress {
	p := &sweepProgress{w: w, total: total, every: 10 * time.Second, now: time.Now}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty, p.every = true, 250*time.Millisecond
		}
	}
	return p
}

// ran counts one finished run (SweepConfig.OnRun).
func (p *sweepProgress) ran(_ simulator.Seed, rep simulator.RunReport) {
	p.done.Add(1)
	if rep.Err != nil {
		p.failed.Add(1)
	}
}

func (p *sweepProgress) start() {
	p.began = p.now()
	p.quit = make(chan struct{})
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(p.every)
		defer t.Stop()
		for {
			select {
			case <-p.quit:
				return
			case <-t.C:
				p.print(false)
			}
		}
	}()
}

func (p *sweepProgress) stop() {
	close(p.quit)
	p.wg.Wait()
	p.print(true)
}

// line is the progress text at now.
func (p *sweepProgress) line(now time.Time) string {
	done, failed := p.done.Load(), p.failed.Load()
	elapsed := now.Sub(p.began)
	rate := 0.0
	if elapsed > 0 {
		rate = float64(done) / elapsed.Seconds()
	}
	left := "time left unknown"
	switch {
	case done >= p.total:
		left = fmt.Sprintf("done in %v", elapsed.Round(time.Second))
	case rate > 0:
		left = fmt.Sprintf("about %v left", (time.Duration(float64(p.total-done) / rate * float64(time.Second))).Round(time.Second))
	}
	pct := 100 * float64(done) / float64(max(p.total, 1))
	return fmt.Sprintf("simulate: %d/%d seeds (%.1f%%), %d failing, %.1f seeds/s, %s", done, p.total, pct, failed, rate, left)
}

func (p *sweepProgress) print(final bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.line(p.now())
	switch {
	case p.tty && final:
		fmt.Fprintf(p.w, "\r%-*s\n", p.lastLen, l)
	case p.tty:
		fmt.Fprintf(p.w, "\r%-*s", p.lastLen, l)
		p.lastLen = len(l)
	default:
		fmt.Fprintln(p.w, l)
	}
}

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replay", stderr)
	rewrite := fs.Bool("rewrite", false, "write the actual outputs into the file instead of comparing")
	outDir := fs.String("out", "", "where porcupine visualizations (seed-N.html) of violating runs go (default: none written)")
	if err := parseOnly(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf(fs, "want exactly one FILE, got %d arguments", fs.NArg())
	}
	if isStorageScenario(fs.Arg(0)) {
		if *outDir != "" {
			return usageErrorf(fs, "--out: a storage scenario has no history to visualize")
		}
		return replayStorage(fs.Arg(0), *rewrite, stdout, stderr)
	}
	res, err := simulator.Replay(simulator.ReplayConfig{Path: fs.Arg(0), Rewrite: *rewrite, OutDir: *outDir, Out: stdout})
	if errors.Is(err, simulator.ErrInvalidFile) {
		fmt.Fprintf(stderr, "cpilab replay: %v\n", err)
		return exitError(2)
	}
	if err != nil {
		return err
	}
	if res.Failed() {
		return exitError(1)
	}
	return nil
}

// cutWorkloadFlag takes --workload NAME (or -workload, or =NAME) out of
// args, before the flags of the workload's own command are parsed. Without
// it the workload is disks.
func cutWorkloadFlag(args []string) (string, []string, error) {
	workload, found := workloadDisks, false
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			rest = append(rest, args[i:]...)
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "workload" {
			rest = append(rest, a)
			continue
		}
		if found {
			return "", nil, fmt.Errorf("--workload given twice")
		}
		found = true
		if !hasVal {
			if i+1 == len(args) {
				return "", nil, fmt.Errorf("flag needs an argument: --workload (%s or %s)", workloadDisks, workloadStorage)
			}
			i++
			val = args[i]
		}
		workload = val
	}
	return workload, rest, nil
}

// isSet reports whether the flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// usageErrorf reports a misuse of fs's command: said once, exit status 2.
func usageErrorf(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(fs.Output(), "%s: %s\n", fs.Name(), fmt.Sprintf(format, args...))
	return exitError(2)
}
