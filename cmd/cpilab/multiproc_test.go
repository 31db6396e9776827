package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/internal/pgtest"
)

// One api and three worker processes on one PostgreSQL database pass the
// dynamic disks suite, run by `cpilab certify-director --url`.
func TestCertifyDirectorAgainstSeveralProcessesOnPostgres(t *testing.T) {
	t.Parallel() // waits on its processes most of the time (about a fifth of a core): overlaps the package's other waiting tests
	db := pgtest.URL(t)
	c := startCluster(t, clusterConfig{database: db, workers: 3})
	stemcell, err := filepath.Abs("../../fixtures/director/stemcell-v2")
	if err != nil {
		t.Fatal(err)
	}
	ca := c.dir + "/ca.pem"
	if err := os.WriteFile(ca, c.ca, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(cpilabBinary(t), "certify-director", "--url", c.apiURL, "--ca-cert", ca,
		"--admin-user", "admin", "--admin-password", "admin", "--disk-user", "disks", "--disk-password", "disks",
		"--disk-pool", "dynamic", "--stemcell", stemcell).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "ACCEPTED: ") {
		t.Fatalf("certify-director against api + 3 workers on PostgreSQL: %v\n%s", err, out)
	}
	t.Logf("%s", lastLine(string(out)))
	// The workers ran the tasks, and more than one of them did.
	ran := map[string]bool{}
	for _, ev := range c.lockEvents(t) {
		if ev.Acquired {
			ran[strings.SplitN(ev.Owner, "/", 2)[0]] = true
		}
	}
	if len(ran) < 2 {
		t.Errorf("lock acquisitions came from %v; want the work spread over several worker processes", ran)
	}
	for o := range ran {
		if strings.HasPrefix(o, "api-") {
			t.Errorf("the api process %s took a lock: it must run no job", o)
		}
	}
}

