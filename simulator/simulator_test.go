package simulator_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/simulator"
	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/simulator/simrt"
)

func TestSeeds(t *testing.T) {
	for text, want := range map[string]simulator.Seed{"42": 42, "0x2a": 42, " 7 ": 7, "18446744073709551615": 1<<64 - 1} {
		if got, err := simulator.ParseSeed(text); err != nil || got != want {
			t.Errorf("ParseSeed(%q) = %v, %v", text, got, err)
		}
	}
	for _, bad := range []string{"", "-1", "x", "1.5", "18446744073709551616"} {
		if _, err := simulator.ParseSeed(bad); err == nil {
			t.Errorf("ParseSeed(%q) accepted it", bad)
		}
	}
	r, err := simulator.ParseSeedRange("10..19")
	if err != nil || r.Len() != 10 || r.String() != "10..19" {
		t.Fatalf("ParseSeedRange: %v %v", r, err)
	}
	if r, err := simulator.ParseSeedRange("5"); err != nil || r.Len() != 1 {
		t.Fatalf("single seed range: %v %v", r, err)
	}
	if _, err := simulator.ParseSeedRange("9..3"); err == nil {
		t.Fatal("a backwards range was accepted")
	}
	a, b := simulator.Derive(1), simulator.Derive(2)
	if a.Runtime == a.Workload || a.Workload == a.Faults || a.Runtime == b.Runtime {
		t.Fatalf("sub-seeds collide: %+v %+v", a, b)
	}
	if a.Runtime != rt.StreamSeed(1, simulator.SubRuntime) {
		t.Fatal("Derive does not use rt.StreamSeed")
	}
}

