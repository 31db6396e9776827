package simulator

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/simulator/faults"
)

// Invariant names, as violations and scenario files print them.
const (
	// InvDiskOnOneVM: a disk is attached to at most one VM (oracle, after
	// every step).
	InvDiskOnOneVM = "disk-attached-to-at-most-one-vm"
	// InvAttachElsewhere: the director never calls attach_disk for a disk
	// the IaaS shows attached to another VM (oracle, at the CPI call).
	InvAttachElsewhere = "no-attach-of-disk-attached-elsewhere"
	// InvDeleteVMWithDisk: no delete_vm while the IaaS has a dynamic disk
	// attached to that VM (oracle, at the CPI call).
	InvDeleteVMWithDisk = "no-delete-vm-with-attached-dynamic-disk"
	// InvDeleteAttachedDisk: no delete_disk of a disk the IaaS shows
	// attached (oracle, at the CPI call).
	InvDeleteAttachedDisk = "no-delete-disk-of-attached-disk"
	// InvVMCallsSerial: the director never has two of attach_disk,
	// detach_disk and delete_vm in flight on one VM (oracle, at the CPI
	// call; vmcalls.go).
	InvVMCallsSerial = "one-disk-call-per-vm"
	// InvLinks: agent symlinks match the IaaS attachments (oracle and VM
	// roots, once quiescent and after every OK provide).
	InvLinks = "agent-links-match-iaas"
	// InvRecords: once quiescent (and whenever the workload is idle), the
	// dynamic disks the Director's API lists match the IaaS, and the last
	// OK provide or attach of each name still holds; a record of a disk
	// the IaaS no longer has, or has detached, is allowed only while a
	// failed delete or detach of the name is in doubt (detached: also a
	// provide, attach or VM operation failed on a CPI fault). An OK re-attaching recreate keeps the promises of
	// its instance's names at once.
	InvRecords = "director-records-match-iaas"
	// InvNoLeak: once quiescent, every IaaS disk is one the Director's API
	// lists (dynamic disk or orphan).
	InvNoLeak = "no-leaked-disk"
	// InvDirectorRestarts: a crashed director starts again from its store
	// (its supervisor retrying a failed start).
	InvDirectorRestarts = "director-restarts"
	// InvLiveness: every task ends once faults heal: none is queued or
	// processing in GET /tasks, and every task the workload was given has
	// ended in GET /tasks/:id.
	InvLiveness = "task-liveness"
	// InvExplained: every failed operation is explained: a fault on its
	// path, an invalid request by the workload, or a documented refusal
	// (explain.go).
	InvExplained = "every-failure-explained"
	// InvProgress: a provide or attach the Director queued, with no fault
	// on its path, ends within the client's task timeout (20 min of
	// simulated time); checked once liveness holds.
	InvProgress = "provide-progress"
	// InvLostLockHonoured: a task whose lock another task took (its lease
	// lapsed) starts no step after that, as its event log shows (at
	// quiescence; lapses.go).
	InvLostLockHonoured = "lost-lock-stops-job"
	// InvLinearizable: the dynamic-disk API history is linearizable per
	// disk name (porcupine, diskmodel).
	InvLinearizable = "linearizable-dynamic-disk-api"
	// InvAgentBoots: every VM's agent starts from its metadata and
	// registry (the world's health: a VM whose agent cannot boot stops the
	// run).
	InvAgentBoots = "agent-boots"
)

// Race is one upstream race (docs/upstream.md): the director knob that
// reproduces it, the invariant it violates, and how random search looks for
// it.
type Race struct {
	// Letter is the race's letter: a–i, and j (upstream's delete-vm with a
	// responsive agent); docs/upstream.md lists each.
	Letter string
	// Title says what goes wrong.
	Title string
	// Knob turns on the upstream behaviour behind the race (for (f), the
	// unlink before detach_disk and upstream's trust in its error).
	Knob func(*director.Knobs)
	// Invariants are the invariants a run that hits the race violates; the
	// first is the one its scenario names.
	Invariants []string
	// Search is the workload and fault mix random search uses to find it.
	Search SearchConfig
}

// SearchConfig is how random search looks for a race: the fault spec and
// the workload shape.
type SearchConfig struct {
	// Faults is the fault spec text.
	Faults string
	// Workload is the workload shape.
	Workload WorkloadConfig
	// VMType is the instance group's vm_type ("default" or "restarting").
	VMType string
}

