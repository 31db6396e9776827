package storage

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"
)

// fakeDirector is an honest in-memory Director: disks with sizes, resize
// tasks that finish after a number of polls, a provider that may refuse.
type fakeDirector struct {
	disks   map[string]*Disk
	tasks   map[string]*fakeTask
	seq     int
	down    bool
	refuse  bool // the provider refuses the next resizes
	polls   int  // polls before a task finishes
	resizes int
}

type fakeTask struct {
	name   string
	size   int64
	polls  int
	refuse bool
}

func newFakeDirector() *fakeDirector {
	return &fakeDirector{disks: map[string]*Disk{}, tasks: map[string]*fakeTask{}, polls: 1}
}

var errDown = errors.New("connection refused")

func (f *fakeDirector) Disk(_ context.Context, name string) (Disk, bool, error) {
	if f.down {
		return Disk{}, false, errDown
	}
	d, ok := f.disks[name]
	if !ok {
		return Disk{}, false, nil
	}
	return *d, true, nil
}

func (f *fakeDirector) Provide(_ context.Context, name string, size int64, _, instance string) error {
	if f.down {
		return errDown
	}
	if _, ok := f.disks[name]; !ok {
		f.seq++
		f.disks[name] = &Disk{CID: fmt.Sprintf("disk-%d", f.seq), SizeMiB: size, InstanceID: instance}
	}
	return nil
}

func (f *fakeDirector) StartResize(_ context.Context, name string, size int64) (string, error) {
	if f.down {
		return "", errDown
	}
	f.seq++
	f.resizes++
	id := fmt.Sprint(f.seq)
	f.tasks[id] = &fakeTask{name: name, size: size, polls: f.polls, refuse: f.refuse}
	return id, nil
}

func (f *fakeDirector) Task(_ context.Context, id string) (TaskState, string, error) {
	if f.down {
		return 0, "", errDown
	}
	t := f.tasks[id]
	if t.refuse {
		return TaskRefused, "volume modification rate exceeded", nil
	}
	if t.polls > 0 {
		t.polls--
		return TaskRunning, "", nil
	}
	f.disks[t.name].SizeMiB = t.size
	return TaskDone, "", nil
}

// fakeUsage fills disks: used = fill(t) capped by the size.
type fakeUsage struct {
	d    *fakeDirector
	used int64
}

func (u *fakeUsage) Usage(_ context.Context, _, cid string) (int64, int64, error) {
	for _, d := range u.d.disks {
		if d.CID == cid {
			return d.SizeMiB, min(u.used, d.SizeMiB), nil
		}
	}
	return 0, 0, errors.New("no such disk on the VM")
}

type memStore map[string]Status

func (m memStore) Load(_ context.Context, id string) (Status, bool, error) {
	s, ok := m[id]
	return s, ok, nil
}
func (m memStore) Save(_ context.Context, id string, st Status) error { m[id] = st; return nil }

func newVolume(t *testing.T) Volume {
	return Volume{ID: "pg/data", DiskName: "pg-data", InstanceID: "db/0", DiskPool: "fast",
		Policy: policy(t, Policy{RequestMiB: 10240, LimitMiB: 1 << 20, Window: Window{Schedule: AlwaysOpen}, Cooldown: -1})}
}

func TestControllerGrowsAndResumesAfterRestart(t *testing.T) {
	ctx := context.Background()
	dir, store := newFakeDirector(), memStore{}
	usage := &fakeUsage{d: dir}
	v := newVolume(t)
	c, err := New(Config{Director: dir, Usage: usage, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	at := t0
	if _, err := c.Reconcile(ctx, v, at); err != nil {
		t.Fatal(err)
	}
	if d := dir.disks["pg-data"]; d == nil || d.SizeMiB != 10240 {
		t.Fatalf("first reconcile provided %+v, want a disk at request", d)
	}
	usage.used = 9000 // 88 % used: grow
	d, err := c.Reconcile(ctx, v, at.Add(time.Minute))
	if err != nil || d.Kind != ScheduledGrow {
		t.Fatalf("reconcile at 88%% used: %+v, %v", d, err)
	}
	// A new controller (a restart) sees the task in flight and issues nothing.
	c2, _ := New(Config{Director: dir, Usage: usage, Store: store})
	d, err = c2.Reconcile(ctx, v, at.Add(2*time.Minute))
	if err != nil || d.Kind != None || d.State != StateResizing || dir.resizes != 1 {
		t.Fatalf("after restart: %+v, %v, %d resizes", d, err, dir.resizes)
	}
	d, _ = c2.Reconcile(ctx, v, at.Add(3*time.Minute))
	st := store["pg/data"]
	if st.LastAction == nil || st.LastAction.Result != Succeeded || st.EffectiveSizeMiB <= 10240 || d.Kind != None {
		t.Fatalf("after the task: %+v, decision %+v", st, d)
	}
}

func TestControllerRefusalsAndOutagesUseNoBudget(t *testing.T) {
	ctx := context.Background()
	dir, store := newFakeDirector(), memStore{}
	usage := &fakeUsage{d: dir}
	v := newVolume(t)
	c, _ := New(Config{Director: dir, Usage: usage, Store: store})
	c.Reconcile(ctx, v, t0)
	usage.used = 10100
	dir.refuse, dir.polls = true, 0
	for i := range 8 {
		if _, err := c.Reconcile(ctx, v, t0.Add(time.Duration(i+1)*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	st := store["pg/data"]
	refused := 0
	for _, a := range st.History {
		if a.Result == Refused {
			refused++
		}
	}
	// Only the resize still in flight counts; the refused ones do not.
	if n := st.ActionsInWindow(t0.Add(time.Hour)); n != 1 || refused < 3 {
		t.Fatalf("%d actions counted, %d refused (history %+v)", n, refused, st.History)
	}
	dir.down = true
	if _, err := c.Reconcile(ctx, v, t0.Add(time.Hour)); !errors.Is(err, ErrDirector) {
		t.Fatalf("director down: %v, want ErrDirector", err)
	}
	dir.down, dir.refuse = false, false
	d, err := c.Reconcile(ctx, v, t0.Add(2*time.Hour))
	if err != nil || d.Kind != EmergencyGrow {
		t.Fatalf("after the outage: %+v, %v", d, err)
	}
}

func TestControllerReplacedDiskStartsAtEffectiveSize(t *testing.T) {
	ctx := context.Background()
	dir, store := newFakeDirector(), memStore{}
	usage := &fakeUsage{d: dir}
	v := newVolume(t)
	c, _ := New(Config{Director: dir, Usage: usage, Store: store})
	c.Reconcile(ctx, v, t0)
	usage.used = 9000
	dir.polls = 0
	c.Reconcile(ctx, v, t0.Add(time.Minute))
	c.Reconcile(ctx, v, t0.Add(2*time.Minute))
	grown := store["pg/data"].EffectiveSizeMiB
	if grown <= 10240 {
		t.Fatalf("not grown: %d", grown)
	}
	delete(dir.disks, "pg-data") // the disk is replaced (e.g. deleted by an operator)
	c.Reconcile(ctx, v, t0.Add(3*time.Minute))
	if got := dir.disks["pg-data"].SizeMiB; got != grown {
		t.Fatalf("replacement disk at %d MiB, want the effective size %d", got, grown)
	}
	if n := store["pg/data"].ActionsInWindow(t0.Add(4 * time.Minute)); n != 1 {
		t.Fatalf("budget after replacement counts %d actions, want 1 (it survives the disk)", n)
	}
}
