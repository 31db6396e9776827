package director_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/simulator/simrt"
)

// A crash point is one step of one job, and one side of its work: "before"
// kills the director once the step's start is recorded, before the step does
// anything (its CPI or agent call); "after" kills it once the step's work is
// done, before the director records anything of it (not even the step's
// end). N counts the occurrences of that job's step in the workload.
type crashPoint struct {
	Job, Stage, Phase string
	N                 int
}

func (p crashPoint) key() string    { return p.Job + "/" + p.Stage + "/" + p.Phase }
func (p crashPoint) String() string { return fmt.Sprintf("%s #%d", p.key(), p.N) }

const (
	phaseBefore = "before"
	phaseAfter  = "after"
)

// crashGate is one director generation's process: its store, CPI, agents
// and inventory go through the gate, and once the gate trips every call
// from the generation blocks forever, as a process killed with SIGKILL does
// nothing more. The gate trips at its crash point, seen in the task event
// writes; with no point it only records the steps it sees.
type crashGate struct {
	never *rt.Event
	point *crashPoint

	mu     sync.Mutex // a leaf lock, never held across a scheduling point
	dead   bool
	counts map[string]int  // crash point key → occurrences so far
	events map[int64]int   // task ID → task events seen
	seen   []crashPoint    // every step event, in order
	trip   *crashPoint     // set when the point is reached
	stages map[string]bool // job/stage pairs seen
}

var errKilled = errors.New("director killed here (crash point)")

func newCrashGate(r rt.Runtime, point *crashPoint) *crashGate {
	return &crashGate{never: rt.NewEvent(r), point: point, counts: map[string]int{}, events: map[int64]int{},
		stages: map[string]bool{}}
}

func (g *crashGate) isDead() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.dead
}

// check blocks forever once the generation is dead.
func (g *crashGate) check() {
	if g.isDead() {
		g.never.Wait(0)
	}
}

// taskWrite notes a task record written; it returns errKilled when this
// write is the crash point's "after" side (the write must not happen).
func (g *crashGate) taskWrite(t *director.Task) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	from := g.events[t.ID]
	if len(t.Events) <= from {
		return nil
	}
	g.events[t.ID] = len(t.Events)
	for _, ev := range t.Events[from:] {
		phase := phaseAfter
		if ev.State == "started" {
			phase = phaseBefore
		}
		p := crashPoint{Job: t.Type, Stage: ev.Stage, Phase: phase}
		g.counts[p.key()]++
		p.N = g.counts[p.key()]
		g.seen = append(g.seen, p)
		g.stages[t.Type+"/"+ev.Stage] = true
		if g.point != nil && g.trip == nil && p == *g.point {
			g.trip = &p
			if phase == phaseAfter {
				return errKilled
			}
		}
	}
	return nil
}

// tripped kills the generation if its point was reached in the last write.
func (g *crashGate) tripped() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.trip != nil && !g.dead {
		g.dead = true
	}
	return g.dead
}

type gateStore struct {
	g  *crashGate
	st store.Store
}

func (s *gateStore) Update(fn func(store.Tx) error) error {
	s.g.check()
	err := s.st.Update(func(tx store.Tx) error { return fn(&gateTx{Tx: tx, g: s.g}) })
	if s.g.tripped() {
		s.g.never.Wait(0)
	}
	return err
}

func (s *gateStore) View(fn func(store.Tx) error) error { s.g.check(); return s.st.View(fn) }
func (s *gateStore) Close() error                       { return nil }

type gateTx struct {
	store.Tx
	g *crashGate
}

func (tx *gateTx) Put(k store.Kind, key string, v any) error {
	if k == store.Tasks {
		var t *director.Task
		switch x := v.(type) {
		case *director.Task:
			t = x
		case director.Task:
			t = &x
		}
		if t != nil {
			if err := tx.g.taskWrite(t); err != nil {
				return err
			}
		}
	}
	return tx.Tx.Put(k, key, v)
}

// gateCPI is the generation's CPI: dead with it. It keeps has_vm, so that
// reconciliation can ask it.
type gateCPI struct {
	g   *crashGate
	cpi cpiv2.CPI
}

func gated[T any](g *crashGate, fn func() (T, error)) (T, error) {
	g.check()
	v, err := fn()
	g.check()
	return v, err
}

