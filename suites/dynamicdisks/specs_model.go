package dynamicdisks

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"

	"github.com/cpilab/cpilab/director"
	. "github.com/onsi/ginkgo/v2"
)

// modelTag marks the disk names the model owns: "<run id>-m-…".
const modelTag = "-m-"

// owned reports whether name is one of the model's.
func (r *run) owned(name string) bool { return strings.HasPrefix(name, r.cfg.RunID+modelTag) }

// mname is a model-owned disk name, tracked for clean-up.
func (r *run) mname(tag string) string { return r.name("m-" + tag) }

// initModel fills the model from the set-up: every instance with a VM of
// the suite's deployments, and the disk pool.
func (r *run) initModel(insts []director.Instance) {
	r.m = NewModel()
	r.m.Pools[r.cfg.DiskPool] = true
	r.m.Deployments[r.deployment] = true
	for _, in := range insts {
		if in.VMCID != "" {
			r.m.AddInstance(ModelInstance{ID: in.ID, Group: in.Group, Deployment: in.Deployment, AZ: in.AZ})
		}
	}
}

// modelSpecs run first: the first one lists the director before the suite
// made any disk.
func modelSpecs(r *run) {
	It(ClauseList, labels("model", "list"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		list, x := r.list(ctx, ClauseList)
		if mine := slices.IndexFunc(list, func(d director.DiskInfo) bool { return r.owned(d.Name) }); mine >= 0 {
			violatef(ClauseList, x, "lists %q before the suite made any disk", list[mine].Name)
		}
		r.compare(ctx, ClauseList, x)
	})

	It(ClauseModel, labels("model", "provide", "create", "attach", "detach", "delete", "list"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		pool, size := r.cfg.DiskPool, r.cfg.DiskSizeMiB
		a, b := r.a, r.b
		one, two, never := r.mname("one"), r.mname("two"), r.mname("never")
		// (These steps also show provide's idempotence and provide of an
		// existing unattached disk, the clauses ClauseProvideIdempotent and
		// ClauseProvideUnattached name.)
		steps := []Op{
			// Sizes other than the pool's: a director taking the pool's
			// size instead of disk_size shows it in the list.
			{Kind: OpProvide, Name: one, Instance: a.ID, Pool: pool, SizeMiB: size + 2, Metadata: map[string]string{"cpilab-run": r.cfg.RunID, "v": "1"}},
			// Metadata changed: the list must show the new metadata.
			{Kind: OpProvide, Name: one, Instance: a.ID, Pool: pool, SizeMiB: size, Metadata: map[string]string{"cpilab-run": r.cfg.RunID, "v": "2", "added": "yes"}},
			// No metadata: the disk keeps what it had; another size changes nothing.
			{Kind: OpProvide, Name: one, Instance: a.ID, Pool: pool, SizeMiB: size + 1},
			{Kind: OpProvide, Name: one, Instance: b.ID, Pool: pool, SizeMiB: size},
			{Kind: OpCreate, Name: one, Deployment: r.deployment, AZ: a.AZ, Pool: pool, SizeMiB: size},
			{Kind: OpCreate, Name: two, Deployment: r.deployment, AZ: a.AZ, Pool: pool, SizeMiB: size + 3, Metadata: map[string]string{"made-by": "create"}},
			{Kind: OpAttach, Name: two, Instance: b.ID},
			{Kind: OpAttach, Name: two, Instance: a.ID},
			{Kind: OpProvide, Name: two, Instance: a.ID, Pool: pool, SizeMiB: size},
			{Kind: OpDetach, Name: two},
			{Kind: OpDetach, Name: two},
			{Kind: OpProvide, Name: two, Instance: a.ID, Pool: pool, SizeMiB: size},
			{Kind: OpDetach, Name: never},
			{Kind: OpAttach, Name: never, Instance: a.ID},
			{Kind: OpProvide, Name: never, Instance: r.cfg.RunID + "-no-such-instance", Pool: pool, SizeMiB: size},
			{Kind: OpProvide, Name: never, Instance: a.ID, Pool: r.cfg.RunID + "-no-such-pool", SizeMiB: size},
			{Kind: OpCreate, Name: never, Deployment: r.cfg.RunID + "-no-such-deployment", AZ: a.AZ, Pool: pool, SizeMiB: size},
			{Kind: OpCreate, Name: never, Deployment: r.deployment, AZ: r.cfg.RunID + "-no-such-az", Pool: pool, SizeMiB: size},
			{Kind: OpAttach, Name: one, Instance: r.cfg.RunID + "-no-such-instance"},
			// (DELETE of an attached disk is race (e)'s spec.)
			{Kind: OpDetach, Name: one},
			{Kind: OpDelete, Name: one},
			{Kind: OpDelete, Name: one},
			{Kind: OpDetach, Name: two},
			{Kind: OpDelete, Name: two},
			{Kind: OpDelete, Name: never},
		}
		for _, op := range steps {
			r.step(ctx, ClauseModel, op)
		}
	})

	It(ClauseModelZones, labels("model", "provide", "create", "attach", "list"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		c, ok := r.otherAZ()
		if !ok {
			Skip("not checked: a second AZ: the suite's deployment has instances with VMs in one AZ only")
		}
		pool, size := r.cfg.DiskPool, r.cfg.DiskSizeMiB
		here, there, moved := r.mname("az-here"), r.mname("az-there"), r.mname("az-moved")
		for _, op := range []Op{
			{Kind: OpCreate, Name: here, Deployment: r.deployment, AZ: r.a.AZ, Pool: pool, SizeMiB: size},
			{Kind: OpAttach, Name: here, Instance: c.ID},
			{Kind: OpCreate, Name: there, Deployment: r.deployment, AZ: c.AZ, Pool: pool, SizeMiB: size},
			{Kind: OpAttach, Name: there, Instance: r.a.ID},
			{Kind: OpAttach, Name: there, Instance: c.ID},
			{Kind: OpProvide, Name: moved, Instance: c.ID, Pool: pool, SizeMiB: size},
			{Kind: OpDetach, Name: moved},
			// Upstream's provide checks no AZ: attached in the new AZ, or refused.
			{Kind: OpProvide, Name: moved, Instance: r.a.ID, Pool: pool, SizeMiB: size},
			{Kind: OpDetach, Name: there},
			{Kind: OpDetach, Name: moved},
			{Kind: OpDelete, Name: here},
			{Kind: OpDelete, Name: there},
			{Kind: OpDelete, Name: moved},
		} {
			r.step(ctx, ClauseModelZones, op)
		}
	})

	It(ClauseModelDeployments, labels("model", "provide", "create", "attach", "list"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		d, ok := r.otherDeployment()
		if !ok {
			Skip("not checked: a second deployment: the suite deployed none (it deploys one when it deploys its own)")
		}
		pool, size := r.cfg.DiskPool, r.cfg.DiskSizeMiB
		mine, theirs := r.mname("dep-mine"), r.mname("dep-theirs")
		for _, op := range []Op{
			{Kind: OpCreate, Name: mine, Deployment: r.deployment, AZ: r.a.AZ, Pool: pool, SizeMiB: size},
			{Kind: OpAttach, Name: mine, Instance: d.ID},
			{Kind: OpProvide, Name: theirs, Instance: d.ID, Pool: pool, SizeMiB: size},
			{Kind: OpProvide, Name: theirs, Instance: r.a.ID, Pool: pool, SizeMiB: size},
			{Kind: OpDetach, Name: theirs},
			{Kind: OpAttach, Name: theirs, Instance: r.a.ID},
			{Kind: OpCreate, Name: mine, Deployment: d.Deployment, AZ: d.AZ, Pool: pool, SizeMiB: size},
			// Upstream's provide checks no deployment: attached, or refused.
			{Kind: OpProvide, Name: theirs, Instance: r.a.ID, Pool: pool, SizeMiB: size},
			{Kind: OpDetach, Name: theirs},
			{Kind: OpDelete, Name: mine},
			{Kind: OpDelete, Name: theirs},
		} {
			r.step(ctx, ClauseModelDeployments, op)
		}
	})

	It(ClauseModelMany, labels("model", "create", "delete", "list"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		n := r.cfg.ManyDisks
		ops := make([]Op, n)
		for i := range ops {
			ops[i] = Op{Kind: OpCreate, Name: r.mname(fmt.Sprintf("many-%03d", i)), Deployment: r.deployment, AZ: r.a.AZ,
				Pool: r.cfg.DiskPool, SizeMiB: r.cfg.DiskSizeMiB}
		}
		r.parallel(ctx, ClauseModelMany, ops)
		_, x := r.list(ctx, ClauseModelMany)
		r.compare(ctx, ClauseModelMany, x)
		for i := range ops {
			ops[i] = Op{Kind: OpDelete, Name: ops[i].Name}
		}
		r.parallel(ctx, ClauseModelMany, ops)
		_, x = r.list(ctx, ClauseModelMany)
		r.compare(ctx, ClauseModelMany, x)
	})
}

