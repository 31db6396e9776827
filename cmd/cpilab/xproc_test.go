package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/internal/disksm"
	"github.com/cpilab/cpilab/internal/pgtest"
)

// The state machine of the disk jobs across processes: the system under
// test is `cpilab fakeiaas`, one api process and three worker processes of
// the real binary on one PostgreSQL database.
//
// The processes start once per test (a start and a deployment cost more
// than every check together); each rapid check begins from a clean slate
// made through the API (its disk names deleted, orphaned disks deleted,
// the fake cloud's oracle then holding no disk), so checks do not depend
// on each other, and shrinking replays them on the same processes.

// xprocKinds are the calls the state machine draws: provide (twice as
// often: it creates, attaches and races), attach to an instance (the same
// or another), detach, delete.
var xprocKinds = []string{"provide", "provide", "attach", "detach", "delete"}

// xproc is the multi-process deployment under test and what the checks
// keep across rounds.
type xproc struct {
	t     *testing.T // the test the processes belong to
	c     *cluster
	insts []director.Instance
	azs   []string
	ctx   context.Context
	// killed maps the owner of every worker killed so far to the instant
	// of its kill (after its process was gone).
	killed map[string]time.Time
	// outcomes holds every task's end as first seen, to check that it
	// never changes.
	outcomes map[int64]director.TaskView
	// nextWorker numbers replacement workers.
	nextWorker int
	// refused counts the calls with hostile names, refused at once.
	refused int
}

// xprocConfig selects the cluster's shape for newXproc.
type xprocConfig struct {
	// workerArgs are extra flags for every worker process (a broken
	// variant's knobs, in the tests that show the checks fail).
	workerArgs []string
}

// newXproc starts the cluster, deploys three instances and slows attach
// and detach down so that kills land inside tasks.
func newXproc(t *testing.T, cfg xprocConfig) *xproc {
	t.Helper()
	c := startCluster(t, clusterConfig{database: pgtest.URL(t), workers: 3, taskLease: 2 * time.Second, workerArgs: cfg.workerArgs})
	insts := c.deploy(t, "xp", 3)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if _, err := fakeiaas.NewClient(c.fakeURL).AddFaultText(ctx,
		"op=attach_disk effect=latency delay=100ms\nop=detach_disk effect=latency delay=100ms"); err != nil {
		t.Fatal(err)
	}
	x := &xproc{t: t, c: c, insts: insts, ctx: ctx, killed: map[string]time.Time{}, outcomes: map[int64]director.TaskView{},
		nextWorker: len(c.workers) + 1}
	for _, in := range insts {
		x.azs = append(x.azs, in.AZ)
	}
	return x
}

// TestDiskJobsStateMachineAcrossProcesses drives one api and three worker
// processes on PostgreSQL with rounds of concurrent dynamic disk calls drawn
// by rapid (repeated and hostile names); in one round of each check a worker
// is killed with -9 (and a replacement started) while the calls run. After
// every round: every task ended (done, or failed with a message: none
// lost); the outcomes and the records are explained by a serial order of
// the calls under the in-process test's model (a task failed by a takeover
// may have made any part of its effect); the records equal the fake cloud's
// oracle, an attached disk has its agent's link in the VM root, and
// orphaned disks number no more than the provides taken over (any other is
// a leak); no lock was held by two owners at once; each task took its locks
// in one process (or in a killed one and then the process that took it
// over). At the end, no task's outcome ever changed. Ten checks by default
// (-rapid.checks sets it): 30 to 50 s on a loaded two-core machine, the
// processes' start included.
func TestDiskJobsStateMachineAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fake cloud, an api process and three worker processes on PostgreSQL")
	}
	t.Parallel() // waits on its processes most of the time (about a fifth of a core): overlaps the package's other waiting tests
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == "100" {
		_ = f.Value.Set("10")
		defer func() { _ = f.Value.Set("100") }()
	}
	cfg := xprocConfigFromEnv(t)
	x := newXproc(t, cfg)
	start := time.Now()
	var rounds, kills int
	rapid.Check(t, func(rt *rapid.T) {
		r, k := x.check(rt)
		rounds, kills = rounds+r, kills+k
	})
	x.checkOutcomesStable(t)
	tasks, takenOver := len(x.outcomes), 0
	for _, tv := range x.outcomes {
		if outcomeOf(tv) == disksm.Unknown {
			takenOver++
		}
	}
	t.Logf("%d rounds, %d tasks, %d calls with hostile names refused, %d kills, %d tasks taken over from killed workers, in %s",
		rounds, tasks, x.refused, kills, takenOver, time.Since(start).Round(time.Millisecond))
}

