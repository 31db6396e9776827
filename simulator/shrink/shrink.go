// Package shrink reduces a failing input to a minimal one that still fails,
// by delta debugging. The input is a list of workload operations or a fault
// schedule; the algorithm is Zeller's ddmin, removing chunks of halving size
// down to single items.
//
// A failing simulation replays with a scripted fault schedule; shrinking
// asks, for each candidate schedule, whether the run still fails:
//
//	min, stats := shrink.Minimize(fired, func(s faults.Schedule) bool {
//		return run(cfg, faults.NewScripted(s)).Err != nil
//	}, shrink.Options{MaxTests: 500})
//
// The predicate must be deterministic, which a seeded simulation is.
package shrink

// Options bounds Minimize.
type Options struct {
	// MaxTests caps the calls to the predicate; 0: no cap. When reached,
	// Minimize returns the smallest failing input found so far.
	MaxTests int
}

// Stats says what Minimize did.
type Stats struct {
	// Tests counts the predicate calls.
	Tests int
	// From and To are the input's length before and after.
	From, To int
	// Capped reports that MaxTests stopped the search before the result
	// was 1-minimal.
	Capped bool
}

// Minimize returns a sub-sequence of items, in their order, for which fails
// still reports true, and from which no single item can be removed without
// it reporting false (1-minimal) unless opts.MaxTests stopped the search.
// fails(items) is assumed true and not called. items is not modified.
func Minimize[S ~[]T, T any](items S, fails func(S) bool, opts Options) (S, Stats) {
	st := Stats{From: len(items)}
	cur := append(S(nil), items...)
	test := func(c S) bool {
		if opts.MaxTests > 0 && st.Tests >= opts.MaxTests {
			st.Capped = true
			return false
		}
		st.Tests++
		return fails(c)
	}
	if len(cur) > 0 && test(S{}) {
		st.To = 0
		return S{}, st
	}
	n := 2
	for len(cur) >= 2 && !st.Capped {
		chunk := (len(cur) + n - 1) / n
		reduced := false
		for lo := 0; lo < len(cur); lo += chunk {
			hi := min(lo+chunk, len(cur))
			cand := append(append(S(nil), cur[:lo]...), cur[hi:]...)
			if test(cand) {
				cur = cand
				n = max(n-1, 2)
				reduced = true
				break
			}
		}
		if !reduced {
			if chunk == 1 {
				break
			}
			n = min(n*2, len(cur))
		}
	}
	st.To = len(cur)
	return cur, st
}