// otherAZ is an instance of the suite's deployment in another AZ than a.
func (r *run) otherAZ() (director.Instance, bool) {
	for _, in := range r.insts {
		if in.Deployment == r.deployment && in.VMCID != "" && in.AZ != r.a.AZ {
			return in, true
		}
	}
	return director.Instance{}, false
}

// otherDeployment is an instance of another deployment, in a's AZ when
// there is one.
func (r *run) otherDeployment() (director.Instance, bool) {
	var out director.Instance
	found := false
	for _, in := range r.insts {
		if in.Deployment != r.deployment && in.VMCID != "" && (!found || (in.AZ == r.a.AZ && out.AZ != r.a.AZ)) {
			out, found = in, true
		}
	}
	return out, found
}

// send sends op as the disk-scoped caller.
func (r *run) sendOp(ctx context.Context, op Op) *Exchange {
	switch op.Kind {
	case OpProvide:
		return r.s.sendJSON(ctx, r.s.disks, http.MethodPost, "/dynamic_disks/provide", provideBody{
			DiskName: op.Name, DiskSize: op.SizeMiB, DiskPoolName: op.Pool, InstanceID: op.Instance, Metadata: op.Metadata})
	case OpCreate:
		return r.s.sendJSON(ctx, r.s.disks, http.MethodPost, "/dynamic_disks", createBody{Deployment: op.Deployment, AZ: op.AZ,
			DiskName: op.Name, DiskPoolName: op.Pool, DiskSize: op.SizeMiB, Metadata: op.Metadata})
	case OpAttach:
		return r.attach(ctx, op.Name, op.Instance)
	case OpDetach:
		return r.detach(ctx, op.Name)
	default:
		return r.remove(ctx, op.Name)
	}
}