// envXprocKnobs names director knobs (comma-separated) the workers of the
// cross-process tests run with: a broken variant, to show the tests fail,
// e.g. NoTaskTakeover (a dead worker's task is never
// taken over: it is lost) or NoDiskNameLock (concurrent provides of one
// name both create a disk: one leaks).
const envXprocKnobs = "CPILAB_XPROC_WORKER_KNOBS"

// xprocConfigFromEnv is the cluster's shape: the workers get the knobs of
// envXprocKnobs, if set.
func xprocConfigFromEnv(t *testing.T) xprocConfig {
	var cfg xprocConfig
	if knobs := os.Getenv(envXprocKnobs); knobs != "" {
		for _, k := range strings.Split(knobs, ",") {
			cfg.workerArgs = append(cfg.workerArgs, "--knob", k)
		}
		t.Logf("%s: the workers run with %v, a broken variant: this test must fail", envXprocKnobs, cfg.workerArgs)
	}
	return cfg
}

// check is one rapid check: a clean slate, then one to three rounds. It
// returns the rounds run and the workers killed.
func (x *xproc) check(rt *rapid.T) (rounds, kills int) {
	x.reset(rt)
	model := disksm.Model{}
	providesTakenOver := 0 // in this check: each may leave one orphaned disk
	n := rapid.IntRange(1, 3).Draw(rt, "rounds")
	// One kill per check, in one of its rounds: the fault runs in every
	// check, and the rounds before it check that nothing leaks without it.
	killRound := rapid.IntRange(0, n-1).Draw(rt, "kill round")
	for round := range n {
		ops := rapid.SliceOfN(disksm.OpGen(disksm.GenConfig{Kinds: xprocKinds, Names: disksm.Names,
			Hostile: disksm.HostileNames, Instances: len(x.insts)}), 1, 4).Draw(rt, "ops")
		kill := round == killRound

		ids := make([]int64, len(ops))
		for i, o := range ops { // queue them all before waiting: they run concurrently
			id, err := x.start(o)
			switch {
			case !o.Valid():
				var ae *director.APIError
				if !errors.As(err, &ae) || (ae.Status != http.StatusBadRequest && ae.Status != http.StatusNotFound &&
					ae.Status != http.StatusUnprocessableEntity) {
					rt.Fatalf("%v: %v (task %d); want it refused at once with HTTP 400, 404 or 422", o, err, id)
				}
				x.refused++
			case err != nil:
				rt.Fatalf("%v: %v", o, err)
			}
			ids[i] = id
		}
		if kill {
			x.killAndReplace(rt, rapid.IntRange(0, len(x.c.workers)-1).Draw(rt, "victim"))
			kills++
		}

		outcomes := make([]disksm.Outcome, len(ops))
		views := make([]director.TaskView, len(ops))
		for i, id := range ids {
			if id == 0 {
				outcomes[i] = disksm.Failed
				continue
			}
			views[i] = x.wait(rt, ops[i], id)
			outcomes[i] = outcomeOf(views[i])
			if outcomes[i] == disksm.Unknown && ops[i].Kind == "provide" {
				providesTakenOver++
			}
		}
		final := x.observe(rt, providesTakenOver)
		if why, ok := disksm.Linearizable(model, ops, outcomes, final, x.azs); !ok {
			var seen []string
			for i := range ops {
				seen = append(seen, fmt.Sprintf("%v=%v(task %d %q)", ops[i], outcomes[i], ids[i], views[i].Result))
			}
			rt.Fatalf("from %v, calls %v ended in %v: %s", model, seen, final, why)
		}
		model = final
		x.checkLocks(rt)
		rounds++
	}
	return rounds, kills
}

