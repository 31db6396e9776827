package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/internal/disksm"
	"github.com/cpilab/cpilab/simulator/diskmodel"
)

// TestConcurrentProvidesAcrossProcessesAreLinearizable runs six clients
// against one api and three worker processes on PostgreSQL, all on one disk
// name: provides to random instances (most calls), detaches and deletes. In
// a first phase nothing fails; in a second, a worker is killed with -9 (and
// a replacement started) while the calls run. The history of calls and
// outcomes (a task taken over from the killed worker is an unknown outcome)
// must be linearizable under the dynamic disks model (simulator/diskmodel,
// with porcupine): in particular one disk CID for every successful provide
// while the disk lives. After each phase: every task ended, done or failed
// with a message; no lock was held by two owners at once; each task took its
// locks in one process (or a killed one and its taker); the records equal
// the fake cloud's oracle; orphaned disks number no more than the provides
// taken over (none after the first phase): any other is a leak.
func TestConcurrentProvidesAcrossProcessesAreLinearizable(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a fake cloud, an api process and three worker processes on PostgreSQL")
	}
	t.Parallel() // waits on its processes most of the time (about a sixth of a core): overlaps the package's other waiting tests
	x := newXproc(t, xprocConfigFromEnv(t))
	seed := uint64(time.Now().UnixNano())
	t.Logf("workload seed %d", seed)
	var rec diskmodel.Recorder
	for phase, kill := range []bool{false, true} {
		x.concurrentPhase(t, &rec, seed+uint64(phase), kill)
		h := rec.History()
		res, err := diskmodel.Check(h, diskmodel.Options{Timeout: 30 * time.Second,
			Visualization: filepath.Join(t.TempDir(), "linearizability.html")})
		if err != nil {
			t.Error(err)
		}
		if !res.Linearizable() || len(res.Undecided) > 0 {
			t.Fatalf("the history of %d calls on %q is not linearizable (illegal %v, undecided %v; %s):\n%s",
				len(h), xprocSharedName, res.Illegal, res.Undecided, res.Visualization, diskmodel.Describe(h))
		}
		outcomes := map[diskmodel.Outcome]int{}
		providesTakenOver := 0
		for _, op := range h {
			out := op.Output.(diskmodel.Output).Outcome
			outcomes[out]++
			if out == diskmodel.Unknown && op.Input.(diskmodel.Input).Kind == diskmodel.Provide {
				providesTakenOver++
			}
		}
		var orphans []director.OrphanedDisk
		if err := x.c.admin.GetJSON(x.ctx, "/disks?orphaned=true", &orphans); err != nil {
			t.Fatal(err)
		}
		if len(orphans) > providesTakenOver {
			t.Errorf("phase %d: %d orphaned disks %+v, and %d provides taken over from the killed worker: a disk leaked from a task",
				phase+1, len(orphans), orphans, providesTakenOver)
		}
		t.Logf("phase %d (kill: %v): %d calls so far: %d ok, %d failed, %d unknown (taken over from the killed worker); linearizable",
			phase+1, kill, len(h), outcomes[diskmodel.OK], outcomes[diskmodel.Failed], outcomes[diskmodel.Unknown])
	}
}

// xprocSharedName is the one disk name of the concurrency test.
const xprocSharedName = "shared"

