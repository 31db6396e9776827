package simulator

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/simulator/diskmodel"
	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/simulator/simrt"
)

// OpKind is a workload operation: an orchestrator's dynamic-disk call or an
// operator's VM operation.
type OpKind string

// The operations.
const (
	OpProvide          OpKind = "provide"           // POST /dynamic_disks/provide
	OpDetach           OpKind = "detach"            // POST /dynamic_disks/:name/detach
	OpDelete           OpKind = "delete"            // DELETE /dynamic_disks/:name
	OpCreate           OpKind = "create"            // POST /dynamic_disks (create only, in the instance's deployment)
	OpAttach           OpKind = "attach"            // POST /dynamic_disks/:name/attach
	OpRecreate         OpKind = "recreate"          // instance state recreate
	OpRestart          OpKind = "restart"           // instance state restart
	OpStop             OpKind = "stop"              // instance state stopped (soft)
	OpStart            OpKind = "start"             // instance state started
	OpStopHard         OpKind = "stop-hard"         // instance state stopped, hard: the VM is deleted
	OpDeleteVM         OpKind = "delete-vm"         // DELETE /vms/:cid
	OpDeleteDeployment OpKind = "delete-deployment" // DELETE /deployments/:name
	// OpSilence is not an API call but a scripted fault for scenarios: the
	// instance's current agent stops answering for Op.For.
	OpSilence OpKind = "silence"
)

// OpKinds lists every kind, orchestrator kinds first.
var OpKinds = []OpKind{OpProvide, OpDetach, OpDelete, OpCreate, OpAttach, OpRecreate, OpRestart, OpStop, OpStart, OpStopHard,
	OpDeleteVM, OpDeleteDeployment, OpSilence}

func (k OpKind) hasDisk() bool {
	return k == OpProvide || k == OpDetach || k == OpDelete || k == OpCreate || k == OpAttach
}
func (k OpKind) hasVM() bool { return k != OpDetach && k != OpDelete && k != OpDeleteDeployment }

// Op is one workload operation of one client. Clients run concurrently,
// each its operations in order. Its text form is
//
//	c0 provide disk=d1 vm=2 delay=1.5s
//	c3 recreate vm=0 after=agent:stop
type Op struct {
	// Client runs the operation.
	Client int
	// Kind is the operation.
	Kind OpKind
	// Disk is the disk name (provide, detach, delete).
	Disk string
	// VM is the instance index (provide and VM operations).
	VM int
	// Delay is the client's think time before the operation.
	Delay time.Duration
	// After, when set, holds the operation until that point ("cpi:…",
	// "agent:…") has been reached (at most 30 s).
	After string
	// For is how long a silence lasts.
	For time.Duration
	// NoWait: the client does not wait for the operation's task before its
	// next operation (the task is still polled to its end, for the
	// history); text form "wait=no".
	NoWait bool
	// Reattach: a recreate that re-attaches the instance's dynamic disks to
	// its new VM (reattach_dynamic_disks); text form "reattach=yes".
	Reattach bool
	// Meta, when not 0, sends metadata with a provide, attach or create:
	// OpMetadata(Meta); text form "meta=N".
	Meta int
}

// OpMetadata is the metadata an operation with Meta n sends: a string, a
// number and an object, so that the Director's tags carry values it must
// send as their JSON text, and one key of three that depends on n, so that
// a Director that merges new metadata into the old (rather than replacing
// it) lists, and tags, a key the last operation did not send.
func OpMetadata(n int) map[string]any {
	if n == 0 {
		return nil
	}
	return map[string]any{"set_by": "cpilab-simulate", "serial": n, "labels": map[string]any{"tier": "gold", "serial": n},
		fmt.Sprintf("slot-%d", n%3): "cpilab"}
}

func (k OpKind) hasMeta() bool { return k == OpProvide || k == OpAttach || k == OpCreate }