func gated0(g *crashGate, fn func() error) error {
	_, err := gated(g, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

func (c *gateCPI) CreateStemcell(ctx context.Context, a cpiv2.CreateStemcellArgs) (cpiv2.StemcellCID, error) {
	return gated(c.g, func() (cpiv2.StemcellCID, error) { return c.cpi.CreateStemcell(ctx, a) })
}
func (c *gateCPI) CreateVM(ctx context.Context, a cpiv2.CreateVMArgs) (cpiv2.CreateVMResult, error) {
	return gated(c.g, func() (cpiv2.CreateVMResult, error) { return c.cpi.CreateVM(ctx, a) })
}
func (c *gateCPI) DeleteVM(ctx context.Context, cid cpiv2.VMCID) error {
	return gated0(c.g, func() error { return c.cpi.DeleteVM(ctx, cid) })
}
func (c *gateCPI) HasVM(ctx context.Context, cid cpiv2.VMCID) (bool, error) {
	return gated(c.g, func() (bool, error) { return c.cpi.HasVM(ctx, cid) })
}
func (c *gateCPI) HasDisk(ctx context.Context, cid cpiv2.DiskCID) (bool, error) {
	return gated(c.g, func() (bool, error) { return c.cpi.HasDisk(ctx, cid) })
}
func (c *gateCPI) CreateDisk(ctx context.Context, a cpiv2.CreateDiskArgs) (cpiv2.DiskCID, error) {
	return gated(c.g, func() (cpiv2.DiskCID, error) { return c.cpi.CreateDisk(ctx, a) })
}
func (c *gateCPI) DeleteDisk(ctx context.Context, cid cpiv2.DiskCID) error {
	return gated0(c.g, func() error { return c.cpi.DeleteDisk(ctx, cid) })
}
func (c *gateCPI) AttachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) (cpiv2.DiskHint, error) {
	return gated(c.g, func() (cpiv2.DiskHint, error) { return c.cpi.AttachDisk(ctx, vm, disk) })
}
func (c *gateCPI) DetachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) error {
	return gated0(c.g, func() error { return c.cpi.DetachDisk(ctx, vm, disk) })
}
func (c *gateCPI) SetDiskMetadata(ctx context.Context, cid cpiv2.DiskCID, m cpiv2.Metadata) error {
	return gated0(c.g, func() error { return c.cpi.SetDiskMetadata(ctx, cid, m) })
}
func (c *gateCPI) ResizeDisk(ctx context.Context, cid cpiv2.DiskCID, sizeMiB int) error {
	return gated0(c.g, func() error { return c.cpi.ResizeDisk(ctx, cid, sizeMiB) })
}
func (c *gateCPI) GetDisks(ctx context.Context, vm cpiv2.VMCID) ([]cpiv2.DiskCID, error) {
	return gated(c.g, func() ([]cpiv2.DiskCID, error) { return c.cpi.GetDisks(ctx, vm) })
}

type gateAgents struct {
	g *crashGate
	a *mbus.Client
}

func (a *gateAgents) WaitUntilReady(agentID string, timeout time.Duration) error {
	return gated0(a.g, func() error { return a.a.WaitUntilReady(agentID, timeout) })
}
func (a *gateAgents) Run(agentID, method string, args ...any) (json.RawMessage, error) {
	return gated(a.g, func() (json.RawMessage, error) { return a.a.Run(agentID, method, args...) })
}

type gateInventory struct {
	g *crashGate
	l *lab.Lab
}

func (i *gateInventory) ListDisks(ctx context.Context) ([]cpiv2.DiskCID, error) {
	return gated(i.g, func() ([]cpiv2.DiskCID, error) { return i.l.ListDisks(ctx) })
}
func (i *gateInventory) ListStemcells(ctx context.Context) ([]cpiv2.StemcellCID, error) {
	return gated(i.g, func() ([]cpiv2.StemcellCID, error) { return i.l.ListStemcells(ctx) })
}
func (i *gateInventory) CopyDisk(ctx context.Context, vm cpiv2.VMCID, from, to cpiv2.DiskCID) error {
	return gated0(i.g, func() error { return i.l.CopyDisk(ctx, vm, from, to) })
}
func (i *gateInventory) ListVMs(ctx context.Context) ([]director.ListedVM, error) {
	return gated(i.g, func() ([]director.ListedVM, error) { return i.l.ListVMs(ctx) })
}

