package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
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
	case "-h", "--help", "help":
		fmt.Fprintln(stderr, storageUsage)
		return flag.ErrHelp
	case "run":
		return runStorageRun(ctx, args[1:], stdout, stderr)
	case "simulate":
		return runStorageSimulate(ctx, args[1:], stdout, stderr)
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
	fs.StringVar(&cc.URL, "director", "", "the Director's URL (required)")
	fs.StringVar(&caFile, "ca-cert", "", "PEM file of the CA the Director's certificate is checked against")
	fs.StringVar(&cc.Username, "user", "", "user with bosh.admin, or bosh.dynamic-disks.create and .attach (resize needs create)")
	fs.StringVar(&cc.Password, "password", "", "its password")
	fs.StringVar(&cc.Token, "token", "", "or a bearer token")
	fs.StringVar(&policyPath, "policy", "", "YAML file of the volumes and their policies (required; see docs in README)")
	fs.StringVar(&statusAt, "status", "storage-status.json", "JSON file the volumes' status is kept in (written atomically)")
	fs.StringVar(&natsURL, "nats-url", "", "the mbus the agents listen on, for their usage reports (required)")
	fs.StringVar(&agentUUID, "mbus-uuid", "cpilab-storage", "this process's name on the mbus (reply subjects)")
	fs.StringVar(&profile, "profile", "reference", "reference, fork or fork:KNOB[,KNOB] (budget-reset, no-cooldown, no-hysteresis)")
	fs.DurationVar(&interval, "interval", time.Minute, "time between two reconciliations of every volume")
	fs.BoolVar(&once, "once", false, "reconcile every volume once and exit")
	if err := parseFlags(fs, args); err != nil {
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

func runStorageSimulate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("storage simulate", stderr)
	seeds := fs.String("seeds", "1..100", "seed range A..B (or one seed); each seed draws a whole run (storagesim.Generate)")
	profile := fs.String("profile", "reference", "reference, fork or fork:KNOB[,KNOB] (budget-reset, no-cooldown, no-hysteresis)")
	outDir := fs.String("out", ".", "where each violation's shrunk scenario (storage-seed-N.txt) goes")
	duration := fs.Duration("duration", 0, "virtual time per run (default: storagesim's, 4 weeks)")
	keepGoing := fs.Bool("keep-going", false, "run every seed instead of stopping at the first violation")
	if err := parseFlags(fs, args); err != nil {
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
	if err := os.MkdirAll(*outDir, 0o755); err != nil {
		return err
	}
	start := time.Now() // I/O edge: progress on the wall clock
	total := uint64(rng.To-rng.From) + 1
	var runs, violations int
	var simulated time.Duration
	for s := uint64(rng.From); ; s++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		cfg := storagesim.Generate(s)
		cfg.Profile = prof
		if *duration > 0 {
			cfg.Duration = *duration
		}
		res, err := storagesim.Run(cfg)
		if err != nil {
			return fmt.Errorf("seed %d: %w", s, err)
		}
		runs++
		simulated += res.Simulated
		if res.Failed() {
			violations++
			path, err := saveStorageViolation(*outDir, s, cfg, res)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "seed %d: %s\n  shrunk scenario: %s\n  replay: cpilab storage replay %s\n", s, res.Violations[0], path, path)
			if !*keepGoing {
				break
			}
		}
		if runs%100 == 0 || uint64(runs) == total {
			fmt.Fprintf(stderr, "storage simulate: %d/%d seeds, %d violations, %s\n", runs, total, violations, time.Since(start).Round(time.Millisecond))
		}
		if s == uint64(rng.To) {
			break
		}
	}
	wall := time.Since(start)
	fmt.Fprintf(stdout, "profile %s: %d runs, %d violations, %s simulated in %s\n", storagesim.ProfileName(prof), runs, violations,
		simulated.Round(time.Hour), wall.Round(time.Millisecond))
	if violations > 0 {
		return exitError(1)
	}
	return nil
}

// saveStorageViolation shrinks a failing run and writes it as a scenario
// file (the shrunk run, then the same run under the reference profile).
func saveStorageViolation(dir string, seed uint64, cfg storagesim.Config, res storagesim.Result) (string, error) {
	small, sres, err := storagesim.Shrink(cfg)
	if err != nil {
		return "", fmt.Errorf("seed %d: shrink: %w", seed, err)
	}
	if !sres.Failed() { // cannot happen: Shrink keeps the violation; keep the whole run then
		small, sres = cfg, res
	}
	var b strings.Builder
	whole := "the default duration"
	if cfg.Duration > 0 {
		whole = cfg.Duration.String()
	}
	comment := fmt.Sprintf("cpilab storage simulate --seeds %d --profile %s: %s\nshrunk from a run of %s with %d faults",
		seed, storagesim.ProfileName(cfg.Profile), sres.Violations[0], whole, len(cfg.Faults))
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
	path := filepath.Join(dir, fmt.Sprintf("storage-seed-%d.txt", seed))
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

func runStorageReplay(args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("storage replay", stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: cpilab storage replay [--rewrite] FILE\n\nReplays a storage scenario file (fixtures/scenarios/storage, or one cpilab storage simulate wrote)\nand compares every run's verdict with the file's expected output.")
		fs.PrintDefaults()
	}
	rewrite := fs.Bool("rewrite", false, "write the actual verdicts into the file instead of comparing")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return exitError(2)
	}
	if fs.NArg() != 1 {
		return usageErrorf(fs, "want exactly one FILE, got %d arguments", fs.NArg())
	}
	rep, err := scenario.Run(fs.Arg(0), storagesim.Registry(), &storagesim.State{}, scenario.Options{Rewrite: *rewrite})
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
