package simrt_test

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/simulator/simrt"
)

// workload exercises every primitive: queues, locks, conds with time-outs,
// sleeps of random length, nested goroutines and annotations.
func workload(s *simrt.Sim) {
	q := rt.NewQueue[int](s)
	mu := s.NewMutex()
	total := 0
	grp := rt.NewGroup(s)
	for w := range 4 {
		grp.Go(fmt.Sprintf("producer-%d", w), func() {
			r := s.Rand(fmt.Sprintf("producer-%d", w))
			for i := range 20 {
				s.Sleep(time.Duration(r.IntN(1000)) * time.Millisecond)
				q.Push(w*100 + i)
				mu.Lock()
				total++
				mu.Unlock()
			}
		})
	}
	done := rt.NewEvent(s)
	grp.Go("consumer", func() {
		for {
			v, ok := q.Pop(3 * time.Second)
			if !ok {
				done.Set()
				return
			}
			s.Trace(fmt.Sprintf("consumed %d", v))
		}
	})
	grp.Go("nester", func() {
		inner := rt.NewGroup(s)
		for i := range 3 {
			inner.Go("inner", func() { s.Yield(); s.Sleep(time.Duration(i) * time.Second) })
		}
		inner.Wait()
	})
	grp.Wait()
	if !done.IsSet() {
		panic("consumer did not finish")
	}
	mu.Lock()
	defer mu.Unlock()
	if total != 80 {
		panic(fmt.Sprintf("total = %d", total))
	}
}

func runWorkload(t testing.TB, seed uint64, trace *bytes.Buffer) simrt.Result {
	t.Helper()
	cfg := simrt.Config{Seed: seed, MaxSteps: 1e6, MaxTime: 24 * time.Hour}
	if trace != nil {
		cfg.Trace = trace
	}
	res := simrt.Run(cfg, workload)
	if !res.OK() {
		t.Fatalf("seed %d: %v: %v", seed, res, res.Err)
	}
	return res
}

func TestSameSeedSameTraceAtAnyGOMAXPROCS(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for seed := uint64(1); seed <= 50; seed++ {
		runtime.GOMAXPROCS(1)
		a := runWorkload(t, seed, nil)
		runtime.GOMAXPROCS(2)
		b := runWorkload(t, seed, nil)
		if a.TraceHash != b.TraceHash || a.Steps != b.Steps || a.Elapsed != b.Elapsed {
			t.Fatalf("seed %d: GOMAXPROCS 1 gave %v, GOMAXPROCS 2 gave %v", seed, a, b)
		}
	}
	// The full trace text is identical too.
	var x, y bytes.Buffer
	runtime.GOMAXPROCS(1)
	runWorkload(t, 7, &x)
	runtime.GOMAXPROCS(2)
	runWorkload(t, 7, &y)
	if !bytes.Equal(x.Bytes(), y.Bytes()) || x.Len() == 0 {
		t.Fatalf("seed 7: trace texts differ (%d and %d bytes)", x.Len(), y.Len())
	}
}

func TestDifferentSeedsInterleaveDifferently(t *testing.T) {
	hashes := map[uint64]uint64{}
	orders := map[string]bool{}
	for seed := uint64(1); seed <= 50; seed++ {
		var order []string
		res := simrt.Run(simrt.Config{Seed: seed}, func(s *simrt.Sim) {
			g := rt.NewGroup(s)
			mu := s.NewMutex()
			for _, name := range []string{"a", "b", "c", "d"} {
				g.Go(name, func() {
					for range 3 {
						mu.Lock()
						order = append(order, name)
						mu.Unlock()
					}
				})
			}
			g.Wait()
		})
		if !res.OK() {
			t.Fatal(res.Err)
		}
		if prev, dup := hashes[res.TraceHash]; dup {
			t.Errorf("seeds %d and %d gave the same trace hash %016x", prev, seed, res.TraceHash)
		}
		hashes[res.TraceHash] = seed
		orders[strings.Join(order, "")] = true
	}
	if len(orders) < 40 {
		t.Fatalf("50 seeds gave only %d distinct lock orders", len(orders))
	}
}

