package dynamicdisks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/cpilab/cpilab/director"
	. "github.com/onsi/ginkgo/v2"
)

func concurrencySpecs(r *run) {
	It(ClauseRaceA+" (judged by the IaaS with an oracle, else by the API)", labels("race", "provide", "list"), Label("race:a"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("race-a")
		var before []string
		if r.cfg.Oracle != nil {
			before = r.oracleDisks(ctx)
			AddReportEntry("judged by", "the IaaS (its oracle) and the API")
		} else {
			AddReportEntry("judged by", "the API alone: a leaked IaaS disk is invisible without an oracle of the cloud")
		}
		var gate Gate
		if r.cfg.Gates != nil {
			gate = r.hold(ctx, OpCreateDisk)
		}
		n := r.cfg.Concurrency
		xs := make([]*Exchange, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { xs[i] = r.provide(ctx, name, r.a.ID, nil) })
		}
		wg.Wait()
		if gate != nil {
			r.settle(ctx, gate)
		}
		tasks := make([]director.TaskView, n)
		for i, x := range xs {
			tasks[i] = r.task(ctx, ClauseRaceA, x)
		}
		var cids []string
		for i, tv := range tasks {
			if tv.State != director.TaskDone {
				continue
			}
			cid, ok, _, err := r.s.resultCID(ctx, tv.ID)
			if err != nil || !ok {
				violatef(ClauseRaceA, xs[i], "task %d succeeded without a disk_cid in its result (%v)", tv.ID, err)
			}
			if !slices.Contains(cids, cid) {
				cids = append(cids, cid)
			}
		}
		listed, ok := r.listed(ctx, ClauseRaceA, name)
		if r.cfg.Oracle != nil {
			made := newOnly(before, r.oracleDisks(ctx))
			if len(made) != 1 {
				violatef(ClauseRaceA, nil, "%d concurrent provides of %q to instance %s made %d IaaS disks %q; the director lists %q (listed %v): %d leaked; tasks: %s",
					n, name, r.a.ID, len(made), made, listed.CID, ok, max(len(made)-1, 0), tasksString(tasks))
			}
			if ok && listed.CID != made[0] {
				violatef(ClauseRaceA, nil, "the director lists %q as %q; the IaaS disk it made is %q", name, listed.CID, made[0])
			}
		}
		for i, tv := range tasks {
			if tv.State != director.TaskDone {
				violatef(ClauseRaceA, xs[i], "provide %d of %d concurrent provides of one name to one VM failed: %s (all tasks: %s)",
					i+1, n, taskString(tv), tasksString(tasks))
			}
		}
		switch {
		case len(cids) != 1:
			violatef(ClauseRaceA, nil, "%d concurrent provides returned %d disk_cids %q", n, len(cids), cids)
		case !ok:
			violatef(ClauseRaceA, nil, "GET /dynamic_disks does not list %q after %d provides", name, n)
		case listed.CID != cids[0]:
			violatef(ClauseRaceA, nil, "GET /dynamic_disks lists %q as %q; the provides returned %q", name, listed.CID, cids[0])
		}
	})

	It(ClauseRaceE+" (the IaaS and the link checked when available)", labels("race", "provide", "delete", "list"), Label("race:e"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("race-e")
		vm := r.vm(ctx, r.a.ID)
		cid := r.doneCID(ctx, ClauseRaceE, r.provide(ctx, name, r.a.ID, nil))
		x := r.remove(ctx, name)
		r.done(ctx, ClauseRaceE, x)
		if d, ok := r.listed(ctx, ClauseRaceE, name); ok {
			violatef(ClauseRaceE, x, "the delete task succeeded, but GET /dynamic_disks still lists %+v", d)
		}
		if r.cfg.Oracle != nil {
			if d, ok := r.oracleDisk(ctx, cid); ok {
				violatef(ClauseRaceE, x, "the delete task succeeded, but the IaaS still has disk %s (attached to %q)", cid, d.AttachedTo)
			}
		}
		if r.cfg.Links != nil {
			target, ok, err := r.cfg.Links.DynamicDiskLink(ctx, vm, cid)
			if err != nil {
				Fail("links: " + err.Error())
			}
			if ok {
				violatef(ClauseRaceE, x, "the disk is deleted, but VM %s still links %s → %s (dangling)", vm.VMCID, cid, target)
			}
		}
	})

	It(ClauseQueue, labels("queue", "provide"), Label("queue:i", "cap:gates"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		gate := r.hold(ctx, OpCreateVM)
		slow := r.cfg.RunID + "-slow"
		r.t.add("deployment", slow)
		xd := r.s.send(ctx, r.s.admin, http.MethodPost, "/deployments", r.cfg.Setup.Manifest(slow, r.osOf(ctx), 1), "text/yaml")
		deployID := xd.taskID()
		if deployID == 0 {
			Fail(fmt.Sprintf("could not start the slow deploy: %s → %s", xd.RequestString(), xd.ResponseString()))
		}
		r.waitHeld(ctx, gate, deployID)
		x := r.provide(ctx, r.name("queue"), r.a.ID, nil)
		id := x.taskID()
		if id == 0 {
			violatef(ClauseQueue, x, "answered no 302 redirect to /tasks/<id>")
		}
		tv, err := r.s.waitTask(ctx, id, r.cfg.Timeouts.Task)
		dtv, derr := r.s.admin.dc.Task(ctx, deployID)
		if derr != nil {
			Fail(fmt.Sprintf("GET /tasks/%d as admin: %v", deployID, derr))
		}
		var st *errStuck
		switch {
		case errors.As(err, &st):
			violatef(ClauseQueue, x, "%v while deploy task %d was %s: disk work waits behind the deploy, or its queue has no worker; %s",
				err, deployID, dtv.State, taskString(tv))
		case err != nil:
			violatef(ClauseQueue, x, "%v (deploy task %d is %s)", err, deployID, dtv.State)
		case tv.State != director.TaskDone:
			violatef(ClauseQueue, x, "the disk task failed: %s", taskString(tv))
		case dtv.State.Final():
			Fail(fmt.Sprintf("the slow deploy (task %d) ended (%s) while create_vm was held: the gate did not hold it", deployID, dtv.State))
		}
		if err := gate.Release(ctx); err != nil {
			Fail("gates: release: " + err.Error())
		}
		dtv, err = r.s.waitTask(ctx, deployID, r.cfg.Timeouts.Deploy)
		if err != nil || dtv.State != director.TaskDone {
			Fail(fmt.Sprintf("the slow deploy did not finish once released: %v %s", err, taskString(dtv)))
		}
	})
}

