package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/simulator"
	"github.com/cpilab/cpilab/simulator/scenario"
	"github.com/cpilab/cpilab/storage"
	"github.com/cpilab/cpilab/storage/boshdirector"
	"github.com/cpilab/cpilab/storage/storagesim"
)

func init() {
	commands["storage"] = command{summary: "convergent storage sizing over dynamic disks: run, simulate, replay", run: runStorage}
}

const storageUsage = `usage: cpilab storage <subcommand> [flags]

subcommands:
  run       size the volumes of a policy file through a Director, on the wall clock
  simulate  run the controller's simulation over a seed range; shrink and save each violation
  replay    replay a storage scenario file and compare its expected output

Run 'cpilab storage <subcommand> -h' for its flags.`

func runStorage(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, storageUsage)
		return exitError(2)
	}
	switch args[0] {
	case "-h", "--help", "-help", "help":
		return flag.ErrHelp // run prints helps["storage"] on stdout
	case "run":
		return runStorageRun(ctx, args[1:], stdout, stderr)
	case "simulate":
		return runStorageSimulate(ctx, "storage simulate", args[1:], stdout, stderr)
	case "replay":
		return runStorageReplay(args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "cpilab storage: unknown subcommand %q\n\n%s\n", args[0], storageUsage)
	return exitError(2)
}

func runStorageRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("storage run", stderr)
	var (
		cc                           director.ClientConfig
		caFile, policyPath, statusAt string
		natsURL, agentUUID, profile  string
		interval                     time.Duration
		once                         bool
	)
	fs.StringVar(&cc.URL, "director", "", "the Director's `URL` (required)")
	fs.StringVar(&caFile, "ca-cert", "", "PEM `FILE` of the CA the Director's certificate is checked against")
	fs.StringVar(&cc.Username, "user", "", "user with bosh.admin, or bosh.dynamic-disks.create and .attach (resize needs create)")
	fs.StringVar(&cc.Password, "password", "", "its password")
	fs.StringVar(&cc.Token, "token", "", "or a bearer token")
	fs.StringVar(&policyPath, "policy", "", "YAML `FILE` of the volumes and their policies (required; README, docs/storage.md)")
	fs.StringVar(&statusAt, "status", "storage-status.json", "JSON `FILE` the volumes' status is kept in (written atomically)")
	fs.StringVar(&natsURL, "nats-url", "", "the mbus `URL` the agents listen on, for their usage reports (required)")
	fs.StringVar(&agentUUID, "mbus-uuid", "cpilab-storage", "this process's name on the mbus (reply subjects)")
	fs.StringVar(&profile, "profile", "reference", "reference, fork or fork:KNOB[,KNOB] (budget-reset, no-cooldown, no-hysteresis)")
	fs.DurationVar(&interval, "interval", time.Minute, "time between two reconciliations of every volume")
	fs.BoolVar(&once, "once", false, "reconcile every volume once and exit")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeHelp(stdout, "storage run")
			return nil
		}
		return err
	}
	if cc.URL == "" || policyPath == "" || natsURL == "" {
		return usageErrorf(fs, "--director, --policy and --nats-url are required")
	}
	if interval <= 0 {
		return usageErrorf(fs, "--interval must be positive, got %s", interval)
	}
	prof, err := storagesim.ParseProfile(profile)
	if err != nil {
		return usageErrorf(fs, "--profile: %v", err)
	}
	vols, err := boshdirector.LoadVolumes(policyPath)
	if err != nil {
		return err
	}
	if caFile != "" {
		if cc.CACertPEM, err = os.ReadFile(caFile); err != nil {
			return fmt.Errorf("--ca-cert: %w", err)
		}
	}
	client, err := director.NewClient(cc)
	if err != nil {
		return err
	}
	if cc.Token == "" && cc.Username != "" {
		if err := client.Login(ctx); err != nil {
			return fmt.Errorf("login to %s: %w", cc.URL, err)
		}
	}
	nats, err := mbus.Connect(mbus.NATSConfig{URL: natsURL, Name: agentUUID})
	if err != nil {
		return fmt.Errorf("--nats-url: %w", err)
	}
	defer nats.Close()
	agents, err := mbus.NewClient(mbus.ClientConfig{Transport: nats, DirectorUUID: agentUUID})
	if err != nil {
		return err
	}
	defer agents.Close()
	st, err := boshdirector.OpenFileStore(statusAt)
	if err != nil {
		return err
	}
	ctl, err := storage.New(storage.Config{Director: boshdirector.NewDirector(client), Usage: boshdirector.NewUsage(client, agents),
		Store: st, Profile: prof})
	if err != nil {
		return err
	}
	tick := time.NewTicker(interval) // I/O edge: the command runs on the wall clock
	defer tick.Stop()
	for {
		for _, v := range vols {
			d, err := ctl.Reconcile(ctx, v, time.Now())
			if err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", v.ID, err)
				continue
			}
			fmt.Fprintln(stdout, describeDecision(v, d))
		}
		if once {
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// describeDecision is one line per volume and reconciliation.
func describeDecision(v storage.Volume, d storage.Decision) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", v.ID, d.State)
	if d.Kind != storage.None {
		fmt.Fprintf(&b, " %s %d→%d MiB", d.Kind, d.FromMiB, d.TargetMiB)
	}
	for _, c := range d.Blocked {
		fmt.Fprintf(&b, "; %s: %s", c.Gate, c.Message)
	}
	return b.String()
}

