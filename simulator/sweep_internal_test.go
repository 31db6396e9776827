package simulator

import (
	"runtime/debug"
	"testing"
)

// TestSweepRaisesGCTargetAndRestoresIt: a sweep collects at sweepGCPercent
// while it runs (nested sweeps too) and leaves the target as it found it; a
// higher target set by the user is kept.
func TestSweepRaisesGCTargetAndRestoresIt(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	outer := raiseGC()
	if got := debug.SetGCPercent(sweepGCPercent); got != sweepGCPercent {
		t.Fatalf("during a sweep: GC target %d, want %d", got, sweepGCPercent)
	}
	inner := raiseGC()
	inner()
	if got := debug.SetGCPercent(sweepGCPercent); got != sweepGCPercent {
		t.Fatalf("after a nested sweep ended inside another: GC target %d, want %d", got, sweepGCPercent)
	}
	outer()
	if got := debug.SetGCPercent(800); got != 100 {
		t.Fatalf("after the sweeps: GC target %d, want the 100 it was", got)
	}
	restore := raiseGC()
	if got := debug.SetGCPercent(800); got != 800 {
		t.Fatalf("user's GOGC 800 during a sweep: got %d", got)
	}
	restore()
	if got := debug.SetGCPercent(100); got != 800 {
		t.Fatalf("after a sweep under GOGC 800: got %d", got)
	}
}
