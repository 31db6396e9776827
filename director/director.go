package director

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/rt"
)

// Config configures a Director. Zero fields take the documented defaults.
type Config struct {
	// Runtime supplies time, randomness and concurrency. Default rt.Real(0).
	Runtime rt.Runtime
	// Store holds tasks, locks, deployments and disks. Default: a new
	// store.Memory (nothing survives the process).
	Store store.Store
	// CPI is the cloud (required).
	CPI CPI
	// Inventory, when set, lists every IaaS disk for restart
	// reconciliation (see DiskLister). Default: CPI, if it implements
	// DiskLister; else none.
	Inventory DiskLister
	// Agents reaches the agents (required).
	Agents Agents
	// UUID is the director's UUID. Default: drawn from the runtime's
	// "director/ids" stream.
	UUID string
	// Name is reported by /info. Default "cpilab".
	Name string
	// Knobs select upstream behaviours (docs/upstream.md); zero is safe.
	Knobs Knobs
	// NormalWorkers serve the normal and urgent queues. Default 2.
	NormalWorkers int
	// UrgentWorkers serve only the urgent queue. Default 1.
	UrgentWorkers int
	// DynamicDiskWorkers serve only the dynamic_disks queue. Default 2;
	// Knobs.ZeroDynamicDiskWorkers starts none.
	DynamicDiskWorkers int
	// LockTimeout bounds waits for deployment locks. Default 10 s.
	LockTimeout time.Duration
	// VMLockTimeout bounds waits for VM and disk-name locks. Default 60 s
	// (upstream's VM_LOCK_TIMEOUT in dynamic-disk jobs).
	VMLockTimeout time.Duration
	// LockLease is how long a lock lives unless renewed. A held lock is
	// renewed on a timer every LockLease/2 while held, as upstream's lock
	// thread (lock.rb), and at each step of its job. Default 240 s
	// (upstream's lock expiration).
	LockLease time.Duration
	// PerStepLockRenewal turns the timer renewal off: a job renews its
	// leases only at each step and before each in-doubt disk call it makes
	// again, as cpilab did before, so one CPI call or agent wait longer
	// than LockLease lets another job take the lock. It is neither upstream
	// nor the reference: it exists to show what a lapsed lease does.
	// Default false.
	PerStepLockRenewal bool
	// AgentTimeout bounds wait_until_ready after create_vm and attach_disk.
	// Default 60 s.
	AgentTimeout time.Duration
	// AgentPingTimeout is how long recreate and VM delete wait to decide an
	// agent is unresponsive. Default 5 s.
	AgentPingTimeout time.Duration
	// InDoubtBackoff is the pause before calling an attach_disk,
	// detach_disk or delete_disk again whose error left its outcome in
	// doubt; it doubles for each further try (InDoubtTries in all). Default
	// 1 s. See Knobs.TrustCPIErrors.
	InDoubtBackoff time.Duration
	// VMInventory, when set, lists every IaaS VM for restart
	// reconciliation (see VMLister). Default: Inventory, if it implements
	// VMLister, else CPI if it does; else none (the agent is asked).
	VMInventory VMLister
	// StemcellInventory, when set, lists every IaaS stemcell, so that an
	// upload interrupted by a crash is settled at restart (see
	// StemcellLister). Default: Inventory, if it implements
	// StemcellLister, else CPI if it does; else none.
	StemcellInventory StemcellLister
	// ReconcileTries bounds the calls restart reconciliation makes of one
	// CPI call while it fails with a retryable error (ok_to_retry, or no
	// answer). Default 5.
	ReconcileTries int
	// ReconcileBackoff is the pause before reconciliation calls again; it
	// doubles each time. Default 1 s (5 tries wait 15 s in all).
	ReconcileBackoff time.Duration

	// Shared says that other director processes use Store too (PostgreSQL,
	// docs/director.md): workers claim queued tasks from the store under a
	// lease (TaskLease) instead of from in-memory queues, locks are records
	// in the store that every process honours, start-up neither fails the
	// tasks in flight nor reconciles the cloud (other processes may be
	// running them), and a task
	// whose worker stopped renewing its lease is taken over by another
	// worker, which settles what the task left in flight and fails it.
	// Store must implement store.Claimer (every cpilab store does). Default
	// false: one process owns the store.
	Shared bool
	// NoWorkers starts no workers: the director records tasks and answers
	// for them, and worker processes sharing the store run them (the api
	// role). Default false.
	NoWorkers bool
	// Owner names this process in task leases and lock records (Shared).
	// Default: "director-" and an ID drawn from the runtime's
	// "director/ids" stream.
	Owner string
	// TaskLease is how long a claimed task stays this process's without a
	// renewal (Shared); a running task renews it every TaskLease/3.
	// Default 30 s.
	TaskLease time.Duration
	// PollInterval is how often idle workers look in the store for queued
	// tasks and expired leases, and how often waiters for a lock or a task
	// held by another process look again (Shared). Default 100 ms.
	PollInterval time.Duration
	// LockObserver, when set, is called after each lock acquisition and
	// before each release, with this process's owner name: tests record
	// these to check that no lock is ever held twice. Default none.
	LockObserver func(LockEvent)
}