// String is the op's text form.
func (o Op) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "c%d %s", o.Client, o.Kind)
	if o.Kind.hasDisk() {
		b.WriteString(" disk=" + o.Disk)
	}
	if o.Kind.hasVM() {
		fmt.Fprintf(&b, " vm=%d", o.VM)
	}
	if o.Kind == OpSilence {
		b.WriteString(" for=" + o.For.String())
	}
	if o.Delay > 0 {
		b.WriteString(" delay=" + o.Delay.String())
	}
	if o.After != "" {
		b.WriteString(" after=" + o.After)
	}
	if o.NoWait {
		b.WriteString(" wait=no")
	}
	if o.Reattach {
		b.WriteString(" reattach=yes")
	}
	if o.Meta != 0 {
		fmt.Fprintf(&b, " meta=%d", o.Meta)
	}
	return b.String()
}

func parseClient(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "c"))
	if err != nil || n < 0 || !strings.HasPrefix(s, "c") {
		return 0, fmt.Errorf("client %q: want c<N>", s)
	}
	return n, nil
}

// ParseOp reads an op in the form Op.String writes.
func ParseOp(line string) (Op, error) {
	f := strings.Fields(line)
	if len(f) < 2 {
		return Op{}, fmt.Errorf("op %q: want c<N> <kind> [key=value…]", line)
	}
	c, err := parseClient(f[0])
	if err != nil {
		return Op{}, fmt.Errorf("op %q: %w", line, err)
	}
	o := Op{Client: c, Kind: OpKind(f[1])}
	if !slices.Contains(OpKinds, o.Kind) {
		return Op{}, fmt.Errorf("op %q: unknown kind %q", line, f[1])
	}
	for _, kv := range f[2:] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return Op{}, fmt.Errorf("op %q: want key=value, got %q", line, kv)
		}
		switch k {
		case "disk":
			o.Disk = v
		case "vm":
			o.VM, err = strconv.Atoi(v)
		case "delay":
			o.Delay, err = time.ParseDuration(v)
		case "after":
			o.After = v
		case "for":
			o.For, err = time.ParseDuration(v)
		case "wait":
			if v != "no" && v != "yes" {
				err = fmt.Errorf("wait=%q: want yes or no", v)
			}
			o.NoWait = v == "no"
		case "reattach":
			if v != "no" && v != "yes" {
				err = fmt.Errorf("reattach=%q: want yes or no", v)
			}
			o.Reattach = v == "yes"
		case "meta":
			if o.Meta, err = strconv.Atoi(v); err == nil && o.Meta <= 0 {
				err = fmt.Errorf("meta=%q: want a positive number", v)
			}
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			return Op{}, fmt.Errorf("op %q: %v", line, err)
		}
	}
	if o.Kind.hasDisk() && o.Disk == "" {
		return Op{}, fmt.Errorf("op %q: %s needs disk=NAME", line, o.Kind)
	}
	if o.Reattach && o.Kind != OpRecreate {
		return Op{}, fmt.Errorf("op %q: reattach=yes is for recreate only", line)
	}
	if o.Meta != 0 && !o.Kind.hasMeta() {
		return Op{}, fmt.Errorf("op %q: meta=N is for provide, attach and create only", line)
	}
	return o, nil
}

// WorkloadConfig shapes a random workload.
type WorkloadConfig struct {
	// Shape names the workload's shape (Shapes): "" or ShapeMixed draws,
	// per seed, which of the contention features a run gets; ShapeLight is
	// none of them; the others are one each.
	Shape string
	// Clients is the number of concurrent clients (default: drawn from 1
	// to 16 per seed, 3 under ShapeLight). Each draws its operations from
	// Mix.
	Clients int
	// Disks is the number of disk names ("d0", "d1", …; default 3).
	Disks int
	// Mix weighs the operation kinds, "provide=5,detach=2,…" (default
	// DefaultMix). Kinds not named never happen.
	Mix string
	// MaxDelay bounds each operation's think time (default 5 s).
	MaxDelay time.Duration
}

// DefaultMix is the default operation mix: mostly orchestrator calls, some
// operator VM operations, a rare deployment delete.
const DefaultMix = "provide=10,detach=5,delete=3,create=1,attach=1,recreate=1,restart=1,stop=1,start=1,stop-hard=1,delete-vm=1,delete-deployment=0"

func (c WorkloadConfig) withDefaults() WorkloadConfig {
	if c.Shape == "" {
		c.Shape = ShapeMixed
	}
	if c.Disks <= 0 {
		c.Disks = 3
	}
	if c.Mix == "" {
		c.Mix = DefaultMix
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = 5 * time.Second
	}
	return c
}

