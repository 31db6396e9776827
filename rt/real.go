package rt

import (
	"hash/fnv"
	"math/rand/v2"
	"sync"
	"time"
)

// Real returns the production runtime: the wall clock, goroutines, and random
// streams seeded from seed (0 picks nothing special: it is just a seed).
func Real(seed uint64) Runtime { return &realRuntime{seed: seed, streams: map[string]*rand.Rand{}} }

type realRuntime struct {
	seed uint64

	mu      sync.Mutex
	streams map[string]*rand.Rand // guarded by mu
}

func (*realRuntime) Now() time.Time        { return time.Now() }
func (*realRuntime) Sleep(d time.Duration) { time.Sleep(d) }
func (*realRuntime) Go(_ string, fn func()) {
	go fn()
}
func (*realRuntime) Yield() {}

func (r *realRuntime) Rand(stream string) *rand.Rand {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.streams[stream]; ok {
		return s
	}
	s := rand.New(&lockedSource{src: rand.NewPCG(r.seed, StreamSeed(r.seed, stream))})
	r.streams[stream] = s
	return s
}

func (*realRuntime) NewMutex() Mutex { return &sync.Mutex{} }

func (*realRuntime) NewCond(m Mutex) Cond { return &realCond{mu: m, ch: make(chan struct{})} }

// StreamSeed derives the seed of a named stream from a root seed. The
// simulator uses the same derivation, so a stream's draws depend only on the
// root seed and the stream's name.
func StreamSeed(root uint64, stream string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(stream))
	x := root ^ h.Sum64()
	// splitmix64 finaliser: nearby roots give unrelated streams.
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

type lockedSource struct {
	mu  sync.Mutex
	src rand.Source
}

func (l *lockedSource) Uint64() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.src.Uint64()
}

// realCond is a condition variable with time-outs: each generation of waiters
// shares a channel that Broadcast closes. Signal wakes every waiter of the
// generation, which the Cond contract allows (waiters recheck their predicate).
type realCond struct {
	mu Mutex
	g  sync.Mutex
	ch chan struct{} // guarded by g
}

func (c *realCond) Wait() { c.WaitFor(0) }

func (c *realCond) WaitFor(d time.Duration) bool {
	c.g.Lock()
	ch := c.ch
	c.g.Unlock()
	c.mu.Unlock()
	defer c.mu.Lock()
	if d <= 0 {
		<-ch
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ch:
		return true
	case <-t.C:
		return false
	}
}

func (c *realCond) Signal() { c.Broadcast() }

func (c *realCond) Broadcast() {
	c.g.Lock()
	close(c.ch)
	c.ch = make(chan struct{})
	c.g.Unlock()
}
