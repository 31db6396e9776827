package fakeiaas

import (
	"fmt"
	"slices"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/rt"
)

// Op names a fakeiaas operation: what fault rules match on and what the
// history records.
type Op string

// The operations. Mutations are recorded in the history; so are registry and
// metadata accesses. Reads (get_*) can be matched by fault rules.
const (
	OpCreateStemcell  Op = "create_stemcell"
	OpDeleteStemcell  Op = "delete_stemcell"
	OpGetStemcell     Op = "get_stemcell"
	OpCreateVM        Op = "create_vm"
	OpDeleteVM        Op = "delete_vm"
	OpGetVM           Op = "get_vm"
	OpRebootVM        Op = "reboot_vm"
	OpSetVMMetadata   Op = "set_vm_metadata"
	OpCreateDisk      Op = "create_disk"
	OpDeleteDisk      Op = "delete_disk"
	OpGetDisk         Op = "get_disk"
	OpAttachDisk      Op = "attach_disk"
	OpDetachDisk      Op = "detach_disk"
	OpSetDiskMetadata Op = "set_disk_metadata"
	OpGetDisks        Op = "get_disks"
	OpResizeDisk      Op = "resize_disk"
	OpUpdateDisk      Op = "update_disk"
	OpSnapshotDisk    Op = "snapshot_disk"
	OpDeleteSnapshot  Op = "delete_snapshot"
	OpRegistryGet     Op = "registry_get"
	OpRegistryPut     Op = "registry_put"
	OpRegistryDelete  Op = "registry_delete"
	OpMetadataGet     Op = "metadata_get"
)

// Ops lists every Op.
var Ops = []Op{
	OpCreateStemcell, OpDeleteStemcell, OpGetStemcell, OpCreateVM, OpDeleteVM, OpGetVM, OpRebootVM,
	OpSetVMMetadata, OpCreateDisk, OpDeleteDisk, OpGetDisk, OpAttachDisk, OpDetachDisk,
	OpSetDiskMetadata, OpGetDisks, OpResizeDisk, OpUpdateDisk, OpSnapshotDisk, OpDeleteSnapshot,
	OpRegistryGet, OpRegistryPut, OpRegistryDelete, OpMetadataGet,
}

// EffectKind is what a fault rule does when it fires.
type EffectKind string

// The effects.
const (
	// EffectError fails the call with a typed CPI error; nothing is applied.
	EffectError EffectKind = "error"
	// EffectLatency delays the call by Delay on the runtime clock, then runs it.
	EffectLatency EffectKind = "latency"
	// EffectRateLimit fails the call as rate limited (HTTP 429, Retry-After
	// Delay); nothing is applied. The reference CPI waits and retries.
	EffectRateLimit EffectKind = "rate_limit"
	// EffectLoseResponse applies the call, then drops the response: over
	// HTTP the connection is closed unanswered; in-process the caller gets
	// an ErrResponseLost error.
	EffectLoseResponse EffectKind = "lose_response"
	// EffectPause blocks the call before it is applied until the rule is
	// released (Cloud.ReleaseFault) or removed.
	EffectPause EffectKind = "pause"
)

// Rule is one fault rule: a match and an effect. Rules are values: String
// prints the one-line text form and ParseRule reads it back.
type Rule struct {
	// ID names the rule; assigned ("r1", "r2", …) when empty on AddFault.
	ID string `json:"id,omitempty"`
	// Op matches the operation; "" matches every operation. Mutations are
	// named as the CPI methods; has_vm and has_disk reach fakeiaas as
	// get_vm and get_disk.
	Op Op `json:"op,omitempty"`
	// Target matches the CID acted on (for attach_disk and detach_disk,
	// the VM's or the disk's); "" matches every target.
	Target string `json:"target,omitempty"`
	// Nth, when > 0, fires only on the Nth call that matches Op and Target
	// (counting from 1, from when the rule was added).
	Nth int `json:"nth,omitempty"`
	// Prob, when in (0,1), fires with that probability, drawn from the
	// runtime's "fakeiaas.faults" stream (so a seed replays it). 0 means 1.
	Prob float64 `json:"prob,omitempty"`
	// Times, when > 0, stops the rule after it fired that many times.
	Times int `json:"times,omitempty"`
	// Effect is what happens when the rule fires.
	Effect Effect `json:"effect"`
}

