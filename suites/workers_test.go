package suites

import (
	"slices"
	"strings"
	"testing"

	"github.com/onsi/ginkgo/v2/types"
)

// TestShares: every container is in exactly one share, the contract
// contexts (the heavy ones) are spread first, and a share's filter keeps
// the user's filter.
func TestShares(t *testing.T) {
	cfg := Config{}.withDefaults()
	for n := 1; n <= 6; n++ {
		parts := shares(cfg, n)
		var all []string
		for _, p := range parts {
			all = append(all, p...)
		}
		names, _ := shareWeights(cfg)
		slices.Sort(all)
		slices.Sort(names)
		if !slices.Equal(all, names) {
			t.Fatalf("%d workers: shares %v do not hold each container once", n, parts)
		}
		if n <= len(cfg.Contexts) {
			for i, p := range parts {
				if !slices.ContainsFunc(p, func(r string) bool { return strings.Contains(r, "director") || strings.HasPrefix(r, "cli.api") }) {
					t.Errorf("%d workers: share %d has no contract context: %v", n, i, p)
				}
			}
		}
	}
	f := shareFilter("area:errors", []string{"d1.c1.s1", "cli.api2"})
	m, err := types.ParseLabelFilter(f)
	if err != nil {
		t.Fatal(err)
	}
	if !m([]string{"row:cli.api2", "area:errors"}) || m([]string{"row:cli.api2", "area:shapes"}) || m([]string{"row:d2.c2.s2", "area:errors"}) {
		t.Fatalf("filter %q selects the wrong specs", f)
	}
}

func TestProgressHubWaitsForEveryTotal(t *testing.T) {
	var got []int
	h := &progressHub{n: 2, totals: map[int]int{}, out: func(done, total int, sr *types.SpecReport) {
		got = append(got, done, total)
	}}
	h.total(0, 3)
	h.spec(types.SpecReport{})
	if len(got) != 0 {
		t.Fatalf("progress before every worker said its total: %v", got)
	}
	h.total(1, 2)
	h.spec(types.SpecReport{})
	if want := []int{0, 5, 1, 5, 2, 5}; !slices.Equal(got, want) {
		t.Fatalf("progress %v, want %v", got, want)
	}
}

// A worker's CPI processes get the worker's own TMPDIR (each worker judges
// its own cloud); outside a worker they get the caller's.
func TestWorkerGivesItsCPIsTheirOwnTmpdir(t *testing.T) {
	t.Setenv("TMPDIR", "/caller-tmp")
	t.Setenv(cpiTmpEnv, "")
	if env := cpiEnv(); env != nil {
		t.Fatalf("outside a worker: cpiEnv() = %q, want nil (the scrubbed environment)", env)
	}
	t.Setenv(cpiTmpEnv, "/worker-tmp")
	var tmp []string
	for _, kv := range cpiEnv() {
		if strings.HasPrefix(kv, "TMPDIR=") {
			tmp = append(tmp, kv)
		}
	}
	if !slices.Equal(tmp, []string{"TMPDIR=/worker-tmp"}) {
		t.Fatalf("in a worker: TMPDIR entries %q, want only the worker's", tmp)
	}
}