// stepWorkload is every job, in an order that reaches every step of each:
// each op queues one task on the director given.
func stepWorkload(t *testing.T) []func(d *director.Director) (int64, error) {
	img, _ := filepath.Abs(filepath.Join(fixtures, "stemcell-v2", "image"))
	mf, cc, m := readFixture(t, "stemcell-v2/stemcell.MF"), readFixture(t, "cloud-config.yml"), manifestWith(t, 2)
	inst := func(d *director.Director, i int) string {
		insts, _ := d.Instances("")
		sort.Slice(insts, func(a, b int) bool { return insts[a].Index < insts[b].Index })
		if i >= len(insts) {
			return "missing"
		}
		return insts[i].ID
	}
	state := func(i int, s string, hard, reattach bool) func(d *director.Director) (int64, error) {
		return func(d *director.Director) (int64, error) {
			return d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: inst(d, i), State: s,
				Hard: hard, ReattachDynamicDisks: reattach})
		}
	}
	provide := func(name string, i int, meta map[string]any) func(d *director.Director) (int64, error) {
		return func(d *director.Director) (int64, error) {
			return d.Provide("admin", director.ProvideRequest{DiskName: name, DiskSize: 4, DiskPoolName: "small", InstanceID: inst(d, i), Metadata: meta})
		}
	}
	resize := func(name string, size int) func(d *director.Director) (int64, error) {
		return func(d *director.Director) (int64, error) {
			return d.ResizeDynamicDisk("admin", director.ResizeRequest{DiskName: name, DiskSize: size})
		}
	}
	return []func(d *director.Director) (int64, error){
		func(d *director.Director) (int64, error) { return d.UploadStemcell("admin", mf, img) },
		func(d *director.Director) (int64, error) { return d.UpdateCloudConfig("admin", cc) },
		func(d *director.Director) (int64, error) { return d.Deploy("admin", m) },
		provide("a", 0, map[string]any{"purpose": "crash-test"}),
		func(d *director.Director) (int64, error) {
			return d.CreateDynamicDisk("admin", director.CreateDiskRequest{DiskName: "b", DiskSize: 4, DiskPoolName: "small", InstanceID: inst(d, 1)})
		},
		func(d *director.Director) (int64, error) {
			return d.AttachDynamicDisk("admin", director.AttachRequest{DiskName: "b", InstanceID: inst(d, 1)})
		},
		resize("a", 8), // grows in place: detach, resize_disk, attach, link
		resize("a", 6), // shrinks by copy: create, attach, copy, metadata, detach, swap, link
		func(d *director.Director) (int64, error) { return d.DetachDynamicDisk("admin", "a") },
		state(1, "stopped", false, false),
		state(1, "started", false, false),
		state(1, "restart", false, false),
		state(1, "recreate", false, true),
		state(0, "stopped", true, false),
		state(0, "started", false, false),
		func(d *director.Director) (int64, error) {
			insts, _ := d.Instances("")
			for _, in := range insts {
				if in.Index == 0 && in.VMCID != "" {
					return d.DeleteVM("admin", in.VMCID)
				}
			}
			return 0, errors.New("instance 0 has no VM to delete")
		},
		func(d *director.Director) (int64, error) { return d.DeleteOrphanedDisks("admin", nil) },
		provide("c", 1, nil),
		func(d *director.Director) (int64, error) { return d.DeleteDynamicDisk("admin", "a") },
		func(d *director.Director) (int64, error) { return d.DeleteDeployment("admin", "workers") },
	}
}

// crashRun is what one run of the workload found.
type crashRun struct {
	seen      []crashPoint
	stages    map[string]bool
	killedAt  string // the crash point reached, "" when none
	mismatch  []string
	jobErrors []string
}

