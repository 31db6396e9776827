package storagesim

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/simulator/scenario"
	"github.com/cpilab/cpilab/storage"
)

// Provider is the cloud's constraints on modifying a disk.
type Provider struct {
	// MinInterval between two modifications of one disk (legacy EBS text: 6 h).
	MinInterval time.Duration
	// MaxPer24h modifications of one disk in any rolling 24 h (current EBS
	// text: 4); 0 means no count limit.
	MaxPer24h int
	// MaxSizeMiB is the largest disk (0: none).
	MaxSizeMiB int64
	// Latency is how long a resize takes (detach, resize, attach).
	Latency time.Duration
}

// Fault kinds: simulator/faults' storage-sizing kinds (faults.StorageKinds),
// the one fault vocabulary of the project's simulations.
const (
	ControllerDown = faults.ControllerDown // the controller is not running (restarted after)
	DirectorDown   = faults.DirectorDown   // every Director call fails
	ResizeFails    = faults.ResizeFails    // resize tasks started in the span fail
	VMRecreate     = faults.VMRecreate     // the VM is recreated: a resize in flight fails, no usage for the span
	AgentDown      = faults.AgentDown      // no usage reports
)

// Fault is one fault over a span of virtual time from the start of the run.
type Fault struct {
	Kind faults.Kind // one of faults.StorageKinds
	At   time.Duration
	For  time.Duration
}

// String is the fault in the simulator's fault format (simulator/faults):
// kind@AT d=FOR, AT being the time from the start of the run at which it
// begins (the clock seam's position) and FOR how long it holds, as in
//
//	director-down@26h0m0s d=2h0m0s
//
// ParseFault reads it back.
func (f Fault) String() string { return string(f.Kind) + "@" + f.At.String() + " d=" + f.For.String() }

// ParseFault reads a fault as Fault.String writes it, with the simulator's
// tokenizer and quoting (scenario.SplitWords, scenario.Unquote). It also
// reads the storage simulation's first form, kind=KIND at=AT for=FOR, so
// files written before stay readable.
func ParseFault(s string) (Fault, error) {
	toks, err := scenario.SplitWords(s)
	if err != nil {
		return Fault{}, fmt.Errorf("fault %q: %w", s, err)
	}
	if len(toks) == 0 {
		return Fault{}, fmt.Errorf("fault %q: empty: want kind@TIME d=DURATION", s)
	}
	var f Fault
	head, legacy := toks[0], !strings.Contains(toks[0], "@")
	if !legacy {
		i := strings.LastIndexByte(head, '@')
		f.Kind = faults.Kind(head[:i])
		if !f.Kind.Storage() {
			return Fault{}, fmt.Errorf("fault %q: unknown kind %q (known: %s)", s, f.Kind, storageKindList())
		}
		if f.At, err = time.ParseDuration(head[i+1:]); err != nil || f.At < 0 {
			return Fault{}, fmt.Errorf("fault %q: time %q after @ is not a non-negative duration", s, head[i+1:])
		}
		toks = toks[1:]
	}
	seen, err := scenario.KeyValues(toks, func(k, v string) error {
		var d *time.Duration
		switch {
		case k == "d" && !legacy, k == "for" && legacy:
			d = &f.For
		case k == "at" && legacy:
			d = &f.At
		case k == "kind" && legacy:
			f.Kind = faults.Kind(v)
			return nil
		default:
			want := "d"
			if legacy {
				want = "kind, at, for"
			}
			return fmt.Errorf("key %q does not apply (want %s)", k, want)
		}
		var err error
		if *d, err = time.ParseDuration(v); err != nil || *d < 0 {
			return fmt.Errorf("%s %q is not a non-negative duration", k, v)
		}
		if d == &f.For && f.For == 0 {
			return fmt.Errorf("%s must be more than 0s (how long the fault holds)", k)
		}
		return nil
	})
	if err != nil {
		return Fault{}, fmt.Errorf("fault %q: %w", s, err)
	}
	if !f.Kind.Storage() {
		return Fault{}, fmt.Errorf("fault %q: unknown kind %q (known: %s)", s, f.Kind, storageKindList())
	}
	need := []string{"d"}
	if legacy {
		need = []string{"at", "for"}
	}
	for _, k := range need {
		if !seen[k] {
			return Fault{}, fmt.Errorf("fault %q: %s needs %s=<duration>", s, f.Kind, k)
		}
	}
	return f, nil
}

