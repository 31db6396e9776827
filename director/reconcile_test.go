package director_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/director/store"
)

// flakyGetDisks is the lab's CPI with get_disks failing its first fail
// calls with err.
type flakyGetDisks struct {
	cpiv2.CPI
	err error

	mu    sync.Mutex
	fail  int // guarded by mu
	calls int // guarded by mu
}

func (f *flakyGetDisks) GetDisks(ctx context.Context, vm cpiv2.VMCID) ([]cpiv2.DiskCID, error) {
	f.mu.Lock()
	f.calls++
	failing := f.fail > 0
	if failing {
		f.fail--
	}
	f.mu.Unlock()
	if failing {
		return nil, f.err
	}
	return f.CPI.GetDisks(ctx, vm)
}

// diskInventory hides the lab's VM and stemcell listing: a director with a
// disk inventory only.
type diskInventory struct{ l *lab.Lab }

func (i diskInventory) ListDisks(ctx context.Context) ([]cpiv2.DiskCID, error) {
	return i.l.ListDisks(ctx)
}

// restart closes the world's director and starts another on its store.
func (w *world) restart(t *testing.T, configure func(*director.Config)) *director.Director {
	t.Helper()
	if err := w.d.Close(); err != nil {
		t.Fatal(err)
	}
	cfg := director.Config{Store: w.st, CPI: w.lab.CPI, Agents: w.lab.Agents, Inventory: w.lab,
		AgentPingTimeout: time.Second, ReconcileBackoff: time.Millisecond}
	if configure != nil {
		configure(&cfg)
	}
	d, err := director.New(cfg)
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	t.Cleanup(func() { _ = d.Close() })
	w.d = d
	return d
}

// A get_disks that fails with ok_to_retry during restart reconciliation is
// called again (with backoff) and the director starts; one that keeps
// failing, retryable or not, is noted and skipped: the director still
// starts.
func TestReconcileRetriesGetDisks(t *testing.T) {
	throttled := &cpiv2.Error{Type: cpiv2.TypeCloudError, Message: "rate limited", OkToRetry: true}
	for _, tc := range []struct {
		name      string
		err       error
		fail      int
		wantCalls int // get_disks calls, over both VMs
		wantNote  bool
	}{
		{"retryable, then fine", throttled, 3, 3 + 2, false},
		{"retryable, always", throttled, 1000, 2 * 5, true},
		{"not retryable", &cpiv2.Error{Type: cpiv2.TypeCloudError, Message: "boom"}, 1, 1 + 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorld(t, worldOpts{})
			w.done(w.provide("a", 0))
			cpi := &flakyGetDisks{CPI: w.lab.CPI, err: tc.err, fail: tc.fail}
			d := w.restart(t, func(c *director.Config) { c.CPI = cpi })
			cpi.mu.Lock()
			calls := cpi.calls
			cpi.mu.Unlock()
			if calls != tc.wantCalls {
				t.Errorf("get_disks called %d times; want %d", calls, tc.wantCalls)
			}
			notes := d.ReconcileNotes()
			if got := len(notes) > 0 && strings.Contains(strings.Join(notes, "\n"), "get_disks"); got != tc.wantNote {
				t.Errorf("notes %q; want a get_disks note: %v", notes, tc.wantNote)
			}
			// The director works: the records still hold the attachment.
			if dd, _ := w.disk("a"); !dd.Attached() {
				t.Error("the attachment was lost")
			}
			w.done(w.d.DetachDynamicDisk("admin", "a"))
		})
	}
}

// A VM the director recorded but the cloud deleted (kill -9 after delete_vm
// returned) leaves the records on restart, with the attachments naming it;
// the instance gets a new VM when started.
func TestReconcileForgetsDeletedVM(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.done(w.provide("a", 0))
	vm := w.instance(0).VMCID
	if err := w.lab.CPI.DeleteVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind](vm)); err != nil {
		t.Fatal(err)
	}
	d := w.restart(t, nil)
	vms, _ := d.VMs()
	for _, v := range vms {
		if v.CID == vm {
			t.Fatalf("VM %s deleted by the cloud is still recorded", vm)
		}
	}
	if in := w.instance(0); in.VMCID != "" {
		t.Fatalf("instance 0 still names VM %s", in.VMCID)
	}
	if dd, _ := w.disk("a"); dd.Attached() {
		t.Fatalf("disk a still attached to %s", dd.VMCID)
	}
	w.done(d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: w.insts[0].ID, State: "started"}))
	w.done(w.provide("a", 0))
}