func TestVirtualTimeCostsNoWallTime(t *testing.T) {
	wall := time.Now()
	var before, after time.Time
	res := simrt.Run(simrt.Config{Seed: 1}, func(s *simrt.Sim) {
		before = s.Now()
		s.Sleep(time.Hour)
		after = s.Now()
	})
	if !res.OK() {
		t.Fatal(res.Err)
	}
	if got := after.Sub(before); got != time.Hour {
		t.Fatalf("Sleep(1h) advanced the clock by %v", got)
	}
	if !before.Equal(simrt.DefaultStart) {
		t.Fatalf("run began at %v, want %v", before, simrt.DefaultStart)
	}
	if res.Elapsed != time.Hour {
		t.Fatalf("Result.Elapsed = %v, want 1h", res.Elapsed)
	}
	if d := time.Since(wall); d > 5*time.Second {
		t.Fatalf("a 1-hour virtual sleep took %v of wall time", d)
	}
}

func TestDeadlockNamesEveryBlockedGoroutine(t *testing.T) {
	res := simrt.Run(simrt.Config{Seed: 3}, func(s *simrt.Sim) {
		a, b := s.NewMutex(), s.NewMutex()
		started := rt.NewEvent(s)
		a.Lock()
		s.Go("takes-b-then-a", func() {
			b.Lock()
			started.Set()
			a.Lock()
		})
		started.Wait(0)
		b.Lock()
	})
	if res.Outcome != simrt.Deadlocked {
		t.Fatalf("outcome %v, want deadlocked (err %v)", res.Outcome, res.Err)
	}
	var de *simrt.DeadlockError
	if !errors.As(res.Err, &de) || !errors.Is(res.Err, simrt.ErrDeadlock) {
		t.Fatalf("Err = %T %v, want *DeadlockError", res.Err, res.Err)
	}
	if len(de.Blocked) != 2 || de.Blocked[0].Name != "main" || de.Blocked[1].Name != "takes-b-then-a" {
		t.Fatalf("blocked = %+v", de.Blocked)
	}
	for _, bl := range de.Blocked {
		if !strings.HasPrefix(bl.WaitsOn, "mutex m") || !strings.Contains(bl.WaitsOn, "sim_test.go") {
			t.Errorf("g%d waits on %q; want the mutex and where it was made", bl.ID, bl.WaitsOn)
		}
	}
	if !strings.Contains(de.Blocked[0].WaitsOn, `held by g1 "takes-b-then-a"`) {
		t.Errorf("main waits on %q; want the holder named", de.Blocked[0].WaitsOn)
	}
	if res.Unwound != 2 {
		t.Errorf("Unwound = %d, want 2", res.Unwound)
	}
}

func TestDeadlockOnCondWait(t *testing.T) {
	res := simrt.Run(simrt.Config{Seed: 1}, func(s *simrt.Sim) {
		q := rt.NewQueue[int](s)
		q.Pop(0) // nobody pushes
	})
	var de *simrt.DeadlockError
	if !errors.As(res.Err, &de) || len(de.Blocked) != 1 || !strings.HasPrefix(de.Blocked[0].WaitsOn, "cond c") {
		t.Fatalf("Err = %v; want a deadlock on a cond", res.Err)
	}
}

func TestMutexExcludesAndIsFair(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		const n, rounds = 16, 20
		inside, count := 0, 0
		res := simrt.Run(simrt.Config{Seed: seed, MaxSteps: 1e6}, func(s *simrt.Sim) {
			mu := s.NewMutex()
			g := rt.NewGroup(s)
			for i := range n {
				g.Go(fmt.Sprintf("w%d", i), func() {
					for range rounds {
						mu.Lock()
						inside++
						if inside != 1 {
							panic(fmt.Sprintf("%d goroutines inside the critical section", inside))
						}
						s.Yield()
						s.Sleep(time.Millisecond)
						count++
						inside--
						mu.Unlock()
					}
				})
			}
			g.Wait()
		})
		if !res.OK() || count != n*rounds {
			t.Fatalf("seed %d: %v (%v), count %d", seed, res, res.Err, count)
		}
	}
}

func TestMutexHandsOverInArrivalOrder(t *testing.T) {
	var order []int
	res := simrt.Run(simrt.Config{Seed: 9}, func(s *simrt.Sim) {
		mu := s.NewMutex()
		mu.Lock()
		g := rt.NewGroup(s)
		for i := range 10 {
			g.Go(fmt.Sprintf("w%d", i), func() {
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
			})
			s.Sleep(time.Second) // w_i is alone: it runs and queues on mu
		}
		mu.Unlock()
		g.Wait()
	})
	if !res.OK() {
		t.Fatal(res.Err)
	}
	if fmt.Sprint(order) != "[0 1 2 3 4 5 6 7 8 9]" {
		t.Fatalf("waiters got the mutex in order %v, want arrival order", order)
	}
}