// LockEvent is one acquisition or release of a lock (Config.LockObserver).
type LockEvent struct {
	Name     string    `json:"name"`
	Owner    string    `json:"owner"` // the process owner and the task: "<owner>/task-<id>/<n>"
	TaskID   int64     `json:"task_id"`
	Acquired bool      `json:"acquired"` // false: released
	At       time.Time `json:"at"`
}

func (c *Config) setDefaults() error {
	if c.CPI == nil {
		return errors.New("director: Config.CPI is required")
	}
	if c.Agents == nil {
		return errors.New("director: Config.Agents is required")
	}
	if c.Runtime == nil {
		c.Runtime = rt.Real(0)
	}
	if c.Store == nil {
		c.Store = store.NewMemory()
	}
	if c.Inventory == nil {
		if l, ok := c.CPI.(DiskLister); ok {
			c.Inventory = l
		}
	}
	if c.VMInventory == nil {
		if l, ok := c.Inventory.(VMLister); ok {
			c.VMInventory = l
		} else if l, ok := c.CPI.(VMLister); ok {
			c.VMInventory = l
		}
	}
	if c.StemcellInventory == nil {
		if l, ok := c.Inventory.(StemcellLister); ok {
			c.StemcellInventory = l
		} else if l, ok := c.CPI.(StemcellLister); ok {
			c.StemcellInventory = l
		}
	}
	if c.Name == "" {
		c.Name = "cpilab"
	}
	def := func(p *int, v int) {
		if *p <= 0 {
			*p = v
		}
	}
	def(&c.NormalWorkers, 2)
	def(&c.UrgentWorkers, 1)
	def(&c.DynamicDiskWorkers, 2)
	def(&c.ReconcileTries, 5)
	defd := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	defd(&c.LockTimeout, 10*time.Second)
	defd(&c.VMLockTimeout, 60*time.Second)
	defd(&c.LockLease, 240*time.Second)
	defd(&c.AgentTimeout, 60*time.Second)
	defd(&c.AgentPingTimeout, 5*time.Second)
	defd(&c.InDoubtBackoff, time.Second)
	defd(&c.ReconcileBackoff, time.Second)
	defd(&c.TaskLease, 30*time.Second)
	defd(&c.PollInterval, 100*time.Millisecond)
	if c.Shared {
		if _, ok := c.Store.(store.Claimer); !ok {
			return fmt.Errorf("director: Config.Shared needs a store that implements store.Claimer; %T does not", c.Store)
		}
	}
	return nil
}

// Director is the reference Director for disks: tasks on queues served by
// workers, jobs that drive the CPI and the agents under leases.
type Director struct {
	cfg   Config
	r     rt.Runtime
	st    store.Store
	locks *lockTable
	group *rt.Group

	// decoded caches the last decoding of each stored task record, so that
	// listing tasks decodes only the records that changed since. Its mutex
	// is never held across a runtime call (it is no scheduling point).
	decoded decodedTasks

	mu      rt.Mutex
	changed rt.Cond            // broadcast when a task ends or a queue gains a task
	queues  map[string][]int64 // guarded by mu: queued task IDs per queue
	waiters map[int64]int      // guarded by mu: WaitTask callers per task
	ended   map[int64]bool     // guarded by mu: waited-on tasks that ended
	closed  bool               // guarded by mu
	notes   []string           // guarded by mu: what start-up reconciliation left for later
}

