package storagesim

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/cpilab/cpilab/storage"
)

// countSince is storage.CountInWindow on times in order.
func TestCountSinceIsCountInWindow(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		start := time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)
		var ts []time.Time
		at := start
		for i := range rapid.IntRange(0, 40).Draw(t, "n") {
			at = at.Add(time.Duration(rapid.IntRange(0, 12*60).Draw(t, fmt.Sprint("gap", i))) * time.Minute)
			ts = append(ts, at)
		}
		q := start.Add(time.Duration(rapid.IntRange(0, 10*24*60).Draw(t, "at")) * time.Minute)
		window := time.Duration(rapid.IntRange(0, 48*60).Draw(t, "window")) * time.Minute
		if got, want := countSince(ts, q, window), storage.CountInWindow(slices.Values(ts), q, window); got != want {
			t.Fatalf("countSince(%v, %s, %s) = %d, CountInWindow = %d", ts, q, window, got, want)
		}
	})
}
