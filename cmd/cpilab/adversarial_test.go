package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/cpilab/cpilab/adversarial"
)

// The campaign's command-line area against cpilab's own front doors
// (certify, simulate, replay and the servers, with malformed flags and
// half-written or hostile scenario files): no crash, nothing left behind,
// every refusal clear. The other areas run in package adversarial.
func TestAdversarialCLIArea(t *testing.T) {
	scale := adversarial.ScaleTest
	if testing.Short() {
		scale = adversarial.ScaleShort
	}
	rep, err := adversarial.Run(context.Background(), adversarial.Config{Seed: 5, Scale: scale, Areas: []string{adversarial.AreaCLI},
		CLI: runNested, FixturesDir: "../../fixtures"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	_ = rep.WriteTable(&b)
	if !rep.Clean() || rep.Total.ClearErrors != rep.Total.ErrorsExpected || rep.Total.Tried == 0 {
		t.Fatalf("the cli area found something:\n%s", b.String())
	}
	t.Log("\n" + b.String())
}

// The command refuses what it does not know, as every command does.
func TestAdversarialUsage(t *testing.T) {
	for _, args := range [][]string{{"adversarial", "--areas", "nope"}, {"adversarial", "--scale", "huge"}, {"adversarial", "--seed", "0"}, {"adversarial", "x"}} {
		code, _, errb := runArgs(args...)
		if code != exitUsage || errb == "" {
			t.Errorf("%q: exit %d, stderr %q; want 2 and a message", args, code, errb)
		}
	}
}

// Outside a source checkout (no fixtures/ around the working directory)
// the campaign uses the fixtures built into cpilab.
func TestAdversarialNeedsNoCheckout(t *testing.T) {
	t.Chdir(t.TempDir())
	rep, err := adversarial.Run(context.Background(), adversarial.Config{Seed: 5, Scale: adversarial.ScaleShort, Areas: []string{adversarial.AreaCLI},
		CLI: runNested})
	if err != nil {
		t.Fatalf("adversarial outside a checkout: %v", err)
	}
	if rep.Total.Tried == 0 || !rep.Clean() {
		var b bytes.Buffer
		_ = rep.WriteTable(&b)
		t.Fatalf("the cli area with the built-in fixtures:\n%s", b.String())
	}
}