// start sends op's call as the disk-scoped user and returns its task (0
// when the call was refused).
func (x *xproc) start(o disksm.Op) (int64, error) {
	inst := x.insts[o.Inst].ID
	path := "/dynamic_disks/" + url.PathEscape(o.Name)
	switch o.Kind {
	case "provide":
		return x.c.disks.Start(x.ctx, http.MethodPost, "/dynamic_disks/provide", director.ProvideRequest{
			InstanceID: inst, DiskName: o.Name, DiskPoolName: "dynamic", DiskSize: disksm.NewDiskSize})
	case "attach":
		return x.c.disks.Start(x.ctx, http.MethodPost, path+"/attach", map[string]string{"instance_id": inst})
	case "detach":
		return x.c.disks.Start(x.ctx, http.MethodPost, path+"/detach", nil)
	case "delete":
		return x.c.disks.Start(x.ctx, http.MethodDelete, path, nil)
	}
	return 0, fmt.Errorf("no call for %v", o)
}

// xprocTaskDeadline is how long a round waits for its tasks: a task that
// has not ended by then is lost. Each waits behind at most three others on
// its disk name (a few seconds each) and one takeover (a task lease of 2 s,
// a sweep every second); 30 s is several times that.
const xprocTaskDeadline = 30 * time.Second

// wait waits for a task to end, and fails the check if it is lost (not
// ended by xprocTaskDeadline), ends otherwise than done or error, fails
// without a message, or ends differently from an earlier read.
func (x *xproc) wait(rt fataler, o disksm.Op, id int64) director.TaskView {
	ctx, cancel := context.WithTimeout(x.ctx, xprocTaskDeadline)
	defer cancel()
	tv, err := x.c.admin.WaitTask(ctx, id)
	var tf *director.TaskFailedError
	if err != nil && !errors.As(err, &tf) {
		rt.Fatalf("%v: task %d did not end: %v", o, id, err)
	}
	switch tv.State {
	case director.TaskDone:
	case director.TaskError:
		if strings.TrimSpace(tv.Result) == "" {
			rt.Fatalf("%v: task %d failed without a message", o, id)
		}
	default:
		rt.Fatalf("%v: task %d ended %s (%q); want done, or error with a message", o, id, tv.State, tv.Result)
	}
	if prev, ok := x.outcomes[id]; ok && (prev.State != tv.State || prev.Result != tv.Result) {
		rt.Fatalf("task %d ended %s %q, later %s %q", id, prev.State, prev.Result, tv.State, tv.Result)
	}
	x.outcomes[id] = tv
	return tv
}

// outcomeOf is what a caller learned from a task's end: a task taken over
// from a dead worker may have made any part of its effect.
func outcomeOf(tv director.TaskView) disksm.Outcome {
	switch {
	case tv.State == director.TaskDone:
		return disksm.Done
	case strings.Contains(tv.Result, director.ReasonLeaseLapsed):
		return disksm.Unknown
	}
	return disksm.Failed
}