// judge checks x's outcome against the model's legal answers to op and
// returns whether it succeeded and the disk_cid its result held.
func (r *run) judge(ctx context.Context, clause string, op Op, x *Exchange) (bool, string) {
	GinkgoHelper()
	want := r.m.Expect(op)
	if want.Clause != "" {
		clause = want.Clause
	}
	if x.Err == nil && slices.Contains(want.Refusals, x.Status) && want.Verdict != MustSucceed {
		if strings.TrimSpace(x.message()) == "" {
			violatef(clause, x, "%s: the %d carries no message", op, x.Status)
		}
		return false, ""
	}
	if x.taskID() == 0 {
		if want.Verdict == MustSucceed {
			violatef(clause, x, "%s: answered no 302 to a task; want a task that succeeds (%s)", op, want.Why)
		}
		violatef(clause, x, "%s: answered neither a 302 to a task nor a refusal %v (%s)", op, want.Refusals, want.Why)
	}
	tv := r.task(ctx, clause, x)
	switch {
	case tv.State == director.TaskDone && want.Verdict == MustFail:
		violatef(clause, x, "%s: the task succeeded (%s); want it to fail: %s", op, taskString(tv), want.Why)
	case tv.State != director.TaskDone && want.Verdict == MustSucceed:
		violatef(clause, x, "%s: the task ended %s; want success: %s: %s", op, tv.State, want.Why, taskString(tv))
	case tv.State != director.TaskDone:
		if strings.TrimSpace(tv.Result) == "" {
			violatef(clause, x, "%s: the task failed without saying why: %s", op, taskString(tv))
		}
		return false, ""
	}
	cid, held, raw, err := r.s.resultCID(ctx, tv.ID)
	if err != nil {
		violatef(clause, x, "%v", err)
	}
	old := ""
	if d := r.m.Disks[op.Name]; d != nil {
		old = d.CID
	}
	switch want.CID {
	case CIDNew:
		if !held || cid == "" {
			violatef(clause, x, "%s: task %d succeeded, but its result %q holds no disk_cid", op, tv.ID, strings.TrimSpace(string(raw)))
		}
		if r.m.CIDTaken(cid, op.Name) {
			violatef(clause, x, "%s: the new disk's disk_cid %q is another disk's", op, cid)
		}
	case CIDSame:
		if !held || cid != old {
			violatef(clause, x, "%s: the task result %q holds disk_cid %q; the disk is %q (%s)", op, strings.TrimSpace(string(raw)), cid, old, want.Why)
		}
	default:
		if held && cid != "" && cid != old {
			violatef(clause, x, "%s: the task result holds disk_cid %q; the disk is %q", op, cid, old)
		}
	}
	return true, cid
}