// New starts a director: it recovers the store (failing tasks that were in
// flight and reconciling the IaaS, see Recover), then starts the workers.
func New(cfg Config) (*Director, error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	d := &Director{cfg: cfg, r: cfg.Runtime, st: cfg.Store, queues: map[string][]int64{},
		waiters: map[int64]int{}, ended: map[int64]bool{}}
	d.mu = d.r.NewMutex()
	d.changed = d.r.NewCond(d.mu)
	d.group = rt.NewGroup(d.r)
	if d.cfg.UUID == "" {
		d.cfg.UUID = newUUID(d.r)
	}
	if d.cfg.Shared && d.cfg.Owner == "" {
		d.cfg.Owner = "director-" + newUUID(d.r)
	}
	d.locks = newLockTable(d.r, d.st, cfg.LockLease)
	d.locks.observe = cfg.LockObserver
	if !cfg.PerStepLockRenewal {
		d.locks.renewEvery, d.locks.spawn = cfg.LockLease/2, d.group.Go
	}
	if d.cfg.Shared {
		d.locks.shared, d.locks.owner, d.locks.poll = true, d.cfg.Owner, d.cfg.PollInterval
	} else if err := d.recover(); err != nil {
		return nil, err
	}
	start := func(prefix string, n int, queues ...string) {
		if d.cfg.NoWorkers {
			return
		}
		for i := 1; i <= n; i++ {
			d.group.Go(fmt.Sprintf("director/%s_worker_%d", prefix, i), func() {
				if d.cfg.Shared {
					d.workShared(queues)
				} else {
					d.work(queues)
				}
			})
		}
	}
	start("normal", cfg.NormalWorkers, QueueUrgent, QueueNormal)
	start("urgent", cfg.UrgentWorkers, QueueUrgent)
	served := []string{QueueUrgent, QueueNormal}
	if !cfg.Knobs.ZeroDynamicDiskWorkers {
		start("dynamic_disks", cfg.DynamicDiskWorkers, QueueDynamicDisks)
		served = append(served, QueueDynamicDisks)
	}
	if d.cfg.Shared && !d.cfg.NoWorkers {
		d.group.Go("director/lease_sweeper", func() { d.sweepLapsed(served) })
	}
	return d, nil
}

// UUID is the director's UUID.
func (d *Director) UUID() string { return d.cfg.UUID }

// Knobs are the behaviour knobs the director runs with.
func (d *Director) Knobs() Knobs { return d.cfg.Knobs }

// Close stops taking tasks, lets running tasks finish and waits for the
// workers. Queued tasks stay queued in the store for the next start.
func (d *Director) Close() error {
	d.mu.Lock()
	d.closed = true
	d.changed.Broadcast()
	d.mu.Unlock()
	d.group.Wait()
	return nil
}

// work is a worker's loop: take the oldest task of the first non-empty queue
// in queues (in that priority order) and run it.
func (d *Director) work(queues []string) {
	for {
		d.mu.Lock()
		var id int64
		for id == 0 && !d.closed {
			for _, q := range queues {
				if len(d.queues[q]) > 0 {
					id = d.queues[q][0]
					d.queues[q] = d.queues[q][1:]
					break
				}
			}
			if id == 0 && !d.closed {
				d.changed.Wait()
			}
		}
		d.mu.Unlock()
		if id == 0 {
			return
		}
		d.runTask(id)
	}
}

// enqueue records a queued task durably and hands it to the workers. Once
// it returns, the task survives a crash.
func (d *Director) enqueue(user, typ, deployment, description string, args any) (int64, error) {
	spec, ok := jobSpecs[typ]
	if !ok {
		return 0, fmt.Errorf("director: unknown job %q", typ)
	}
	raw, err := json.Marshal(args)
	if err != nil {
		return 0, fmt.Errorf("director: encode %s arguments: %w", typ, err)
	}
	var id int64
	err = d.st.Update(func(tx store.Tx) error {
		var err error
		if id, err = tx.NextID("tasks"); err != nil {
			return err
		}
		t := Task{ID: id, Type: typ, Queue: spec.queue, State: TaskQueued, Description: description,
			Deployment: deployment, User: user, Args: raw, CreatedAt: d.r.Now()}
		return tx.Insert(store.Tasks, store.IDKey(id), t)
	})
	if err != nil {
		return 0, fmt.Errorf("director: record task: %w", err)
	}
	if d.cfg.Shared {
		d.wake() // workers of this process look now; others poll
	} else {
		d.push(spec.queue, id)
	}
	return id, nil
}

