package faults

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/simulator/scenario"
)

// Seam is where faults are injected. Each seam counts its operations from 0
// in the order they happen; a Fault fires at one index of its kind's seam.
type Seam string

// The seams, in canonical order.
const (
	// SeamStep counts workload steps (the director-crash seam).
	SeamStep Seam = "step"
	// SeamCPI counts CPI calls; the operation's name is the CPI method.
	SeamCPI Seam = "cpi"
	// SeamAgent counts agent requests; the name is the agent method.
	SeamAgent Seam = "agent"
	// SeamMbus counts mbus messages published; the name is the subject.
	SeamMbus Seam = "mbus"
	// SeamVM counts VMs created; the name is "create_vm" (the simulator
	// draws a VM's faults before it has a CID).
	SeamVM Seam = "vm"
	// SeamClock is virtual time from the start of a run: the storage-sizing
	// simulation's faults (StorageKinds) each hold over a span of it. The
	// dynamic-disk simulation counts no operation on it, so its specs and
	// schedules refuse these kinds.
	SeamClock Seam = "clock"
)

// Kind is a kind of fault.
type Kind string

// The fault kinds, in canonical order.
const (
	// CPIError: the CPI call fails with a typed error and has no effect.
	// Fault.ErrType names the BOSH error type, Fault.OkToRetry its
	// ok_to_retry. Injected errors never lie about state: they are generic
	// (CloudError, CpiError, or VMCreationFailed for a retryable create_vm).
	CPIError Kind = "cpi-error"
	// LostResponse: the CPI call takes effect but its response is lost; the
	// caller sees a time-out.
	LostResponse Kind = "lost-response"
	// Latency: the CPI call is delayed by Fault.Duration before it runs.
	Latency Kind = "latency"
	// DirectorCrash: the director crashes at the step and restarts
	// Fault.Duration later.
	DirectorCrash Kind = "director-crash"
	// AgentUnresponsive: the agent receiving the request stops answering for
	// Fault.Duration (the request is dropped).
	AgentUnresponsive Kind = "agent-unresponsive"
	// AgentRestart: the agent receiving the request restarts, losing its
	// in-memory state, and is back Fault.Duration later.
	AgentRestart Kind = "agent-restart"
	// AgentOld: the VM runs an old agent, which answers "unknown message"
	// to the dynamic-disk actions.
	AgentOld Kind = "agent-old"
	// VMRestartOnAttach: the VM restarts inside every attach_disk, so its
	// agent is briefly unreachable.
	VMRestartOnAttach Kind = "vm-restart-on-attach"
	// MbusLost: the mbus message is dropped.
	MbusLost Kind = "mbus-lost"
	// MbusDelay: the mbus message is delivered Fault.Duration late.
	MbusDelay Kind = "mbus-delay"
	// CPIOutage: the cloud's API is down for Fault.Duration from this CPI
	// call on: it and every CPI call that starts before the outage ends
	// fail with a generic CloudError and have no effect. Unlike CPIError,
	// whose one failure a retry of an in-doubt call gets past, an outage
	// outlasts the Director's retries (InDoubtTries spaced by
	// InDoubtBackoff), so the paths where a disk call finally fails are
	// reached.
	CPIOutage Kind = "cpi-outage"
	// LockRenewalStall: at this CPI call the Director's lock renewal
	// thread stalls for Fault.Duration (blocked on the database, or
	// descheduled), while its jobs go on: meanwhile held leases are
	// extended only at the jobs' checkpoints, so a lease that one long
	// step outlasts lapses, a job waiting for the lock takes it, and the
	// holder must find the loss at its next checkpoint and stop.
	LockRenewalStall Kind = "lock-renewal-stall"
)

// The storage-sizing simulation's fault kinds, on SeamClock: each holds
// from a time to a time of the run.
const (
	// ControllerDown: the storage controller is not running (it restarts
	// after).
	ControllerDown Kind = "controller-down"
	// DirectorDown: every Director call fails.
	DirectorDown Kind = "director-down"
	// ResizeFails: resize tasks started in the span fail.
	ResizeFails Kind = "resize-fails"
	// VMRecreate: the VM is recreated: a resize in flight fails, and no
	// usage is reported for the span.
	VMRecreate Kind = "vm-recreate"
	// AgentDown: the agent reports no usage.
	AgentDown Kind = "agent-down"
)

type kindInfo struct {
	seam     Seam
	duration bool          // takes a duration
	min, max time.Duration // default range drawn from
}

var kinds = map[Kind]kindInfo{
	CPIError:          {seam: SeamCPI},
	LostResponse:      {seam: SeamCPI},
	Latency:           {SeamCPI, true, time.Millisecond, 2 * time.Second},
	DirectorCrash:     {SeamStep, true, time.Second, 30 * time.Second},
	AgentUnresponsive: {SeamAgent, true, time.Second, 2 * time.Minute},
	AgentRestart:      {SeamAgent, true, time.Second, 10 * time.Second},
	AgentOld:          {seam: SeamVM},
	VMRestartOnAttach: {seam: SeamVM},
	MbusLost:          {seam: SeamMbus},
	MbusDelay:         {SeamMbus, true, time.Millisecond, 5 * time.Second},
	CPIOutage:         {SeamCPI, true, 5 * time.Second, time.Minute},
	LockRenewalStall:  {SeamCPI, true, 10 * time.Second, 5 * time.Minute},
	ControllerDown:    {seam: SeamClock, duration: true},
	DirectorDown:      {seam: SeamClock, duration: true},
	ResizeFails:       {seam: SeamClock, duration: true},
	VMRecreate:        {seam: SeamClock, duration: true},
	AgentDown:         {seam: SeamClock, duration: true},
}