// step sends op, judges the answer, moves the model on and compares the
// director's whole visible state with it.
func (r *run) step(ctx context.Context, clause string, op Op) {
	GinkgoHelper()
	x := r.sendOp(ctx, op)
	ok, cid := r.judge(ctx, clause, op, x)
	r.apply(op, ok, cid)
	r.compare(ctx, clause, x)
}

// parallel sends ops (on distinct names) eight at a time, judging each,
// then moves the model on.
func (r *run) parallel(ctx context.Context, clause string, ops []Op) {
	GinkgoHelper()
	type res struct {
		ok  bool
		cid string
		x   *Exchange
	}
	out := make([]res, len(ops))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, op := range ops {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[i].x = r.sendOp(ctx, op)
			id := out[i].x.taskID()
			if id != 0 {
				_, _ = r.s.waitTask(ctx, id, r.cfg.Timeouts.Task)
			}
		})
	}
	wg.Wait()
	for i, op := range ops {
		ok, cid := r.judge(ctx, clause, op, out[i].x)
		r.apply(op, ok, cid)
	}
}

// apply moves the model on, remembering the cid of a deleted disk (the
// IaaS must lose it).
func (r *run) apply(op Op, ok bool, cid string) {
	if d := r.m.Disks[op.Name]; ok && op.Kind == OpDelete && d != nil && d.CID != "" {
		r.gone = append(r.gone, d.CID)
	}
	if ok && op.Kind == OpDelete {
		r.t.forget("disk", op.Name) // gone: nothing to clean up
	}
	r.m.Apply(op, ok, cid)
}

// list is GET /dynamic_disks as the disk-scoped caller: a JSON list (null
// is no list), every entry with a name.
func (r *run) list(ctx context.Context, clause string) ([]director.DiskInfo, *Exchange) {
	GinkgoHelper()
	x := r.s.send(ctx, r.s.disks, http.MethodGet, "/dynamic_disks", nil, "")
	if x.Err != nil || x.Status != http.StatusOK {
		violatef(clause, x, "GET /dynamic_disks did not answer 200")
	}
	body := bytes.TrimSpace(x.Answer)
	if !bytes.HasPrefix(body, []byte("[")) {
		violatef(clause, x, "GET /dynamic_disks answered %q, not a JSON list (an empty director lists [])", excerpt(body))
	}
	var all []director.DiskInfo
	if err := json.Unmarshal(body, &all); err != nil {
		violatef(clause, x, "GET /dynamic_disks answered no list of disks: %v", err)
	}
	for i, d := range all {
		if d.Name == "" {
			violatef(clause, x, "GET /dynamic_disks entry %d has no name", i)
		}
	}
	return all, x
}

