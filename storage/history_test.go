package storage

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// drawHistory draws a status history: actions mostly in time order, now and
// then one from a clock that went back, of every result.
func drawHistory(t *rapid.T) []Action {
	n := rapid.IntRange(0, 60).Draw(t, "n")
	at := t0
	var h []Action
	for i := range n {
		step := time.Duration(rapid.IntRange(-3*60, 20*60).Draw(t, fmt.Sprint("step", i))) * time.Minute
		at = at.Add(step)
		r := rapid.SampledFrom([]Result{Issued, Succeeded, Failed, Refused}).Draw(t, fmt.Sprint("result", i))
		k := rapid.SampledFrom([]Kind{ScheduledGrow, EmergencyGrow, ScheduledShrink, FloorGrow}).Draw(t, fmt.Sprint("kind", i))
		h = append(h, Action{Kind: k, FromMiB: int64(i), ToMiB: int64(i + 1), At: at, Result: r})
	}
	return h
}

// The pruning and the budget count are the plain filters they stand for,
// whatever the order of the history.
func TestHistoryPruneAndCountAreThePlainFilters(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		h := drawHistory(t)
		at := t0.Add(time.Duration(rapid.IntRange(0, 14*24*60).Draw(t, "at")) * time.Minute)

		var want []Action
		for _, a := range h {
			if at.Sub(a.At) <= historyKeep {
				want = append(want, a)
			}
		}
		got := prune(slices.Clone(h), at.Add(-historyKeep))
		if !slices.Equal(got, want) {
			t.Fatalf("prune at %s:\n got %v\nwant %v", at, got, want)
		}

		budgeted := func(yield func(time.Time) bool) {
			for _, a := range h {
				if a.CountsAgainstBudget() && !yield(a.At) {
					return
				}
			}
		}
		if got, want := (Status{History: h}).ActionsInWindow(at), CountInWindow(budgeted, at, BudgetWindow); got != want {
			t.Fatalf("ActionsInWindow(%s) = %d, CountInWindow of the budgeted actions = %d", at, got, want)
		}
	})
}

// The gates' messages read as they always have (they were fmt.Sprintf
// formats; Decide builds them without fmt now).
func TestGateMessagesText(t *testing.T) {
	p := policy(t, Policy{RequestMiB: 1024, LimitMiB: 102400})
	inWindow := t0.Add(3*time.Hour + 30*time.Minute)
	msg := func(d Decision, g Gate) string {
		t.Helper()
		for _, c := range d.Blocked {
			if c.Gate == g {
				return c.Message
			}
		}
		t.Fatalf("no %s gate in %+v", g, d.Blocked)
		return ""
	}
	check := func(got, want string) {
		t.Helper()
		if got != want {
			t.Errorf("message %q, want %q", got, want)
		}
	}

	d := Decide(p, Status{}, obs(inWindow, 102400, 85000), Reference)
	check(msg(d, GateLimit), fmt.Sprintf("the volume is at its limit %d MiB", 102400))
	d = Decide(p, Status{}, obs(inWindow, 102400, 101900), Reference)
	check(msg(d, GateLimit), fmt.Sprintf("free space is critical (%d of %d MiB used) but the volume is at its limit %d MiB", 101900, 102400, 102400))

	small := policy(t, Policy{RequestMiB: 1024, LimitMiB: 1 << 20, MinStepMiB: 1})
	d = Decide(small, Status{}, obs(inWindow, 102400, 82000), Reference)
	check(msg(d, GateMinDelta), fmt.Sprintf("%d → %d MiB is below the minimum change of %d %%", 102400, 102500, 5))

	var st Status
	for i := range 3 {
		st.History = append(st.History, Action{Kind: ScheduledGrow, At: inWindow.Add(time.Duration(i-3) * 10 * time.Minute), Result: Succeeded})
	}
	d = Decide(p, st, obs(inWindow, 10240, 8500), Reference)
	check(msg(d, GateBudget), fmt.Sprintf("%d of %d actions used in the last 24 h (%d kept for emergencies)", 3, 4, 1))
	check(msg(d, GateCooldown), fmt.Sprintf("the last planned action was %s ago (cooldown %s)", 10*time.Minute, time.Hour))
}

// LastAction is a copy of the last action, never a pointer into History
// (an append or a prune would change it under the reader), and it follows
// every change of that action.
func TestLastActionIsACopyOfTheLast(t *testing.T) {
	p := policy(t, Policy{RequestMiB: 1024, LimitMiB: 1 << 20, Window: Window{Schedule: AlwaysOpen}, Cooldown: -1})
	var st Status
	check := func(when string) {
		t.Helper()
		n := len(st.History)
		if st.LastAction == nil || n == 0 {
			t.Fatalf("%s: LastAction %v with %d actions", when, st.LastAction, n)
		}
		if st.LastAction == &st.History[n-1] || *st.LastAction != st.History[n-1] {
			t.Fatalf("%s: LastAction %p %+v, last action %p %+v", when, st.LastAction, *st.LastAction, &st.History[n-1], st.History[n-1])
		}
	}
	d := Decide(p, st, obs(t0, 10240, 8500), Reference)
	Record(&st, d, t0, Issued, "", Reference)
	check("after the grow")
	first := st.LastAction
	d = Decide(p, st, Observation{At: t0.Add(time.Minute), InFlight: true}, Reference)
	Record(&st, d, t0.Add(time.Minute), Issued, "", Reference)
	check("after a tick with nothing done")
	if st.LastAction != first {
		t.Error("a tick that did nothing made a new copy of the last action")
	}
	st.complete(Succeeded, "")
	check("after the task completed")
	if st.LastAction.Result != Succeeded || first.Result != Issued {
		t.Errorf("LastAction %s, the earlier copy %s: want Succeeded, and Issued left as it was", st.LastAction.Result, first.Result)
	}
	held := *st.LastAction
	st.History = append(st.History, Action{Kind: ScheduledShrink, At: t0.Add(time.Hour), Result: Refused})
	d = Decide(p, st, obs(t0.Add(2*time.Hour), 20480, 8500), Reference)
	Record(&st, d, t0.Add(2*time.Hour), Issued, "", Reference)
	check("after an action appended by hand")
	if held.Result != Succeeded {
		t.Error("the copy a reader held changed")
	}
}