// A VM whose create_vm returned just before a kill -9 (an intent, no
// record) is found on restart, through the VM inventory or, without one,
// through its agent, and deleted: nothing leaks and the intent is settled.
func TestReconcileDeletesVMOfInterruptedCreate(t *testing.T) {
	for _, withInventory := range []bool{true, false} {
		name := "agent get_state"
		if withInventory {
			name = "VM inventory"
		}
		t.Run(name, func(t *testing.T) {
			w := newWorld(t, worldOpts{})
			scs, _ := w.d.Stemcells()
			ctx := cpiv2.WithStemcellAPIVersion(context.Background(), 2)
			res, err := w.lab.CPI.CreateVM(ctx, cpiv2.CreateVMArgs{AgentID: "agent-lost",
				StemcellCID: cpiv2.MustCID[cpiv2.StemcellKind](scs[0].CID), CloudProperties: cpiv2.CloudProps{},
				Networks: cpiv2.Networks{"default": cpiv2.Network{Type: "dynamic"}}})
			if err != nil {
				t.Fatal(err)
			}
			if err := w.st.Update(func(tx store.Tx) error {
				id, err := tx.NextID(string(store.Intents))
				if err != nil {
					return err
				}
				return tx.Insert(store.Intents, store.IDKey(id), director.Intent{ID: id, Op: director.IntentCreateVM,
					InstanceID: w.insts[0].ID, AgentID: "agent-lost", StemcellAPIVersion: 2, TaskID: 42})
			}); err != nil {
				t.Fatal(err)
			}
			d := w.restart(t, func(c *director.Config) {
				if !withInventory {
					c.Inventory = diskInventory{w.lab}
				}
			})
			for _, v := range w.state().VMs {
				if v.CID == res.VMCID {
					t.Fatalf("the VM of the interrupted create_vm (%s) leaked", v.CID)
				}
			}
			if in, _ := d.Intents(); len(in) != 0 {
				t.Fatalf("intents left: %+v", in)
			}
			if n := len(w.state().VMs); n != 2 {
				t.Fatalf("the cloud has %d VMs; want the deployment's 2", n)
			}
		})
	}
}

// Without a VM inventory and with no agent answering, an interrupted
// create_vm cannot be settled: its intent stays, with a note, and the
// director starts.
func TestReconcileKeepsUnsettledIntent(t *testing.T) {
	w := newWorld(t, worldOpts{})
	if err := w.st.Update(func(tx store.Tx) error {
		id, err := tx.NextID(string(store.Intents))
		if err != nil {
			return err
		}
		return tx.Insert(store.Intents, store.IDKey(id), director.Intent{ID: id, Op: director.IntentCreateVM,
			AgentID: "agent-nobody", TaskID: 7})
	}); err != nil {
		t.Fatal(err)
	}
	d := w.restart(t, func(c *director.Config) {
		c.Inventory = diskInventory{w.lab}
		c.AgentPingTimeout = 50 * time.Millisecond
	})
	in, _ := d.Intents()
	if len(in) != 1 || in[0].Unsettled != 1 || in[0].Note == "" {
		t.Fatalf("intents %+v; want the one, unsettled once, with a note", in)
	}
	if len(d.ReconcileNotes()) == 0 {
		t.Fatal("no reconciliation note")
	}
}

// lostCreateVM is the lab's CPI with create_vm's response lost while lose
// is set: the VM is made, the director hears a time-out.
type lostCreateVM struct {
	cpiv2.CPI

	mu   sync.Mutex
	lose bool // guarded by mu
}

func (c *lostCreateVM) CreateVM(ctx context.Context, args cpiv2.CreateVMArgs) (cpiv2.CreateVMResult, error) {
	res, err := c.CPI.CreateVM(ctx, args)
	c.mu.Lock()
	lose := c.lose
	c.mu.Unlock()
	if err == nil && lose {
		return cpiv2.CreateVMResult{}, &cpiv2.InvalidResponseError{Kind: cpiv2.ErrCPITimeout, Method: cpiv2.MethodCreateVM, Detail: "response lost (test)"}
	}
	return res, err
}

// A create_vm whose response is lost (the VM made, the director told
// nothing) fails its task without leaking the VM: its intent is settled at
// once, by agent ID.
func TestCreateVMLostResponseLeaksNothing(t *testing.T) {
	var cpi *lostCreateVM
	w := newWorld(t, worldOpts{configure: func(c *director.Config) {
		cpi = &lostCreateVM{CPI: c.CPI.(cpiv2.CPI)}
		c.CPI = cpi
	}})
	cpi.mu.Lock()
	cpi.lose = true
	cpi.mu.Unlock()
	task := w.failed(w.d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: w.insts[0].ID, State: "recreate"}))
	if !strings.Contains(task.Error, "create_vm") {
		t.Fatalf("task error %q; want the create_vm failure", task.Error)
	}
	vms, _ := w.d.VMs()
	if got := len(w.state().VMs); got != len(vms) || got != 1 {
		t.Fatalf("the cloud has %d VMs, the director records %d; want 1 each (instance 1's)", got, len(vms))
	}
	if in, _ := w.d.Intents(); len(in) != 0 {
		t.Fatalf("intents left: %+v", in)
	}
}