// Races lists the races (docs/upstream.md) in order.
var Races = []Race{
	{Letter: "a", Title: "two concurrent provides of one name both create_disk; one IaaS disk leaks",
		Knob: func(k *director.Knobs) { k.NoDiskNameLock = true }, Invariants: []string{InvExplained, InvNoLeak},
		Search: SearchConfig{Faults: "none", Workload: WorkloadConfig{Shape: ShapeLight, Clients: 4, Disks: 1, Mix: "provide=5,delete=3", MaxDelay: time.Second}}},
	{Letter: "b", Title: "provide of one disk to two VMs: per-VM locks only, so two attach_disk calls",
		Knob: func(k *director.Knobs) { k.NoDiskNameLock = true }, Invariants: []string{InvAttachElsewhere, InvDiskOnOneVM},
		Search: SearchConfig{Faults: "none", Workload: WorkloadConfig{Shape: ShapeLight, Clients: 3, Disks: 2, Mix: "provide=6,detach=3,delete=1"}}},
	{Letter: "c", Title: "provide lands in a recreate's window (after detach, before delete_vm)",
		Knob: func(k *director.Knobs) { k.VMLockPerCPICallOnly = true }, Invariants: []string{InvDeleteVMWithDisk},
		Search: SearchConfig{Faults: "none", Workload: WorkloadConfig{Shape: ShapeLight, Clients: 3, Disks: 3, Mix: "provide=6,recreate=4"}}},
	{Letter: "d", Title: "recreate with an unresponsive agent deletes the VM with dynamic disks still attached",
		Knob: func(k *director.Knobs) { k.RecreateUnresponsiveSkipsDetach = true }, Invariants: []string{InvDeleteVMWithDisk},
		Search: SearchConfig{Faults: "agent-unresponsive=0.05:10s..2m", Workload: WorkloadConfig{Shape: ShapeLight, Clients: 2, Disks: 3, Mix: "provide=6,recreate=3"}}},
	{Letter: "e", Title: "DELETE of an attached disk calls delete_disk on an in-use disk",
		Knob: func(k *director.Knobs) { k.DeleteWithoutDetach = true }, Invariants: []string{InvDeleteAttachedDisk},
		Search: SearchConfig{Faults: "none", Workload: WorkloadConfig{Shape: ShapeLight, Clients: 2, Disks: 2, Mix: "provide=4,delete=2"}}},
	{Letter: "f", Title: "detach removes the symlink before the CPI detach; a CPI failure leaves the disk attached, unlinked",
		Knob: func(k *director.Knobs) { k.UnlinkBeforeDetach, k.TrustCPIErrors = true, true }, Invariants: []string{InvLinks},
		Search: SearchConfig{Faults: "cpi-error=0.1", Workload: WorkloadConfig{Shape: ShapeLight, Clients: 2, Disks: 2, Mix: "provide=4,detach=3"}}},
	{Letter: "g", Title: "add_dynamic_disk without waiting for the agent after attach (VM restarts on attach)",
		Knob: func(k *director.Knobs) { k.NoWaitUntilReadyAfterAttach = true }, Invariants: []string{InvLinks},
		Search: SearchConfig{Faults: "vm-restart-on-attach=0.3", Workload: WorkloadConfig{Shape: ShapeLight, Clients: 2, Disks: 2, Mix: "provide=4,detach=2,recreate=1"}}},
	{Letter: "h", Title: `an old agent answers "unknown message", which is swallowed: provide succeeds with no symlink`,
		Knob: func(k *director.Knobs) { k.SwallowUnknownMessage = true }, Invariants: []string{InvLinks},
		Search: SearchConfig{Faults: "agent-old=0.3", Workload: WorkloadConfig{Shape: ShapeLight, Clients: 2, Disks: 2, Mix: "provide=4,detach=2,recreate=1"}}},
	{Letter: "j", Title: "delete-vm with a responsive agent deletes the VM with dynamic disks still attached",
		Knob: func(k *director.Knobs) { k.DeleteVMKeepsDisksAttached = true }, Invariants: []string{InvDeleteVMWithDisk},
		Search: SearchConfig{Faults: "none", Workload: WorkloadConfig{Shape: ShapeLight, Clients: 2, Disks: 2, Mix: "provide=6,delete-vm=2"}}},
	{Letter: "i", Title: "zero dedicated dynamic-disk workers: tasks stay queued forever",
		Knob: func(k *director.Knobs) { k.ZeroDynamicDiskWorkers = true }, Invariants: []string{InvLiveness},
		Search: SearchConfig{Faults: "none", Workload: WorkloadConfig{Shape: ShapeLight, Clients: 2, Disks: 2, Mix: "provide=4,detach=1"}}},
}

