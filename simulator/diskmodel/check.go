package diskmodel

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Recorder builds a history as a workload runs: Call when a client invokes
// an operation, Return when it learns the outcome. Timestamps are a logical
// counter, so the history is as deterministic as the run. Safe for
// concurrent use.
type Recorder struct {
	mu    sync.Mutex
	clock int64
	ops   []porcupine.Operation
	done  []bool
	// Per disk name, kept as operations are called and return, so that
	// questions about one name cost what that name holds: its operations
	// in call order, those not returned, and a version that grows with
	// every Call and Return on the name.
	byName  map[string][]int
	running map[string]map[int]bool
	version map[string]int
}

// Call records the invocation of in by client (numbered from 0) and returns
// the operation's id for Return.
func (r *Recorder) Call(client int, in Input) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.clock++
	r.ops = append(r.ops, porcupine.Operation{ClientId: client, Input: in, Call: r.clock})
	r.done = append(r.done, false)
	id := len(r.ops) - 1
	if r.byName == nil {
		r.byName, r.running, r.version = map[string][]int{}, map[string]map[int]bool{}, map[string]int{}
	}
	r.byName[in.Disk] = append(r.byName[in.Disk], id)
	if r.running[in.Disk] == nil {
		r.running[in.Disk] = map[int]bool{}
	}
	r.running[in.Disk][id] = true
	r.version[in.Disk]++
	return id
}

// Return records the outcome of operation id.
func (r *Recorder) Return(id int, out Output) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done[id] {
		panic(fmt.Sprintf("diskmodel: operation %d returned twice", id))
	}
	r.clock++
	r.ops[id].Output = out
	r.ops[id].Return = r.clock
	r.done[id] = true
	name := r.ops[id].Input.(Input).Disk
	delete(r.running[name], id)
	r.version[name]++
}

// OthersRunning reports whether an operation on id's disk name, other
// than id, has been called and not returned, leaving out, for a provide or
// attach, evictions and re-attaching recreates of other VMs (which leave a
// disk attached to id's VM alone). A detach or delete names no VM: every
// VM operation counts for it, since the disk may be on that VM.
func (r *Recorder) OthersRunning(id int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	in := r.ops[id].Input.(Input)
	for i := range r.running[in.Disk] {
		other := r.ops[i].Input.(Input)
		if i == id || in.VM != "" && (other.Kind == Evict || other.Kind == Reattach) && other.VM != in.VM {
			continue
		}
		return true
	}
	return false
}

// NameVersions returns, for every disk name an operation was called on, a
// number that grows whenever an operation on the name is called or returns:
// what a caller derived from NameHistory(name) holds while it is unchanged.
func (r *Recorder) NameVersions() map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[string]int, len(r.version))
	for name, v := range r.version {
		out[name] = v
	}
	return out
}

// NameHistory returns the operations on disk name so far, in call order,
// as History gives them (those that never returned are Unknown).
func (r *Recorder) NameHistory(name string) []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	ids := r.byName[name]
	h := make([]porcupine.Operation, len(ids))
	for i, id := range ids {
		h[i] = r.ops[id]
		if !r.done[id] {
			h[i].Output = Output{Outcome: Unknown}
		}
	}
	return h
}

// Alone reports whether no other operation on id's disk name overlapped
// id so far: none was called after it, none is still running, and none
// returned after it was called. As in OthersRunning, evictions and
// re-attaching recreates of other VMs are left out for an operation that
// names a VM, and every one counts for a detach or delete.
func (r *Recorder) Alone(id int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	self := r.ops[id]
	in := self.Input.(Input)
	for _, i := range r.byName[in.Disk] {
		op := r.ops[i]
		other := op.Input.(Input)
		if i == id {
			continue
		}
		if in.VM != "" && (other.Kind == Evict || other.Kind == Reattach) && other.VM != in.VM {
			continue
		}
		if op.Call > self.Call || !r.done[i] || op.Return > self.Call {
			return false
		}
	}
	return true
}

// History returns the operations so far. Those that never returned are
// Unknown.
func (r *Recorder) History() []porcupine.Operation {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := slices.Clone(r.ops)
	for i := range h {
		if !r.done[i] {
			h[i].Output = Output{Outcome: Unknown}
		}
	}
	return h
}

// Options configures Check.
type Options struct {
	// Timeout bounds the search per disk; 0: none. A disk whose check
	// times out is listed in Result.Undecided, not as a violation.
	Timeout time.Duration
	// Visualization is the file the HTML visualization of the whole
	// history is written to when some disk's history is not linearizable.
	// "": none written.
	Visualization string
}

// Result is the verdict on a history.
type Result struct {
	// Illegal lists the disks whose histories are not linearizable, sorted.
	Illegal []string
	// Undecided lists the disks whose check timed out, sorted.
	Undecided []string
	// Visualization is the path of the HTML file written, if any.
	Visualization string
}

// Linearizable reports whether no disk's history was found illegal.
func (r Result) Linearizable() bool { return len(r.Illegal) == 0 }

// Check checks a history against the model, disk by disk. An Unknown
// operation may take effect at any time after its call, so its return is
// moved to the end of the history first. The error is for a visualization
// that could not be written.
func Check(history []porcupine.Operation, opts Options) (Result, error) {
	h := normalize(history)
	var res Result
	for _, part := range partition(h) {
		disk := part[0].Input.(Input).Disk
		switch porcupine.CheckOperationsTimeout(Model, part, opts.Timeout) {
		case porcupine.Illegal:
			res.Illegal = append(res.Illegal, disk)
		case porcupine.Unknown:
			res.Undecided = append(res.Undecided, disk)
		}
	}
	slices.Sort(res.Illegal)
	slices.Sort(res.Undecided)
	if !res.Linearizable() && opts.Visualization != "" {
		_, info := porcupine.CheckOperationsVerbose(Model, h, opts.Timeout)
		if err := porcupine.VisualizePath(Model, info, opts.Visualization); err != nil {
			return res, fmt.Errorf("diskmodel: writing the visualization: %w", err)
		}
		res.Visualization = opts.Visualization
	}
	return res, nil
}

// Visualize writes porcupine's HTML visualization of the whole history to
// path, whether or not it is linearizable: each disk name's operations on
// a timeline, with a linearization where one exists and the longest legal
// prefix where none does. timeout bounds the search (0: none).
func Visualize(history []porcupine.Operation, path string, timeout time.Duration) error {
	_, info := porcupine.CheckOperationsVerbose(Model, normalize(history), timeout)
	if err := porcupine.VisualizePath(Model, info, path); err != nil {
		return fmt.Errorf("diskmodel: writing the visualization: %w", err)
	}
	return nil
}

func normalize(history []porcupine.Operation) []porcupine.Operation {
	h := slices.Clone(history)
	end := int64(0)
	for _, op := range h {
		end = max(end, op.Call, op.Return)
	}
	if end < math.MaxInt64 {
		end++
	}
	for i := range h {
		if h[i].Output == nil {
			h[i].Output = Output{Outcome: Unknown}
		}
		if h[i].Output.(Output).Outcome == Unknown {
			h[i].Return = end
		}
	}
	return h
}
