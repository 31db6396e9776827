package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"

	"github.com/cpilab/cpilab/cpimodel/explore"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/cpisuite"
)

// exploreFlags are certify's flags for random lifecycles (the contract
// suite's explore row): --explore runs only them with a bigger budget,
// --replay FILE runs a replay file's steps alone; --seed and
// --explore-steps set the seed and the budget (the default run explores a
// small seeded budget too).
type exploreFlags struct {
	explore   bool
	seed      uint64
	steps     int
	replay    string
	replayOut string
	noExplore bool
	noShrink  bool
}

// exploreOnlySteps is --explore's budget when --explore-steps is not given.
const exploreOnlySteps = 600

func registerCertifyExplore(fs *flag.FlagSet, f *certifyFlags) {
	e := &f.explore
	fs.BoolVar(&e.explore, "explore", false, "run only random lifecycles (the explore row: rapid draws call sequences over several VMs, disks, snapshots and stemcells under each caller profile, the contract's model checked over the whole cloud after every step), with a bigger budget")
	fs.Uint64Var(&e.seed, "seed", cpisuite.DefaultExploreSeed, "`S` seeds the random lifecycles: the same seed, the same sequences (the default run explores too, with this seed)")
	fs.IntVar(&e.steps, "explore-steps", 0, fmt.Sprintf("about `N` steps of random lifecycles in all (default %d in a default run, %d with --explore)", cpisuite.DefaultExploreSteps, exploreOnlySteps))
	fs.StringVar(&e.replay, "replay", "", "run only the steps of replay `FILE` (written by a failed exploration) and check the model after each")
	fs.StringVar(&e.replayOut, "replay-out", "", "write the shrunk steps of a failed exploration to `FILE` (default: a file in the temporary directory, named in the failure)")
	fs.BoolVar(&e.noExplore, "no-explore", false, "leave the random lifecycles out of the run")
	fs.BoolVar(&e.noShrink, "no-shrink", false, "report the first failing sequence of the random lifecycles as found, unshrunk (the same verdict and clause, without the reruns shrinking makes)")
}

// checkCertifyExplore refuses flags that cannot work together.
func (f *certifyFlags) checkExplore(fs *flag.FlagSet) error {
	e := f.explore
	switch {
	case e.steps < 0:
		return usageError(fs, "--explore-steps %d: want a positive number of steps", e.steps)
	case e.replay != "" && e.explore:
		return usageError(fs, "--replay and --explore exclude each other: a replay runs its own steps")
	case e.noExplore && (e.explore || e.replay != ""):
		return usageError(fs, "--no-explore excludes --explore and --replay")
	case e.noShrink && (e.noExplore || e.replay != ""):
		return usageError(fs, "--no-shrink applies to random lifecycles: --no-explore leaves them out and --replay runs its own steps, never shrunk")
	}
	return nil
}

// applyCertifyExplore sets the explore row's configuration and, with
// --explore or --replay, runs that row alone (within any --label-filter).
// The note it returns says what is explored, with the seed.
func applyCertifyExplore(cfg *cpisuite.Config, opts *suites.RunOptions, f certifyFlags) (note string, err error) {
	e := f.explore
	cfg.Explore = cpisuite.Explore{Seed: e.seed, Steps: e.steps, Off: e.noExplore, ReplayFile: e.replayOut, NoShrink: e.noShrink}
	if e.explore && e.steps == 0 {
		cfg.Explore.Steps = exploreOnlySteps
	}
	if e.replay != "" {
		raw, err := os.ReadFile(e.replay)
		if err != nil {
			return "", fmt.Errorf("--replay: %w", err)
		}
		var rp explore.Replay
		if err := json.Unmarshal(raw, &rp); err != nil || len(rp.Steps) == 0 {
			if err == nil {
				err = fmt.Errorf("no steps")
			}
			return "", fmt.Errorf("--replay %s: not a replay file ({\"steps\": [...]}): %v", e.replay, err)
		}
		cfg.Explore.Replay = &rp
	}
	if e.explore || e.replay != "" {
		only := "row:" + cpisuite.ExploreRow
		if opts.LabelFilter != "" {
			only = "(" + opts.LabelFilter + ") && " + only
		}
		opts.LabelFilter = only
	}
	switch {
	case e.noExplore:
		return "random lifecycles: left out (--no-explore)", nil
	case e.replay != "":
		return fmt.Sprintf("random lifecycles: replaying %d steps of %s", len(cfg.Explore.Replay.Steps), e.replay), nil
	}
	steps := cfg.Explore.Steps
	if steps == 0 {
		steps = cpisuite.DefaultExploreSteps
	}
	unshrunk := ""
	if e.noShrink {
		unshrunk = "; a failure is reported as found, unshrunk (--no-shrink)"
	}
	return fmt.Sprintf("random lifecycles: seed %d, about %d steps (--seed, --explore-steps; the model is checked after every step)%s", e.seed, steps, unshrunk), nil
}