// RaceByLetter returns the race with that letter.
func RaceByLetter(letter string) (Race, error) {
	for _, r := range Races {
		if r.Letter == letter {
			return r, nil
		}
	}
	letters := make([]string, len(Races))
	for i, r := range Races {
		letters[i] = r.Letter
	}
	return Race{}, fmt.Errorf("no race %q (want one of %s)", letter, strings.Join(letters, ", "))
}

// Profile is the profile turning on only this race's knob: "upstream:X".
func (r Race) Profile() string { return ProfileUpstream + ":" + r.Letter }

// Detects reports whether err is a violation of one of the race's
// invariants.
func (r Race) Detects(err error) bool {
	v, ok := AsViolation(err)
	if !ok {
		return false
	}
	for _, inv := range r.Invariants {
		if v.Invariant == inv {
			return true
		}
	}
	return false
}

// SearchResult is one random search for a race.
type SearchResult struct {
	// Found reports whether a seed hit the race.
	Found bool
	// Seed is the lowest seed of the range that hit it.
	Seed Seed
	// Runs counts the runs made.
	Runs int
	// Elapsed is the wall-clock time to the detection (or to the end).
	Elapsed time.Duration
}

// Find runs seeds from..from+max-1 under the race's profile (only its
// knob), fault spec and workload, on parallelism cores, and stops at the
// first seed whose run violates one of the race's invariants.
func (r Race) Find(ctx context.Context, from Seed, max uint64, steps, parallelism int) (SearchResult, error) {
	if _, err := faults.ParseSpec(r.Search.Faults); err != nil {
		return SearchResult{}, err
	}
	res, err := Sweep(ctx, SweepConfig{Seeds: SeedRange{From: from, To: from + Seed(max) - 1}, Parallelism: parallelism,
		StopOnFailure: true,
		Run: func(seed Seed) RunReport {
			c, _ := r.SearchRun(r.Profile(), seed, steps)
			c.SkipLinearizability = true
			rep := Simulate(c).Report()
			if rep.Err != nil && !r.Detects(rep.Err) {
				rep.Err = nil // another finding: keep searching for this race
			}
			return rep
		}})
	if err != nil {
		return SearchResult{}, err
	}
	out := SearchResult{Runs: res.Runs, Elapsed: res.Elapsed}
	if f := res.First(); f != nil {
		out.Found, out.Seed = true, f.Seed
	}
	return out, nil
}

// SearchRun is one run of the race's search workload and fault mix under
// profile (the race's own, r.Profile(), or ProfileReference to show that
// the reference director survives it) from seed, with steps workload steps.
func (r Race) SearchRun(profile string, seed Seed, steps int) (SimConfig, error) {
	spec, err := faults.ParseSpec(r.Search.Faults)
	if err != nil {
		return SimConfig{}, fmt.Errorf("race (%s) search faults: %w", r.Letter, err)
	}
	return SimConfig{RunConfig: RunConfig{Seed: seed, Profile: profile, Steps: steps, Faults: spec, Workload: r.Search.Workload},
		VMType: r.Search.VMType}, nil
}

// ReferenceSweepFaults is the fault spec of the reference sweep: every kind
// of faults.DefaultSpec at its default rate, lost responses included (they
// left the reference director's records wrong, the lost-response-*.txt
// scenarios, until it began calling in-doubt disk calls again).
const ReferenceSweepFaults = "cpi-error=0.02,lost-response=0.01,latency=0.05,director-crash=0.002,agent-unresponsive=0.01," +
	"agent-restart=0.005,agent-old=0.05,vm-restart-on-attach=0.1,mbus-lost=0.01,mbus-delay=0.05,cpi-outage=0.002"