// concurrentPhase runs six clients of eight calls each on xprocSharedName,
// recorded in rec, killing a worker a third of the way in when kill; then
// reads every task again, and checks the locks and the records.
func (x *xproc) concurrentPhase(t *testing.T, rec *diskmodel.Recorder, seed uint64, kill bool) {
	t.Helper()
	const clients, calls, name = 6, 8, xprocSharedName
	var (
		mu      sync.Mutex
		started int
		tasks   = map[int64]diskmodel.Input{}
		ends    = map[int64]director.TaskView{}
		errs    = make(chan error, clients)
		wg      sync.WaitGroup
	)
	for client := range clients {
		wg.Add(1)
		work := rand.New(rand.NewPCG(seed, uint64(client)))
		go func() {
			defer wg.Done()
			for range calls {
				var in diskmodel.Input
				var id int64
				var tv director.TaskView
				var err error
				switch k := work.IntN(10); {
				case k < 7:
					inst := x.insts[work.IntN(len(x.insts))]
					in = diskmodel.Input{Kind: diskmodel.Provide, Disk: name, VM: inst.ID}
					op := rec.Call(client, in)
					id, err = x.c.disks.Start(x.ctx, http.MethodPost, "/dynamic_disks/provide", director.ProvideRequest{
						InstanceID: inst.ID, DiskName: name, DiskPoolName: "dynamic", DiskSize: 4})
					tv, err = x.finish(rec, op, id, err)
				case k < 9:
					in = diskmodel.Input{Kind: diskmodel.Detach, Disk: name}
					op := rec.Call(client, in)
					id, err = x.c.disks.Start(x.ctx, http.MethodPost, "/dynamic_disks/"+name+"/detach", nil)
					tv, err = x.finish(rec, op, id, err)
				default:
					in = diskmodel.Input{Kind: diskmodel.Delete, Disk: name}
					op := rec.Call(client, in)
					id, err = x.c.disks.Start(x.ctx, http.MethodDelete, "/dynamic_disks/"+name, nil)
					tv, err = x.finish(rec, op, id, err)
				}
				if err != nil {
					errs <- fmt.Errorf("client %d, %v: %w", client, in, err)
					return
				}
				mu.Lock()
				started++
				tasks[id], ends[id] = in, tv
				mu.Unlock()
			}
		}()
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	if kill {
		// The fault: a third of the calls in, kill -9 a worker (one holding
		// a lock, if one does within two seconds) and start a replacement.
		for waiting := true; waiting; {
			mu.Lock()
			n := started
			mu.Unlock()
			select {
			case <-allDone:
				t.Fatalf("the clients ended (%d calls) before a third of their calls were in", n)
			case <-time.After(10 * time.Millisecond):
			}
			waiting = n < clients*calls/3
		}
		x.killAndReplace(t, int(seed%3))
	}
	<-allDone
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Each task's end was recorded by finish: read them again, then check
	// the locks and the records.
	for id, in := range tasks {
		x.outcomes[id] = ends[id]
		x.wait(t, disksm.Op{Kind: string(in.Kind), Name: in.Disk, Inst: -1}, id)
	}
	x.checkLocks(t)
	checkRecordsAgainstOracle(t, x.ctx, x.c, "xp")
}

// finish waits for a call's task and records its outcome: ok with the CID
// a provide reports, unknown for a task taken over from a dead worker,
// failed otherwise (a failure must say why); it returns the task's end. An
// error is a call or task
// that went wrong outside the model: refused, lost, or failed silently.
func (x *xproc) finish(rec *diskmodel.Recorder, op int, id int64, err error) (director.TaskView, error) {
	if err != nil {
		return director.TaskView{}, err
	}
	ctx, cancel := context.WithTimeout(x.ctx, xprocTaskDeadline)
	defer cancel()
	tv, err := x.c.admin.WaitTask(ctx, id)
	var tf *director.TaskFailedError
	if err != nil && !errors.As(err, &tf) {
		return tv, fmt.Errorf("task %d did not end: %w", id, err)
	}
	switch {
	case tv.State == director.TaskDone:
		var r struct {
			DiskCID string `json:"disk_cid"`
		}
		if len(tv.Output) > 0 {
			if err := json.Unmarshal(tv.Output, &r); err != nil {
				return tv, fmt.Errorf("task %d: result %s: %w", id, tv.Output, err)
			}
		}
		rec.Return(op, diskmodel.Output{Outcome: diskmodel.OK, CID: r.DiskCID})
	case tv.State != director.TaskError || strings.TrimSpace(tv.Result) == "":
		return tv, fmt.Errorf("task %d ended %s %q; want done, or error with a message", id, tv.State, tv.Result)
	case strings.Contains(tv.Result, director.ReasonLeaseLapsed):
		rec.Return(op, diskmodel.Output{Outcome: diskmodel.Unknown})
	default:
		rec.Return(op, diskmodel.Output{Outcome: diskmodel.Failed})
	}
	return tv, nil
}