// killAndReplace kills a worker with -9 and starts a replacement in its
// place. So that the kill lands inside a task, it waits (up to two seconds)
// for a worker to hold a lock and kills the first seen holding one,
// looking at worker i first; failing that it kills worker i idle.
func (x *xproc) killAndReplace(rt fataler, i int) {
	n := len(x.c.workers)
	chosen := false
	for deadline := time.Now().Add(2 * time.Second); !chosen && time.Now().Before(deadline); {
		evs := x.c.lockEvents(rt)
		for k := range n {
			if _, ok := heldBy(evs, x.c.owners[(i+k)%n]); ok {
				i, chosen = (i+k)%n, true
				break
			}
		}
		if !chosen {
			time.Sleep(5 * time.Millisecond)
		}
	}
	victim, owner := x.c.workers[i], x.c.owners[i]
	if err := victim.cmd.Process.Kill(); err != nil {
		rt.Fatalf("kill -9 %s: %v", victim.name, err)
	}
	<-victim.done
	x.killed[owner] = time.Now()
	// The replacement belongs to the test, not to this check: it serves
	// the checks that follow.
	x.c.workers[i], x.c.owners[i] = x.c.startWorker(x.t, x.nextWorker)
	x.nextWorker++
}

// reset makes a clean slate: every name deleted, every orphaned disk
// deleted, and then the fake cloud holds no disk.
func (x *xproc) reset(rt *rapid.T) {
	for _, n := range disksm.Names {
		id, err := x.c.admin.Start(x.ctx, http.MethodDelete, "/dynamic_disks/"+n, nil)
		if err != nil {
			rt.Fatalf("reset: delete %s: %v", n, err)
		}
		if tv := x.wait(rt, disksm.Op{Kind: "delete", Name: n}, id); tv.State != director.TaskDone {
			rt.Fatalf("reset: delete %s: task %d %s %q", n, id, tv.State, tv.Result)
		}
	}
	var orphans []director.OrphanedDisk
	if err := x.c.admin.GetJSON(x.ctx, "/disks?orphaned=true", &orphans); err != nil {
		rt.Fatal(err)
	}
	for _, o := range orphans {
		id, err := x.c.admin.Start(x.ctx, http.MethodDelete, "/disks/"+o.CID, nil)
		if err != nil {
			rt.Fatalf("reset: delete orphaned disk %s: %v", o.CID, err)
		}
		if tv := x.wait(rt, disksm.Op{Kind: "delete", Name: o.CID}, id); tv.State != director.TaskDone {
			rt.Fatalf("reset: delete orphaned disk %s: task %d %s %q", o.CID, id, tv.State, tv.Result)
		}
	}
	st, err := fakeiaas.NewClient(x.c.fakeURL).State(x.ctx)
	if err != nil {
		rt.Fatal(err)
	}
	if len(st.Disks) != 0 {
		rt.Fatalf("reset: the fake cloud still holds %d disks after every name and orphan was deleted: %+v", len(st.Disks), st.Disks)
	}
}

// observe checks the director's records against the fake cloud's oracle
// and the VM roots, and returns them as the model's state. Orphaned disks
// number at most the provides taken over since the clean slate (a takeover
// makes the disk a dead provide created an orphan); any other is a leak.
func (x *xproc) observe(rt *rapid.T, providesTakenOver int) disksm.Model {
	var oracle problems
	checkRecordsAgainstOracle(&oracle, x.ctx, x.c, "xp")
	oracle.fatal(rt, "the records differ from the fake cloud's oracle")
	disks, err := x.c.admin.DynamicDisks(x.ctx)
	if err != nil {
		rt.Fatal(err)
	}
	var orphans []director.OrphanedDisk
	if err := x.c.admin.GetJSON(x.ctx, "/disks?orphaned=true", &orphans); err != nil {
		rt.Fatal(err)
	}
	if len(orphans) > providesTakenOver {
		rt.Fatalf("%d orphaned disks %+v, and %d provides taken over from killed workers: a disk leaked from a task",
			len(orphans), orphans, providesTakenOver)
	}
	insts, err := x.c.admin.Instances(x.ctx, "xp")
	if err != nil {
		rt.Fatal(err)
	}
	m := disksm.Model{}
	for _, d := range disks {
		az := ""
		if d.AZ != nil {
			az = *d.AZ
		}
		ds := disksm.Disk{At: -1, AZ: az, Size: d.SizeMiB}
		if name := d.InstanceName(); name != "" {
			idx := slices.IndexFunc(x.insts, func(in director.Instance) bool { return in.Group+"/"+in.ID == name })
			if idx < 0 {
				rt.Fatalf("disk %q attached to %s, not an instance of the deployment", d.Name, name)
			}
			vm := ""
			for _, in := range insts {
				if in.ID == x.insts[idx].ID {
					vm = in.VMCID
				}
			}
			// `cpilab fakeiaas --data-dir D` keeps its cloud in D/fakeiaas.
			link := filepath.Join(x.c.dir, "fakeiaas", "fakeiaas", "vms", vm, "root", agent.DynamicDiskLink(d.CID))
			if _, err := os.Lstat(link); err != nil {
				rt.Fatalf("disk %q (%s) is attached to %s (VM %s) without its agent's link: %v", d.Name, d.CID, name, vm, err)
			}
			ds.At = idx
		}
		m[d.Name] = ds
	}
	return m
}