func TestCondWaitForTimesOutOnTheVirtualClock(t *testing.T) {
	res := simrt.Run(simrt.Config{Seed: 5}, func(s *simrt.Sim) {
		mu := s.NewMutex()
		c := s.NewCond(mu)
		t0 := s.Now()

		mu.Lock()
		if c.WaitFor(5 * time.Second) {
			panic("WaitFor with no signal reported a wake-up")
		}
		if got := s.Now().Sub(t0); got != 5*time.Second {
			panic(fmt.Sprintf("WaitFor(5s) timed out after %v", got))
		}
		mu.Unlock() // panics unless WaitFor relocked mu

		s.Go("signaller", func() {
			s.Sleep(3 * time.Second)
			mu.Lock()
			c.Signal()
			mu.Unlock()
		})
		mu.Lock()
		if !c.WaitFor(10 * time.Second) {
			panic("WaitFor signalled at +3s reported a time-out")
		}
		if got := s.Now().Sub(t0); got != 8*time.Second {
			panic(fmt.Sprintf("signalled WaitFor returned at %v, want 8s", got))
		}
		mu.Unlock()

		s.Go("broadcaster", func() {
			s.Sleep(time.Hour)
			mu.Lock()
			c.Broadcast()
			mu.Unlock()
		})
		mu.Lock()
		if !c.WaitFor(0) { // no time-out: waits the hour
			panic("WaitFor(0) reported a time-out")
		}
		mu.Unlock()
		s.Sleep(time.Hour) // the cancelled time-out of the signalled wait fired nothing
	})
	if !res.OK() {
		t.Fatal(res.Err)
	}
	if res.Elapsed != 8*time.Second+2*time.Hour {
		t.Fatalf("Elapsed = %v", res.Elapsed)
	}
}

func TestRtHelpersOnSimrt(t *testing.T) {
	res := simrt.Run(simrt.Config{Seed: 11}, func(s *simrt.Sim) {
		q := rt.NewQueue[int](s)
		g := rt.NewGroup(s)
		g.Go("producer", func() {
			for i := range 100 {
				q.Push(i)
				if i%10 == 0 {
					s.Sleep(time.Second)
				}
			}
		})
		for want := range 100 {
			got, ok := q.Pop(5 * time.Second)
			if !ok || got != want {
				panic(fmt.Sprintf("Pop = %d, %v; want %d", got, ok, want))
			}
		}
		g.Wait()
		t0 := s.Now()
		if _, ok := q.Pop(10 * time.Millisecond); ok {
			panic("Pop on an empty queue reported an item")
		}
		if d := s.Now().Sub(t0); d != 10*time.Millisecond {
			panic(fmt.Sprintf("Pop time-out took %v", d))
		}
		q.Close()
		if _, ok := q.Pop(0); ok {
			panic("Pop on a closed queue reported an item")
		}
		e := rt.NewEvent(s)
		woke := rt.NewQueue[bool](s)
		for range 8 {
			g.Go("waiter", func() { woke.Push(e.Wait(10 * time.Second)) })
		}
		s.Sleep(time.Second)
		e.Set()
		g.Wait()
		for range 8 {
			if v, ok := woke.Pop(time.Second); !ok || !v {
				panic("a waiter was not woken by Set")
			}
		}
		if rt.NewEvent(s).Wait(time.Minute) {
			panic("an unset event reported set")
		}
	})
	if !res.OK() {
		t.Fatal(res.Err)
	}
}

func TestPanicIsCapturedWithNameAndStack(t *testing.T) {
	boom := errors.New("boom")
	res := simrt.Run(simrt.Config{Seed: 2}, func(s *simrt.Sim) {
		s.Go("exploder", func() { explode(boom) })
		s.Sleep(time.Minute)
		panic("main should not get here")
	})
	var pe *simrt.PanicError
	if res.Outcome != simrt.Panicked || !errors.As(res.Err, &pe) {
		t.Fatalf("outcome %v err %v, want a captured panic", res.Outcome, res.Err)
	}
	if pe.Name != "exploder" || !errors.Is(res.Err, boom) || !errors.Is(res.Err, simrt.ErrPanic) {
		t.Fatalf("PanicError = %q %v", pe.Name, pe.Value)
	}
	if !strings.Contains(string(pe.Stack), "simrt_test.explode") {
		t.Fatalf("stack does not show the panicking function:\n%s", pe.Stack)
	}
	if res.Unwound != 1 { // main, asleep
		t.Fatalf("Unwound = %d, want 1", res.Unwound)
	}
}

func explode(err error) { panic(err) }