func parseMix(mix string) (kinds []OpKind, weights []int, err error) {
	for _, e := range strings.Split(mix, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(e), "=")
		n, aerr := strconv.Atoi(v)
		if !ok || aerr != nil || n < 0 || !slices.Contains(OpKinds, OpKind(k)) {
			return nil, nil, fmt.Errorf("workload mix entry %q: want kind=weight with a known kind", e)
		}
		if n > 0 {
			kinds, weights = append(kinds, OpKind(k)), append(weights, n)
		}
	}
	if len(kinds) == 0 {
		return nil, nil, fmt.Errorf("workload mix %q: no kind has weight", mix)
	}
	return kinds, weights, nil
}

// GenerateOps draws steps operations from the workload seed.
func GenerateOps(cfg WorkloadConfig, seed uint64, steps, instances int) ([]Op, error) {
	cfg = cfg.withDefaults()
	kinds, weights, err := parseMix(cfg.Mix)
	if err != nil {
		return nil, err
	}
	sh, err := DrawShape(cfg, seed)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, w := range weights {
		total += w
	}
	rng := rand.New(rand.NewPCG(seed, rt.StreamSeed(seed, "workload/ops")))
	pick := func() OpKind {
		x := rng.IntN(total)
		for i, w := range weights {
			if x < w {
				return kinds[i]
			}
			x -= w
		}
		return kinds[0]
	}
	delay := func() time.Duration {
		return time.Duration(rng.Int64N(int64(cfg.MaxDelay)/int64(time.Millisecond)+1)) * time.Millisecond
	}
	ops := make([]Op, 0, steps)
	for len(ops) < steps {
		if sh.Burst > 0 && rng.Float64() < sh.Burst {
			ops = append(ops, burst(rng, sh, cfg, instances, steps-len(ops))...)
			continue
		}
		k := pick()
		o := Op{Client: rng.IntN(sh.Clients), Kind: k, VM: rng.IntN(instances), Delay: delay(),
			NoWait: sh.NoWait > 0 && rng.Float64() < sh.NoWait}
		if k.hasDisk() {
			o.Disk = "d" + strconv.Itoa(rng.IntN(cfg.Disks))
		}
		ops = append(ops, o)
	}
	// Half the recreates re-attach the disks, drawn from a stream of their
	// own so that the other draws stay as they were.
	re := rand.New(rand.NewPCG(seed, rt.StreamSeed(seed, "workload/reattach")))
	for i := range ops {
		if ops[i].Kind == OpRecreate {
			ops[i].Reattach = re.IntN(2) == 0
		}
	}
	if sh.Reattach && len(ops) >= 4 {
		reattachPair(rand.New(rand.NewPCG(seed, rt.StreamSeed(seed, "workload/reattach-pair"))), ops, cfg, instances)
	}
	// One run in eight ends by deleting the deployment, waited for, so
	// that the quiescent checks see what it did with every dynamic disk
	// (attached or not): no record, no IaaS disk, no leak. Its own stream.
	if len(ops) >= 2 && rand.New(rand.NewPCG(seed, rt.StreamSeed(seed, "workload/teardown"))).IntN(8) == 0 {
		last := &ops[len(ops)-1]
		*last = Op{Client: last.Client, Kind: OpDeleteDeployment, Delay: last.Delay}
	}
	// A third of the provides, attaches and creates send metadata, on a
	// stream of its own too.
	meta := rand.New(rand.NewPCG(seed, rt.StreamSeed(seed, "workload/metadata")))
	for i := range ops {
		if ops[i].Kind.hasMeta() && meta.IntN(3) == 0 {
			ops[i].Meta = 1 + meta.IntN(999)
		}
	}
	return ops, nil
}

