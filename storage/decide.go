package storage

import (
	"iter"
	"strconv"
	"time"
)

// Profile selects behaviours where implementations of the RFC differ.
// Reference follows the RFC; Fork reproduces the divergences of its one
// implementation (the CloudNativePG fork's pkg/reconciler/dynamicstorage).
type Profile struct {
	// BudgetReset counts actions with one counter that resets when the last
	// action is more than 24 h old, instead of a sliding 24 h window.
	BudgetReset bool
	// NoCooldown drops the cooldown between non-emergency actions.
	NoCooldown bool
	// NoHysteresis shrinks as soon as free space exceeds the target buffer.
	NoHysteresis bool
}

// Profiles by name.
var (
	Reference = Profile{}
	Fork      = Profile{BudgetReset: true, NoCooldown: true, NoHysteresis: true}
)

// BudgetWindow is the sliding window of the action budget.
const BudgetWindow = 24 * time.Hour

// historyKeep is how long actions stay in Status.History.
const historyKeep = 2 * BudgetWindow

// Decision is what the controller decided for one observation.
type Decision struct {
	Kind      Kind
	FromMiB   int64
	TargetMiB int64 // the size to resize to (Kind != None)
	// ConvergeMiB is the size the policy converges toward (the status's
	// targetSize), which one bounded step may not reach.
	ConvergeMiB int64
	State       State
	// Blocked lists every gate that held an action back.
	Blocked []Condition
	// NextWindow is when the window next opens, for a grow or shrink that
	// waits for it.
	NextWindow time.Time
}

// ActionsInWindow counts the budgeted actions in (at-24h, at].
// It is CountInWindow over the budgeted actions' times, written as one
// loop: a volume the provider keeps refusing holds a refusal a tick, and
// this runs every tick.
func (s Status) ActionsInWindow(at time.Time) int {
	lo := at.Add(-BudgetWindow)
	n := 0
	for i := range s.History {
		a := &s.History[i]
		if a.CountsAgainstBudget() && a.At.After(lo) && !a.At.After(at) {
			n++
		}
	}
	return n
}

// CountInWindow counts the times of ts in the sliding window of length
// window that ends at at: (at−window, at]. It is the one count of a
// rolling window (the action budget, a provider's modifications per 24 h).
func CountInWindow(ts iter.Seq[time.Time], at time.Time, window time.Duration) int {
	lo := at.Add(-window)
	n := 0
	for t := range ts {
		if t.After(lo) && !t.After(at) {
			n++
		}
	}
	return n
}

// used is the budget count under prof.
func (s *Status) used(at time.Time, prof Profile) int {
	if prof.BudgetReset {
		if s.CounterAt.IsZero() || at.Sub(s.CounterAt) > BudgetWindow {
			return 0
		}
		return s.Counter
	}
	return s.ActionsInWindow(at)
}

// shrinkAllowed: no growth in the last ShrinkDelay (a grow's step may
// overshoot; taking it back at once is a flap).
func (s *Status) shrinkAllowed(at time.Time, p Policy) bool {
	for i := range s.History {
		a := &s.History[i]
		if a.ToMiB > a.FromMiB && a.Result != Refused && at.Sub(a.At) < p.ShrinkDelay {
			return false
		}
	}
	return true
}

// lastPlannedAt is when the last non-urgent budgeted action was issued.
func (s *Status) lastPlannedAt() time.Time {
	var t time.Time
	for i := range s.History {
		a := &s.History[i]
		if a.CountsAgainstBudget() && !a.Kind.Urgent() && a.At.After(t) {
			t = a.At
		}
	}
	return t
}

// ConvergeSize is the size the policy converges toward at used: the
// smallest that leaves TargetBuffer % free and is not critical (below
// CriticalThreshold % used, more than CriticalMinimumFree free), within
// [request, limit].
func ConvergeSize(p Policy, usedMiB int64) int64 { return fitSize(p, usedMiB, 0) }

