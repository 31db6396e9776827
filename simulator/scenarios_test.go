package simulator_test

import (
	"path/filepath"
	"strings"
	"testing"

	"flag"
	"github.com/cpilab/cpilab/simulator"
	"github.com/cpilab/cpilab/simulator/scenario"
)

// rewrite: go test -run … -args -rewrite replaces the expected output in
// the scenario files with the actual output.
var rewrite = flag.Bool("rewrite", false, "rewrite the expected output in scenario files with the actual output")

const scenarioDir = "../fixtures/scenarios"

// Every scenario file replays with its checked-in output (-rewrite updates
// it). The race files (docs/upstream.md) also must fail under their upstream
// behaviour naming one of the race's invariants, and pass under reference.
func TestScenarios(t *testing.T) {
	files, err := scenario.Files(scenarioDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatalf("no scenario files in %s", scenarioDir)
	}
	reg := simulator.ScenarioRegistry()
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			st := &simulator.ScenarioState{}
			scenario.RunTest(t, f, reg, func() *simulator.ScenarioState { return st }, *rewrite)
			letter, ok := strings.CutPrefix(strings.TrimSuffix(filepath.Base(f), ".txt"), "race-")
			if !ok {
				return
			}
			race, err := simulator.RaceByLetter(letter)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Outcomes) != 2 {
				t.Fatalf("race file has %d runs, want 2 (upstream, then reference)", len(st.Outcomes))
			}
			up, ref := st.Outcomes[0], st.Outcomes[1]
			if !race.Detects(up.Err) {
				t.Errorf("race (%s) under %s: %v; want a violation of %v", letter, up.Config.Profile, up.Err, race.Invariants)
			}
			if ref.Config.Profile != simulator.ProfileReference || ref.Err != nil {
				t.Errorf("race (%s) under %s: %v; want no violation under reference", letter, ref.Config.Profile, ref.Err)
			}
		})
	}
}