func storageKindList() string {
	names := make([]string, len(faults.StorageKinds))
	for i, k := range faults.StorageKinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

func (f Fault) active(since time.Duration) bool { return since >= f.At && since < f.At+f.For }

// world is the model the controller acts on.
type world struct {
	start    time.Time
	now      time.Time
	faults   []Fault
	provider Provider

	// active holds the kinds of the faults active at now (setNow): the
	// models ask several times a tick.
	active []faults.Kind

	disk   *disk
	tasks  map[string]*task
	seq    int
	issued []issued // every StartResize, for the checkers
}

type disk struct {
	name, cid string
	sizeMiB   int64
	usedMiB   float64
	mods      []time.Time // accepted modifications, in time order
	inflight  *task
}

type task struct {
	id      string
	target  int64
	doneAt  time.Time
	fails   bool
	refused string
	state   storage.TaskState
}

type issued struct {
	at      time.Time
	from    int64
	target  int64
	refused bool
}

var errDirectorDown = errors.New("director unavailable (simulated outage)")

func (w *world) since() time.Duration { return w.now.Sub(w.start) }

// setNow moves the world's clock to now and notes the faults active then.
func (w *world) setNow(now time.Time) {
	w.now = now
	w.active = w.active[:0]
	since := w.since()
	for _, f := range w.faults {
		if f.active(since) {
			w.active = append(w.active, f.Kind)
		}
	}
}

func (w *world) faultActive(kind faults.Kind) bool {
	for _, k := range w.active {
		if k == kind {
			return true
		}
	}
	return false
}

// countSince counts the times of ts, which are in order, in the window of
// length window that ends at at: storage.CountInWindow by two binary
// searches (the provider's record of modifications grows all run long).
func countSince(ts []time.Time, at time.Time, window time.Duration) int {
	lo := at.Add(-window)
	i := sort.Search(len(ts), func(i int) bool { return ts[i].After(lo) })
	j := sort.Search(len(ts), func(i int) bool { return ts[i].After(at) })
	return max(j-i, 0)
}

// agentUnreachable: no usage report can come now (the agent is down, or
// its VM is being recreated).
func (w *world) agentUnreachable() bool {
	return w.faultActive(AgentDown) || w.faultActive(VMRecreate)
}

// advance moves tasks forward to w.now.
func (w *world) advance() {
	d := w.disk
	if d == nil || d.inflight == nil {
		return
	}
	t := d.inflight
	if w.faultActive(VMRecreate) {
		t.fails = true
	}
	if w.now.Before(t.doneAt) {
		return
	}
	if t.fails {
		t.state = storage.TaskFailed
	} else {
		d.sizeMiB = t.target
		t.state = storage.TaskDone
	}
	d.inflight = nil
}

// The Director model (storage.Director).
type director struct{ w *world }

func (dr director) Disk(_ context.Context, name string) (storage.Disk, bool, error) {
	w := dr.w
	if w.faultActive(DirectorDown) {
		return storage.Disk{}, false, errDirectorDown
	}
	if w.disk == nil || w.disk.name != name {
		return storage.Disk{}, false, nil
	}
	return storage.Disk{CID: w.disk.cid, SizeMiB: w.disk.sizeMiB, InstanceID: "db/0"}, true, nil
}

func (dr director) Provide(_ context.Context, name string, size int64, _, _ string) error {
	w := dr.w
	if w.faultActive(DirectorDown) {
		return errDirectorDown
	}
	if w.disk == nil {
		w.seq++
		w.disk = &disk{name: name, cid: fmt.Sprintf("disk-%d", w.seq), sizeMiB: size}
	}
	return nil
}

func (dr director) StartResize(_ context.Context, name string, size int64) (string, error) {
	w := dr.w
	if w.faultActive(DirectorDown) {
		return "", errDirectorDown
	}
	d := w.disk
	if d == nil || d.name != name {
		return "", fmt.Errorf("no dynamic disk %q", name)
	}
	w.seq++
	t := &task{id: fmt.Sprint(w.seq), target: size, state: storage.TaskRunning}
	w.tasks[t.id] = t
	switch {
	case d.inflight != nil:
		t.refused = "a modification of this volume is already in progress"
	case w.provider.MaxSizeMiB > 0 && size > w.provider.MaxSizeMiB:
		t.refused = fmt.Sprintf("size %d MiB exceeds the provider maximum %d MiB", size, w.provider.MaxSizeMiB)
	case w.provider.MinInterval > 0 && len(d.mods) > 0 && w.now.Sub(d.mods[len(d.mods)-1]) < w.provider.MinInterval:
		t.refused = fmt.Sprintf("the volume was modified %s ago (minimum interval %s)", w.now.Sub(d.mods[len(d.mods)-1]), w.provider.MinInterval)
	case w.provider.MaxPer24h > 0 && countSince(d.mods, w.now, 24*time.Hour) >= w.provider.MaxPer24h:
		t.refused = fmt.Sprintf("%d modifications in the last 24 h (provider limit)", w.provider.MaxPer24h)
	}
	w.issued = append(w.issued, issued{at: w.now, from: d.sizeMiB, target: size, refused: t.refused != ""})
	if t.refused != "" {
		t.state = storage.TaskRefused
		return t.id, nil
	}
	d.mods = append(d.mods, w.now)
	t.doneAt = w.now.Add(w.provider.Latency)
	t.fails = w.faultActive(ResizeFails) || w.faultActive(VMRecreate)
	d.inflight = t
	return t.id, nil
}

func (dr director) Task(_ context.Context, id string) (storage.TaskState, string, error) {
	w := dr.w
	if w.faultActive(DirectorDown) {
		return 0, "", errDirectorDown
	}
	t, ok := w.tasks[id]
	if !ok {
		return 0, "", fmt.Errorf("no task %s", id)
	}
	switch t.state {
	case storage.TaskRefused:
		return t.state, t.refused, nil
	case storage.TaskFailed:
		return t.state, "resize task failed (simulated CPI or VM failure)", nil
	}
	return t.state, "", nil
}

// The agent's usage report (storage.UsageSource).
type usage struct{ w *world }

func (u usage) Usage(_ context.Context, _, cid string) (int64, int64, error) {
	w := u.w
	if w.agentUnreachable() {
		return 0, 0, errors.New("agent unreachable (simulated)")
	}
	if w.disk == nil || w.disk.cid != cid || w.disk.inflight != nil {
		return 0, 0, errors.New("disk not attached")
	}
	return w.disk.sizeMiB, int64(w.disk.usedMiB), nil
}

// store is the controller's durable status (it survives controller restarts).
type store map[string]storage.Status

func (s store) Load(_ context.Context, id string) (storage.Status, bool, error) {
	st, ok := s[id]
	return st, ok, nil
}

func (s store) Save(_ context.Context, id string, st storage.Status) error {
	s[id] = st
	return nil
}
