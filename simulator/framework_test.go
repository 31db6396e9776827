package simulator_test

// An end-to-end use of the framework on a toy disk service with a known
// race, standing in for the director: a seeded workload on simrt, faults from
// a spec, safety checks against an oracle after every step, the porcupine
// model at the end, a sweep that finds the race, shrinking and the report.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/simulator"
	"github.com/cpilab/cpilab/simulator/diskmodel"
	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/simulator/shrink"
	"github.com/cpilab/cpilab/simulator/simrt"
)

// cloud is the toy IaaS; its attachments are the oracle's truth.
type cloud struct {
	attached map[string][]string // disk CID → VMs
	cids     int
}

var (
	errInjected    = errors.New("injected CPI error")
	errLost        = errors.New("response lost")
	errElsewhere   = errors.New("attached to another VM")
	errUnknownName = errors.New("unknown disk name")
)

// service is the toy director: disk name → CID and VM. With upstream set it
// checks under the lock, releases it for the CPI call and acts without
// re-checking (race (b) (docs/upstream.md)).
type service struct {
	s        *simrt.Sim
	mu       rt.Mutex
	upstream bool
	inj      *faults.Injector
	cloud    *cloud
	records  map[string]*record
}

type record struct{ cid, vm string }

// cpi calls the toy cloud through the fault injector.
func (d *service) cpi(method string, apply func()) error {
	for _, f := range d.inj.Next(faults.SeamCPI, method) {
		switch f.Kind {
		case faults.Latency:
			d.s.Sleep(f.Duration)
		case faults.CPIError:
			return errInjected
		case faults.LostResponse:
			apply()
			return errLost
		}
	}
	d.s.Sleep(time.Millisecond)
	apply()
	return nil
}

func (d *service) provide(name, vm string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.records[name]
	if r != nil && r.vm != "" {
		if r.vm != vm {
			return "", errElsewhere
		}
		return r.cid, nil
	}
	if r == nil {
		r = &record{}
		if err := d.cpi("create_disk", func() { d.cloud.cids++; r.cid = fmt.Sprintf("disk-%d", d.cloud.cids) }); err != nil {
			return "", err
		}
		d.records[name] = r
	}
	if d.upstream {
		d.mu.Unlock() // upstream holds only a per-VM lock across the CPI call
	}
	err := d.cpi("attach_disk", func() { d.cloud.attached[r.cid] = append(d.cloud.attached[r.cid], vm) })
	if d.upstream {
		d.mu.Lock()
	}
	if errors.Is(err, errLost) {
		r.vm = vm // it may have attached: keep the disk reserved for vm until a detach
	}
	if err != nil {
		return "", err
	}
	r.vm = vm
	return r.cid, nil
}

func (d *service) detach(name string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.records[name]
	if r == nil {
		return errUnknownName
	}
	if r.vm == "" {
		return nil
	}
	err := d.cpi("detach_disk", func() {
		d.cloud.attached[r.cid] = slices.DeleteFunc(d.cloud.attached[r.cid], func(v string) bool { return v == r.vm })
	})
	if err != nil && !errors.Is(err, errLost) {
		return err
	}
	r.vm = "" // lost response: the CPI detached; the director checks has_disk… (toy: trusts it)
	return err
}

// oracleView is what the checkers see: the cloud's attachments, copied.
type oracleView struct{ attached map[string][]string }

func (c *cloud) view() oracleView {
	v := oracleView{attached: map[string][]string{}}
	for cid, vms := range c.attached {
		v.attached[cid] = slices.Clone(vms)
	}
	return v
}

var attachedOnce = simulator.Invariant("disk-attached-to-at-most-one-vm", func(v oracleView) error {
	var cids []string
	for cid := range v.attached {
		cids = append(cids, cid)
	}
	slices.Sort(cids) // map order is the caller's business
	for _, cid := range cids {
		if vms := v.attached[cid]; len(vms) > 1 {
			return fmt.Errorf("%s attached to %s", cid, strings.Join(vms, " and "))
		}
	}
	return nil
})

type toyRun struct {
	rep     simulator.RunReport
	fired   faults.Schedule
	history diskmodel.Recorder
}

// runToy runs one seed: 3 clients × 8 operations on 2 disk names and 3 VMs.
func runToy(cfg simulator.RunConfig, inj *faults.Injector) *toyRun {
	cfg = cfg.WithDefaults()
	seeds := simulator.Derive(cfg.Seed)
	if inj == nil {
		inj = faults.NewRandom(cfg.Faults, seeds.Faults)
	}
	out := &toyRun{}
	checkers := simulator.Checkers[oracleView]{Seed: cfg.Seed, Safety: []simulator.Checker[oracleView]{attachedOnce}}
	var violation error
	res := simrt.Run(simrt.Config{Seed: seeds.Runtime, MaxSteps: 1e6, MaxTime: time.Hour}, func(s *simrt.Sim) {
		d := &service{s: s, mu: s.NewMutex(), upstream: cfg.Profile == simulator.ProfileUpstream, inj: inj,
			cloud: &cloud{attached: map[string][]string{}}, records: map[string]*record{}}
		work := rand.New(rand.NewPCG(seeds.Workload, 0))
		step := 0
		g := rt.NewGroup(s)
		for client := range 3 {
			g.Go(fmt.Sprintf("client-%d", client), func() {
				for range 8 {
					name := []string{"data", "logs"}[work.IntN(2)]
					vm := []string{"vm-1", "vm-2", "vm-3"}[work.IntN(3)]
					var in diskmodel.Input
					var cid string
					var err error
					if work.IntN(3) == 0 {
						in = diskmodel.Input{Kind: diskmodel.Detach, Disk: name}
						id := out.history.Call(client, in)
						err = d.detach(name)
						out.history.Return(id, outcome(err, ""))
					} else {
						in = diskmodel.Input{Kind: diskmodel.Provide, Disk: name, VM: vm}
						id := out.history.Call(client, in)
						cid, err = d.provide(name, vm)
						out.history.Return(id, outcome(err, cid))
					}
					s.Trace(fmt.Sprintf("%v: %v", in, err))
					step++
					if v := checkers.AfterStep(step, d.cloud.view()); v != nil && violation == nil {
						violation = v
					}
				}
			})
		}
		g.Wait()
	})
	out.rep = simulator.RunReport{Steps: res.Steps, TraceHash: res.TraceHash, Err: res.Err}
	if out.rep.Err == nil {
		out.rep.Err = violation
	}
	out.fired = inj.Fired()
	return out
}

