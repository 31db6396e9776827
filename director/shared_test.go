package director_test

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/internal/pgtest"
	"github.com/cpilab/cpilab/rt"
)

// sharedStores opens, per implementation, one store for two directors:
// memory and SQLite are shared in process; on PostgreSQL each director gets
// its own connection pool on one database, as separate processes do.
func sharedStores() map[string]func(t *testing.T) (store.Store, store.Store) {
	return map[string]func(t *testing.T) (store.Store, store.Store){
		"memory": func(*testing.T) (store.Store, store.Store) { m := store.NewMemory(); return m, m },
		"sqlite": func(t *testing.T) (store.Store, store.Store) {
			s, err := store.OpenSQLite(filepath.Join(t.TempDir(), "d.db"))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			return s, s
		},
		"postgres": func(t *testing.T) (store.Store, store.Store) {
			url := pgtest.URL(t)
			open := func() store.Store {
				s, err := store.OpenPostgres(context.Background(), store.PostgresConfig{URL: url})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = s.Close() })
				return s
			}
			return open(), open()
		},
	}
}

// lockLog records LockObserver events.
type lockLog struct {
	mu  sync.Mutex
	evs []director.LockEvent
}

func (l *lockLog) add(ev director.LockEvent) {
	l.mu.Lock()
	l.evs = append(l.evs, ev)
	l.mu.Unlock()
}

func sharedConfig(owner string, log *lockLog) func(*director.Config) {
	return func(c *director.Config) {
		c.Shared, c.Owner, c.TaskLease, c.PollInterval, c.LockObserver = true, owner, 2*time.Second, 10*time.Millisecond, log.add
	}
}

// Two directors sharing one store (two processes on PostgreSQL) split the
// queued tasks between their workers, and no task runs in both: each
// task's locks are taken by one process only, and each disk is created
// once.
func TestSharedDirectorsNeverRunOneTaskTwice(t *testing.T) {
	for name, open := range sharedStores() {
		t.Run(name, func(t *testing.T) {
			sa, sb := open(t)
			log := &lockLog{}
			w := newWorld(t, worldOpts{store: sa, instances: 3, configure: sharedConfig("proc-a", log)})
			b, err := director.New(director.Config{Runtime: rt.Real(2), Store: sb, CPI: w.lab.CPI, Agents: w.lab.Agents,
				Inventory: w.lab, AgentTimeout: 10 * time.Second, AgentPingTimeout: time.Second, VMLockTimeout: 20 * time.Second,
				Shared: true, Owner: "proc-b", TaskLease: 2 * time.Second, PollInterval: 10 * time.Millisecond, LockObserver: log.add})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			const n = 12
			var ids []int64
			for i := range n {
				d := w.d
				if i%2 == 1 {
					d = b // tasks recorded by either process
				}
				id, err := d.Provide("admin", director.ProvideRequest{DiskSize: 4, DiskName: fmt.Sprintf("shared-%d", i),
					DiskPoolName: "small", InstanceID: w.insts[i%3].ID})
				if err != nil {
					t.Fatal(err)
				}
				ids = append(ids, id)
			}
			ranBy := map[string]int{}
			for _, id := range ids {
				task := w.done(id, nil)
				ranBy[task.Owner]++
			}
			owners := map[int64]map[string]bool{}
			log.mu.Lock()
			for _, ev := range log.evs {
				if !ev.Acquired {
					continue
				}
				proc, _, _ := strings.Cut(ev.Owner, "/")
				if owners[ev.TaskID] == nil {
					owners[ev.TaskID] = map[string]bool{}
				}
				owners[ev.TaskID][proc] = true
			}
			log.mu.Unlock()
			for _, id := range ids {
				if len(owners[id]) != 1 {
					t.Errorf("task %d took locks in processes %v; want exactly one", id, owners[id])
				}
			}
			if got := w.history(fakeiaas.OpCreateDisk, ""); got != n {
				t.Errorf("create_disk called %d times for %d provides of distinct names", got, n)
			}
			t.Logf("tasks run by %v", ranBy)
		})
	}
}