// hold holds op at a gate, released when the spec ends.
func (r *run) hold(ctx context.Context, op string) Gate {
	GinkgoHelper()
	g, err := r.cfg.Gates.Hold(ctx, op)
	if err != nil {
		Fail(fmt.Sprintf("gates: hold %s: %v", op, err))
	}
	DeferCleanup(func(ctx SpecContext) { _ = g.Release(ctx) })
	return g
}

// settle releases a create_disk gate once two calls wait at it (no lock
// kept them apart), or once one has waited Timeouts.Settle alone (the
// others are held back by a lock, or not concurrent), or after
// Timeouts.Task with none (the tasks never ran; their waits say so).
func (r *run) settle(ctx context.Context, g Gate) {
	GinkgoHelper()
	start := time.Now()
	var first time.Time
	for {
		n, err := g.Held(ctx)
		if err != nil {
			Fail("gates: held: " + err.Error())
		}
		if n >= 1 && first.IsZero() {
			first = time.Now()
		}
		if n >= 2 || (!first.IsZero() && time.Since(first) >= r.cfg.Timeouts.Settle) || time.Since(start) >= r.cfg.Timeouts.Task {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := g.Release(ctx); err != nil {
		Fail("gates: release: " + err.Error())
	}
}

// waitHeld waits until the deploy task is held at the create_vm gate.
func (r *run) waitHeld(ctx context.Context, g Gate, deployID int64) {
	GinkgoHelper()
	start := time.Now()
	for {
		n, err := g.Held(ctx)
		if err != nil {
			Fail("gates: held: " + err.Error())
		}
		if n >= 1 {
			return
		}
		if time.Since(start) >= r.cfg.Timeouts.Deploy {
			tv, _ := r.s.admin.dc.Task(ctx, deployID)
			Fail(fmt.Sprintf("the slow deploy never reached create_vm within %s: %s", r.cfg.Timeouts.Deploy, taskString(tv)))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// osOf is the operating system of the stemcell the suite deploys on: the
// last one GET /stemcells lists (the one Setup uploaded, on a director
// prepared for certification).
func (r *run) osOf(ctx context.Context) string {
	GinkgoHelper()
	if r.stemcellOS == "" {
		var stemcells []director.Stemcell
		if err := r.s.admin.dc.GetJSON(ctx, "/stemcells", &stemcells); err != nil || len(stemcells) == 0 {
			Fail(fmt.Sprintf("GET /stemcells as admin: %d stemcells, %v", len(stemcells), err))
		}
		r.stemcellOS = stemcells[len(stemcells)-1].OS
	}
	return r.stemcellOS
}

func (r *run) oracleDisks(ctx context.Context) []string {
	GinkgoHelper()
	d, err := r.cfg.Oracle.Disks(ctx)
	if err != nil {
		Fail("oracle: disks: " + err.Error())
	}
	return d
}

// newOnly is what after holds that before did not, sorted.
func newOnly(before, after []string) []string {
	var out []string
	for _, c := range after {
		if !slices.Contains(before, c) {
			out = append(out, c)
		}
	}
	sort.Strings(out)
	return out
}

func tasksString(ts []director.TaskView) string {
	s := ""
	for i, tv := range ts {
		if i > 0 {
			s += "; "
		}
		s += taskString(tv)
	}
	return s
}
