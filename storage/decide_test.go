package storage

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

var t0 = time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC) // a Monday, midnight UTC

func policy(t testing.TB, p Policy) Policy {
	t.Helper()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func obs(at time.Time, size, used int64) Observation {
	return Observation{At: at, Known: true, SizeMiB: size, UsedMiB: used}
}

func TestDecideCases(t *testing.T) {
	p := policy(t, Policy{RequestMiB: 10240, LimitMiB: 102400, AllowShrink: true})
	inWindow := t0.Add(3*time.Hour + 30*time.Minute)
	outside := t0.Add(12 * time.Hour)
	for _, c := range []struct {
		name  string
		o     Observation
		kind  Kind
		state State
		gate  Gate
	}{
		{"balanced", obs(outside, 10240, 5000), None, StateBalanced, ""},
		{"no status", Observation{At: outside}, None, StateWaitingForDiskStatus, GateNoStatus},
		{"in flight", Observation{At: outside, Known: true, SizeMiB: 10240, UsedMiB: 10000, InFlight: true}, None, StateResizing, GateInFlight},
		{"critical by percent", obs(outside, 10240, 9800), EmergencyGrow, StateEmergency, ""},
		{"critical by free space", obs(outside, 102400, 102400-500), None, StateAtLimit, GateLimit},
		{"grow waits for the window", obs(outside, 10240, 8500), None, StatePendingGrowth, GateWindow},
		{"grow in the window", obs(inWindow, 10240, 8500), ScheduledGrow, StateNeedsGrow, ""},
		{"below request grows now", obs(outside, 5120, 100), FloorGrow, StateNeedsGrow, ""},
		{"no shrink inside hysteresis", obs(inWindow, 20480, 13000), None, StateBalanced, ""},
		{"shrink in the window", obs(inWindow, 40960, 9000), ScheduledShrink, StateNeedsShrink, ""},
		{"provider refuses", Observation{At: inWindow, Known: true, SizeMiB: 10240, UsedMiB: 8500, ProviderBlockedUntil: inWindow.Add(time.Hour)}, None, StatePendingGrowth, GateProvider},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := Decide(p, Status{}, c.o, Reference)
			if d.Kind != c.kind || d.State != c.state {
				t.Fatalf("Decide = %s/%s (%+v), want %s/%s", d.Kind, d.State, d.Blocked, c.kind, c.state)
			}
			if c.gate != "" && !hasGate(d.Blocked, c.gate) {
				t.Fatalf("blocked by %+v, want %s", d.Blocked, c.gate)
			}
			if d.Kind == ScheduledShrink && d.TargetMiB < ConvergeSize(p, c.o.UsedMiB) {
				t.Fatalf("shrink to %d below the safe size %d", d.TargetMiB, ConvergeSize(p, c.o.UsedMiB))
			}
		})
	}
}

func hasGate(cs []Condition, g Gate) bool {
	for _, c := range cs {
		if c.Gate == g {
			return true
		}
	}
	return false
}

func TestBudgetIsASlidingWindowWithAReserve(t *testing.T) {
	p := policy(t, Policy{RequestMiB: 1024, LimitMiB: 1 << 20, Window: Window{Schedule: AlwaysOpen}, Cooldown: -1})
	var st Status
	// Three planned actions use the planned budget (4 - 1 reserved).
	for i := range 3 {
		at := t0.Add(time.Duration(i) * time.Hour)
		d := Decide(p, st, obs(at, 10240, 8500), Reference)
		if d.Kind != ScheduledGrow {
			t.Fatalf("action %d: %s %+v", i, d.Kind, d.Blocked)
		}
		Record(&st, d, at, Succeeded, "", Reference)
	}
	at := t0.Add(3 * time.Hour)
	if d := Decide(p, st, obs(at, 10240, 8500), Reference); d.Kind != None || !hasGate(d.Blocked, GateBudget) {
		t.Fatalf("a fourth planned action: %s %+v", d.Kind, d.Blocked)
	}
	// The reserve is there for an emergency.
	d := Decide(p, st, obs(at, 10240, 10000), Reference)
	if d.Kind != EmergencyGrow {
		t.Fatalf("emergency with the reserve left: %s %+v", d.Kind, d.Blocked)
	}
	Record(&st, d, at, Succeeded, "", Reference)
	if d := Decide(p, st, obs(at.Add(time.Minute), 10240, 10100), Reference); d.Kind != None || !hasGate(d.Blocked, GateBudget) {
		t.Fatalf("a fifth action within 24 h: %s", d.Kind)
	}
	// 24 h after the first action, one slot is free again (sliding window).
	if d := Decide(p, st, obs(t0.Add(24*time.Hour+time.Minute), 10240, 10100), Reference); d.Kind != EmergencyGrow {
		t.Fatalf("after the first action left the window: %s %+v", d.Kind, d.Blocked)
	}
	// The fork's counter has not reset: its last action is under 24 h old.
	if d := Decide(p, st, obs(t0.Add(24*time.Hour+time.Minute), 10240, 10100), Fork); d.Kind != None {
		t.Fatalf("fork profile: %s, want blocked by its counter", d.Kind)
	}
}

