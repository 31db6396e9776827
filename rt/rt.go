package rt

import (
	"math/rand/v2"
	"time"
)

// Runtime supplies time, randomness and concurrency to deterministic logic.
// Every blocking operation on a Runtime, or on a Mutex or Cond it made, is a
// scheduling point under the simulator.
type Runtime interface {
	// Now is the current time on this runtime's clock.
	Now() time.Time
	// Sleep blocks the calling logical goroutine for d on this runtime's clock.
	Sleep(d time.Duration)
	// Go starts fn as a new logical goroutine. name appears in traces.
	Go(name string, fn func())
	// Yield lets another logical goroutine run; a no-op hint for the real runtime.
	Yield()
	// Rand returns the random stream named stream. Streams are derived from
	// the runtime's root seed, so adding draws to one stream never changes
	// another. A stream is safe for concurrent use.
	Rand(stream string) *rand.Rand
	// NewMutex returns an unlocked mutex.
	NewMutex() Mutex
	// NewCond returns a condition variable bound to m.
	NewCond(m Mutex) Cond
}

// Mutex is a mutual-exclusion lock. Lock on a held mutex is a blocking point.
type Mutex interface {
	Lock()
	Unlock()
}

// Cond is a condition variable whose waits can time out on the runtime clock.
// As with sync.Cond, the caller holds the bound Mutex around Wait and WaitFor.
type Cond interface {
	// Wait atomically unlocks the mutex, blocks until woken, and relocks it.
	Wait()
	// WaitFor is Wait with a time-out; it reports false if d elapsed first.
	// A d ≤ 0 waits forever, like Wait, and reports true.
	WaitFor(d time.Duration) bool
	Signal()
	Broadcast()
}