// checkLocks checks every process's lock log so far: no lock held by two
// owners at once (a killed worker's holds end at its kill), and each task's
// locks taken in one process, or in a killed one and then in the one that
// took the task over.
func (x *xproc) checkLocks(rt fataler) {
	evs := x.c.lockEvents(rt)
	// A killed worker's holds end when it died: close them there.
	open := map[string]director.LockEvent{}
	for _, ev := range evs {
		key := ev.Name + "|" + ev.Owner
		if ev.Acquired {
			open[key] = ev
		} else {
			delete(open, key)
		}
	}
	closed := slices.Clone(evs)
	for _, ev := range open {
		if at, ok := x.killed[processOf(ev.Owner)]; ok {
			ev.Acquired, ev.At = false, at
			closed = append(closed, ev)
		}
	}
	overlaps, _ := lockOverlaps(closed, "", time.Time{})
	found := problems(overlaps)
	slices.SortStableFunc(evs, func(a, b director.LockEvent) int { return a.At.Compare(b.At) })
	procs := map[int64][]string{}
	for _, ev := range evs {
		if p := processOf(ev.Owner); ev.Acquired && !slices.Contains(procs[ev.TaskID], p) {
			procs[ev.TaskID] = append(procs[ev.TaskID], p)
		}
	}
	for id, ps := range procs {
		if len(ps) == 1 {
			continue
		}
		_, firstKilled := x.killed[ps[0]]
		tv := x.outcomes[id]
		if len(ps) > 2 || !firstKilled || outcomeOf(tv) != disksm.Unknown {
			found.Errorf("task %d took locks in processes %v and ended %s %q: it ran twice", id, ps, tv.State, tv.Result)
		}
	}
	found.fatal(rt, "locks")
}

// fataler is what the checks need of a test: a *testing.T or a *rapid.T.
type fataler interface {
	reporter
	Fatalf(format string, args ...any)
}

// problems collects what a checker reports, so that a rapid check fails
// with all of it in its one message.
type problems []string

func (p *problems) Errorf(format string, args ...any) { *p = append(*p, fmt.Sprintf(format, args...)) }
func (p *problems) Fatal(args ...any)                 { *p = append(*p, fmt.Sprint(args...)) }

// fatal fails the check with every problem, if any.
func (p problems) fatal(rt fataler, what string) {
	if len(p) > 0 {
		rt.Fatalf("%s:\n  %s", what, strings.Join(p, "\n  "))
	}
}

// processOf is the process part of a lock owner ("<process>/task-<id>/<n>").
func processOf(owner string) string {
	p, _, _ := strings.Cut(owner, "/")
	return p
}

// checkOutcomesStable reads every task seen again: none ended differently
// later (a task run twice, or written by a worker that lost it).
func (x *xproc) checkOutcomesStable(t *testing.T) {
	t.Helper()
	for id, prev := range x.outcomes {
		tv, err := x.c.admin.Task(x.ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if tv.State != prev.State || tv.Result != prev.Result {
			t.Errorf("task %d ended %s %q, now reads %s %q", id, prev.State, prev.Result, tv.State, tv.Result)
		}
	}
}