// runCrashPoint runs the workload on a director (simulated runtime, memory
// store, the lab's fake cloud) that dies at point (nil: never), restarts it
// from its store, finishes the workload and compares the records with the
// cloud after the restart and at the end.
func runCrashPoint(t *testing.T, seed uint64, point *crashPoint, knobs director.Knobs) crashRun {
	t.Helper()
	dir := t.TempDir()
	ops := stepWorkload(t)
	var out crashRun
	var failure error
	res := simrt.Run(simrt.Config{Seed: seed, MaxSteps: 50_000_000, MaxTime: 1000 * time.Hour}, func(s *simrt.Sim) {
		l, err := lab.New(lab.Config{Runtime: s, DataDir: dir})
		if err != nil {
			failure = err
			return
		}
		defer l.Close()
		// A disk the director does not know: its first start records it
		// as an orphan, which gives delete_orphaned_disks work.
		if _, err := l.CPI.CreateDisk(cpiv2.WithStemcellAPIVersion(context.Background(), 2), cpiv2.CreateDiskArgs{SizeMiB: 8}); err != nil {
			failure = err
			return
		}
		st := store.NewMemory()
		start := func(g *crashGate) (*director.Director, error) {
			return director.New(director.Config{Runtime: s, Store: &gateStore{g: g, st: st}, CPI: &gateCPI{g: g, cpi: l.CPI},
				Agents: &gateAgents{g: g, a: l.Agents}, Inventory: &gateInventory{g: g, l: l}, Knobs: knobs,
				AgentTimeout: 30 * time.Second, AgentPingTimeout: 2 * time.Second, InDoubtBackoff: time.Second})
		}
		g := newCrashGate(s, point)
		d, err := start(g)
		if err != nil {
			failure = err
			return
		}
		// wait polls the store (the test's view, not the director's) until
		// the task ends or the director dies.
		wait := func(g *crashGate, id int64) {
			for !g.isDead() {
				var task director.Task
				_ = st.View(func(tx store.Tx) error { _, err := tx.Get(store.Tasks, store.IDKey(id), &task); return err })
				if task.State.Final() {
					if task.State != director.TaskDone {
						out.jobErrors = append(out.jobErrors, fmt.Sprintf("task %d %s: %s", task.ID, task.Type, task.Error))
					}
					return
				}
				s.Sleep(time.Second)
			}
		}
		restarted := false
		for i := 0; i < len(ops); i++ {
			id, err := ops[i](d)
			if err != nil {
				out.jobErrors = append(out.jobErrors, fmt.Sprintf("op %d refused: %v", i, err))
				continue
			}
			wait(g, id)
			if !g.isDead() {
				continue
			}
			if restarted {
				failure = fmt.Errorf("killed twice (at %s)", g.trip)
				return
			}
			out.killedAt = g.trip.String()
			restarted = true
			g = newCrashGate(s, nil)
			if d, err = start(g); err != nil {
				failure = fmt.Errorf("restart after the kill at %s: %w", out.killedAt, err)
				return
			}
			if failure = drainTasks(s, d, st); failure != nil {
				return
			}
			out.mismatch = append(out.mismatch, prefixed("after restart", recordsVsCloud(d, l))...)
			if point.Job == "resize_dynamic_disk" {
				// A resize restores the link at restart (the other jobs
				// link again when the operator runs them again).
				out.mismatch = append(out.mismatch, prefixed("after restart", unlinked(d, l))...)
			}
			i-- // the operator runs the interrupted request again
		}
		if point == nil {
			out.seen, out.stages = g.seen, g.stages
		}
		if err := drainTasks(s, d, st); err != nil {
			failure = err
			return
		}
		out.mismatch = append(out.mismatch, prefixed("at the end", recordsVsCloud(d, l))...)
		_ = d.Close()
	})
	if failure != nil {
		t.Fatalf("crash point %v: %v", point, failure)
	}
	if res.Err != nil {
		t.Fatalf("crash point %v: simulator: %v", point, res.Err)
	}
	return out
}

func prefixed(p string, lines []string) []string {
	for i := range lines {
		lines[i] = p + ": " + lines[i]
	}
	return lines
}

// drainTasks waits until no task is queued or processing.
func drainTasks(s *simrt.Sim, d *director.Director, st store.Store) error {
	for range 3600 {
		busy := 0
		_ = st.View(func(tx store.Tx) error {
			return tx.List(store.Tasks, func(_ string, raw []byte) error {
				var t director.Task
				if err := json.Unmarshal(raw, &t); err != nil {
					return err
				}
				if !t.State.Final() {
					busy++
				}
				return nil
			})
		})
		if busy == 0 {
			return nil
		}
		s.Sleep(time.Second)
	}
	return errors.New("tasks still running after an hour")
}