// A workload of provides, detaches and deletes on one api and three worker
// processes, with kill -9 of a worker while it holds a task's locks: every
// task ends (done, or failed with a message), the killed worker's task is
// taken over and failed visibly, no lock is ever held by two owners at
// once, and the director's records equal the fake cloud's oracle.
func TestKillNineOfAWorkerLosesNoTask(t *testing.T) {
	t.Parallel() // waits on its processes most of the time (about a quarter of a core): overlaps the package's other waiting tests
	db := pgtest.URL(t)
	c := startCluster(t, clusterConfig{database: db, workers: 3, taskLease: 2 * time.Second})
	insts := c.deploy(t, "mp", 3)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Slow attaches and detaches keep tasks in flight, so that the kill
	// lands inside one.
	if _, err := fakeiaas.NewClient(c.fakeURL).AddFaultText(ctx,
		"op=attach_disk effect=latency delay=150ms\nop=detach_disk effect=latency delay=150ms"); err != nil {
		t.Fatal(err)
	}

	const names, rounds = 6, 4
	var mu sync.Mutex
	var started []int64
	start := func(method, path string, body any) (int64, error) {
		id, err := c.disks.Start(ctx, method, path, body)
		if err == nil {
			mu.Lock()
			started = append(started, id)
			mu.Unlock()
		}
		return id, err
	}
	// The killer: in the middle of the workload (a third of its tasks
	// queued), once worker 1 holds a lock (a task in flight), kill -9.
	victim, victimOwner := c.workers[0], c.owners[0]
	type kill struct {
		at     time.Time
		taskID int64
	}
	killed := make(chan kill, 1)
	go func() {
		for ctx.Err() == nil {
			mu.Lock()
			n := len(started)
			mu.Unlock()
			if n < names*rounds*5/2/3 {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if id, ok := heldBy(c.lockEvents(t), victimOwner); ok {
				at := time.Now()
				_ = victim.cmd.Process.Kill()
				<-victim.done
				killed <- kill{at: at, taskID: id}
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	var wg sync.WaitGroup
	errs := make(chan error, names)
	for n := range names {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := fmt.Sprintf("mp-disk-%d", n)
			for r := range rounds {
				inst := insts[(n+r)%len(insts)]
				steps := []struct {
					method, path string
					body         any
				}{
					{"POST", "/dynamic_disks/provide", director.ProvideRequest{InstanceID: inst.ID, DiskName: name, DiskPoolName: "dynamic", DiskSize: 16}},
					{"POST", "/dynamic_disks/" + name + "/detach", nil},
				}
				if r%2 == 1 {
					steps = append(steps, struct {
						method, path string
						body         any
					}{"DELETE", "/dynamic_disks/" + name, nil})
				}
				for _, s := range steps {
					id, err := start(s.method, s.path, s.body)
					if err != nil {
						errs <- fmt.Errorf("%s %s: %w", s.method, s.path, err)
						return
					}
					if _, err := c.disks.WaitTask(ctx, id); err != nil {
						var tf *director.TaskFailedError
						if !errors.As(err, &tf) {
							errs <- err
							return
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	var k kill
	select {
	case k = <-killed:
	default:
		t.Fatal("worker 1 never held a lock: the workload did not reach it, so nothing was killed")
	}
	t.Logf("killed %s at %s while it held task %d's locks; %d tasks", victimOwner, k.at.Format("15:04:05.000"), k.taskID, len(started))

	// Every task ended; failures say why.
	victimTask := false
	ended := map[director.TaskState]int{}
	for _, id := range started {
		tv, err := c.admin.WaitTask(ctx, id)
		var tf *director.TaskFailedError
		if err != nil && !errors.As(err, &tf) {
			t.Fatalf("task %d: %v", id, err)
		}
		ended[tv.State]++
		switch tv.State {
		case director.TaskDone:
		case director.TaskError:
			if tv.Result == "" {
				t.Errorf("task %d failed without a message", id)
			}
		default:
			t.Errorf("task %d ended %s", id, tv.State)
		}
		if id == k.taskID {
			victimTask = true
			if tv.State != director.TaskError || !strings.Contains(tv.Result, director.ReasonLeaseLapsed) {
				t.Errorf("the killed worker's task %d: %s %q; want it failed, taken over: %q", id, tv.State, tv.Result, director.ReasonLeaseLapsed)
			}
		}
	}
	if !victimTask {
		t.Errorf("the killed worker's task %d is not one the workload started", k.taskID)
	}
	t.Logf("tasks ended: %v", ended)

	// No lock held by two owners at once.
	checkLockIntervals(t, c.lockEvents(t), victimOwner, k.at)

	// The records equal the oracle.
	checkRecordsAgainstOracle(t, ctx, c, "mp")

	// Nothing left locked (the killed worker's locks were taken over and
	// released).
	var locks []director.LockView
	if err := c.admin.GetJSON(ctx, "/locks", &locks); err != nil {
		t.Fatal(err)
	}
	for _, l := range locks {
		if time.Now().Before(l.ExpiresAt) {
			t.Errorf("lock %s still held by %s (task %s) after every task ended", l.Name, l.Owner, l.TaskID)
		}
	}
}

// heldBy reports a task of owner's (the process part of lock owners) that
// holds a lock: acquired and not released.
func heldBy(evs []director.LockEvent, owner string) (int64, bool) {
	open := map[string]int64{} // lock owner → task
	for _, ev := range evs {
		if !strings.HasPrefix(ev.Owner, owner+"/") {
			continue
		}
		if ev.Acquired {
			open[ev.Owner+"|"+ev.Name] = ev.TaskID
		} else {
			delete(open, ev.Owner+"|"+ev.Name)
		}
	}
	for _, id := range open {
		return id, true
	}
	return 0, false
}

// checkLockIntervals checks that for every lock name, the intervals during
// which owners held it never overlap.
func checkLockIntervals(t *testing.T, evs []director.LockEvent, killedOwner string, killedAt time.Time) {
	t.Helper()
	problems, holds := lockOverlaps(evs, killedOwner, killedAt)
	for _, p := range problems {
		t.Error(p)
	}
	if holds == 0 {
		t.Error("no lock acquisitions were recorded")
	}
}

// lockOverlaps lists every two holds of one lock by different owners that
// overlap, and counts the holds. A hold by the killed process that was
// never released ends at the kill; any other hold never released lasts.
func lockOverlaps(evs []director.LockEvent, killedOwner string, killedAt time.Time) (problems []string, holds int) {
	type span struct {
		owner    string
		from, to time.Time
	}
	far := time.Now().Add(time.Hour)
	open := map[string]time.Time{}
	byName := map[string][]span{}
	slices.SortStableFunc(evs, func(a, b director.LockEvent) int { return a.At.Compare(b.At) })
	for _, ev := range evs {
		key := ev.Name + "|" + ev.Owner
		if ev.Acquired {
			open[key] = ev.At
			continue
		}
		if from, ok := open[key]; ok {
			byName[ev.Name] = append(byName[ev.Name], span{ev.Owner, from, ev.At})
			delete(open, key)
		}
	}
	for key, from := range open {
		name, owner, _ := strings.Cut(key, "|")
		to := far
		if strings.HasPrefix(owner, killedOwner+"/") {
			to = killedAt
		}
		byName[name] = append(byName[name], span{owner, from, to})
	}
	for name, spans := range byName {
		holds += len(spans)
		for i, a := range spans {
			for _, b := range spans[i+1:] {
				if a.owner != b.owner && a.from.Before(b.to) && b.from.Before(a.to) {
					problems = append(problems, fmt.Sprintf("lock %s held by %s (%s–%s) and by %s (%s–%s) at once", name,
						a.owner, a.from.Format("15:04:05.000000"), a.to.Format("15:04:05.000000"),
						b.owner, b.from.Format("15:04:05.000000"), b.to.Format("15:04:05.000000")))
				}
			}
		}
	}
	return problems, holds
}

// The lock checker finds two owners holding one lock at once, and a killed
// owner's unreleased hold ending at the kill.
func TestLockOverlapsFindsDoubleHolds(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	ev := func(owner string, acquired bool, ms int) director.LockEvent {
		return director.LockEvent{Name: "lock:disk:a", Owner: owner, Acquired: acquired, At: at(ms)}
	}
	clean := []director.LockEvent{ev("w1/task-1/1", true, 0), ev("w1/task-1/1", false, 10),
		ev("w2/task-2/1", true, 20), ev("w2/task-2/1", false, 30),
		ev("dead/task-3/1", true, 40), ev("w1/task-4/2", true, 60), ev("w1/task-4/2", false, 70)}
	if p, n := lockOverlaps(clean, "dead", at(50)); len(p) != 0 || n != 4 {
		t.Fatalf("disjoint holds: %v, %d holds; want none and 4", p, n)
	}
	if p, _ := lockOverlaps(clean, "dead", at(65)); len(p) != 1 {
		t.Fatalf("a takeover before the kill: %v; want one overlap", p)
	}
	double := append(clean[:2:2], ev("w2/task-2/1", true, 5), ev("w2/task-2/1", false, 30))
	if p, _ := lockOverlaps(double, "dead", at(50)); len(p) != 1 {
		t.Fatalf("two owners at once: %v; want one overlap", p)
	}
}

// reporter is what the checkers need of a test: a *testing.T or a
// *rapid.T.
type reporter interface {
	Errorf(format string, args ...any)
	Fatal(args ...any)
}

// checkRecordsAgainstOracle compares the director's dynamic disks and
// orphaned disks with the fake cloud's oracle.
func checkRecordsAgainstOracle(t reporter, ctx context.Context, c *cluster, deployment string) {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	st, err := fakeiaas.NewClient(c.fakeURL).State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	disks, err := c.admin.DynamicDisks(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var orphans []director.OrphanedDisk
	if err := c.admin.GetJSON(ctx, "/disks?orphaned=true", &orphans); err != nil {
		t.Fatal(err)
	}
	insts, err := c.admin.Instances(ctx, deployment)
	if err != nil {
		t.Fatal(err)
	}
	vmOf := map[string]string{}
	for _, in := range insts {
		vmOf[in.Group+"/"+in.ID] = in.VMCID
	}
	iaas := map[string]fakeiaas.Disk{}
	for _, d := range st.Disks {
		iaas[d.CID.String()] = d
	}
	known := map[string]bool{}
	for _, d := range disks {
		if known[d.CID] {
			t.Errorf("disk CID %s recorded twice", d.CID)
		}
		known[d.CID] = true
		od, ok := iaas[d.CID]
		if !ok {
			t.Errorf("dynamic disk %q (%s) is not in the IaaS", d.Name, d.CID)
			continue
		}
		want := ""
		if d.Instance != nil {
			want = vmOf[*d.Instance]
			if want == "" {
				t.Errorf("dynamic disk %q attached to %s, an instance without a VM", d.Name, *d.Instance)
			}
		}
		if od.VMCID.String() != want {
			t.Errorf("dynamic disk %q (%s): director says attached to VM %q, the IaaS %q", d.Name, d.CID, want, od.VMCID)
		}
	}
	for _, o := range orphans {
		known[o.CID] = true
	}
	for cid, d := range iaas {
		if !known[cid] {
			t.Errorf("IaaS disk %s (attached to %q) is neither a dynamic disk nor an orphaned disk of the director", cid, d.VMCID)
		}
	}
	for _, in := range insts {
		found := false
		for _, v := range st.VMs {
			found = found || v.CID.String() == in.VMCID
		}
		if !found {
			t.Errorf("instance %s's VM %s is not in the IaaS", in.ID, in.VMCID)
		}
	}
}
