package diskmodel

import (
	"fmt"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"
)

// OpKind is a dynamic-disk API operation (the dynamic_disks API).
type OpKind string

// The operations.
const (
	// Provide is POST /dynamic_disks/provide for one VM: create the disk if
	// missing, attach it if detached; fail if attached to another VM.
	Provide OpKind = "provide"
	// Attach is POST /dynamic_disks/:name/attach: like Provide, but an
	// unknown name fails.
	Attach OpKind = "attach"
	// Detach is POST /dynamic_disks/:name/detach: already detached is
	// success; an unknown name fails.
	Detach OpKind = "detach"
	// Delete is DELETE /dynamic_disks/:name: success when absent; an
	// attached disk is detached first.
	Delete OpKind = "delete"
	// Create is POST /dynamic_disks (create only): idempotent when the
	// name exists (it answers the existing disk's CID), as the reference
	// Director has it.
	Create OpKind = "create"
	// Evict is an operator's VM operation (recreate, VM delete, hard stop)
	// seen from one disk name: a disk attached to VM becomes detached; any
	// other state is left alone. It never fails by specification.
	Evict OpKind = "evict"
	// Reattach is an operator's recreate that re-attaches the dynamic
	// disks (reattach_dynamic_disks), seen from one disk name: a disk
	// attached to VM is detached and attached again to the instance's new
	// VM, or stays detached when another operation took it in between
	// (the Director does not re-attach a disk that moved); any other state
	// is left alone. It never fails by specification.
	Reattach OpKind = "reattach"
)

// Input is an operation's invocation.
type Input struct {
	// Kind is the operation.
	Kind OpKind
	// Disk is the disk name, the partition key.
	Disk string
	// VM is the instance for Provide and Attach.
	VM string
	// Meta, when not 0, is the metadata the operation sent (the
	// workload's serial for it); the model does not look at it.
	Meta int
}

// String is "provide(disk, vm)" or "detach(disk)".
func (in Input) String() string {
	if in.Kind == Provide || in.Kind == Attach || in.Kind == Evict || in.Kind == Reattach {
		return fmt.Sprintf("%s(%s, %s)", in.Kind, in.Disk, in.VM)
	}
	return fmt.Sprintf("%s(%s)", in.Kind, in.Disk)
}

// Outcome is what the caller learned.
type Outcome uint8

const (
	// OK: the task succeeded.
	OK Outcome = iota
	// Failed: the task reported failure. The operation may have made part
	// of its progress (a provide that created the disk but failed to attach
	// it), or all of it when a step the model does not see failed after
	// the effect (the agent's symlink of an attached or detached disk), but
	// it took effect, if at all, before the failure was reported.
	Failed
	// Unknown: the caller timed out or crashed; the operation may have taken
	// effect fully, partly or not at all, at any time after its call.
	Unknown
	// Invalid: the task failed, without effect, because the request is
	// invalid where the disk name is (the specification rejects it from the
	// state, or a Create of a name that exists).
	Invalid
	// Refused: the task failed, without effect, with one of the Director's
	// documented refusals that hold whatever the disk name's state (a
	// concurrent task holds the name, the instance has no VM, a lock wait
	// timed out).
	Refused
	// Unexplained: the task failed and nothing explains it (no fault on its
	// path, no invalid request, no documented refusal). No state allows it.
	Unexplained
)

// String is "ok", "failed" or "unknown".
func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Failed:
		return "failed"
	case Unknown:
		return "unknown"
	case Invalid:
		return "invalid"
	case Refused:
		return "refused"
	case Unexplained:
		return "unexplained"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Output is an operation's response.
type Output struct {
	// Outcome is what the caller learned.
	Outcome Outcome
	// CID is the disk CID an OK Provide, Attach or Create reported; "" if
	// none. While the disk lives every reported CID must be the same.
	CID string
	// Alone: no other operation on the name overlapped this one
	// (Recorder.Alone). An OK Reattach that was alone re-attached the
	// disk: nothing could have moved it meanwhile.
	Alone bool
	// Injected: a Failed operation's error carries an injected CPI fault,
	// or is the loss of a lock that an injected stall of the lock renewal
	// let lapse (the model does not look at it).
	Injected bool
}

// String is the outcome and the CID, if any.
func (o Output) String() string {
	if o.CID != "" {
		return o.Outcome.String() + " " + o.CID
	}
	return o.Outcome.String()
}

// State is one disk name's state in the sequential specification.
type State struct {
	// Exists: the name has a disk.
	Exists bool
	// VM is the instance it is attached to; "" when detached.
	VM string
	// CID is the disk's CID once an operation reported it; "" until then.
	CID string
}

// String is "absent", "detached (cid)" or "attached to vm (cid)".
func (s State) String() string {
	switch {
	case !s.Exists:
		return "absent"
	case s.VM == "":
		return "detached" + cidSuffix(s.CID)
	default:
		return "attached to " + s.VM + cidSuffix(s.CID)
	}
}

