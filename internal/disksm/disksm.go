// Package disksm is the sequential model of the dynamic disks API and the
// rapid generator of its calls. The state-machine tests of the disk jobs
// share it: the director's in-process one and cmd/cpilab's one across
// processes on PostgreSQL. Both draw calls from OpGen and judge each round
// of concurrent calls with Linearizable.
//
//	ops := rapid.SliceOfN(disksm.OpGen(disksm.GenConfig{Kinds: disksm.Kinds, Names: disksm.Names,
//		Instances: 3}), 1, 4).Draw(t, "ops")
//	// … run them concurrently, observe each outcome and the final records …
//	if why, ok := disksm.Linearizable(model, ops, outcomes, final, azs); !ok { t.Fatal(why) }
package disksm

import (
	"fmt"
	"maps"
	"strings"

	"pgregory.net/rapid"

	"github.com/cpilab/cpilab/director"
)

// NewDiskSize is the size (MiB) of the disks the model's provide and create
// make: callers send it as disk_size.
const NewDiskSize = 4

// Names are the disk names calls are drawn from: few, so that calls repeat
// names and race on them.
var Names = []string{"r0", "r1", "r2"}

// HostileNames are names the API must refuse at once (HTTP 400, 404 or 422;
// no task): path characters, NUL, a name too long. (Not ".." or "": a path
// holding them is cleaned or redirected before any handler sees it.)
var HostileNames = []string{"../x", "a/b", "nul\x00byte", strings.Repeat("n", director.MaxNameLen+45), `back\slash`}

// Kinds are the operations the in-process test draws from (provide twice as
// often as the others).
var Kinds = []string{"provide", "provide", "create", "attach", "detach", "delete", "resize"}

// Disk is one disk name's state: the instance it is attached to (-1: none),
// its AZ (set by create and by every attach, checked by attach), and its
// size (set by provide and create, changed by cpilab's resize).
type Disk struct {
	At   int
	AZ   string
	Size int
}

// Model is the model's state: the disks by name.
type Model map[string]Disk

// Op is one API call.
type Op struct {
	Kind string // provide, create, attach, detach, delete, resize
	Name string
	Inst int // the instance's index, for provide, create and attach
	Size int // resize's MiB
}

// String is "provide(r0,1)" or "resize(r0,6 MiB)"; names are quoted when
// they are not plain.
func (o Op) String() string {
	name := o.Name
	if !o.Valid() {
		name = fmt.Sprintf("%q", o.Name)
	}
	if o.Kind == "resize" {
		return fmt.Sprintf("resize(%s,%d MiB)", name, o.Size)
	}
	return fmt.Sprintf("%s(%s,%d)", o.Kind, name, o.Inst)
}

// Valid reports whether the op's name is one the API accepts; the API
// refuses the others at once, with no task and no change.
func (o Op) Valid() bool { return director.ValidDiskName(o.Name) == nil }

// Clone returns a copy of m.
func (m Model) Clone() Model { return maps.Clone(m) }

// Apply runs op on m and reports whether the API must succeed; azs are the
// instances' AZs. An invalid name changes nothing and fails.
func (m Model) Apply(o Op, azs []string) bool {
	if !o.Valid() {
		return false
	}
	d, exists := m[o.Name]
	switch o.Kind {
	case "provide":
		if exists && d.At >= 0 && d.At != o.Inst {
			return false
		}
		size := d.Size
		if !exists {
			size = NewDiskSize
		}
		m[o.Name] = Disk{o.Inst, azs[o.Inst], size}
	case "create":
		if exists { // upstream: "disk `<name>` already exists"
			return false
		}
		m[o.Name] = Disk{-1, azs[o.Inst], NewDiskSize}
	case "attach":
		if !exists || (d.At >= 0 && d.At != o.Inst) || (d.AZ != "" && d.AZ != azs[o.Inst]) {
			return false
		}
		m[o.Name] = Disk{o.Inst, azs[o.Inst], d.Size}
	case "detach":
		if !exists {
			return false
		}
		m[o.Name] = Disk{-1, d.AZ, d.Size}
	case "delete":
		delete(m, o.Name)
	case "resize":
		// A shrink copies in the guest: a detached disk cannot shrink.
		if !exists || (o.Size < d.Size && d.At < 0) {
			return false
		}
		d.Size = o.Size
		m[o.Name] = d
	default:
		return false
	}
	return true
}