func (d *Director) push(queue string, id int64) {
	d.mu.Lock()
	d.queues[queue] = append(d.queues[queue], id)
	d.changed.Broadcast()
	d.mu.Unlock()
}

// QueueLen is the number of tasks waiting on a queue.
func (d *Director) QueueLen(queue string) int {
	if d.cfg.Shared {
		return d.queuedInStore(queue)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.queues[queue])
}

// Task returns the task with the given ID.
func (d *Director) Task(id int64) (Task, error) { return d.task(id, true) }

// task is Task; with logs false the task's Events and Debug are left empty
// (not decoded: they are most of a stored task's bytes).
func (d *Director) task(id int64, logs bool) (Task, error) {
	var t Task
	var ok bool
	err := d.st.View(func(tx store.Tx) error {
		var err error
		if logs {
			ok, err = tx.Get(store.Tasks, store.IDKey(id), &t)
			return err
		}
		var nl taskNoLogs
		ok, err = tx.Get(store.Tasks, store.IDKey(id), &nl)
		t = nl.Task
		return err
	})
	if err != nil {
		return Task{}, err
	}
	if !ok {
		return Task{}, notFound("task %d not found", id)
	}
	return t, nil
}

// decodedTasks remembers, per stored task key and per with/without logs,
// the record's bytes and what they decoded to: a record whose bytes did not
// change is not decoded again. What it returns shares no slice with the cache.
type decodedTasks struct {
	mu sync.Mutex
	m  map[decodedKey]decodedTask
}

type decodedKey struct {
	key  string
	logs bool
}

type decodedTask struct {
	raw []byte
	t   Task
}

// task decodes raw, the stored record under key, with its logs or without.
func (c *decodedTasks) task(key string, raw []byte, logs bool) (Task, error) {
	k := decodedKey{key, logs}
	c.mu.Lock()
	hit, ok := c.m[k]
	c.mu.Unlock()
	if !ok || !bytes.Equal(hit.raw, raw) {
		var t Task
		if logs {
			if err := json.Unmarshal(raw, &t); err != nil {
				return Task{}, err
			}
		} else {
			var nl taskNoLogs
			if err := json.Unmarshal(raw, &nl); err != nil {
				return Task{}, err
			}
			t = nl.Task
		}
		hit = decodedTask{raw: bytes.Clone(raw), t: t}
		c.mu.Lock()
		if c.m == nil {
			c.m = make(map[decodedKey]decodedTask)
		}
		c.m[k] = hit
		c.mu.Unlock()
	}
	return hit.t.clone(), nil
}

// clone copies t with slices of its own.
func (t Task) clone() Task {
	t.Args = slices.Clone(t.Args)
	t.Result = slices.Clone(t.Result)
	t.Events = slices.Clone(t.Events)
	t.Debug = slices.Clone(t.Debug)
	return t
}

// taskNoLogs decodes a stored task without its logs: its Events and Debug
// fields hide Task's, and skip what they are given.
type taskNoLogs struct {
	Task
	Events skipJSON `json:"events,omitempty"`
	Debug  skipJSON `json:"debug,omitempty"`
}

// skipJSON decodes any JSON value to nothing.
type skipJSON struct{}

func (*skipJSON) UnmarshalJSON([]byte) error { return nil }

// Tasks lists tasks, newest first, at most limit (≤ 0: all), keeping those
// for which keep returns true (nil: all).
func (d *Director) Tasks(limit int, keep func(*Task) bool) ([]Task, error) {
	return d.tasks(limit, true, keep)
}

// tasks is Tasks; with logs false each task's Events and Debug are left
// empty (as task does).
func (d *Director) tasks(limit int, logs bool, keep func(*Task) bool) ([]Task, error) {
	var out []Task
	err := d.st.View(func(tx store.Tx) error {
		return tx.List(store.Tasks, func(key string, raw []byte) error {
			t, err := d.decoded.task(key, raw, logs)
			if err != nil {
				return err
			}
			if keep == nil || keep(&t) {
				out = append(out, t)
			}
			return nil
		})
	})
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, err
}