// runStorageSimulate is `cpilab storage simulate`, also spelled
// `cpilab simulate --workload storage`: name is the spelling its flags and
// help go under.
func runStorageSimulate(ctx context.Context, name string, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet(name, stderr)
	seeds := fs.String("seeds", "1..100", "seed range A..B (or one seed); each seed draws a whole run (storagesim.Generate)")
	profile := fs.String("profile", "reference", "reference, fork or fork:KNOB[,KNOB] (budget-reset, no-cooldown, no-hysteresis)")
	outDir := fs.String("out", ".", "where each violation's shrunk scenario (storage-seed-N.txt) goes")
	duration := fs.Duration("duration", 0, "virtual time per run (default: storagesim's, 4 weeks)")
	keepGoing := fs.Bool("keep-going", false, "run every seed instead of stopping at the first violation")
	parallel := fs.Int("parallel", 0, "runs at once (0: GOMAXPROCS, every core)")
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeHelp(stdout, name)
			return nil
		}
		return err
	}
	rng, err := simulator.ParseSeedRange(*seeds)
	if err != nil {
		return usageErrorf(fs, "--seeds: %v", err)
	}
	prof, err := storagesim.ParseProfile(*profile)
	if err != nil {
		return usageErrorf(fs, "--profile: %v", err)
	}
	if *duration < 0 {
		return usageErrorf(fs, "--duration must not be negative, got %s", *duration)
	}
	if *parallel < 0 {
		return usageErrorf(fs, "--parallel %d: want a number of runs at once ≥ 1, or 0 for every core", *parallel)
	}
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	par := *parallel
	if par == 0 {
		par = runtime.GOMAXPROCS(0)
	}
	par = int(min(uint64(par), max(rng.Len(), 1)))
	var prog *sweepProgress
	if !newUI(fs, stdout, stderr).quiet {
		prog = newSweepProgress(stderr, rng.Len())
		prog.start()
	}
	start := time.Now()        // I/O edge: the figures are wall-clock times
	var simulated atomic.Int64 // seconds: 10,000 runs of four weeks overflow a time.Duration
	sweep, err := simulator.Sweep(ctx, simulator.SweepConfig{
		Seeds: rng, Parallelism: par, StopOnFailure: !*keepGoing,
		Run: func(s simulator.Seed) simulator.RunReport {
			cfg := storagesim.Generate(uint64(s))
			cfg.Profile = prof
			if *duration > 0 {
				cfg.Duration = *duration
			}
			res, err := storagesim.Run(cfg)
			if err != nil {
				return simulator.RunReport{Err: err}
			}
			simulated.Add(int64(res.Simulated / time.Second))
			rep := simulator.RunReport{Steps: int64(res.Ticks)}
			if res.Failed() {
				// Shrink here, on the worker: a sweep that keeps going
				// shrinks its violations on every core.
				v := &storageViolation{seed: uint64(s), cfg: cfg, res: res, foundAfter: time.Since(start)}
				v.small, v.sres, v.shrinkErr = storagesim.Shrink(cfg)
				v.shrunkAfter = time.Since(start)
				rep.Err = v
			}
			return rep
		},
		OnRun: func(s simulator.Seed, rep simulator.RunReport) {
			if prog != nil {
				prog.ran(s, rep)
			}
		},
	})
	if prog != nil {
		prog.stop()
	}
	if err != nil {
		return err
	}
	failures := sweep.Failures
	if !*keepGoing && len(failures) > 1 {
		failures = failures[:1] // the lowest failing seed; others ran beside it
	}
	violations := 0
	for _, f := range failures {
		var v *storageViolation
		if !errors.As(f.Err, &v) {
			return fmt.Errorf("seed %s: %w", f.Seed, f.Err) // an invalid run or a panic: a harness error
		}
		violations++
		path, err := writeStorageViolation(*outDir, v)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "seed %d: %s\n  found after %s, shrunk after %s: %s\n  replay: cpilab storage replay %s\n",
			v.seed, v.res.Violations[0], v.foundAfter.Round(time.Millisecond), v.shrunkAfter.Round(time.Millisecond), path, path)
	}
	wall := sweep.Elapsed
	sim := float64(simulated.Load())
	fmt.Fprintf(stdout, "profile %s: %d runs, %d violations, %.0f h simulated in %s on %d cores: %.1f seeds/s, simulated/wall %.3g×\n",
		storagesim.ProfileName(prof), sweep.Runs, violations, sim/3600, wall.Round(time.Millisecond), par,
		sweep.SeedsPerSecond(), sim/max(wall.Seconds(), 1e-9))
	if violations > 0 {
		return exitError(1)
	}
	if sweep.Stopped {
		fmt.Fprintf(stdout, "incomplete: %d of %d seeds run (interrupted)\n", sweep.Runs, rng.Len())
		return exitError(exitRejected) // as the disk sweep: not a pass
	}
	return nil
}