// reattachPair puts, in place of four operations of ops, one client's
// start of one instance (which creates its VM if a hard stop or VM delete
// removed it), provides of two disk names no other operation names
// ("d<Disks>", "d<Disks+1>") to it, then a recreate of it that re-attaches
// them, each waited for: the instance holds two disks and nothing else
// moves them, so an OK recreate must have re-attached both.
func reattachPair(rng *rand.Rand, ops []Op, cfg WorkloadConfig, instances int) {
	i, vm := rng.IntN(len(ops)-3), rng.IntN(instances)
	c, delay := ops[i].Client, ops[i].Delay
	a, b := "d"+strconv.Itoa(cfg.Disks), "d"+strconv.Itoa(cfg.Disks+1)
	ops[i] = Op{Client: c, Kind: OpStart, VM: vm, Delay: delay}
	ops[i+1] = Op{Client: c, Kind: OpProvide, Disk: a, VM: vm}
	ops[i+2] = Op{Client: c, Kind: OpProvide, Disk: b, VM: vm}
	ops[i+3] = Op{Client: c, Kind: OpRecreate, VM: vm, Reattach: true}
}

// burst is a burst on one instance and one disk name: up to 8 operations
// (at most room) by distinct clients at once, provides, attaches and
// detaches of the name, with a recreate or hard stop of the instance among
// them under Shape.VMOps; under Shape.Move, over two instances and two
// names, with deletes.
func burst(rng *rand.Rand, sh Shape, cfg WorkloadConfig, instances, room int) []Op {
	n := min(room, 2+rng.IntN(7), sh.Clients)
	if n < 2 {
		n = min(room, 2)
	}
	vm, di := rng.IntN(instances), rng.IntN(cfg.Disks)
	disk := "d" + strconv.Itoa(di)
	first := rng.IntN(sh.Clients)
	kinds := []OpKind{OpProvide, OpProvide, OpProvide, OpAttach, OpDetach}
	// A move burst also names a second instance and a second name (only
	// move shapes draw these, so the other shapes' draws stay as they
	// were), and deletes.
	vms, names := []int{vm}, []string{disk}
	if sh.Move {
		if instances > 1 {
			vms = append(vms, (vm+1+rng.IntN(instances-1))%instances)
		}
		if cfg.Disks > 1 {
			names = append(names, "d"+strconv.Itoa((di+1+rng.IntN(cfg.Disks-1))%cfg.Disks))
		}
		kinds = []OpKind{OpProvide, OpProvide, OpProvide, OpAttach, OpDetach, OpDetach, OpDelete}
	}
	var ops []Op
	for i := range n {
		o := Op{Client: (first + i) % sh.Clients, Kind: kinds[rng.IntN(len(kinds))], VM: vm, Disk: disk,
			Delay: time.Duration(rng.IntN(200)) * time.Millisecond, NoWait: sh.NoWait > 0 && rng.Float64() < sh.NoWait}
		if len(vms) > 1 || len(names) > 1 {
			o.VM, o.Disk = vms[rng.IntN(len(vms))], names[rng.IntN(len(names))]
		}
		if i == n-1 && sh.VMOps && n > 2 {
			o = Op{Client: o.Client, Kind: []OpKind{OpRecreate, OpStopHard, OpDeleteVM}[rng.IntN(3)], VM: vm, Delay: o.Delay}
		}
		ops = append(ops, o)
	}
	return ops
}

// WorkloadDiskMiB and LargeDiskMiB are the sizes the workload's provides
// and creates ask for, by disk pool (DiskMiBOf).
const (
	WorkloadDiskMiB = 4
	LargeDiskMiB    = 6
)

// InstanceLabel is the diskmodel VM name of instance i: "i0", "i1", ….
func InstanceLabel(i int) string { return "i" + strconv.Itoa(i) }

// taskTimeout bounds a client's wait for one task.
const taskTimeout = 20 * time.Minute

// opResult is what a client learned from one op.
type opResult struct {
	outcome diskmodel.Outcome
	cid     string
	detail  string
	// task is the task the Director queued for it (0: none).
	task int64
	// final is whether the client saw the task end.
	final bool
	// state and taskErr are the task's last state and, when it failed, its
	// error, as GET /tasks/:id answered.
	state   director.TaskState
	taskErr string
	// refused is the Director's refusal of the request itself (no task).
	refused error
}