func outcome(err error, cid string) diskmodel.Output {
	switch {
	case err == nil:
		return diskmodel.Output{Outcome: diskmodel.OK, CID: cid}
	case errors.Is(err, errLost):
		return diskmodel.Output{Outcome: diskmodel.Unknown}
	default:
		return diskmodel.Output{Outcome: diskmodel.Failed}
	}
}

func TestFrameworkFindsShrinksAndReportsTheToyRace(t *testing.T) {
	spec, err := faults.ParseSpec("cpi-error=0.1,lost-response=0.05,latency=0.3:1ms..1s")
	if err != nil {
		t.Fatal(err)
	}
	base := simulator.RunConfig{Steps: 24, Faults: spec}
	sweep := func(profile string, stop bool) simulator.SweepResult {
		res, err := simulator.Sweep(context.Background(), simulator.SweepConfig{
			Seeds: simulator.SeedRange{From: 1, To: 300}, Parallelism: 2, StopOnFailure: stop,
			Run: func(seed simulator.Seed) simulator.RunReport {
				c := base
				c.Seed, c.Profile = seed, profile
				run := runToy(c, nil)
				if run.rep.Err == nil {
					// The model must accept a correct service's histories,
					// failures and lost responses included.
					lin, err := diskmodel.Check(run.history.History(), diskmodel.Options{Timeout: 10 * time.Second})
					if err != nil || !lin.Linearizable() {
						run.rep.Err = fmt.Errorf("history not linearizable (%v, %v):\n%s", lin.Illegal, err, diskmodel.Describe(run.history.History()))
					}
				}
				return run.rep
			},
			Replay: func(seed simulator.Seed) string {
				c := base
				c.Seed, c.Profile = seed, profile
				return c.Command()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if ref := sweep(simulator.ProfileReference, false); len(ref.Failures) != 0 {
		t.Fatalf("reference profile failed: %s", ref.First())
	}
	up := sweep(simulator.ProfileUpstream, true)
	first := up.First()
	if first == nil {
		t.Fatal("300 seeds under the upstream profile did not find the race")
	}
	var v *simulator.Violation
	if !errors.As(first.Err, &v) || v.Invariant != "disk-attached-to-at-most-one-vm" {
		t.Fatalf("first failure: %v", first)
	}

	// Replay: the same seed fails the same way, with the same trace hash.
	cfg := base
	cfg.Seed, cfg.Profile = first.Seed, simulator.ProfileUpstream
	run := runToy(cfg, nil)
	if run.rep.TraceHash != first.TraceHash || run.rep.Err == nil {
		t.Fatalf("replay of seed %d: hash %x vs %x, err %v", first.Seed, run.rep.TraceHash, first.TraceHash, run.rep.Err)
	}
	// The history of the failing run is not linearizable either.
	html := filepath.Join(t.TempDir(), "lin.html")
	lin, err := diskmodel.Check(run.history.History(), diskmodel.Options{Visualization: html, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if lin.Linearizable() {
		t.Fatalf("the failing run's history is linearizable:\n%s", diskmodel.Describe(run.history.History()))
	}

	// Shrink the fired faults: the race needs none.
	sched, err := faults.ParseSchedule(run.fired.String()) // the printed schedule replays
	if err != nil {
		t.Fatal(err)
	}
	if again := runToy(cfg, faults.NewScripted(sched)); again.rep.TraceHash != run.rep.TraceHash {
		t.Fatal("the scripted replay of the printed schedule diverged")
	}
	minimal, st := shrink.Minimize(sched, func(s faults.Schedule) bool {
		return runToy(cfg, faults.NewScripted(s)).rep.Err != nil
	}, shrink.Options{MaxTests: 200})
	if runToy(cfg, faults.NewScripted(minimal)).rep.Err == nil || len(minimal) > len(sched) || st.Tests == 0 {
		t.Fatalf("shrinking gave %d faults from %d (%+v) that no longer fail", len(minimal), len(sched), st)
	}

	rep := simulator.FailureReport{Config: cfg, Err: run.rep.Err, TraceHash: run.rep.TraceHash, Faults: minimal, Visualization: lin.Visualization}
	for _, want := range []string{fmt.Sprintf("FAIL seed %d", first.Seed), "disk-attached-to-at-most-one-vm", "--profile upstream", first.Replay} {
		if !strings.Contains(rep.String(), want) {
			t.Fatalf("report lacks %q:\n%s", want, rep)
		}
	}
	t.Logf("found at seed %d of 300 (%d runs), %d faults shrunk to %d in %d runs\n%s", first.Seed, up.Runs, len(sched), len(minimal), st.Tests, rep)
}
