// Package rt is the runtime seam: the one way director, agent, fakeiaas and
// simulator logic reach time, randomness and concurrency.
//
// Code under test never calls time.Now, time.Sleep, the global math/rand
// functions or a bare go statement. It asks its Runtime instead:
//
//	r := rt.Real(1)                // wall clock, goroutines; root seed 1 for the random streams
//	m := r.NewMutex()
//	c := r.NewCond(m)
//	r.Go("worker-1", func() {
//		m.Lock()
//		for !ready {
//			if !c.WaitFor(5 * time.Second) { // false: timed out on r's clock
//				break
//			}
//		}
//		m.Unlock()
//	})
//
// The real runtime (Real) uses the wall clock and goroutines. The simulator's
// runtime (package simulator/simrt) uses a virtual clock and lets exactly one logical
// goroutine run at a time, choosing the next from a seeded generator at every
// blocking point: Sleep, Lock on a held Mutex, Cond waits, Go and Yield. Code
// that blocks only through these primitives therefore replays exactly from a
// seed.
//
// The generic helpers Queue, Event and Group are built on Mutex and Cond, so
// they behave the same under either runtime.
package rt