// A task whose worker stopped renewing its lease (a worker killed in the
// middle of a detach, its locks still unexpired) is taken over: the disk's
// detach is finished as restart reconciliation would, the dead task's locks
// are taken and released, and the task fails saying why.
func TestSharedLapsedLeaseIsTakenOver(t *testing.T) {
	for name, open := range sharedStores() {
		t.Run(name, func(t *testing.T) {
			st, _ := open(t)
			log := &lockLog{}
			w := newWorld(t, worldOpts{store: st, configure: sharedConfig("proc-a", log)})
			w.done(w.provide("x", 0))
			dd, _ := w.disk("x")
			inst := w.insts[0].ID
			now := time.Now()
			var taskID int64
			err := st.Update(func(tx store.Tx) error {
				var err error
				if taskID, err = tx.NextID("tasks"); err != nil {
					return err
				}
				task := director.Task{ID: taskID, Type: "detach_dynamic_disk", Queue: director.QueueDynamicDisks,
					State: director.TaskProcessing, Description: "detach x", User: "admin", CreatedAt: now, StartedAt: now,
					Owner: "dead-worker", LeaseExpiresAt: now.Add(-time.Second)}
				if err := tx.Put(store.Tasks, store.IDKey(taskID), task); err != nil {
					return err
				}
				dd.State, dd.TaskID = director.DiskDetaching, taskID
				if err := tx.Put(store.DynamicDisks, "x", dd); err != nil {
					return err
				}
				for _, l := range []string{"lock:disk:x", "lock:vm:" + inst} {
					if err := tx.Put(store.Locks, l, director.LockRecord{Name: l, Owner: fmt.Sprintf("dead-worker/task-%d/1", taskID),
						TaskID: taskID, ExpiresAt: now.Add(time.Hour)}); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			task := w.failed(taskID, nil)
			if !strings.Contains(task.Error, director.ReasonLeaseLapsed) || task.Owner != "proc-a" {
				t.Fatalf("task %d: owner %s, error %q; want proc-a's and %q", taskID, task.Owner, task.Error, director.ReasonLeaseLapsed)
			}
			got, _ := w.disk("x")
			if got.State != director.DiskReady || got.VMCID != "" || got.TaskID != 0 {
				t.Fatalf("disk x after takeover: %+v; want ready and detached", got)
			}
			if d, ok := w.iaasDisk(dd.CID); !ok || d.VMCID.String() != "" {
				t.Fatalf("IaaS disk %s: %+v (exists %v); want it detached", dd.CID, d, ok)
			}
			locks, err := w.d.Locks()
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range locks {
				if l.TaskID == taskID {
					t.Fatalf("lock %s of the dead task still recorded: %+v", l.Name, l)
				}
			}
			// The locks are free: the disk can be provided again at once.
			w.done(w.provide("x", 1))
		})
	}
}

// Under Knobs.NoTaskTakeover (upstream) the lapsed task ends "timeout",
// nothing it left is settled, and its unexpired locks stay.
func TestSharedNoTaskTakeoverTimesOut(t *testing.T) {
	st := store.NewMemory()
	log := &lockLog{}
	w := newWorld(t, worldOpts{store: st, knobs: director.Knobs{NoTaskTakeover: true}, configure: sharedConfig("proc-a", log)})
	w.done(w.provide("x", 0))
	dd, _ := w.disk("x")
	now := time.Now()
	var taskID int64
	err := st.Update(func(tx store.Tx) error {
		var err error
		if taskID, err = tx.NextID("tasks"); err != nil {
			return err
		}
		task := director.Task{ID: taskID, Type: "detach_dynamic_disk", Queue: director.QueueDynamicDisks,
			State: director.TaskProcessing, CreatedAt: now, StartedAt: now, Owner: "dead-worker", LeaseExpiresAt: now.Add(-time.Second)}
		if err := tx.Put(store.Tasks, store.IDKey(taskID), task); err != nil {
			return err
		}
		dd.State, dd.TaskID = director.DiskDetaching, taskID
		if err := tx.Put(store.DynamicDisks, "x", dd); err != nil {
			return err
		}
		return tx.Put(store.Locks, "lock:disk:x", director.LockRecord{Name: "lock:disk:x", Owner: "dead-worker/task/1",
			TaskID: taskID, ExpiresAt: now.Add(time.Hour)})
	})
	if err != nil {
		t.Fatal(err)
	}
	task, err := w.d.WaitTask(taskID, 30*time.Second)
	if err != nil || task.State != director.TaskTimeout {
		t.Fatalf("task %d: %s (%v); want timeout", taskID, task.State, err)
	}
	if got, _ := w.disk("x"); got.State != director.DiskDetaching {
		t.Fatalf("disk x: %s; want it left detaching, as upstream leaves it", got.State)
	}
	locks, err := w.d.Locks()
	if err != nil {
		t.Fatal(err)
	}
	if len(locks) != 1 || locks[0].TaskID != taskID {
		t.Fatalf("locks %+v; want the dead task's disk lock left to expire", locks)
	}
}
