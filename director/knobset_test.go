package director_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/director"
)

// Knobs.Set turns one knob on by name, on top of a profile, and refuses an
// unknown name, listing the knobs.
func TestKnobsSetByName(t *testing.T) {
	var k director.Knobs
	if err := k.Set("NoTaskTakeover"); err != nil {
		t.Fatal(err)
	}
	if !k.NoTaskTakeover || k.NoDiskNameLock {
		t.Fatalf("after Set(NoTaskTakeover): %+v; want that knob alone", k)
	}
	err := k.Set("NoSuchKnob")
	if err == nil || !strings.Contains(err.Error(), "NoDiskNameLock") {
		t.Fatalf("Set(NoSuchKnob) = %v; want an error listing the knobs", err)
	}
	up, err := director.Profile(director.ProfileUpstream)
	if err != nil {
		t.Fatal(err)
	}
	var all director.Knobs
	for _, name := range director.KnobNames() {
		if err := all.Set(name); err != nil {
			t.Fatal(err)
		}
	}
	if all != up {
		t.Fatalf("every knob by name: %+v; the upstream profile: %+v", all, up)
	}
	if !slices.IsSorted(director.KnobNames()) {
		t.Fatalf("KnobNames not sorted: %v", director.KnobNames())
	}
}