// WaitTask waits up to timeout on the runtime's clock (≤ 0: forever) for the
// task to reach a final state and returns it; on time-out it returns the task
// as it is and an error.
func (d *Director) WaitTask(id int64, timeout time.Duration) (Task, error) {
	deadline := d.r.Now().Add(timeout)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.waiters[id]++
	defer func() {
		if d.waiters[id]--; d.waiters[id] == 0 {
			delete(d.waiters, id)
			delete(d.ended, id)
		}
	}()
	for load := true; ; load = d.ended[id] || d.cfg.Shared {
		if !load && !d.closed {
			// Woken by another task's end or a queue push: nothing to reread.
			if !d.waitChangeLocked(timeout, deadline) {
				t, err := d.Task(id)
				if err == nil && !t.State.Final() {
					err = fmt.Errorf("task %d still %s after %s", id, t.State, timeout)
				}
				return t, err
			}
			continue
		}
		t, err := d.Task(id)
		if err != nil || t.State.Final() {
			return t, err
		}
		if d.closed {
			return t, fmt.Errorf("director closed while task %d was %s", id, t.State)
		}
		if !d.waitChangeLocked(timeout, deadline) {
			return t, fmt.Errorf("task %d still %s after %s", id, t.State, timeout)
		}
	}
}

// waitChangeLocked waits for a broadcast; false when the deadline passed.
func (d *Director) waitChangeLocked(timeout time.Duration, deadline time.Time) bool {
	if timeout <= 0 {
		if d.cfg.Shared {
			// Another process may end the task: look again after a while.
			d.changed.WaitFor(d.cfg.PollInterval)
			return true
		}
		d.changed.Wait()
		return true
	}
	left := deadline.Sub(d.r.Now())
	if left <= 0 {
		return false
	}
	if d.cfg.Shared {
		left = min(left, d.cfg.PollInterval)
	}
	d.changed.WaitFor(left)
	return true
}

// taskEnded wakes WaitTask callers.
func (d *Director) taskEnded(id int64) {
	d.mu.Lock()
	if d.waiters[id] > 0 {
		d.ended[id] = true
	}
	d.changed.Broadcast()
	d.mu.Unlock()
}

// saveTask writes t. Under Config.Shared it writes only while this process
// still holds the task's lease (ErrLeaseLost otherwise), keeping the lease
// expiry the renewals wrote.
func (d *Director) saveTask(t *Task) error {
	if d.cfg.Shared {
		return d.saveOwnedTask(t)
	}
	return d.st.Update(func(tx store.Tx) error { return tx.Put(store.Tasks, store.IDKey(t.ID), t) })
}

// runTask runs one queued task to a final state.
func (d *Director) runTask(id int64) {
	t, err := d.Task(id)
	if err != nil || t.State != TaskQueued {
		return
	}
	t.State = TaskProcessing
	t.StartedAt = d.r.Now()
	if err := d.saveTask(&t); err != nil {
		return
	}
	d.runClaimed(&t)
}

// runClaimed runs a task this worker has marked processing to a final
// state.
func (d *Director) runClaimed(tp *Task) {
	t := *tp
	if d.cfg.Shared {
		stop := d.holdLease(t.ID)
		defer stop()
	}
	j := &job{d: d, task: &t}
	result, err := d.runJob(j)
	t.EndedAt = d.r.Now() // before the release: lock spans end no later
	for _, h := range j.held {
		h.release()
	}
	if err != nil {
		t.State = TaskError
		t.Error = err.Error()
		j.debugf("task failed: %v", err)
	} else {
		t.State = TaskDone
		if out, ok := result.(jobOutput); ok {
			t.Message, result = out.Message, out.Result
		}
		if result != nil {
			b, merr := json.Marshal(result)
			if merr != nil {
				t.State, t.Error = TaskError, "encode result: "+merr.Error()
			} else {
				t.Result = b
			}
		}
	}
	_ = d.saveTask(&t)
	d.taskEnded(t.ID)
}

// runJob runs the job, turning a panic into a task error.
func (d *Director) runJob(j *job) (result any, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("job %s panicked: %v", j.task.Type, p)
		}
	}()
	spec := jobSpecs[j.task.Type]
	return spec.run(j, j.task.Args)
}