// recordsVsCloud lists every way the director's records differ from the
// fake cloud's oracle.
func recordsVsCloud(d *director.Director, l *lab.Lab) []string {
	var out []string
	bad := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	cloud, err := l.Cloud.State(context.Background())
	if err != nil {
		return []string{err.Error()}
	}
	vms, _ := d.VMs()
	recVM := map[string]director.VM{}
	for _, v := range vms {
		recVM[v.CID] = v
	}
	cloudVM := map[string]bool{}
	for _, v := range cloud.VMs {
		cloudVM[v.CID.String()] = true
		if _, ok := recVM[v.CID.String()]; !ok {
			bad("VM %s (agent %s) exists in the cloud, not in the records: leaked", v.CID, v.AgentID)
		}
	}
	for cid := range recVM {
		if !cloudVM[cid] {
			bad("VM %s is recorded, the cloud has none", cid)
		}
	}
	insts, _ := d.Instances("")
	for _, in := range insts {
		if in.VMCID != "" && !cloudVM[in.VMCID] {
			bad("instance %s names VM %s, the cloud has none", in.ID, in.VMCID)
		}
	}
	disks, _ := d.DynamicDisks()
	orphans, _ := d.OrphanedDisks()
	cloudDisk := map[string]string{} // CID → VM CID
	cloudMeta := map[string]map[string]string{}
	cloudSize := map[string]int{}
	for _, dk := range cloud.Disks {
		cloudDisk[dk.CID.String()] = dk.VMCID.String()
		cloudSize[dk.CID.String()] = dk.SizeMiB
		cloudMeta[dk.CID.String()] = dk.Metadata
	}
	known := map[string]bool{}
	for _, dd := range disks {
		if dd.State != director.DiskReady {
			bad("dynamic disk %s left %s", dd.Name, dd.State)
		}
		vm, ok := cloudDisk[dd.CID]
		switch {
		case !ok:
			bad("dynamic disk %s (%s) is recorded, the cloud has none", dd.Name, dd.CID)
		case vm != dd.VMCID:
			bad("dynamic disk %s: the record says VM %q, the cloud %q", dd.Name, dd.VMCID, vm)
		case dd.SizeMiB != cloudSize[dd.CID]:
			bad("dynamic disk %s: the record says %d MiB, the cloud %d MiB", dd.Name, dd.SizeMiB, cloudSize[dd.CID])
		case !metadataSet(dd.Metadata, cloudMeta[dd.CID]):
			bad("dynamic disk %s: the record says metadata %v, the cloud %v", dd.Name, dd.Metadata, cloudMeta[dd.CID])
		}
		known[dd.CID] = true
	}
	for _, o := range orphans {
		if _, ok := cloudDisk[o.CID]; !ok {
			bad("orphaned disk %s is recorded, the cloud has none", o.CID)
		}
		if known[o.CID] {
			bad("disk %s is both a dynamic disk and an orphan", o.CID)
		}
		known[o.CID] = true
	}
	for cid := range cloudDisk {
		if !known[cid] {
			bad("disk %s exists in the cloud, neither a dynamic disk nor an orphan: leaked", cid)
		}
	}
	scs, _ := d.Stemcells()
	recSC := map[string]bool{}
	for _, sc := range scs {
		recSC[sc.CID] = true
	}
	for _, sc := range cloud.Stemcells {
		if !recSC[sc.CID.String()] {
			bad("stemcell %s exists in the cloud, not in the records: leaked", sc.CID)
		}
		delete(recSC, sc.CID.String())
	}
	for cid := range recSC {
		bad("stemcell %s is recorded, the cloud has none", cid)
	}
	intents, _ := d.Intents()
	for _, in := range intents {
		bad("intent %s of task %d left unsettled: %s", in.Op, in.TaskID, in.Note)
	}
	for _, n := range d.ReconcileNotes() {
		bad("reconciliation note: %s", n)
	}
	return out
}

// unlinked lists every attached dynamic disk whose VM's agent holds no link
// to it (read from the VM root).
func unlinked(d *director.Director, l *lab.Lab) []string {
	var out []string
	disks, _ := d.DynamicDisks()
	for _, dd := range disks {
		if !dd.Attached() {
			continue
		}
		root := l.Cloud.VMRoot(cpiv2.MustCID[cpiv2.VMKind](dd.VMCID))
		if _, err := os.Lstat(filepath.Join(root, agent.DynamicDiskLink(dd.CID))); err != nil {
			out = append(out, fmt.Sprintf("dynamic disk %s (%s) is attached to %s, its agent has no link: %v", dd.Name, dd.CID, dd.VMCID, err))
		}
	}
	return out
}

// sourceSteps lists the stages named by j.step("…", …) in the director's
// source: a step added to a job is a crash point the workload must reach.
func sourceSteps(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]bool{}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "step" {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				t.Errorf("%s: a step whose stage is not a literal; the crash test cannot list it", fset.Position(call.Pos()))
				return true
			}
			s, _ := strconv.Unquote(lit.Value)
			set[s] = true
			return true
		})
	}
	return slices.Sorted(func(yield func(string) bool) {
		for s := range set {
			if !yield(s) {
				return
			}
		}
	})
}