// Effect is a fault rule's effect.
type Effect struct {
	Kind EffectKind `json:"kind"`
	// ErrorType is the CPI error type of EffectError (CloudError when empty).
	ErrorType cpiv2.ErrorType `json:"error_type,omitempty"`
	// OkToRetry is the error's ok_to_retry (EffectError).
	OkToRetry bool `json:"ok_to_retry,omitempty"`
	// Message is the error message (EffectError, EffectRateLimit).
	Message string `json:"message,omitempty"`
	// Delay is the latency (EffectLatency) or the Retry-After (EffectRateLimit).
	Delay time.Duration `json:"delay,omitempty"`
}

// Validate reports what is wrong with r, if anything.
func (r Rule) Validate() error {
	name := "fault rule"
	if r.ID != "" {
		name += " " + r.ID
	}
	if r.Op != "" && !knownOp(r.Op) {
		return fmt.Errorf("%s: unknown op %q", name, r.Op)
	}
	if r.Nth < 0 || r.Times < 0 {
		return fmt.Errorf("%s: nth and times must not be negative", name)
	}
	if !(r.Prob >= 0 && r.Prob <= 1) { // also rejects NaN
		return fmt.Errorf("%s: prob %v outside [0,1]", name, r.Prob)
	}
	switch r.Effect.Kind {
	case EffectError, EffectRateLimit, EffectLoseResponse, EffectPause:
	case EffectLatency:
		if r.Effect.Delay <= 0 {
			return fmt.Errorf("%s: latency needs a positive delay", name)
		}
	default:
		return fmt.Errorf("%s: unknown effect %q", name, r.Effect.Kind)
	}
	if r.Effect.Delay < 0 {
		return fmt.Errorf("%s: negative delay", name)
	}
	return nil
}

func knownOp(op Op) bool {
	for _, o := range Ops {
		if o == op {
			return true
		}
	}
	return false
}

// RuleStatus is a rule with its counters, as the faults API lists it.
type RuleStatus struct {
	Rule
	Matched int `json:"matched"` // calls that matched Op and Target
	Fired   int `json:"fired"`   // times the effect was applied
	Paused  int `json:"paused"`  // calls waiting on this pause rule now
	// Released reports that ReleaseFault was called: a pause rule no
	// longer pauses.
	Released bool `json:"released,omitempty"`
}

type activeRule struct {
	Rule
	matched, fired, paused int
	released               *rt.Event
}

// faults holds the active rules. Lock order: faults.mu is never held while
// taking the engine lock or sleeping.
type faults struct {
	r     rt.Runtime
	mu    rt.Mutex
	rules []*activeRule // guarded by mu
	next  int           // guarded by mu
}

func newFaults(r rt.Runtime) *faults { return &faults{r: r, mu: r.NewMutex()} }

func (f *faults) add(rule Rule) (Rule, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if rule.ID == "" {
		for {
			f.next++
			id := fmt.Sprintf("r%d", f.next)
			if f.findLocked(id) == nil {
				rule.ID = id
				break
			}
		}
	} else if f.findLocked(rule.ID) != nil {
		return Rule{}, fmt.Errorf("fault rule %q already exists", rule.ID)
	}
	if err := rule.Validate(); err != nil {
		return Rule{}, err
	}
	if err := checkFaultRule(rule); err != nil {
		return Rule{}, err
	}
	if len(f.rules) >= MaxFaultRules {
		return Rule{}, tooLarge("fault rule %s: %d rules are active, the limit (MaxFaultRules)", rule.ID, len(f.rules))
	}
	f.rules = append(f.rules, &activeRule{Rule: rule, released: rt.NewEvent(f.r)})
	return rule, nil
}

