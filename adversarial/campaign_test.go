package adversarial

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// areasHere are the areas this package's test runs (the cli area needs
// cpilab's command line: cmd/cpilab runs it).
var areasHere = []string{AreaDirector, AreaFakeIaaS, AreaSFTP, AreaAgent, AreaCPI, AreaPeers}

func runCampaign(t *testing.T, cfg Config) *Report {
	t.Helper()
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func table(rep *Report) string {
	var b bytes.Buffer
	_ = rep.WriteTable(&b)
	return b.String()
}

// The seeded slice of the campaign: every area tries its inputs, and none
// finds a crash, data lost, a leak or an escape; every input that must be
// refused is refused clearly.
func TestCampaignSlice(t *testing.T) {
	scale := ScaleTest
	if testing.Short() {
		scale = ScaleShort
	}
	rep := runCampaign(t, Config{Seed: 1, Scale: scale, Areas: areasHere})
	t.Log("\n" + table(rep))
	if len(rep.Rows) != len(areasHere) {
		t.Fatalf("%d areas ran, want %d", len(rep.Rows), len(areasHere))
	}
	for _, r := range rep.Rows {
		if r.Tried < inputsPerArea[scale][r.Area] {
			t.Errorf("%s tried %d inputs, want ≥ %d", r.Area, r.Tried, inputsPerArea[scale][r.Area])
		}
		if r.ErrorsExpected == 0 {
			t.Errorf("%s expected no refusal at all: its clear-error oracle checked nothing", r.Area)
		}
	}
	if !rep.Clean() || rep.Total.ClearErrors != rep.Total.ErrorsExpected {
		t.Fatalf("the campaign found something:\n%s", table(rep))
	}
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || back.Total.Tried != rep.Total.Tried || back.Replay == "" {
		t.Fatalf("JSON form: %v\n%s", err, js.String())
	}
}

// Each oracle can fail: a fault planted in an area (a panicking handler, an
// acknowledged disk overwritten, a goroutine or a daemon process left
// running, a writer following a link out of a VM root) is counted under
// its oracle, and nothing else is.
func TestPlantedFaultsAreCounted(t *testing.T) {
	for _, tc := range []struct {
		plant Plant
		count func(Row) int
	}{
		{Plant{AreaFakeIaaS, OracleCrash}, func(r Row) int { return r.Crashes }},
		{Plant{AreaFakeIaaS, OracleDataLost}, func(r Row) int { return r.DataLost }},
		{Plant{AreaFakeIaaS, OracleLeak}, func(r Row) int { return r.Leaks }},
		{Plant{AreaFakeIaaS, OracleEscape}, func(r Row) int { return r.Escapes }},
		{Plant{AreaCPI, OracleLeak}, func(r Row) int { return r.Leaks }},
		{Plant{AreaDirector, OracleCrash}, func(r Row) int { return r.Crashes }},
	} {
		t.Run(tc.plant.Area+"/"+string(tc.plant.Oracle), func(t *testing.T) {
			if tc.plant.Area == AreaDirector && testing.Short() {
				t.Log("the director's planted panic runs without -short only (its set-up deploys VMs)")
				return
			}
			cfg := Config{Seed: 2, Scale: ScaleShort, Areas: []string{tc.plant.Area}, Plant: []Plant{tc.plant}}
			if testing.Short() {
				cfg.Inputs = 4
			}
			rep := runCampaign(t, cfg)
			row := rep.Rows[0]
			if tc.count(row) == 0 {
				t.Fatalf("the planted %s was not counted:\n%s", tc.plant.Oracle, table(rep))
			}
			others := row.Crashes + row.DataLost + row.Leaks + row.Escapes - tc.count(row)
			if others != 0 {
				t.Fatalf("the planted %s was counted elsewhere too:\n%s", tc.plant.Oracle, table(rep))
			}
			found := false
			for _, f := range row.Findings {
				found = found || (f.Oracle == tc.plant.Oracle && f.Detail != "")
			}
			if !found || !strings.Contains(table(rep), string(tc.plant.Oracle)) {
				t.Fatalf("no finding describes the planted %s:\n%s", tc.plant.Oracle, table(rep))
			}
		})
	}
}

// The same seed draws the same inputs: the tally of a deterministic area
// is the same twice.
func TestSameSeedSameInputs(t *testing.T) {
	a := runCampaign(t, Config{Seed: 9, Scale: ScaleShort, Areas: []string{AreaFakeIaaS}})
	b := runCampaign(t, Config{Seed: 9, Scale: ScaleShort, Areas: []string{AreaFakeIaaS}})
	if a.Rows[0].Tried != b.Rows[0].Tried || a.Rows[0].ErrorsExpected != b.Rows[0].ErrorsExpected {
		t.Fatalf("two runs of seed 9 differ:\n%s\n%s", table(a), table(b))
	}
}

func TestUnknownAreaAndScale(t *testing.T) {
	if _, err := Run(context.Background(), Config{Areas: []string{"nope"}}); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown area: %v", err)
	}
	if _, err := Run(context.Background(), Config{Scale: "huge"}); err == nil {
		t.Error("unknown scale accepted")
	}
	if _, err := Run(context.Background(), Config{Areas: []string{AreaCLI}}); err == nil {
		t.Error("the cli area without Config.CLI accepted")
	}
}
