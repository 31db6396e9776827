package cpisuite

import (
	"slices"
	"strings"
	"testing"
)

// TestShares: every container is in exactly one share, and the contract
// contexts (the heavy ones) are spread first.
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
}