// fitSize is the smallest size s at which used plus a margin of marginPct %
// of s still leaves the target buffer free and is not critical, within
// [request, limit].
func fitSize(p Policy, used int64, marginPct int) int64 {
	pct := min(100-p.TargetBuffer, p.Emergency.CriticalThreshold-1) - marginPct
	pct = max(pct, 1)
	s := ceilDiv(used*100, int64(pct))
	if !p.Emergency.Disabled {
		s = max(s, ceilDiv((used+p.Emergency.CriticalMinimumFreeMiB+1)*100, int64(100-marginPct)))
	}
	return min(max(s, p.RequestMiB), p.LimitMiB)
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// itoa formats like %d. Decide builds its messages with it rather than
// fmt.Sprintf: a held-back volume gets one every tick.
func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// Decide decides what to do for one observation. p must have been
// validated. It does not change st: call Record with what was done.
func Decide(p Policy, st Status, o Observation, prof Profile) Decision {
	d := Decision{Kind: None, FromMiB: o.SizeMiB}
	if o.InFlight {
		d.State = StateResizing
		d.Blocked = append(d.Blocked, Condition{Gate: GateInFlight, Message: "a modification of the disk is in progress"})
		return d
	}
	if !o.Known {
		d.State = StateWaitingForDiskStatus
		d.Blocked = append(d.Blocked, Condition{Gate: GateNoStatus, Message: "no usage report for the volume"})
		return d
	}
	size, used := o.SizeMiB, min(o.UsedMiB, o.SizeMiB)
	free := size - used
	d.ConvergeMiB = ConvergeSize(p, used)

	ceiling := p.LimitMiB
	critical := !p.Emergency.Disabled && size > 0 &&
		(used*100 >= int64(p.Emergency.CriticalThreshold)*size || free <= p.Emergency.CriticalMinimumFreeMiB)
	if critical && p.Emergency.ExceedLimit {
		ceiling = MaxSizeMiB
	}
	if o.ProviderMaxMiB > 0 {
		ceiling = min(ceiling, o.ProviderMaxMiB)
	}

	switch {
	case size < p.RequestMiB:
		d.Kind, d.TargetMiB = FloorGrow, min(max(d.ConvergeMiB, p.RequestMiB), ceiling)
		d.State = StateNeedsGrow
	case critical:
		d.State = StateEmergency
		if size >= ceiling {
			d.State = StateAtLimit
			d.Blocked = append(d.Blocked, Condition{Gate: GateLimit, Message: "free space is critical (" + itoa(used) + " of " + itoa(size) + " MiB used) but the volume is at its limit " + itoa(ceiling) + " MiB"})
			return d
		}
		d.Kind, d.TargetMiB = EmergencyGrow, min(size+step(p, max(d.ConvergeMiB, size)-size), ceiling)
	case free*100 < int64(p.TargetBuffer)*size:
		d.State = StateNeedsGrow
		if size >= ceiling {
			d.State = StateAtLimit
			d.Blocked = append(d.Blocked, Condition{Gate: GateLimit, Message: "the volume is at its limit " + itoa(ceiling) + " MiB"})
			return d
		}
		d.Kind, d.TargetMiB = ScheduledGrow, min(size+step(p, d.ConvergeMiB-size), ceiling)
	case p.AllowShrink && shrinkWanted(p, size, free, prof) && shrinkSize(p, used, prof) < size && st.shrinkAllowed(o.At, p):
		d.State = StateNeedsShrink
		// Shrink leaves half the hysteresis as extra room, so that a small
		// rise in use after a shrink does not call for a grow at once.
		d.Kind, d.TargetMiB = ScheduledShrink, max(shrinkSize(p, used, prof), size-p.MaxStepMiB)
	default:
		d.State = StateBalanced
		return d
	}

	// Too small a change is not worth an action (urgent ones always are).
	if !d.Kind.Urgent() && abs(d.TargetMiB-size)*100 < int64(p.MinDelta)*size {
		d.Blocked = append(d.Blocked, Condition{Gate: GateMinDelta, Message: itoa(size) + " → " + itoa(d.TargetMiB) + " MiB is below the minimum change of " + strconv.Itoa(p.MinDelta) + " %"})
		d.Kind, d.TargetMiB, d.State = None, 0, StateBalanced
		return d
	}
	d.Blocked = gates(p, &st, o, d.Kind, prof, &d.NextWindow) // d.Blocked is empty here
	if len(d.Blocked) > 0 {
		switch d.Kind {
		case ScheduledShrink:
			d.State = StatePendingShrink
		case ScheduledGrow:
			d.State = StatePendingGrowth
		}
		d.Kind, d.TargetMiB = None, 0
	}
	return d
}

// shrinkSize is the size a shrink goes to: the converge size with half the
// hysteresis as margin, so that use must rise by that much before a grow is
// due again (the fork profile: no margin). Usage reports are whole MiB,
// rounded down, so the true use may be up to one MiB more than used: the
// margin is counted from used+1, or a rise one MiB short of the margin
// could call for a grow.
func shrinkSize(p Policy, used int64, prof Profile) int64 {
	if prof.NoHysteresis {
		return fitSize(p, used, 0)
	}
	return fitSize(p, used+1, p.Hysteresis/2)
}

func shrinkWanted(p Policy, size, free int64, prof Profile) bool {
	threshold := int64(p.TargetBuffer + p.Hysteresis)
	if prof.NoHysteresis {
		threshold = int64(p.TargetBuffer)
	}
	return free*100 > threshold*size
}

// step clamps a growth of want MiB to [MinStep, MaxStep].
func step(p Policy, want int64) int64 {
	return min(max(want, p.MinStepMiB), p.MaxStepMiB)
}

func abs(x int64) int64 {
	if x < 0 {
		return -x
	}
	return x
}

// gates returns every gate holding back an action of kind k.
func gates(p Policy, st *Status, o Observation, k Kind, prof Profile, next *time.Time) []Condition {
	var c []Condition
	at := o.At
	if o.ProviderBlockedUntil.After(at) {
		c = append(c, Condition{Gate: GateProvider, Message: "the provider accepts no modification of this disk yet", Until: o.ProviderBlockedUntil})
	}
	max := p.Emergency.MaxActionsPerDay
	allowed := max - p.Emergency.ReservedForEmergency
	if k.Urgent() {
		allowed = max
	}
	if n := st.used(at, prof); n >= allowed {
		c = append(c, Condition{Gate: GateBudget, Message: strconv.Itoa(n) + " of " + strconv.Itoa(max) + " actions used in the last 24 h (" + strconv.Itoa(p.Emergency.ReservedForEmergency) + " kept for emergencies)"})
	}
	if k.Urgent() {
		return c
	}
	if !p.Window.Open(at) {
		*next = p.Window.Next(at)
		c = append(c, Condition{Gate: GateWindow, Message: "the maintenance window is closed", Until: *next})
	}
	if !prof.NoCooldown && p.Cooldown > 0 {
		if last := st.lastPlannedAt(); !last.IsZero() && at.Sub(last) < p.Cooldown {
			c = append(c, Condition{Gate: GateCooldown, Message: "the last planned action was " + at.Sub(last).String() + " ago (cooldown " + p.Cooldown.String() + ")", Until: last.Add(p.Cooldown)})
		}
	}
	return c
}

// Record updates st with a decision and, when an action was issued, its
// outcome so far. It never touches the policy.
func Record(st *Status, d Decision, at time.Time, r Result, message string, prof Profile) {
	st.State = d.State
	st.Conditions = d.Blocked
	st.NextWindow = d.NextWindow
	if d.ConvergeMiB > 0 {
		st.TargetSizeMiB = d.ConvergeMiB
	}
	if d.FromMiB > 0 && d.Kind == None {
		st.EffectiveSizeMiB = d.FromMiB
	}
	if d.Kind != None {
		a := Action{Kind: d.Kind, FromMiB: d.FromMiB, ToMiB: d.TargetMiB, At: at, Result: r, Message: message}
		st.History = append(st.History, a)
		st.LastAction = &st.History[len(st.History)-1]
		if a.CountsAgainstBudget() {
			if st.CounterAt.IsZero() || at.Sub(st.CounterAt) > BudgetWindow {
				st.Counter = 0
			}
			st.Counter++
			st.CounterAt = at
			if r != Failed {
				st.State = StateResizing
			}
		} else {
			st.Conditions = append(st.Conditions, Condition{Gate: GateProvider, Message: message})
		}
		if r == Succeeded {
			st.EffectiveSizeMiB = d.TargetMiB
		}
	}
	st.History = prune(st.History, at.Add(-historyKeep))
	if n := len(st.History); n > 0 && st.LastAction != nil {
		st.setLastAction(&st.History[n-1])
	}
}

// setLastAction points LastAction at a copy of a (never into History). It
// keeps the copy it made last time when that still holds a: most ticks
// record no action, and a fresh copy each was half of what a simulated
// run allocated.
func (st *Status) setLastAction(a *Action) {
	if st.LastAction != nil && st.LastAction == st.lastCopy && *st.LastAction == *a {
		return
	}
	c := *a
	st.lastCopy, st.LastAction = &c, &c
}

// prune drops from h, in place and in order, the actions older than cut:
// no window can count them any more. at.Sub(a.At) <= historyKeep is
// !a.At.Before(at.Add(-historyKeep)) (Sub saturates in the same
// direction). Actions are recorded in time order, so the old ones are a
// prefix: that is resliced away without copying the rest, which a volume
// with a refusal every tick would otherwise copy every tick; any old one
// after the prefix (a clock that went back) is compacted as before.
func prune(h []Action, cut time.Time) []Action {
	k := 0
	for k < len(h) && h[k].At.Before(cut) {
		k++
	}
	h = h[k:]
	for i := range h {
		if h[i].At.Before(cut) {
			keep := h[:i]
			for _, a := range h[i+1:] {
				if !a.At.Before(cut) {
					keep = append(keep, a)
				}
			}
			return keep
		}
	}
	return h
}