func TestBudgets(t *testing.T) {
	ticker := func(s *simrt.Sim) {
		for {
			s.Sleep(time.Second)
		}
	}
	res := simrt.Run(simrt.Config{Seed: 1, MaxTime: time.Minute}, ticker)
	if res.Outcome != simrt.TimeBudgetExhausted || !errors.Is(res.Err, simrt.ErrBudget) || res.Elapsed != time.Minute {
		t.Fatalf("time budget: %v %v", res, res.Err)
	}
	res = simrt.Run(simrt.Config{Seed: 1, MaxSteps: 1000}, func(s *simrt.Sim) {
		for {
			s.Yield()
		}
	})
	if res.Outcome != simrt.StepBudgetExhausted || res.Steps != 1000 {
		t.Fatalf("step budget: %v %v", res, res.Err)
	}
}

func TestUnwindingRunsDefersAndLeaksNothing(t *testing.T) {
	baseline := runtime.NumGoroutine()
	for _, tc := range []struct {
		name string
		want simrt.Outcome
		end  func(s *simrt.Sim)
	}{
		{"main returns", simrt.Completed, func(s *simrt.Sim) {}},
		{"deadlock", simrt.Deadlocked, func(s *simrt.Sim) { s.NewCond(lockedMutex(s)).Wait() }},
		{"panic", simrt.Panicked, func(s *simrt.Sim) { panic("end") }},
		{"budget", simrt.TimeBudgetExhausted, func(s *simrt.Sim) { s.Sleep(48 * time.Hour) }},
	} {
		unwound := 0
		res := simrt.Run(simrt.Config{Seed: 4, MaxTime: 24 * time.Hour}, func(s *simrt.Sim) {
			mu := s.NewMutex()
			c := s.NewCond(mu)
			g := rt.NewGroup(s)
			mu.Lock()
			for i := range 3 {
				g.Go("blocked", func() {
					defer func() {
						unwound++
						s.Sleep(time.Second) // blocking in a defer while unwinding exits at once
					}()
					switch i {
					case 0:
						mu.Lock()
					case 1:
						s.Sleep(time.Hour)
					}
				})
			}
			g.Go("cond-waiter", func() {
				defer func() { unwound++ }()
				m2 := s.NewMutex()
				m2.Lock()
				s.NewCond(m2).Wait()
			})
			_ = c
			s.Sleep(time.Millisecond)
			tc.end(s)
		})
		if res.Outcome != tc.want {
			t.Errorf("%s: outcome %v (%v), want %v", tc.name, res.Outcome, res.Err, tc.want)
		}
		if unwound == 0 {
			t.Errorf("%s: no deferred call of an unwound goroutine ran", tc.name)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > baseline && time.Now().Before(deadline) {
		runtime.Gosched()
		time.Sleep(time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > baseline {
		t.Fatalf("%d goroutines after the runs, %d before", n, baseline)
	}
}

func TestUnstartedGoroutinesAreUnwound(t *testing.T) {
	unstarted := 0
	for seed := uint64(1); seed <= 20; seed++ {
		ran := false
		res := simrt.Run(simrt.Config{Seed: seed}, func(s *simrt.Sim) {
			s.Go("late", func() { ran = true })
		})
		if !res.OK() {
			t.Fatal(res.Err)
		}
		if !ran {
			unstarted++
			if res.Unwound != 1 {
				t.Fatalf("seed %d: late never ran but Unwound = %d", seed, res.Unwound)
			}
		}
	}
	if unstarted == 0 || unstarted == 20 {
		t.Fatalf("%d of 20 seeds ended main before the late goroutine ran; want some but not all", unstarted)
	}
}

func lockedMutex(s *simrt.Sim) rt.Mutex {
	m := s.NewMutex()
	m.Lock()
	return m
}

func TestStreamsMatchRtReal(t *testing.T) {
	s := simrt.New(simrt.Config{Seed: 77})
	r := rt.Real(77)
	for _, name := range []string{"cpi", "agent", "faults/cpi"} {
		for range 5 {
			if a, b := s.Rand(name).Uint64(), r.Rand(name).Uint64(); a != b {
				t.Fatalf("stream %q: simrt drew %d, rt.Real %d", name, a, b)
			}
		}
	}
}

func TestOutsideRun(t *testing.T) {
	s := simrt.New(simrt.Config{Seed: 1})
	q := rt.NewQueue[int](s) // constructors and non-blocking calls work before Run
	q.Push(1)
	ran := false
	s.Go("registered-before-run", func() { ran = true })
	res := s.Run(func() {
		if v, ok := q.Pop(0); !ok || v != 1 {
			panic("lost the item pushed before Run")
		}
		s.Sleep(time.Second)
	})
	if !res.OK() || !ran {
		t.Fatalf("%v %v ran=%v", res, res.Err, ran)
	}
	if q.Len() != 0 {
		t.Fatal("Len after the run")
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Sleep after the run did not panic")
		}
	}()
	s.Sleep(time.Second)
}

func TestMisuseIsReportedAsAPanic(t *testing.T) {
	for name, body := range map[string]func(s *simrt.Sim){
		"recursive lock":      func(s *simrt.Sim) { m := s.NewMutex(); m.Lock(); m.Lock() },
		"unlock of unlocked":  func(s *simrt.Sim) { s.NewMutex().Unlock() },
		"wait without mutex":  func(s *simrt.Sim) { s.NewCond(s.NewMutex()).Wait() },
		"cond on real mutex":  func(s *simrt.Sim) { rt.Real(0).NewCond(s.NewMutex()) },
		"cond on other mutex": func(s *simrt.Sim) { s.NewCond(simrt.New(simrt.Config{}).NewMutex()) },
	} {
		res := simrt.Run(simrt.Config{Seed: 1}, body)
		if name == "cond on real mutex" {
			// rt.Real accepts any Mutex; nothing to report.
			continue
		}
		if res.Outcome != simrt.Panicked {
			t.Errorf("%s: outcome %v, want panicked", name, res.Outcome)
		}
	}
}

func TestManyShortLivedGoroutines(t *testing.T) {
	res := simrt.Run(simrt.Config{Seed: 8}, func(s *simrt.Sim) {
		g := rt.NewGroup(s)
		for i := range 10000 {
			g.Go(fmt.Sprintf("short-%d", i), func() { s.Sleep(time.Duration(i%7) * time.Millisecond) })
			if i%100 == 99 {
				g.Wait()
			}
		}
		s.Go("left-over", func() { s.Sleep(time.Hour) })
		g.Wait()
	})
	if !res.OK() || res.Goroutines != 10002 || res.Unwound > 1 {
		t.Fatalf("%v (%v), unwound %d", res, res.Err, res.Unwound)
	}
}

// A stalled goroutine does not come back from a Sleep or a Cond wait
// before its stall ends, and holds no mutex meanwhile: another goroutine
// takes the cond's mutex while it is stalled. A goroutine of another name
// is not stalled, nor one started later under the same name after the
// stall ended; a shorter Stall does not shorten a longer one. A run with
// no Stall makes the same decisions as before Stall existed (the pinned
// traces of the simulator hold this).
func TestStallKeepsANamedGoroutineAsleep(t *testing.T) {
	var failures []string
	fail := func(f string, args ...any) { failures = append(failures, fmt.Sprintf(f, args...)) }
	res := simrt.Run(simrt.Config{Seed: 3, MaxTime: time.Hour}, func(s *simrt.Sim) {
		t0 := s.Now()
		mu := s.NewMutex()
		c := s.NewCond(mu)
		var renewedAt, otherAt, lockedAt time.Duration
		wg := rt.NewGroup(s)
		wg.Go("renewer", func() {
			mu.Lock()
			c.WaitFor(10 * time.Second) // times out at +10s, stalled until +60s
			renewedAt = s.Now().Sub(t0)
			mu.Unlock()
			s.Sleep(time.Second) // not stalled any more
			if got := s.Now().Sub(t0); got != 61*time.Second {
				fail("the renewer's sleep after its stall ended at %v, want 61s", got)
			}
		})
		wg.Go("worker", func() {
			s.Sleep(10 * time.Second)
			otherAt = s.Now().Sub(t0)
			s.Sleep(10 * time.Second)
			mu.Lock() // free: the stalled renewer holds it not
			lockedAt = s.Now().Sub(t0)
			mu.Unlock()
		})
		s.Sleep(time.Second)
		s.Stall("renewer", 59*time.Second)
		s.Stall("renewer", 5*time.Second) // ends sooner: no effect
		wg.Wait()
		if renewedAt != 60*time.Second || otherAt != 10*time.Second || lockedAt != 20*time.Second {
			fail("renewer back at %v (want 60s), worker slept to %v (want 10s) and locked at %v (want 20s)", renewedAt, otherAt, lockedAt)
		}
		s.Go("renewer", func() {
			s.Sleep(time.Second)
			if got := s.Now().Sub(t0); got != 62*time.Second {
				fail("a renewer started after the stall slept to %v, want 62s", got)
			}
		})
		s.Sleep(2 * time.Second)
	})
	if !res.OK() {
		t.Fatal(res.Err)
	}
	for _, f := range failures {
		t.Error(f)
	}
}