// compare reads the director's whole visible state and compares it with
// the model: the list, each model disk by name (GET /dynamic_disks/:name,
// a cpilab extension, when the director has it), and with an oracle the
// IaaS disks and the VMs they are attached to. after is the request the
// state follows.
func (r *run) compare(ctx context.Context, clause string, after *Exchange) {
	GinkgoHelper()
	list, lx := r.list(ctx, clause)
	if diffs := r.m.Diff(list, r.owned); len(diffs) > 0 {
		violatef(clause, after, "after this request GET /dynamic_disks %s (the list: %s)", strings.Join(diffs, "; "), excerpt(lx.Answer))
	}
	if len(r.m.Disks) <= 16 {
		r.compareEach(ctx, clause, after)
	}
	if r.cfg.Oracle != nil && len(r.m.Disks) <= 16 {
		r.compareCloud(ctx, clause, after)
	}
}

// compareEach looks every model disk up by name. A director answering 404
// for a disk it lists has no such route (upstream); it is then not asked
// again.
func (r *run) compareEach(ctx context.Context, clause string, after *Exchange) {
	GinkgoHelper()
	if r.noGetRoute {
		return
	}
	for _, name := range sortedNames(r.m) {
		x := r.s.send(ctx, r.s.disks, http.MethodGet, diskPath(name, ""), nil, "")
		if x.Err == nil && x.Status == http.StatusNotFound && !r.sawGetRoute {
			r.noGetRoute = true
			return
		}
		if x.Err != nil || x.Status != http.StatusOK {
			violatef(clause, after, "GET %s answered %s for a disk GET /dynamic_disks lists", diskPath(name, ""), x.ResponseString())
		}
		r.sawGetRoute = true
		var e director.DiskInfo
		if err := json.Unmarshal(x.Answer, &e); err != nil {
			violatef(clause, x, "answered no disk: %v", err)
		}
		if e.Name != name {
			violatef(clause, x, "GET of disk %q shows disk %q", name, e.Name)
		}
		if diffs := r.m.DiffDisk(e); len(diffs) > 0 {
			violatef(clause, after, "after this request GET %s %s", diskPath(name, ""), strings.Join(diffs, "; "))
		}
	}
}

// compareCloud checks the IaaS behind every model disk: it exists,
// attached to the VM of the model's instance (or to none), and holds the
// model's metadata.
func (r *run) compareCloud(ctx context.Context, clause string, after *Exchange) {
	GinkgoHelper()
	for _, name := range sortedNames(r.m) {
		d := r.m.Disks[name]
		if d.CID == "" {
			continue
		}
		od, ok := r.oracleDisk(ctx, d.CID)
		if !ok {
			violatef(clause, after, "after this request the IaaS has no disk %s (%q), which the director lists", d.CID, name)
		}
		want := ""
		if d.Instance != "" {
			want = r.vmOf(ctx, d.Instance)
		}
		if od.AttachedTo != want {
			violatef(clause, after, "after this request the IaaS has disk %s (%q) attached to %q; the model has it on VM %q (instance %q)",
				d.CID, name, od.AttachedTo, want, d.Instance)
		}
		for k, v := range d.Metadata {
			if od.Metadata[k] != v {
				violatef(clause, after, "after this request the IaaS disk %s (%q) holds metadata %v; want at least %v", d.CID, name, od.Metadata, d.Metadata)
			}
		}
	}
	if len(r.gone) == 0 {
		return
	}
	for _, cid := range r.oracleDisks(ctx) {
		if slices.Contains(r.gone, cid) {
			violatef(clause, after, "after this request the IaaS still has disk %s, which the director deleted", cid)
		}
	}
}

// vmOf is an instance's VM CID as set-up found it.
func (r *run) vmOf(_ context.Context, id string) string {
	for _, in := range r.insts {
		if in.ID == id {
			return in.VMCID
		}
	}
	return ""
}

func sortedNames(m *Model) []string {
	out := make([]string, 0, len(m.Disks))
	for n := range m.Disks {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}