// Kinds lists every kind in canonical order.
var Kinds = []Kind{CPIError, LostResponse, Latency, DirectorCrash, AgentUnresponsive, AgentRestart,
	AgentOld, VMRestartOnAttach, MbusLost, MbusDelay, CPIOutage, LockRenewalStall}

// StorageKinds lists the storage-sizing simulation's kinds, in the order it
// draws them from.
var StorageKinds = []Kind{ControllerDown, DirectorDown, ResizeFails, VMRecreate, AgentDown}

var seams = []Seam{SeamStep, SeamCPI, SeamAgent, SeamMbus, SeamVM, SeamClock}

// A kind listed in Kinds but not classified in kinds (its seam, whether it
// takes a duration), or the other way round, or classified on an unknown
// seam, stops every program at start, as pebble's errorfs does for an
// operation left unclassified: a fault nobody can inject or parse is never
// silently drawn.
func init() {
	if err := checkClassified(slices.Concat(Kinds, StorageKinds), kinds); err != nil {
		panic(err)
	}
	for _, k := range StorageKinds {
		if kinds[k].seam != SeamClock {
			panic(fmt.Sprintf("faults: storage-sizing kind %q is classified on seam %q, not %q", k, kinds[k].seam, SeamClock))
		}
	}
}

func checkClassified(list []Kind, classified map[Kind]kindInfo) error {
	for _, k := range list {
		info, ok := classified[k]
		if !ok {
			return fmt.Errorf("faults: kind %q is listed in Kinds or StorageKinds but not classified", k)
		}
		if !slices.Contains(seams, info.seam) {
			return fmt.Errorf("faults: kind %q is classified on unknown seam %q", k, info.seam)
		}
	}
	for k := range classified {
		if !slices.Contains(list, k) {
			return fmt.Errorf("faults: kind %q is classified but missing from Kinds and StorageKinds", k)
		}
	}
	return nil
}

// Valid reports whether k is a kind the dynamic-disk simulation injects
// (one of Kinds).
func (k Kind) Valid() bool { i, ok := kinds[k]; return ok && i.seam != SeamClock }

// Storage reports whether k is one of the storage-sizing simulation's kinds
// (StorageKinds).
func (k Kind) Storage() bool { i, ok := kinds[k]; return ok && i.seam == SeamClock }

// Seam is the seam whose operations k's faults are counted on.
func (k Kind) Seam() Seam { return kinds[k].seam }

// HasDuration reports whether k's faults carry a Duration.
func (k Kind) HasDuration() bool { return kinds[k].duration }

// DefaultRange is the duration range a Spec draws k's durations from unless
// it says otherwise (zero for kinds without a duration).
func (k Kind) DefaultRange() (lo, hi time.Duration) { return kinds[k].min, kinds[k].max }

// The BOSH error types injected CPIError faults carry.
const (
	ErrCloudError       = "Bosh::Clouds::CloudError"
	ErrCpiError         = "Bosh::Clouds::CpiError"
	ErrVMCreationFailed = "Bosh::Clouds::VMCreationFailed"
)

// Fault is one injected fault: Kind fires at operation number At (from 0) of
// Kind.Seam(). Its text form is
//
//	cpi-error@12 on=attach_disk n=3 type=Bosh::Clouds::CloudError ok_to_retry=true
//	latency@3 d=250ms
//	director-crash@120 d=30s
//
// with the keys in that order and only those that apply; values holding
// spaces, quotes or separators are Go-quoted.
type Fault struct {
	// Kind is what happens.
	Kind Kind
	// At is the index of the operation on Kind.Seam() at which it fires.
	At int
	// On is the operation's name as the seam reports it (CPI method, agent
	// method, mbus subject, "create_vm"). A scripted fault with a non-empty On
	// fires only when the operation at At has that name. "" matches any.
	On string
	// Nth, when > 0 (with On set), is the operation's rank among the
	// seam's operations named On (1: the first). A scripted fault with Nth
	// fires at the Nth operation named On, wherever it falls, and At is
	// then only informative; so a schedule still fires on "the second
	// detach_disk" after other operations were removed (shrinking) or
	// added. Injectors record it on every fault they fire.
	Nth int
	// ErrType is the BOSH error type of a CPIError fault.
	ErrType string
	// OkToRetry is the ok_to_retry of a CPIError fault.
	OkToRetry bool
	// Duration is the delay (Latency, MbusDelay), the silence
	// (AgentUnresponsive), the downtime (DirectorCrash, AgentRestart,
	// CPIOutage) or the stall (LockRenewalStall).
	Duration time.Duration
}

