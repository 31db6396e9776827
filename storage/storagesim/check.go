package storagesim

import (
	"fmt"
	"time"

	"github.com/cpilab/cpilab/storage"
)

// Invariants checked after every tick, by id. Each reads the model (the
// disk, the provider's record of modifications, the resizes started), never
// the controller's own account of itself, except where the invariant is
// about the status (coherence).
var Invariants = map[string]string{
	"bounds":             "request ≤ size ≤ limit; above limit only after an emergency growth with exceedLimitOnEmergency",
	"shrink-safe":        "a shrink never goes below request nor below the size that leaves the target buffer free",
	"policy-unchanged":   "the controller never rewrites the policy",
	"budget":             "budgeted resizes in any sliding 24 h ≤ maxActionsPerDay; planned ones leave reservedActionsForEmergency",
	"one-in-flight":      "no resize is started while one is in flight on the disk",
	"window":             "non-urgent resizes start only while the maintenance window is open",
	"cooldown":           "non-urgent resizes are at least the cooldown apart",
	"no-flapping":        "no grow and shrink within 24 h of each other while use moved less than half the hysteresis",
	"full-while-allowed": "the disk never fills while an emergency growth was critical and every gate was open",
	"refusal-free":       "resizes the provider refused cost no budget",
	"status-coherent":    "every held-back action names its gate in the status; Resizing means a task in flight",
}

type action struct {
	at       time.Time
	kind     storage.Kind
	from, to int64
	used     float64
	refused  bool
}

type checker struct {
	cfg        Config
	w          *world
	st         store
	policy     storage.Policy
	actions    []action
	violations []Violation
	seen       map[string]bool
	last       storage.Decision
	lastAt     time.Time
	lastCrit   bool
	lastOK     bool // the controller ran at the last tick
	// lastBlind: at the last tick no usage report could reach the
	// controller (decided from the model's faults, not from its status).
	lastBlind bool
}

func newChecker(cfg Config, w *world, st store) *checker {
	return &checker{cfg: cfg, w: w, st: st, policy: cfg.Policy, seen: map[string]bool{}}
}

// violate records one violation per invariant (the first is the one to
// shrink toward; later ones are mostly consequences).
func (c *checker) violate(inv, format string, a ...any) {
	if c.seen[inv] {
		return
	}
	c.seen[inv] = true
	c.violations = append(c.violations, Violation{Invariant: inv, At: c.w.since(), Detail: fmt.Sprintf(format, a...)})
}

func (c *checker) controllerDown() { c.lastOK = false }

func (c *checker) afterReconcile(d storage.Decision, err error, started []issued) {
	p := c.cfg.Policy
	w := c.w
	if c.cfg.Policy != c.policy {
		c.violate("policy-unchanged", "the policy changed: %+v", c.cfg.Policy)
	}
	for _, is := range started {
		a := action{at: is.at, kind: d.Kind, from: is.from, to: is.target, refused: is.refused}
		if w.disk != nil {
			a.used = w.disk.usedMiB
		}
		c.checkStart(a)
		c.actions = append(c.actions, a)
	}
	if ds := w.disk; ds != nil {
		ceiling := p.LimitMiB
		if p.Emergency.ExceedLimit {
			ceiling = storage.MaxSizeMiB
		}
		if ds.sizeMiB < p.RequestMiB || ds.sizeMiB > ceiling {
			c.violate("bounds", "size %d MiB outside [%d, %d]", ds.sizeMiB, p.RequestMiB, ceiling)
		}
		if ds.sizeMiB > p.LimitMiB && !c.lastGrowWasEmergency() {
			c.violate("bounds", "size %d MiB above limit %d without an emergency growth", ds.sizeMiB, p.LimitMiB)
		}
	}
	// Status coherence.
	if err == nil {
		st := c.st["db/data"]
		held := d.Kind == storage.None && (d.State == storage.StatePendingGrowth || d.State == storage.StatePendingShrink || d.State == storage.StateAtLimit || d.State == storage.StateEmergency)
		if held && len(st.Conditions) == 0 {
			c.violate("status-coherent", "state %s with no condition naming the gate", d.State)
		}
		if st.State == storage.StateResizing && st.PendingTask == "" {
			c.violate("status-coherent", "state Resizing with no task in flight")
		}
		// Refusals cost no budget: the status's count may exceed the
		// accepted modifications in the window by the one in flight only.
		if w.disk != nil {
			accepted := countSince(w.disk.mods, w.now, storage.BudgetWindow)
			if n := st.ActionsInWindow(w.now); n > accepted+1 {
				c.violate("refusal-free", "the status counts %d actions in 24 h, the provider accepted %d", n, accepted)
			}
		}
	}
	c.last, c.lastAt, c.lastOK = d, w.now, err == nil
	c.lastCrit = c.critical()
	c.lastBlind = w.agentUnreachable()
}

func (c *checker) lastGrowWasEmergency() bool {
	for i := len(c.actions) - 1; i >= 0; i-- {
		a := c.actions[i]
		if a.to > a.from && !a.refused {
			return a.kind == storage.EmergencyGrow
		}
	}
	return false
}

// critical reports whether the disk is critically full under the policy.
func (c *checker) critical() bool {
	ds := c.w.disk
	if ds == nil || ds.sizeMiB == 0 {
		return false
	}
	e := c.cfg.Policy.Emergency
	used, size := ds.usedMiB, float64(ds.sizeMiB)
	return !e.Disabled && (used*100 >= float64(e.CriticalThreshold)*size || size-used <= float64(e.CriticalMinimumFreeMiB))
}