func (f *faults) findLocked(id string) *activeRule {
	for _, a := range f.rules {
		if a.ID == id {
			return a
		}
	}
	return nil
}

func (f *faults) remove(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, a := range f.rules {
		if a.ID == id {
			a.released.Set()
			f.rules = append(f.rules[:i:i], f.rules[i+1:]...)
			return true
		}
	}
	return false
}

func (f *faults) clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, a := range f.rules {
		a.released.Set()
	}
	f.rules = nil
}

func (f *faults) release(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.findLocked(id)
	if a == nil {
		return false
	}
	a.released.Set()
	return true
}

func (f *faults) list() []RuleStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]RuleStatus, 0, len(f.rules))
	for _, a := range f.rules {
		out = append(out, RuleStatus{Rule: a.Rule, Matched: a.matched, Fired: a.fired, Paused: a.paused, Released: a.released.IsSet()})
	}
	return out
}

// outcome is what the rules decided for one call.
type outcome struct {
	fired        []string
	loseResponse bool
}

// before runs the rules for one call: it sleeps for latency rules, waits on
// pause rules, and returns the error of the first error or rate-limit rule
// that fires. It never holds f.mu while waiting.
func (f *faults) before(op Op, target string, also ...string) (outcome, *Error) {
	var out outcome
	type action struct {
		a    *activeRule
		kind EffectKind
		eff  Effect
	}
	var actions []action
	f.mu.Lock()
	for _, a := range f.rules {
		if (a.Op != "" && a.Op != op) || (a.Target != "" && a.Target != target && !slices.Contains(also, a.Target)) {
			continue
		}
		if a.Times > 0 && a.fired >= a.Times {
			continue
		}
		a.matched++
		if a.Nth > 0 && a.matched != a.Nth {
			continue
		}
		if a.Prob > 0 && a.Prob < 1 && f.r.Rand("fakeiaas.faults").Float64() >= a.Prob {
			continue
		}
		if a.Effect.Kind == EffectPause && a.released.IsSet() {
			continue
		}
		a.fired++
		out.fired = append(out.fired, a.ID)
		actions = append(actions, action{a: a, kind: a.Effect.Kind, eff: a.Effect})
		if a.Effect.Kind == EffectPause {
			a.paused++
		}
		if a.Effect.Kind == EffectError || a.Effect.Kind == EffectRateLimit {
			break
		}
	}
	f.mu.Unlock()
	for _, act := range actions {
		switch act.kind {
		case EffectLatency:
			f.r.Sleep(act.eff.Delay)
		case EffectPause:
			act.a.released.Wait(0)
			f.mu.Lock()
			act.a.paused--
			f.mu.Unlock()
		case EffectLoseResponse:
			out.loseResponse = true
		case EffectError:
			t := act.eff.ErrorType
			if t == "" {
				t = cpiv2.TypeCloudError
			}
			msg := act.eff.Message
			if msg == "" {
				msg = fmt.Sprintf("injected fault %s on %s %s", act.a.ID, op, target)
			}
			return out, &Error{Code: CodeInjected, CPI: &cpiv2.Error{Type: t, Message: msg, OkToRetry: act.eff.OkToRetry}}
		case EffectRateLimit:
			msg := act.eff.Message
			if msg == "" {
				msg = fmt.Sprintf("rate limit exceeded on %s (fault %s)", op, act.a.ID)
			}
			return out, &Error{Code: CodeRateLimited, RetryAfter: act.eff.Delay,
				CPI: &cpiv2.Error{Type: cpiv2.TypeCloudError, Message: msg, OkToRetry: true}}
		}
	}
	return out, nil
}