// String is the fault's text form, which ParseFault reads back.
func (f Fault) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s@%d", f.Kind, f.At)
	if f.On != "" {
		b.WriteString(" on=" + quote(f.On))
		if f.Nth > 0 {
			fmt.Fprintf(&b, " n=%d", f.Nth)
		}
	}
	if f.Kind == CPIError {
		b.WriteString(" type=" + quote(f.ErrType))
		if f.OkToRetry {
			b.WriteString(" ok_to_retry=true")
		}
	}
	if f.Kind.HasDuration() {
		b.WriteString(" d=" + f.Duration.String())
	}
	return b.String()
}

func quote(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\n\"';,=#") {
		return strconv.Quote(v)
	}
	return v
}

// ParseFault reads a fault in the form Fault.String writes.
func ParseFault(s string) (Fault, error) {
	toks, err := scenario.SplitWords(s)
	if err != nil {
		return Fault{}, fmt.Errorf("fault %q: %w", s, err)
	}
	if len(toks) == 0 {
		return Fault{}, fmt.Errorf("fault %q: empty", s)
	}
	head := toks[0]
	at := strings.LastIndexByte(head, '@')
	if at < 0 {
		return Fault{}, fmt.Errorf("fault %q: want kind@index, got %q", s, head)
	}
	f := Fault{Kind: Kind(head[:at])}
	if !f.Kind.Valid() {
		return Fault{}, fmt.Errorf("fault %q: unknown kind %q (known: %s)", s, f.Kind, kindList())
	}
	if f.At, err = strconv.Atoi(head[at+1:]); err != nil || f.At < 0 {
		return Fault{}, fmt.Errorf("fault %q: index %q is not a non-negative integer", s, head[at+1:])
	}
	seen, err := scenario.KeyValues(toks[1:], func(k, v string) error {
		var err error
		switch {
		case k == "on":
			f.On = v
		case k == "n":
			if f.Nth, err = strconv.Atoi(v); err != nil || f.Nth < 1 {
				return fmt.Errorf("n %q is not a positive integer", v)
			}
		case k == "type" && f.Kind == CPIError:
			f.ErrType = v
		case k == "ok_to_retry" && f.Kind == CPIError:
			if f.OkToRetry, err = strconv.ParseBool(v); err != nil {
				return fmt.Errorf("ok_to_retry %q is not a bool", v)
			}
		case k == "d" && f.Kind.HasDuration():
			if f.Duration, err = time.ParseDuration(v); err != nil || f.Duration < 0 {
				return fmt.Errorf("d %q is not a non-negative duration", v)
			}
		default:
			return fmt.Errorf("key %q does not apply to %s", k, f.Kind)
		}
		return nil
	})
	if err != nil {
		return Fault{}, fmt.Errorf("fault %q: %w", s, err)
	}
	if f.Nth > 0 && f.On == "" {
		return Fault{}, fmt.Errorf("fault %q: n= needs on=<name>", s)
	}
	if f.Kind == CPIError && f.ErrType == "" {
		return Fault{}, fmt.Errorf("fault %q: cpi-error needs type=<BOSH error type>", s)
	}
	if f.Kind.HasDuration() && !seen["d"] {
		return Fault{}, fmt.Errorf("fault %q: %s needs d=<duration>", s, f.Kind)
	}
	return f, nil
}

// Schedule is a list of faults: what a run injected, or what a replay
// injects. Its text form has one fault per line.
type Schedule []Fault

// String writes one fault per line in canonical order (seam, index, kind);
// ParseSchedule reads it back.
func (s Schedule) String() string {
	var b strings.Builder
	for _, f := range s.Sorted() {
		b.WriteString(f.String())
		b.WriteByte('\n')
	}
	return b.String()
}

// Sorted returns a copy in canonical order: by seam, index, then kind.
func (s Schedule) Sorted() Schedule {
	out := slices.Clone(s)
	slices.SortStableFunc(out, compareFaults)
	return out
}

func compareFaults(a, b Fault) int {
	if c := slices.Index(seams, a.Kind.Seam()) - slices.Index(seams, b.Kind.Seam()); c != 0 {
		return c
	}
	if a.At != b.At {
		return a.At - b.At
	}
	return slices.Index(Kinds, a.Kind) - slices.Index(Kinds, b.Kind)
}

// ParseSchedule reads faults separated by newlines or semicolons; blank
// lines and lines starting with # are skipped.
func ParseSchedule(text string) (Schedule, error) {
	var s Schedule
	for n, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts, err := scenario.SplitOutside(line, ';')
		if err != nil {
			return nil, fmt.Errorf("schedule line %d: %w", n+1, err)
		}
		for _, p := range parts {
			if strings.TrimSpace(p) == "" {
				continue
			}
			f, err := ParseFault(p)
			if err != nil {
				return nil, fmt.Errorf("schedule line %d: %w", n+1, err)
			}
			s = append(s, f)
		}
	}
	return s, nil
}

func kindList() string {
	names := make([]string, len(Kinds))
	for i, k := range Kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}