func TestRunConfigCommandRoundTripsThroughFlags(t *testing.T) {
	spec, err := faults.ParseSpec("cpi-error=0.05,lost-response=0.02,latency=0.1:10ms..2s")
	if err != nil {
		t.Fatal(err)
	}
	for _, cfg := range []simulator.RunConfig{
		{Seed: 42},
		{Seed: 1<<64 - 1, Steps: 5000, Profile: simulator.ProfileUpstream, Faults: spec},
		{Seed: 3, Faults: faults.DefaultSpec()},
	} {
		args := cfg.Args()
		if args[0] != "simulate" {
			t.Fatalf("Args() = %q", args)
		}
		var back simulator.RunConfig
		fs := flag.NewFlagSet("simulate", flag.ContinueOnError)
		back.RegisterFlags(fs)
		if err := fs.Parse(args[1:]); err != nil {
			t.Fatal(err)
		}
		want := cfg.WithDefaults()
		if back.Seed != want.Seed || back.Steps != want.Steps || back.Profile != want.Profile || !back.Faults.Equal(want.Faults) {
			t.Fatalf("%q parsed back as %+v, want %+v", args, back, want)
		}
		if err := back.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	got := simulator.RunConfig{Seed: 7, Profile: simulator.ProfileUpstream, Faults: spec}.Command()
	want := "cpilab simulate --seed 7 --steps 200 --profile upstream --faults cpi-error=0.05,lost-response=0.02,latency=0.1:10ms..2s"
	if got != want {
		t.Fatalf("Command() =\n%s\nwant\n%s", got, want)
	}
	if got := simulator.ReplayCommand("out/it's here.txt"); got != `cpilab replay 'out/it'\''s here.txt'` {
		t.Fatalf("ReplayCommand = %s", got)
	}
	if err := (simulator.RunConfig{Profile: "bogus"}).Validate(); err == nil {
		t.Fatal("an unknown profile was accepted")
	}
}

type view struct{ attachments map[string][]string }

func TestCheckersReportTheFirstViolation(t *testing.T) {
	once := simulator.Invariant("disk-attached-to-one-vm", func(v view) error {
		for _, d := range sortedKeys(v.attachments) {
			if vms := v.attachments[d]; len(vms) > 1 {
				return fmt.Errorf("disk %s attached to %s", d, strings.Join(vms, " and "))
			}
		}
		return nil
	})
	never := simulator.Invariant("never", func(view) error { return errors.New("always fails") })
	c := simulator.Checkers[view]{Seed: 9, Safety: []simulator.Checker[view]{once}, Quiescent: []simulator.Checker[view]{once, never}}
	good := view{attachments: map[string][]string{"d1": {"vm1"}}}
	bad := view{attachments: map[string][]string{"d1": {"vm1", "vm2"}}}
	if err := c.AfterStep(3, good); err != nil {
		t.Fatal(err)
	}
	err := c.AfterStep(4, bad)
	var v *simulator.Violation
	if !errors.As(err, &v) || v.Invariant != "disk-attached-to-one-vm" || v.Step != 4 || v.Seed != 9 || v.Phase != simulator.AfterStep {
		t.Fatalf("violation = %#v", err)
	}
	if want := `invariant "disk-attached-to-one-vm" violated after step 4 (seed 9): disk d1 attached to vm1 and vm2`; err.Error() != want {
		t.Fatalf("Error() = %q", err)
	}
	if err := c.AtQuiescence(10, good); !errors.As(err, &v) || v.Invariant != "never" || v.Phase != simulator.AtQuiescence {
		t.Fatalf("quiescent violation = %v", err)
	}
}

func sortedKeys(m map[string][]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// lostUpdate is a run with a real race: two goroutines increment a counter
// with a read, a scheduling point, and a write. Some interleavings lose an
// update.
func lostUpdate(seed simulator.Seed) simulator.RunReport {
	counter := 0
	res := simrt.Run(simrt.Config{Seed: simulator.Derive(seed).Runtime, MaxSteps: 10000}, func(s *simrt.Sim) {
		g := rt.NewGroup(s)
		for range 2 {
			g.Go("incrementer", func() {
				v := counter
				s.Yield()
				counter = v + 1
			})
		}
		g.Wait()
	})
	rep := simulator.RunReport{Steps: res.Steps, TraceHash: res.TraceHash, Err: res.Err}
	if rep.Err == nil && counter != 2 {
		rep.Err = &simulator.Violation{Invariant: "no-lost-update", Phase: simulator.AtQuiescence, Seed: seed,
			Err: fmt.Errorf("counter = %d after two increments", counter)}
	}
	return rep
}

func TestSweepFindsFailuresDeterministically(t *testing.T) {
	replay := func(s simulator.Seed) string { return simulator.RunConfig{Seed: s}.Command() }
	full, err := simulator.Sweep(context.Background(), simulator.SweepConfig{
		Seeds: simulator.SeedRange{From: 1, To: 200}, Parallelism: 2, Run: lostUpdate, Replay: replay,
	})
	if err != nil {
		t.Fatal(err)
	}
	if full.Runs != 200 || full.Stopped || len(full.Failures) == 0 || len(full.Failures) == 200 {
		t.Fatalf("full sweep: %d runs, %d failures, stopped %v", full.Runs, len(full.Failures), full.Stopped)
	}
	first := full.First()
	if !strings.Contains(first.Replay, fmt.Sprintf("--seed %d ", first.Seed)) || !strings.Contains(first.String(), "no-lost-update") {
		t.Fatalf("first failure: %s", first)
	}
	// Replaying a failing seed fails the same way.
	again := lostUpdate(first.Seed)
	if again.Err == nil || again.TraceHash != first.TraceHash {
		t.Fatalf("replay of seed %d: %v, hash %x vs %x", first.Seed, again.Err, again.TraceHash, first.TraceHash)
	}
	// Stopping early still reports the lowest failing seed, whatever the
	// timing, and leaves seeds unrun.
	for range 3 {
		early, err := simulator.Sweep(context.Background(), simulator.SweepConfig{
			Seeds: simulator.SeedRange{From: 1, To: 200}, Parallelism: 2, StopOnFailure: true, Run: lostUpdate,
		})
		if err != nil {
			t.Fatal(err)
		}
		if early.First() == nil || early.First().Seed != first.Seed || !early.Stopped || early.Runs >= 200 {
			t.Fatalf("early-stopping sweep: first %v, %d runs, stopped %v; want seed %d", early.First(), early.Runs, early.Stopped, first.Seed)
		}
	}
}

func TestSweepCapturesPanicsAndHonoursCancel(t *testing.T) {
	res, err := simulator.Sweep(context.Background(), simulator.SweepConfig{
		Seeds: simulator.SeedRange{From: 0, To: 9},
		Run: func(s simulator.Seed) simulator.RunReport {
			if s == 5 {
				panic("harness bug")
			}
			return simulator.RunReport{Steps: 10}
		},
	})
	var pe *simulator.ErrPanicked
	if err != nil || len(res.Failures) != 1 || !errors.As(res.Failures[0].Err, &pe) || res.Steps != 90 {
		t.Fatalf("sweep with a panicking run: %+v %v", res, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err = simulator.Sweep(ctx, simulator.SweepConfig{Seeds: simulator.SeedRange{From: 0, To: 99},
		Run: func(simulator.Seed) simulator.RunReport { return simulator.RunReport{} }})
	if err != nil || res.Runs != 0 || !res.Stopped {
		t.Fatalf("cancelled sweep ran %d seeds (stopped %v, err %v)", res.Runs, res.Stopped, err)
	}
	if _, err := simulator.Sweep(context.Background(), simulator.SweepConfig{}); err == nil {
		t.Fatal("a sweep without a Run function was accepted")
	}
}

// BenchmarkSweep runs the lost-update simulation over many seeds on every
// core and reports seeds/s and simulated steps/s.
func BenchmarkSweep(b *testing.B) {
	var res simulator.SweepResult
	for i := 0; i < b.N; i++ {
		var err error
		res, err = simulator.Sweep(context.Background(), simulator.SweepConfig{
			Seeds: simulator.SeedRange{From: 1, To: 2000}, Run: lostUpdate,
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(res.SeedsPerSecond(), "seeds/s")
	b.ReportMetric(res.StepsPerSecond(), "steps/s")
}

func TestFailureReport(t *testing.T) {
	spec, _ := faults.ParseSpec("cpi-error=0.05")
	sched, _ := faults.ParseSchedule("cpi-error@12 on=attach_disk type=Bosh::Clouds::CloudError")
	r := simulator.FailureReport{
		Config:    simulator.RunConfig{Seed: 42, Profile: simulator.ProfileUpstream, Faults: spec},
		Err:       &simulator.Violation{Invariant: "one-vm", Phase: simulator.AfterStep, Step: 3, Seed: 42, Err: errors.New("two VMs")},
		TraceHash: 0xc0ffee, Faults: sched, TraceFile: "out/seed-42.txt", Visualization: "out/seed-42.html",
	}
	want := `FAIL seed 42 (profile upstream, 200 steps, faults cpi-error=0.05): invariant "one-vm" violated after step 3 (seed 42): two VMs
trace hash: 0000000000c0ffee
fault schedule (1 fault):
  cpi-error@12 on=attach_disk type=Bosh::Clouds::CloudError
minimized trace: out/seed-42.txt
history visualization: out/seed-42.html
replay: cpilab simulate --seed 42 --steps 200 --profile upstream --faults cpi-error=0.05
replay minimized: cpilab replay out/seed-42.txt
`
	if got := r.String(); got != want {
		t.Fatalf("report:\n%s\nwant:\n%s", got, want)
	}
	if got := (simulator.FailureReport{Config: simulator.RunConfig{Seed: 1}, Err: errors.New("x")}).String(); !strings.Contains(got, "fault schedule (0 faults):\nreplay: cpilab simulate --seed 1 ") {
		t.Fatalf("report without faults or files:\n%s", got)
	}
}
