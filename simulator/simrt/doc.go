// Package simrt is the simulator's deterministic rt.Runtime.
//
// A Sim runs logical goroutines on real goroutines that pass a single run
// token, so exactly one runs at a time. Every blocking point of the rt seam
// (Go, Yield, Sleep, Mutex.Lock, Cond.Wait and WaitFor) and every goroutine
// exit is a scheduling point: the scheduler picks the next goroutine,
// uniformly among the runnable ones, from a generator seeded by the root
// seed. Time is virtual: when nothing is runnable the clock jumps to the
// earliest timer (Sleep, WaitFor time-out), so an hour of Sleep costs
// nothing. When nothing is runnable and no timer is pending the run ends as a
// deadlock, naming every blocked goroutine and what it waits on.
//
//	res := simrt.Run(simrt.Config{Seed: 42, MaxSteps: 1e6, MaxTime: time.Hour}, func(s *simrt.Sim) {
//		q := rt.NewQueue[string](s)
//		g := rt.NewGroup(s)
//		g.Go("producer", func() {
//			s.Sleep(time.Minute) // returns at once, at +1m
//			q.Push("hello")
//		})
//		v, _ := q.Pop(0)
//		s.Trace("got " + v)
//		g.Wait()
//	})
//	fmt.Println(res) // completed: seed 42, … trace 3f2a…
//
// Stalls. Stall(name, d) keeps the goroutines named name from coming back
// from a Sleep or a Cond wait for d (they hold no mutex meanwhile): one
// thread of a process stops being scheduled while the rest goes on, as
// the simulator's lock-renewal-stall fault does to the Director's lock
// renewal. Without a Stall the scheduler's decisions are unchanged.
//
// Determinism. Same seed, same code ⇒ the same sequence of decisions, hence a
// byte-identical trace (Config.Trace) and the same Result.TraceHash, at any
// GOMAXPROCS. The Sim controls only what goes through it. The caller must
// keep everything else deterministic: iterate maps in a sorted order (Go
// randomises map iteration), do no real I/O, wall-clock reads or sleeps,
// real channel operations between logical goroutines, sync locks held across
// a scheduling point, or bare go statements inside a run, and draw randomness
// only from Sim.Rand streams.
//
// Random streams. Rand(name) is seeded with rt.StreamSeed(seed, name), as in
// rt.Real, so each subsystem has its own stream and extra draws on one never
// shift another. The scheduler has a private stream.
//
// The end of a run. Run returns when main returns, a goroutine panics (the
// panic is captured with the goroutine's name and stack: Result.Err is a
// *PanicError), the run deadlocks (*DeadlockError), or Config.MaxSteps or
// Config.MaxTime runs out (*BudgetError). Goroutines still alive are then
// unwound, each exiting through runtime.Goexit from its blocking call, so
// nothing leaks from one run into the next.
package simrt