// submit issues one op: the op's result when it has no task to wait for,
// else the task's ID.
func (w *World) submit(o Op) (opResult, int64) {
	d := w.Director()
	if d == nil {
		return opResult{outcome: diskmodel.Failed, detail: "director down"}, 0
	}
	if o.VM < 0 || o.VM >= len(w.Instances) {
		return opResult{outcome: diskmodel.Failed, detail: fmt.Sprintf("no instance %d", o.VM)}, 0
	}
	inst := w.Instances[o.VM]
	var id int64
	var err error
	switch o.Kind {
	case OpProvide:
		id, err = d.Provide(directorUser, director.ProvideRequest{DiskSize: DiskMiBOf(o.Disk), DiskName: o.Disk, DiskPoolName: DiskPoolOf(o.Disk), InstanceID: inst,
			Metadata: OpMetadata(o.Meta)})
	case OpDetach:
		id, err = d.DetachDynamicDisk(directorUser, o.Disk)
	case OpDelete:
		id, err = d.DeleteDynamicDisk(directorUser, o.Disk)
	case OpAttach:
		id, err = d.AttachDynamicDisk(directorUser, director.AttachRequest{DiskName: o.Disk, InstanceID: inst, Metadata: OpMetadata(o.Meta)})
	case OpCreate:
		req := director.CreateDiskRequest{DiskSize: DiskMiBOf(o.Disk), DiskName: o.Disk, DiskPoolName: DiskPoolOf(o.Disk), InstanceID: inst,
			Metadata: OpMetadata(o.Meta)}
		if o.VM == 0 {
			// Upstream's form: the Director finds a VM in the AZ for
			// locality (find_active_vm_in_az); cpilab's instance_id names it.
			req.InstanceID, req.Deployment, req.AZ = "", w.Deployment, WorldAZ
		}
		id, err = d.CreateDynamicDisk(directorUser, req)
	case OpSilence:
		if _, agentID, err := w.instanceVM(inst); err == nil && agentID != "" {
			w.mu.Lock()
			w.silentUntil[agentID] = w.s.Now().Add(o.For)
			w.excused[agentID] = true
			w.mu.Unlock()
		}
		return opResult{outcome: diskmodel.OK, detail: "agent silenced"}, 0
	case OpRecreate, OpRestart, OpStop, OpStart, OpStopHard:
		state := map[OpKind]string{OpRecreate: "recreate", OpRestart: "restart", OpStop: "stopped", OpStart: "started", OpStopHard: "stopped"}[o.Kind]
		id, err = d.ChangeInstanceState(directorUser, director.InstanceStateRequest{InstanceID: inst, State: state, Hard: o.Kind == OpStopHard,
			ReattachDynamicDisks: o.Reattach})
	case OpDeleteVM:
		vm, _, err := w.instanceVM(inst)
		if err != nil {
			return opResult{outcome: diskmodel.Failed, detail: "listing instances: " + err.Error()}, 0
		}
		if vm == "" {
			return opResult{outcome: diskmodel.Failed, detail: "instance has no VM"}, 0
		}
		id, err = d.DeleteVM(directorUser, vm)
	case OpDeleteDeployment:
		id, err = d.DeleteDeployment(directorUser, w.Deployment)
	}
	if err != nil {
		return opResult{outcome: diskmodel.Failed, detail: "refused: " + err.Error(), refused: err}, 0
	}
	return opResult{}, id
}

// awaitTask polls the op's task until it ends (or taskTimeout).
func (w *World) awaitTask(id int64) opResult {
	t, ok := w.WaitTask(id, taskTimeout)
	res := opResult{task: id, final: ok, state: t.State}
	switch {
	case !ok:
		res.outcome, res.detail = diskmodel.Unknown, fmt.Sprintf("task %d still %s", id, t.State)
	case t.State == director.TaskDone:
		var dr director.DiskResult
		_ = jsonUnmarshal(t.Output, &dr)
		res.outcome, res.cid, res.detail = diskmodel.OK, dr.DiskCID, fmt.Sprintf("task %d done", id)
	case t.Result == director.ReasonRestarted:
		res.outcome, res.detail = diskmodel.Unknown, fmt.Sprintf("task %d: %s", id, t.Result)
	default:
		res.outcome, res.taskErr = diskmodel.Failed, t.Result
		res.detail = fmt.Sprintf("task %d %s: %s", id, t.State, t.Result)
	}
	return res
}