func TestRefusalsUseNoBudget(t *testing.T) {
	p := policy(t, Policy{RequestMiB: 1024, LimitMiB: 1 << 20, Window: Window{Schedule: AlwaysOpen}, Cooldown: -1})
	var st Status
	for i := range 10 {
		at := t0.Add(time.Duration(i) * time.Minute)
		d := Decide(p, st, obs(at, 10240, 10000), Reference)
		if d.Kind != EmergencyGrow {
			t.Fatalf("try %d: %s %+v", i, d.Kind, d.Blocked)
		}
		Record(&st, d, at, Refused, "provider quota", Reference)
	}
	if n := st.ActionsInWindow(t0.Add(time.Hour)); n != 0 {
		t.Fatalf("%d refused actions counted against the budget", n)
	}
}

func TestCooldownBetweenPlannedActions(t *testing.T) {
	p := policy(t, Policy{RequestMiB: 1024, LimitMiB: 1 << 20, Window: Window{Schedule: AlwaysOpen}})
	var st Status
	d := Decide(p, st, obs(t0, 10240, 8500), Reference)
	Record(&st, d, t0, Succeeded, "", Reference)
	next := obs(t0.Add(30*time.Minute), d.TargetMiB, d.TargetMiB*85/100)
	if d := Decide(p, st, next, Reference); d.Kind != None || !hasGate(d.Blocked, GateCooldown) {
		t.Fatalf("30 min after a planned action: %s %+v", d.Kind, d.Blocked)
	}
	if d := Decide(p, st, next, Fork); d.Kind != ScheduledGrow {
		t.Fatalf("fork profile has no cooldown, got %s %+v", d.Kind, d.Blocked)
	}
}

// TestDecideProperties checks, over random policies, histories and
// observations, the bounds every decision keeps.
func TestDecideProperties(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		req := rapid.Int64Range(1024, 1<<20).Draw(rt, "request")
		p := Policy{
			RequestMiB:   req,
			LimitMiB:     rapid.Int64Range(req, 4<<20).Draw(rt, "limit"),
			TargetBuffer: rapid.IntRange(5, 50).Draw(rt, "buffer"),
			AllowShrink:  rapid.Bool().Draw(rt, "shrink"),
			Emergency: Emergency{
				ExceedLimit:          rapid.Bool().Draw(rt, "exceed"),
				MaxActionsPerDay:     rapid.IntRange(1, 10).Draw(rt, "max"),
				ReservedForEmergency: rapid.IntRange(0, 1).Draw(rt, "reserved"),
			},
		}
		if err := p.Validate(); err != nil {
			rt.Skip(err.Error())
		}
		prof := Reference
		var st Status
		size := rapid.Int64Range(req, p.LimitMiB).Draw(rt, "size")
		at := t0
		for i := range rapid.IntRange(1, 60).Draw(rt, "steps") {
			at = at.Add(time.Duration(rapid.IntRange(1, 600).Draw(rt, "minutes")) * time.Minute)
			used := rapid.Int64Range(0, size).Draw(rt, "used")
			o := obs(at, size, used)
			d := Decide(p, st, o, prof)
			if d2 := Decide(p, st, o, prof); d2.Kind != d.Kind || d2.TargetMiB != d.TargetMiB {
				rt.Fatalf("step %d: Decide is not a function of its inputs", i)
			}
			if d.Kind == None {
				Record(&st, d, at, Issued, "", prof)
				continue
			}
			if d.TargetMiB < p.RequestMiB {
				rt.Fatalf("step %d: target %d below request %d", i, d.TargetMiB, p.RequestMiB)
			}
			if d.TargetMiB > p.LimitMiB && !(d.Kind == EmergencyGrow && p.Emergency.ExceedLimit) {
				rt.Fatalf("step %d: %s to %d above limit %d", i, d.Kind, d.TargetMiB, p.LimitMiB)
			}
			if d.Kind == ScheduledShrink && (d.TargetMiB >= size || d.TargetMiB < ConvergeSize(p, used)) {
				rt.Fatalf("step %d: unsafe shrink %d → %d with %d used", i, size, d.TargetMiB, used)
			}
			if !d.Kind.Urgent() && !p.Window.Open(at) {
				rt.Fatalf("step %d: %s outside the window", i, d.Kind)
			}
			if (d.Kind == ScheduledGrow || d.Kind == EmergencyGrow) && d.TargetMiB <= size {
				rt.Fatalf("step %d: %s to %d from %d", i, d.Kind, d.TargetMiB, size)
			}
			Record(&st, d, at, Succeeded, "", prof)
			size = d.TargetMiB
			if n := st.ActionsInWindow(at); n > p.Emergency.MaxActionsPerDay {
				rt.Fatalf("step %d: %d actions in 24 h, budget %d", i, n, p.Emergency.MaxActionsPerDay)
			}
		}
	})
}