// Partial lists the states an op may leave m in when its task ended part
// way (its worker died and another took it over and reconciled its work):
// unchanged, each step of its effect, and its whole effect. A provide of a
// missing disk may stop after the create (detached, with no AZ yet: only
// create and attach set it); a delete of an attached disk after the detach.
func (m Model) Partial(o Op, azs []string) []Model {
	out := []Model{m.Clone()}
	full := m.Clone()
	if !full.Apply(o, azs) {
		return out
	}
	d, exists := m[o.Name]
	switch {
	case o.Kind == "provide" && !exists:
		mid := m.Clone() // created for the provide: no AZ until an attach
		mid[o.Name] = Disk{-1, "", NewDiskSize}
		out = append(out, mid)
	case o.Kind == "delete" && exists && d.At >= 0:
		mid := m.Clone()
		mid[o.Name] = Disk{-1, d.AZ, d.Size}
		out = append(out, mid)
	}
	return append(out, full)
}

// Outcome is what a caller learned of an op.
type Outcome int

const (
	// Failed: the task ended in error; the op must be one the model
	// rejects.
	Failed Outcome = iota
	// Done: the task succeeded; the model must accept the op.
	Done
	// Unknown: the task's worker died and another took it over and failed
	// it; any of Partial's states may follow.
	Unknown
)

// String is "failed", "done" or "unknown".
func (o Outcome) String() string {
	switch o {
	case Failed:
		return "failed"
	case Done:
		return "done"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Linearizable reports whether some serial order of the concurrent ops,
// from start, gives their observed outcomes and the observed final state;
// if not, it says which final states the orders matching the outcomes give.
func Linearizable(start Model, ops []Op, outcomes []Outcome, final Model, azs []string) (string, bool) {
	idx := make([]int, len(ops))
	for i := range idx {
		idx[i] = i
	}
	want := fmt.Sprint(final)
	tried := map[string]bool{}
	var run func(m Model, k int) bool
	run = func(m Model, k int) bool { // ops idx[k:] from m
		if k == len(idx) {
			got := fmt.Sprint(m)
			tried[got] = true
			return got == want
		}
		o := ops[idx[k]]
		switch outcomes[idx[k]] {
		case Unknown:
			for _, next := range m.Partial(o, azs) {
				if run(next, k+1) {
					return true
				}
			}
			return false
		default:
			next := m.Clone()
			if next.Apply(o, azs) != (outcomes[idx[k]] == Done) {
				return false
			}
			return run(next, k+1)
		}
	}
	var try func(k int) bool
	try = func(k int) bool {
		if k == len(idx) {
			return run(start.Clone(), 0)
		}
		for j := k; j < len(idx); j++ {
			idx[k], idx[j] = idx[j], idx[k]
			if try(k + 1) {
				return true
			}
			idx[k], idx[j] = idx[j], idx[k]
		}
		return false
	}
	if try(0) {
		return "", true
	}
	var ends []string
	for s := range tried {
		ends = append(ends, s)
	}
	return fmt.Sprintf("no serial order explains it; serial orders matching the outcomes end in %v", ends), false
}

// GenConfig selects what OpGen draws.
type GenConfig struct {
	// Kinds are the operations, drawn uniformly (repeat one to weigh it).
	Kinds []string
	// Names are the ordinary disk names.
	Names []string
	// Hostile are names the API must refuse, drawn instead of Names one
	// time in eight; none: never.
	Hostile []string
	// Instances is how many instances calls name (indexes 0 to
	// Instances-1); at least 1.
	Instances int
	// Sizes are resize's sizes (MiB); default 4, 6 and 8.
	Sizes []int
}

// OpGen draws one API call.
func OpGen(cfg GenConfig) *rapid.Generator[Op] {
	sizes := cfg.Sizes
	if len(sizes) == 0 {
		sizes = []int{4, 6, 8}
	}
	insts := max(cfg.Instances, 1)
	return rapid.Custom(func(t *rapid.T) Op {
		o := Op{Kind: rapid.SampledFrom(cfg.Kinds).Draw(t, "kind")}
		if len(cfg.Hostile) > 0 && rapid.IntRange(0, 7).Draw(t, "hostile") == 0 {
			o.Name = rapid.SampledFrom(cfg.Hostile).Draw(t, "name")
		} else {
			o.Name = rapid.SampledFrom(cfg.Names).Draw(t, "name")
		}
		o.Inst = rapid.IntRange(0, insts-1).Draw(t, "inst")
		o.Size = rapid.SampledFrom(sizes).Draw(t, "size")
		return o
	})
}
