package director_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/rt"
)

const fixtures = "../fixtures/director"

func readFixture(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// world is a director on a lab: fakeiaas + reference CPI + agents on mbus.
type world struct {
	t      testing.TB
	lab    *lab.Lab
	d      *director.Director
	st     store.Store
	insts  []director.Instance
	vmType string
}

type worldOpts struct {
	knobs     director.Knobs
	instances int // default 2
	store     store.Store
	agentMode agent.Mode
	configure func(*director.Config)
	lab       func(*lab.Config)
	vmType    string // the instance group's vm_type (default "default")
	noDeploy  bool
}

func newWorld(t testing.TB, o worldOpts) *world {
	t.Helper()
	r := rt.Real(1)
	lc := lab.Config{Runtime: r, DataDir: t.TempDir(), AgentMode: o.agentMode}
	if o.lab != nil {
		o.lab(&lc)
	}
	l, err := lab.New(lc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	if o.store == nil {
		o.store = store.NewMemory()
	}
	cfg := director.Config{Runtime: r, Store: o.store, CPI: l.CPI, Agents: l.Agents, Inventory: l, Knobs: o.knobs,
		AgentTimeout: 10 * time.Second, AgentPingTimeout: time.Second, VMLockTimeout: 20 * time.Second}
	cfg.InDoubtBackoff = 10 * time.Millisecond // retries of in-doubt calls, quickly
	if o.configure != nil {
		o.configure(&cfg)
	}
	d, err := director.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	w := &world{t: t, lab: l, d: d, st: o.store, vmType: o.vmType}
	if o.noDeploy {
		return w
	}
	w.setup(o.instances)
	return w
}

// setup uploads a stemcell, sets the cloud config and deploys n instances.
func (w *world) setup(n int) {
	w.t.Helper()
	if n == 0 {
		n = 2
	}
	abs, err := filepath.Abs(filepath.Join(fixtures, "stemcell-v2", "image"))
	if err != nil {
		w.t.Fatal(err)
	}
	w.done(w.d.UploadStemcell("admin", readFixture(w.t, "stemcell-v2/stemcell.MF"), abs))
	w.done(w.d.UpdateCloudConfig("admin", readFixture(w.t, "cloud-config.yml")))
	w.deploy(n)
}

func (w *world) deploy(n int) {
	w.t.Helper()
	m := manifestWith(w.t, n)
	if w.vmType != "" {
		m = []byte(replaceOnce(string(m), "vm_type: default", "vm_type: "+w.vmType))
	}
	w.done(w.d.Deploy("admin", m))
	insts, err := w.d.Instances("workers")
	if err != nil {
		w.t.Fatal(err)
	}
	sort.Slice(insts, func(i, j int) bool { return insts[i].Index < insts[j].Index })
	w.insts = insts
}

func manifestWith(t testing.TB, n int) []byte {
	m := string(readFixture(t, "manifest.yml"))
	return []byte(replaceOnce(m, "instances: 2", "instances: "+itoa(n)))
}

func replaceOnce(s, old, new string) string {
	for i := 0; i+len(old) <= len(s); i++ {
		if s[i:i+len(old)] == old {
			return s[:i] + new + s[i+len(old):]
		}
	}
	return s
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// wait waits for a queued task; it fails the test if queueing failed.
func (w *world) wait(id int64, err error) director.Task {
	w.t.Helper()
	if err != nil {
		w.t.Fatalf("queue task: %v", err)
	}
	task, err := w.d.WaitTask(id, 60*time.Second)
	if err != nil {
		w.t.Fatalf("task %d: %v", id, err)
	}
	return task
}

// done waits for a task and requires it to succeed.
func (w *world) done(id int64, err error) director.Task {
	w.t.Helper()
	task := w.wait(id, err)
	if task.State != director.TaskDone {
		w.t.Fatalf("task %d (%s) ended %s: %s\ndebug:\n%v", task.ID, task.Description, task.State, task.Error, task.Debug)
	}
	return task
}

// failed waits for a task and requires it to fail.
func (w *world) failed(id int64, err error) director.Task {
	w.t.Helper()
	task := w.wait(id, err)
	if task.State != director.TaskError {
		w.t.Fatalf("task %d (%s) ended %s, want error; result %s", task.ID, task.Description, task.State, task.Result)
	}
	return task
}

func (w *world) provide(name string, inst int) (int64, error) {
	return w.d.Provide("admin", director.ProvideRequest{DiskSize: 4, DiskName: name, DiskPoolName: "small", InstanceID: w.insts[inst].ID})
}

func (w *world) instance(i int) director.Instance {
	w.t.Helper()
	in, err := w.d.Instances("workers")
	if err != nil {
		w.t.Fatal(err)
	}
	for _, x := range in {
		if x.ID == w.insts[i].ID {
			return x
		}
	}
	w.t.Fatalf("instance %d gone", i)
	return director.Instance{}
}

func (w *world) disk(name string) (director.DynamicDisk, bool) {
	dd, err := w.d.DynamicDisk(name)
	if err != nil {
		return dd, false
	}
	return dd, true
}

// state is the oracle: fakeiaas's real state.
func (w *world) state() fakeiaas.State {
	w.t.Helper()
	s, err := w.lab.Cloud.State(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	return s
}

// iaasDisk returns the IaaS disk with cid.
func (w *world) iaasDisk(cid string) (fakeiaas.Disk, bool) {
	for _, d := range w.state().Disks {
		if d.CID.String() == cid {
			return d, true
		}
	}
	return fakeiaas.Disk{}, false
}

// linked reports whether the VM's agent has the dynamic disk symlink.
func (w *world) linked(vmCID, diskCID string) bool {
	root := w.lab.Cloud.VMRoot(cpiv2.MustCID[cpiv2.VMKind](vmCID))
	_, err := os.Lstat(filepath.Join(root, agent.DynamicDiskLink(diskCID)))
	return err == nil
}

// waitFor polls cond (the system runs on the real runtime here) until it
// holds, failing the test after 20 s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// pauseRule pauses every op call (on target, if set) until released.
func (w *world) pauseRule(op fakeiaas.Op, target string) fakeiaas.Rule {
	w.t.Helper()
	r, err := w.lab.Cloud.AddFault(context.Background(), fakeiaas.Rule{Op: op, Target: target,
		Effect: fakeiaas.Effect{Kind: fakeiaas.EffectPause}})
	if err != nil {
		w.t.Fatal(err)
	}
	return r
}

func (w *world) ruleStatus(id string) fakeiaas.RuleStatus {
	w.t.Helper()
	all, err := w.lab.Cloud.Faults(context.Background())
	if err != nil {
		w.t.Fatal(err)
	}
	for _, s := range all {
		if s.ID == id {
			return s
		}
	}
	w.t.Fatalf("no fault rule %s", id)
	return fakeiaas.RuleStatus{}
}

func (w *world) release(id string) {
	w.t.Helper()
	if err := w.lab.Cloud.RemoveFault(context.Background(), id); err != nil {
		w.t.Fatal(err)
	}
}

// history counts the IaaS operations op on target ("" : any).
func (w *world) history(op fakeiaas.Op, target string) int {
	w.t.Helper()
	h, err := w.lab.Cloud.History(context.Background(), fakeiaas.HistoryFilter{Op: op, Target: target}, 0)
	if err != nil {
		w.t.Fatal(err)
	}
	return len(h)
}

// lockWaiting reports whether the task's event log shows it waiting for a
// lock (a Locking step started and not finished).
func (w *world) lockWaiting(id int64) bool {
	task, err := w.d.Task(id)
	if err != nil {
		return false
	}
	n := len(task.Events)
	return n > 0 && task.Events[n-1].Stage == "Locking" && task.Events[n-1].State == "started"
}