// clientOutcome is what the client saw: an invalid, refused or
// unexplained failure is a failure.
func clientOutcome(o diskmodel.Outcome) diskmodel.Outcome {
	if o == diskmodel.Invalid || o == diskmodel.Refused || o == diskmodel.Unexplained {
		return diskmodel.Failed
	}
	return o
}

// workloadRun runs ops on the world: one logical goroutine per client, the
// safety checks after every step, director crashes at their steps.
type workloadRun struct {
	w        *World
	ops      []Op
	disks    []string // every disk name of the workload, sorted
	history  *diskmodel.Recorder
	checkers *Checkers[View]
	log      func(string) // nil: none
	group    *rt.Group    // the clients, and the pollers of tasks they did not wait for

	mu     sync.Mutex     // a leaf lock, never held across a scheduling point
	latest map[string]int // guarded by mu; disk name → the last operation called on it
	given  []GivenTask    // guarded by mu; the tasks the Director queued for the ops
	spans  []span         // guarded by mu; every operation called, in call order
	busy   int            // guarded by mu; the spans not done
	late   []string       // guarded by mu; provides and attaches that outlasted their client's wait
	// links maps a disk name to where its last OK provide or attach
	// linked it, while no other operation on it ended since; guarded by mu.
	links map[string]diskLink

	promises   promises // guarded by promisesMu; the workload's promises so far (lastOK)
	promisesMu sync.Mutex
}

// givenTasks are the tasks the Director queued for the workload so far.
func (r *workloadRun) givenTasks() []GivenTask {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.given)
}

// noteLink updates links with what op o learned, and answers where the
// name's disk was linked before. A provide or attach whose success
// checkProvideLink judged (at is the VM the IaaS has the disk attached to,
// "" if none was judged) records it; any other operation forgets the name,
// and a VM operation every name: a detach that failed after the CPI
// detached may leave the agent's symlink (the task says so), and the next
// detach finds the disk detached and answers OK.
func (r *workloadRun) noteLink(o Op, cid, at string) (diskLink, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.links == nil {
		r.links = map[string]diskLink{}
	}
	was, known := r.links[o.Disk]
	switch {
	case !o.Kind.hasDisk():
		clear(r.links)
	case at != "":
		r.links[o.Disk] = diskLink{cid: cid, vm: at}
	default:
		delete(r.links, o.Disk)
	}
	return was, known
}

// diskLink is a disk's CID and the VM the IaaS had it attached to when a
// provide or attach of it succeeded.
type diskLink struct{ cid, vm string }

// latestCall is the id of the last operation called on the disk name.
func (r *workloadRun) latestCall(name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.latest[name]
}

func (r *workloadRun) run() {
	w := r.w
	byClient := map[int][]Op{}
	var clients []int
	for _, o := range r.ops {
		if _, ok := byClient[o.Client]; !ok {
			clients = append(clients, o.Client)
		}
		byClient[o.Client] = append(byClient[o.Client], o)
	}
	slices.Sort(clients)
	g := rt.NewGroup(w.s)
	r.group = g
	for _, c := range clients {
		ops := byClient[c]
		g.Go(fmt.Sprintf("client-%d", c), func() {
			for _, o := range ops {
				r.runOne(o)
			}
			w.cfg.Gates.clientDone(c)
		})
	}
	g.Wait()
}

