package director

import (
	"maps"
	"slices"
)

// JobTypes lists every task type the director runs, sorted: what a test
// that must cover every job (the kill -9 at every step) checks itself
// against.
func JobTypes() []string { return slices.Sorted(maps.Keys(jobSpecs)) }
