package rt

import "time"

// Event is a one-shot signal: Set once, and every Wait returns.
type Event struct {
	r   Runtime
	mu  Mutex
	c   Cond
	set bool // guarded by mu
}

// NewEvent returns an unset event on r.
func NewEvent(r Runtime) *Event {
	m := r.NewMutex()
	return &Event{r: r, mu: m, c: r.NewCond(m)}
}

// Set marks the event; later calls do nothing.
func (e *Event) Set() {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.set {
		e.set = true
		e.c.Broadcast()
	}
}

// IsSet reports whether Set has been called.
func (e *Event) IsSet() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.set
}

// Wait blocks until the event is set or d elapses (d ≤ 0: no time-out). It
// reports whether the event was set.
func (e *Event) Wait(d time.Duration) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d <= 0 {
		for !e.set {
			e.c.Wait()
		}
		return true
	}
	return waitUntil(e.r, e.c, d, func() bool { return e.set })
}

// Queue is an unbounded FIFO of T that blocks readers until an item arrives.
type Queue[T any] struct {
	r      Runtime
	mu     Mutex
	c      Cond
	items  []T  // guarded by mu
	closed bool // guarded by mu
}

// NewQueue returns an empty queue on r.
func NewQueue[T any](r Runtime) *Queue[T] {
	m := r.NewMutex()
	return &Queue[T]{r: r, mu: m, c: r.NewCond(m)}
}

// Push appends v and wakes a reader. Pushing to a closed queue drops v.
func (q *Queue[T]) Push(v T) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return
	}
	q.items = append(q.items, v)
	q.c.Broadcast()
}

// Close wakes every reader; Pop then drains what is left and reports false.
func (q *Queue[T]) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	q.c.Broadcast()
}

// Len is the number of queued items.
func (q *Queue[T]) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

// Pop removes the oldest item, waiting up to d for one (d ≤ 0: forever). It
// reports false on time-out or when the queue is closed and empty.
func (q *Queue[T]) Pop(d time.Duration) (T, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	ready := func() bool { return len(q.items) > 0 || q.closed }
	if d <= 0 {
		for !ready() {
			q.c.Wait()
		}
	} else if !waitUntil(q.r, q.c, d, ready) {
		var zero T
		return zero, false
	}
	if len(q.items) == 0 {
		var zero T
		return zero, false
	}
	v := q.items[0]
	var zero T
	q.items[0] = zero
	q.items = q.items[1:]
	return v, true
}

// Group waits for a set of logical goroutines started through it.
type Group struct {
	r  Runtime
	mu Mutex
	c  Cond
	n  int // guarded by mu
}

// NewGroup returns an empty group on r.
func NewGroup(r Runtime) *Group {
	m := r.NewMutex()
	return &Group{r: r, mu: m, c: r.NewCond(m)}
}

// Go starts fn on the group's runtime and counts it until it returns.
func (g *Group) Go(name string, fn func()) {
	g.mu.Lock()
	g.n++
	g.mu.Unlock()
	g.r.Go(name, func() {
		defer func() {
			g.mu.Lock()
			g.n--
			if g.n == 0 {
				g.c.Broadcast()
			}
			g.mu.Unlock()
		}()
		fn()
	})
}

// Wait blocks until every goroutine started through the group has returned.
func (g *Group) Wait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.n > 0 {
		g.c.Wait()
	}
}

// waitUntil waits on c (its mutex held) until ready() or until d has passed
// on r's clock, whatever wake-ups come in between.
func waitUntil(r Runtime, c Cond, d time.Duration, ready func() bool) bool {
	deadline := r.Now().Add(d)
	for !ready() {
		remaining := deadline.Sub(r.Now())
		if remaining <= 0 {
			return false
		}
		c.WaitFor(remaining)
	}
	return true
}