func (r *workloadRun) runOne(o Op) {
	w := r.w
	if o.Delay > 0 {
		w.s.Sleep(o.Delay)
	}
	if o.After != "" {
		w.cfg.Gates.reachedWithin(o.After, 30*time.Second)
	}
	var ids []int
	label := InstanceLabel(o.VM)
	call := func(in diskmodel.Input) {
		r.mu.Lock()
		defer r.mu.Unlock()
		id := r.history.Call(o.Client, in)
		ids = append(ids, id)
		if r.latest == nil {
			r.latest = map[string]int{}
		}
		r.latest[in.Disk] = id
	}
	switch o.Kind {
	case OpProvide:
		call(diskmodel.Input{Kind: diskmodel.Provide, Disk: o.Disk, VM: label, Meta: o.Meta})
	case OpDetach:
		call(diskmodel.Input{Kind: diskmodel.Detach, Disk: o.Disk})
	case OpDelete:
		call(diskmodel.Input{Kind: diskmodel.Delete, Disk: o.Disk})
	case OpCreate:
		call(diskmodel.Input{Kind: diskmodel.Create, Disk: o.Disk, Meta: o.Meta})
	case OpAttach:
		call(diskmodel.Input{Kind: diskmodel.Attach, Disk: o.Disk, VM: label, Meta: o.Meta})
	case OpRecreate, OpStopHard, OpDeleteVM:
		kind := diskmodel.Evict
		if o.Reattach {
			kind = diskmodel.Reattach
		}
		for _, name := range r.disks {
			call(diskmodel.Input{Kind: kind, Disk: name, VM: label})
		}
	case OpDeleteDeployment:
		// It deletes each instance's VM (detaching its disks) one after
		// the other, then the disks: seen from a name, evictions of
		// every instance and a delete, each of which may land apart (a
		// provide to an instance not yet deleted may come in between).
		for _, name := range r.disks {
			for i := range w.Instances {
				call(diskmodel.Input{Kind: diskmodel.Evict, Disk: name, VM: InstanceLabel(i)})
			}
			call(diskmodel.Input{Kind: diskmodel.Delete, Disk: name})
		}
	}
	callAt := w.s.Now()
	r.mu.Lock()
	self := len(r.spans)
	r.spans = append(r.spans, span{op: o, call: callAt})
	r.busy++
	r.mu.Unlock()
	res, task := w.submit(o)
	if task == 0 {
		r.finish(o, ids, self, callAt, res)
		return
	}
	if o.NoWait {
		// The client goes on; the task is polled to its end beside it.
		r.group.Go(fmt.Sprintf("client-%d-task-%d", o.Client, task), func() { r.finish(o, ids, self, callAt, w.awaitTask(task)) })
		return
	}
	r.finish(o, ids, self, callAt, w.awaitTask(task))
}

// checkIdle runs the idle checks after step when the workload waits on
// nothing: every operation called has been answered, every task the
// Director gave it seen to its end (the workload's clients are the only
// ones who ask for tasks). A Director that is down (its API cannot be
// read) is not idle.
func (r *workloadRun) checkIdle(step int) {
	r.mu.Lock()
	busy := r.busy > 0
	r.mu.Unlock()
	if busy || r.checkers.Idle == nil {
		return
	}
	r.promisesMu.Lock()
	promised, doubt := r.promises.lastOK(r.history)
	r.promisesMu.Unlock()
	// The oracle is read again rather than the step's SafetyView reused:
	// the cloud's lock is a scheduling point, and the runs' traces are
	// pinned.
	v := r.w.recordsView(r.w.SafetyView(), promised, doubt)
	if v.APIErr != nil {
		return
	}
	if err := r.checkers.WhenIdle(step, v); err != nil {
		r.w.addViolation(err.(*Violation))
	}
}