// storageViolation is a failing seed of a storage sweep, shrunk on the
// worker that found it.
type storageViolation struct {
	seed       uint64
	cfg        storagesim.Config
	res        storagesim.Result
	small      storagesim.Config
	sres       storagesim.Result
	shrinkErr  error
	foundAfter time.Duration // since the sweep started
	// shrunkAfter is when its shrunk run was ready (since the sweep
	// started).
	shrunkAfter time.Duration
}

func (v *storageViolation) Error() string { return v.res.Violations[0].String() }

// writeStorageViolation writes a failing run's shrunk scenario file: the
// shrunk run, then the same run under the reference profile.
func writeStorageViolation(dir string, v *storageViolation) (string, error) {
	if v.shrinkErr != nil {
		return "", fmt.Errorf("seed %d: shrink: %w", v.seed, v.shrinkErr)
	}
	small, sres := v.small, v.sres
	if !sres.Failed() { // cannot happen: Shrink keeps the violation; keep the whole run then
		small, sres = v.cfg, v.res
	}
	var b strings.Builder
	whole := "the default duration"
	if v.cfg.Duration > 0 {
		whole = v.cfg.Duration.String()
	}
	comment := fmt.Sprintf("cpilab storage simulate --seeds %d --profile %s: %s\nshrunk from a run of %s with %d faults",
		v.seed, storagesim.ProfileName(v.cfg.Profile), sres.Violations[0], whole, len(v.cfg.Faults))
	if err := storagesim.WriteScenario(&b, comment, small, sres); err != nil {
		return "", err
	}
	if small.Profile != storage.Reference {
		ref := small
		ref.Profile = storage.Reference
		rres, err := storagesim.Run(ref)
		if err != nil {
			return "", err
		}
		b.WriteString("\n")
		if err := storagesim.WriteScenario(&b, "the same run under the reference profile", ref, rres); err != nil {
			return "", err
		}
	}
	path := filepath.Join(dir, fmt.Sprintf("storage-seed-%d.txt", v.seed))
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func runStorageReplay(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("storage replay", stderr)
	rewrite := fs.Bool("rewrite", false, "write the actual verdicts into the file instead of comparing")
	if err := parseOnly(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			writeHelp(stdout, "storage replay")
			return nil
		}
		return err
	}
	if fs.NArg() != 1 {
		return usageErrorf(fs, "want exactly one FILE, got %d arguments", fs.NArg())
	}
	return replayStorage(fs.Arg(0), *rewrite, stdout, stderr)
}

// isStorageScenario reports whether path is a storage scenario file: its
// first command is a storage run (storagesim's format). A file that cannot
// be read or parsed is left to the disk replayer, which says why.
func isStorageScenario(path string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	f, err := scenario.Parse(path, string(data))
	if err != nil {
		return false
	}
	cmds := f.Commands()
	return len(cmds) > 0 && cmds[0].Name == storagesim.Command
}

// replayStorage is `cpilab storage replay FILE`, also spelled `cpilab
// replay FILE` for a storage scenario.
func replayStorage(path string, rewrite bool, stdout, stderr io.Writer) error {
	if !rewrite {
		if err := storagesim.CheckFile(path); err != nil {
			fmt.Fprintf(stderr, "cpilab replay: %v\n", err)
			return exitError(exitUsage)
		}
	}
	rep, err := scenario.Run(path, storagesim.Registry(), &storagesim.State{}, scenario.Options{Rewrite: rewrite})
	if err != nil {
		return err
	}
	for _, m := range rep.Mismatches {
		fmt.Fprintln(stdout, m)
	}
	switch {
	case rep.Rewritten:
		fmt.Fprintf(stdout, "%s: %d runs, rewritten\n", rep.Path, rep.Commands)
	case len(rep.Mismatches) > 0:
		fmt.Fprintf(stdout, "%s: %d runs, %d differ from the expected output\n", rep.Path, rep.Commands, len(rep.Mismatches))
		return exitError(1)
	default:
		fmt.Fprintf(stdout, "%s: %d runs, all as expected\n", rep.Path, rep.Commands)
	}
	return nil
}