// A kill -9 at every step of every job leaves records equal to the cloud
// once the director has restarted: no VM or disk leaked, none recorded that
// the cloud lacks, no attachment that differs, no intent left. The steps
// come from a dry run of a workload of every job; the dry run must reach
// every job type and every stage named in the source, so a new step is a
// new crash point (or a failure here asking the workload to reach it).
func TestKillAtEveryStep(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the workload once per crash point")
	}
	const seed = 1
	dry := runCrashPoint(t, seed, nil, director.Knobs{})
	if len(dry.mismatch) > 0 || len(dry.jobErrors) > 0 {
		t.Fatalf("the workload without a crash:\nmismatch %s\njob errors %s", strings.Join(dry.mismatch, "\n"),
			strings.Join(dry.jobErrors, "\n"))
	}
	jobsSeen := map[string]bool{}
	stagesSeen := map[string]bool{}
	for js := range dry.stages {
		job, stage, _ := strings.Cut(js, "/")
		jobsSeen[job], stagesSeen[stage] = true, true
	}
	for _, job := range director.JobTypes() {
		if !jobsSeen[job] && job != "update_cloud_config" { // the one job without a step: nothing to kill in
			t.Errorf("the workload runs no step of job %s; add it to stepWorkload", job)
		}
	}
	for _, stage := range sourceSteps(t) {
		if !stagesSeen[stage] {
			t.Errorf("the workload never reaches step %q; make stepWorkload reach it", stage)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	points := dry.seen
	if s := os.Getenv("CPILAB_DIRECTOR_CRASH_POINT"); s != "" { // one point, to debug it
		points = slices.DeleteFunc(points, func(p crashPoint) bool { return p.String() != s })
	}
	t.Logf("%d crash points in %d jobs' steps", len(points), len(dry.stages))
	// Each crash point is its own simulation (own runtime, lab and store):
	// they run in parallel, go test's -parallel at a time.
	for _, p := range points {
		t.Run(p.String(), func(t *testing.T) {
			t.Parallel()
			run := runCrashPoint(t, seed, &p, director.Knobs{})
			if run.killedAt != p.String() {
				t.Fatalf("%s: the run never reached it (killed at %q)", p, run.killedAt)
			}
			if len(run.mismatch) > 0 {
				t.Errorf("kill -9 at %s: the records differ from the cloud:\n  %s", p, strings.Join(run.mismatch, "\n  "))
			}
		})
	}
}

// NoVMReconcile restores upstream's restart: a kill -9 once delete_vm has
// returned leaves a record of a VM the cloud deleted, and once create_vm
// has returned leaks the VM; the reference reconciles both.
func TestKnobNoVMReconcile(t *testing.T) {
	for _, tc := range []struct {
		point crashPoint
		want  string
	}{
		{crashPoint{Job: "change_instance_state", Stage: "Deleting VM", Phase: phaseAfter, N: 1}, "is recorded, the cloud has none"},
		{crashPoint{Job: "deploy", Stage: "Creating VM", Phase: phaseAfter, N: 1}, "not in the records: leaked"},
	} {
		t.Run(tc.point.Stage, func(t *testing.T) {
			bothWays(t, func(k *director.Knobs) { k.NoVMReconcile = true }, func(t *testing.T, upstream bool, k director.Knobs) {
				run := runCrashPoint(t, 1, &tc.point, k)
				if run.killedAt != tc.point.String() {
					t.Fatalf("never reached %s", tc.point)
				}
				got := strings.Join(run.mismatch, "\n")
				if upstream != strings.Contains(got, tc.want) {
					t.Fatalf("kill at %s, upstream %v: mismatches:\n%s\nwant %q: %v", tc.point, upstream, got, tc.want, upstream)
				}
			})
		})
	}
}

// metadataSet reports whether the cloud holds every key of the recorded
// metadata with its value (the cloud also holds the director's tags).
func metadataSet(rec map[string]any, cloud map[string]string) bool {
	for k, v := range rec {
		s, ok := v.(string)
		if !ok {
			b, _ := json.Marshal(v)
			s = string(b)
		}
		if cloud[k] != s {
			return false
		}
	}
	return true
}