// finish records what the client learned of op o (history entries ids,
// span self, called at callAt) and runs the checks that follow a step.
func (r *workloadRun) finish(o Op, ids []int, self int, callAt time.Time, res opResult) {
	w := r.w
	retAt := w.s.Now()
	r.mu.Lock()
	r.spans[self].task, r.spans[self].ret, r.spans[self].done = res.task, retAt, res.final || res.task == 0
	if r.spans[self].done {
		r.busy--
	}
	if res.task != 0 {
		r.given = append(r.given, GivenTask{Op: o, ID: res.task})
	}
	r.mu.Unlock()
	if res.outcome == diskmodel.Failed && o.Kind != OpSilence {
		res.outcome = r.checkExplained(self, o, res, callAt, retAt)
	}
	r.checkProgress(o, res, callAt, retAt)
	if f := w.cfg.tamper.afterOp; f != nil {
		f(w, o)
	}
	at := ""
	if (o.Kind == OpProvide || o.Kind == OpAttach) && res.outcome == diskmodel.OK && r.history.Alone(ids[0]) {
		// No operation on the name overlapped it: none began since, none
		// called before is still running (a recreate of the VM queued
		// behind it that re-attaches the disk), and none returned after
		// it was called (a recreate that moved the disk after the
		// provide's effect and answered first): the state is this
		// provide's.
		at = w.checkProvideLink(o.Kind, o.Disk, res.cid)
		if o.Meta != 0 {
			w.checkMetadataNow(o, res.cid)
		}
	}
	if was, ok := r.noteLink(o, res.cid, at); ok && o.Kind == OpDetach && res.outcome == diskmodel.OK &&
		r.history.Alone(ids[0]) {
		// As for a provide: the state is this detach's.
		w.checkDetachLink(o.Disk, was.cid, was.vm)
	}
	// A task that lost a lock a stalled renewal let lapse, or took one, and
	// failed stopped where an injected fault stops one (lapses.go).
	injected := res.outcome == diskmodel.Failed && (strings.Contains(res.taskErr, "injected") || w.stalledTakeover(res.task) != "")
	out := diskmodel.Output{Outcome: res.outcome, CID: res.cid, Injected: injected}
	switch {
	case !o.Kind.hasDisk() && out.Outcome == diskmodel.Failed:
		out.Outcome = diskmodel.Unknown // a failed VM operation may have detached some disks
	case !o.Kind.hasDisk() && out.Outcome == diskmodel.Invalid:
		out.Outcome = diskmodel.Refused // seen from each disk name, a refused VM operation did nothing
	}
	for _, id := range ids {
		out := out
		if o.Reattach && out.Outcome == diskmodel.OK {
			// A re-attaching recreate that no operation on the name
			// overlapped must have re-attached the disk.
			out.Alone = r.history.Alone(id)
		}
		r.history.Return(id, out)
	}
	if o.Reattach && out.Outcome == diskmodel.OK {
		r.checkReattached(o, ids)
	}
	// The detail may name paths in the run's temporary directory, which
	// must not reach the trace (its hash is compared across runs).
	detail := strings.ReplaceAll(res.detail, w.cfg.DataDir, "$DATA")
	simrt.Annotate(w.s, fmt.Sprintf("%v: %v (%s)", o, res.outcome, detail))
	if r.log != nil {
		r.log(fmt.Sprintf("%v: %v", o, clientOutcome(res.outcome)))
	}
	w.mu.Lock()
	w.step++
	step := w.step
	w.mu.Unlock()
	if err := r.checkers.AfterStep(step, w.SafetyView()); err != nil {
		w.addViolation(err.(*Violation))
	}
	r.checkIdle(step)
	for _, f := range w.next(faults.SeamStep, "step") {
		if f.Kind == faults.DirectorCrash {
			w.Crash(f.Duration)
		}
	}
}

// checkReattached runs when a recreate that re-attaches the instance's
// dynamic disks succeeds (ids are its history entries, one per name of
// r.disks): each name it kept the promise of (lastOK: the name's last
// provide or attach put its disk on this instance, and only re-attaching
// recreates of it followed, one after the other) on which no operation
// began since must have that disk attached to the instance's new VM, as
// the API lists the instance, with its agent's symlink. The idle records
// check would see the same, but with several clients a later operation
// on the name usually comes first and ends the promise.
func (r *workloadRun) checkReattached(o Op, ids []int) {
	w := r.w
	label := InstanceLabel(o.VM)
	for i, id := range ids {
		name := r.disks[i]
		if r.latestCall(name) != id || r.history.OthersRunning(id) {
			continue
		}
		p, ok := namePromise(r.history.NameHistory(name))
		if !ok || p.Reattached == 0 || p.Instance != label {
			continue
		}
		vm, _, err := w.instanceVM(w.Instances[o.VM])
		if err != nil {
			continue // the Director is down: the idle and quiescent checks decide
		}
		d, inIaaS := w.oracleDisk(p.CID)
		if !inIaaS || d.VMCID.IsZero() || d.VMCID.String() != vm {
			at := "the IaaS has no such disk"
			if inIaaS {
				at = fmt.Sprintf("the IaaS has it attached to %q, not to the instance's VM %q", d.VMCID, vm)
			}
			w.addViolation(&Violation{Invariant: InvRecords, Phase: AfterStep,
				Err: fmt.Errorf("%v succeeded and no other operation on %s overlapped it, whose last provide or attach put disk %s on %s, but %s",
					o, name, p.CID, label, at)})
			continue
		}
		w.checkProvideLink(o.Kind, name, p.CID)
	}
}