// checkStart checks one started resize against the model's truth.
func (c *checker) checkStart(a action) {
	p := c.cfg.Policy
	w := c.w
	at := w.now
	if w.disk != nil && w.disk.inflight != nil && w.disk.inflight.doneAt.After(at) && !a.refused && w.disk.inflight.target != a.to {
		c.violate("one-in-flight", "a resize to %d MiB started while one to %d MiB was in flight", a.to, w.disk.inflight.target)
	}
	if a.refused {
		if len(w.issued) >= 2 {
			if prev := w.issued[len(w.issued)-2]; !prev.refused && prev.at.Add(c.cfg.Provider.Latency).After(at) {
				c.violate("one-in-flight", "a resize started %s after the previous one, which was still in flight", at.Sub(prev.at))
			}
		}
		return
	}
	urgent := a.kind.Urgent()
	if a.to < a.from {
		safe := storage.ConvergeSize(p, int64(a.used))
		if a.to < p.RequestMiB || a.to < safe {
			c.violate("shrink-safe", "shrink %d → %d MiB with %.0f MiB used (safe size %d)", a.from, a.to, a.used, safe)
		}
	}
	if !urgent && !p.Window.Open(at) {
		c.violate("window", "%s to %d MiB outside the maintenance window", a.kind, a.to)
	}
	// The budget, counted by the provider's truth: accepted resizes.
	since := at.Add(-storage.BudgetWindow)
	n := 0
	for _, b := range c.actions {
		if !b.refused && b.at.After(since) {
			n++
		}
	}
	max := p.Emergency.MaxActionsPerDay
	if n+1 > max {
		c.violate("budget", "%d resizes in the 24 h ending now, budget %d", n+1, max)
	}
	if !urgent && n+1 > max-p.Emergency.ReservedForEmergency {
		c.violate("budget", "planned resize number %d in 24 h eats the %d kept for emergencies (budget %d)", n+1, p.Emergency.ReservedForEmergency, max)
	}
	var prev *action // the last accepted resize before this one
	for i := len(c.actions) - 1; i >= 0; i-- {
		b := c.actions[i]
		if b.refused || at.Sub(b.at) >= 24*time.Hour {
			continue
		}
		if prev == nil {
			prev = &c.actions[i]
		}
		if !urgent && !b.kind.Urgent() && p.Cooldown > 0 && at.Sub(b.at) < p.Cooldown {
			c.violate("cooldown", "planned resizes %s apart (cooldown %s)", at.Sub(b.at), p.Cooldown)
		}
	}
	// A flap: this resize undoes the previous one within 24 h although use
	// moved less than half the hysteresis of the size in between.
	if b := prev; b != nil && (a.to > a.from) != (b.to > b.from) && float64(p.Hysteresis)/2*float64(a.from)/100 > abs(a.used-b.used) {
		c.violate("no-flapping", "%s (%d → %d) %s after %s (%d → %d) while use moved %.0f MiB", a.kind, a.from, a.to, at.Sub(b.at), b.kind, b.from, b.to, abs(a.used-b.used))
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// attributeFull names the gate that let the disk fill, and records a
// violation when no gate did: the controller could see a critical disk at
// its last tick (it ran, and the agent could report usage), nothing was in
// flight, the true sliding-window budget had room, the provider would have
// accepted and the limit was not reached.
func (c *checker) attributeFull() string {
	w := c.w
	p := c.cfg.Policy
	ds := w.disk
	switch {
	case !c.lastOK:
		return "controller or director down"
	case !c.lastCrit:
		return "filled within one tick of detection"
	case c.lastBlind:
		return "no usage report (agent unreachable)"
	case ds.inflight != nil || c.last.State == storage.StateResizing:
		return "resize in flight"
	}
	ceiling := p.LimitMiB
	if p.Emergency.ExceedLimit {
		ceiling = storage.MaxSizeMiB
	}
	if c.cfg.Provider.MaxSizeMiB > 0 {
		ceiling = min(ceiling, c.cfg.Provider.MaxSizeMiB)
	}
	if ds.sizeMiB >= ceiling {
		return "limit reached"
	}
	n := 0
	for _, b := range c.actions {
		if !b.refused && b.at.After(c.lastAt.Add(-storage.BudgetWindow)) {
			n++
		}
	}
	if n >= p.Emergency.MaxActionsPerDay {
		return "budget exhausted"
	}
	prov := c.cfg.Provider
	if prov.MinInterval > 0 && len(ds.mods) > 0 && c.lastAt.Sub(ds.mods[len(ds.mods)-1]) < prov.MinInterval {
		return "provider interval"
	}
	if prov.MaxPer24h > 0 && countSince(ds.mods, c.lastAt, 24*time.Hour) >= prov.MaxPer24h {
		return "provider quota"
	}
	gate := "none"
	if len(c.last.Blocked) > 0 {
		gate = string(c.last.Blocked[0].Gate)
	}
	c.violate("full-while-allowed", "the disk filled (%d MiB) although growth was allowed at the last tick (%d of %d budget used, size below the ceiling %d MiB); the controller's gate: %s", ds.sizeMiB, n, p.Emergency.MaxActionsPerDay, ceiling, gate)
	return "none (violation)"
}
