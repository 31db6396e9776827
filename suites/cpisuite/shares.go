package cpisuite

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"testing"

	"github.com/cpilab/cpilab/suites"
)

// workerCount is how many processes a run uses: opts.Workers, else
// $CPILAB_SUITES_WORKERS (suites.WorkersEnv), else NumCPU + 1 (a CPI call waits on its process
// and the IaaS about half the time), at most one per contract context; and
// 1 inside a test binary (which cannot be run again as a certify command).
func workerCount(opts suites.RunOptions, cfg Config) int {
	if opts.Workers > 0 {
		return opts.Workers
	}
	if testing.Testing() || opts.DryRun {
		return 1
	}
	if n, err := strconv.Atoi(os.Getenv(suites.WorkersEnv)); err == nil && n > 0 {
		return n
	}
	return max(1, min(len(cfg.Contexts), runtime.NumCPU()+1))
}

// weight estimates a container's run time, for a fair split.
func shareWeights(cfg Config) (names []string, weights []int) {
	for _, c := range cfg.Contexts {
		w := 5
		if c.Thorough {
			w = 9
		}
		names, weights = append(names, c.Name), append(weights, w)
	}
	for _, r := range cfg.Rows {
		w := 1
		if r.Refused || r.FailsClearly {
			w = 0
		}
		names, weights = append(names, r.Name), append(weights, w)
	}
	if !cfg.Explore.Off {
		names, weights = append(names, ExploreRow), append(weights, 4)
	}
	return names, weights
}

// shares splits the containers over n processes: heaviest first, each to
// the lightest share so far.
func shares(cfg Config, n int) [][]string {
	names, weights := shareWeights(cfg)
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return weights[b] - weights[a] })
	out := make([][]string, n)
	load := make([]int, n)
	for _, i := range order {
		j := slices.Index(load, slices.Min(load))
		out[j] = append(out[j], names[i])
		load[j] += weights[i] + 1
	}
	return out
}