func cidSuffix(cid string) string {
	if cid == "" {
		return ""
	}
	return " (" + cid + ")"
}

var absent = State{}

// effects returns the states an operation passes through from s, in order,
// the last being its completed effect (none: it succeeds without change),
// or rejected when the specification says it must fail from s.
func effects(s State, in Input) (chain []State, rejected bool) {
	detached := State{Exists: true, CID: s.CID}
	switch in.Kind {
	case Create:
		if s.Exists {
			return nil, false // idempotent: the existing disk (its CID)
		}
		return []State{{Exists: true}}, false
	case Provide, Attach:
		switch {
		case !s.Exists && in.Kind == Attach:
			return nil, true
		case !s.Exists:
			return []State{{Exists: true}, {Exists: true, VM: in.VM}}, false
		case s.VM == "":
			return []State{{Exists: true, VM: in.VM, CID: s.CID}}, false
		case s.VM == in.VM:
			return nil, false
		default:
			return nil, true
		}
	case Detach:
		switch {
		case !s.Exists:
			return nil, true
		case s.VM == "":
			return nil, false
		default:
			return []State{detached}, false
		}
	case Evict:
		if s.Exists && s.VM != "" && s.VM == in.VM {
			return []State{detached}, false
		}
		return nil, false
	case Reattach:
		if s.Exists && s.VM != "" && s.VM == in.VM {
			return []State{detached, s}, false
		}
		return nil, false
	case Delete:
		switch {
		case !s.Exists:
			return nil, false
		case s.VM == "":
			return []State{absent}, false
		default:
			return []State{detached, absent}, false
		}
	}
	return nil, true
}

// Step is the nondeterministic specification: the states a disk can be in
// after the operation in, answered by out, from state s. None: the answer is
// impossible from s.
//
//   - OK: the operation completed; it must not be one the specification
//     rejects from s, and a reported CID must match the disk's.
//   - Failed (a fault on its path explains it): any prefix of the
//     operation's effects (nothing, a disk created but not attached, …, or
//     the whole effect when a later step the model does not track failed,
//     such as the agent's symlink). Unlike Unknown, it took effect before
//     it returned.
//   - Invalid: no effect, and only where the specification rejects the
//     operation (or a Create finds the name taken).
//   - Refused: no effect, from any state.
//   - Unexplained: impossible.
//   - Unknown: any prefix, the completed effect included.
func Step(s State, in Input, out Output) []State {
	chain, rejected := effects(s, in)
	switch out.Outcome {
	case OK:
		if rejected {
			return nil
		}
		final := s
		if len(chain) > 0 {
			final = chain[len(chain)-1]
		}
		if in.Kind == Reattach && !out.Alone {
			// Re-attached, or left detached when the disk moved meanwhile.
			return append([]State{final}, chain[:max(0, len(chain)-1)]...)
		}
		if out.CID != "" && in.Kind != Detach && in.Kind != Delete && in.Kind != Evict {
			if !final.Exists || final.CID != "" && final.CID != out.CID {
				return nil
			}
			final.CID = out.CID
		}
		return []State{final}
	case Invalid:
		if rejected || (in.Kind == Create && s.Exists) {
			return []State{s}
		}
		return nil
	case Refused:
		return []State{s}
	case Unexplained:
		return nil
	default: // Failed, Unknown
		return append([]State{s}, chain...)
	}
}

// Model is the porcupine model of the dynamic-disk API, partitioned by disk
// name. Histories' inputs are Input and outputs Output.
var Model = (&porcupine.NondeterministicModel{
	Partition: partition,
	Init:      func() []any { return []any{absent} },
	Step: func(state, input, output any) []any {
		next := Step(state.(State), input.(Input), output.(Output))
		out := make([]any, len(next))
		for i, s := range next {
			out[i] = s
		}
		return out
	},
	DescribeOperation: func(input, output any) string {
		return fmt.Sprintf("%v → %v", input, output)
	},
	DescribeState: func(state any) string { return state.(State).String() },
}).ToModel()

// partition groups a history by disk name, in order of first appearance.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	var names []string
	by := map[string][]porcupine.Operation{}
	for _, op := range history {
		d := op.Input.(Input).Disk
		if _, ok := by[d]; !ok {
			names = append(names, d)
		}
		by[d] = append(by[d], op)
	}
	out := make([][]porcupine.Operation, len(names))
	for i, n := range names {
		out[i] = by[n]
	}
	return out
}

// Disks lists the disk names of a history, sorted.
func Disks(history []porcupine.Operation) []string {
	var names []string
	for _, p := range partition(history) {
		names = append(names, p[0].Input.(Input).Disk)
	}
	slices.Sort(names)
	return names
}

// Describe is a history as text, one operation per line, for reports.
func Describe(history []porcupine.Operation) string {
	var b strings.Builder
	for _, op := range history {
		fmt.Fprintf(&b, "[%d, %d] client %d: %v → %v\n", op.Call, op.Return, op.ClientId, op.Input, op.Output)
	}
	return b.String()
}
