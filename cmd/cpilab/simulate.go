package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/cpilab/cpilab/simulator"
)

func init() {
	commands["simulate"] = command{summary: "deterministic simulation of director + agents + cloud from a seed, or a sweep of seeds", run: runSimulate}
	commands["replay"] = command{summary: "replay a scenario or minimized trace file and compare its expected output", run: runReplay}
}

func runSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("simulate", stderr)
	var run simulator.RunConfig
	run.RegisterFlags(fs)
	seeds := fs.String("seeds", "", "sweep a seed range A..B on every core instead of one --seed")
	outDir := fs.String("out", ".", "where a failing run's minimized trace (seed-N.txt) and visualization (seed-N.html) go")
	noShrink := fs.Bool("no-shrink", false, "write the whole failing run instead of shrinking it")
	keepGoing := fs.Bool("keep-going", false, "with --seeds: run every seed instead of stopping at the first failure")
	parallel := fs.Int("parallel", 0, "with --seeds: runs at once (0: every core)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *seeds == "" {
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
	rng, err := simulator.ParseSeedRange(*seeds)
	if err != nil {
		return usageErrorf(fs, "--seeds: %v", err)
	}
	sweep, first, err := simulator.SweepSeeds(ctx, simulator.SweepRunConfig{Seeds: rng, Run: run, Parallelism: *parallel,
		KeepGoing: *keepGoing, OutDir: *outDir, NoShrink: *noShrink})
	fmt.Fprintln(stdout, sweep)
	if first != nil {
		fmt.Fprint(stdout, first)
	}
	if err != nil {
		return err
	}
	if len(sweep.Failures) > 0 {
		return exitError(1)
	}
	return nil
}

func runReplay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("replay", stderr)
	rewrite := fs.Bool("rewrite", false, "write the actual outputs into the file instead of comparing")
	outDir := fs.String("out", "", "where porcupine visualizations of violating runs go (default: none)")
	if err := parseOnly(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf(fs, "want exactly one FILE, got %d arguments", fs.NArg())
	}
	res, err := simulator.Replay(simulator.ReplayConfig{Path: fs.Arg(0), Rewrite: *rewrite, OutDir: *outDir, Out: stdout})
	if err != nil {
		return err
	}
	if res.Failed() {
		return exitError(1)
	}
	return nil
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
