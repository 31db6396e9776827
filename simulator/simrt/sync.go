package simrt

import (
	"fmt"
	"path"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/rt"
)

// mutex is the Sim's rt.Mutex. Lock is a scheduling point; a held mutex
// queues its waiters FIFO and Unlock hands it directly to the first.
type mutex struct {
	s       *Sim
	id      int
	site    string // where it was made, for deadlock reports
	holder  *g     // nil: free
	waiters []*g
}

// outsider holds a mutex locked outside a run.
var outsider = &g{id: -1, name: "outside Run"}

// NewMutex returns an unlocked mutex of this Sim.
func (s *Sim) NewMutex() rt.Mutex {
	s.nMutex++
	return &mutex{s: s, id: s.nMutex, site: callSite()}
}

func (m *mutex) Lock() {
	s := m.s
	switch s.phase {
	case phaseUnwinding:
		return
	case phaseRunning:
	default:
		if m.holder != nil {
			panic(fmt.Sprintf("simrt: Lock of held mutex m%d outside Sim.Run (it would block)", m.id))
		}
		m.holder = outsider
		return
	}
	cur := s.running("Mutex.Lock")
	s.runnable = append(s.runnable, cur)
	s.schedule(cur, reasonLock, m.id)
	if m.holder == nil {
		m.holder = cur
		return
	}
	if m.holder == cur {
		panic(fmt.Sprintf("simrt: g%d %q locks mutex m%d (made at %s), which it already holds", cur.id, cur.name, m.id, m.site))
	}
	m.waiters = append(m.waiters, cur)
	cur.block = blockedMutex
	cur.mu = m
	s.schedule(cur, reasonLockBlock, m.id)
	// Unlock handed the mutex to cur.
}

func (m *mutex) Unlock() {
	if m.s.phase == phaseUnwinding {
		return
	}
	if m.holder == nil {
		panic(fmt.Sprintf("simrt: Unlock of unlocked mutex m%d (made at %s)", m.id, m.site))
	}
	m.release()
}

// release hands the mutex to its first waiter, or frees it.
func (m *mutex) release() {
	if len(m.waiters) == 0 {
		m.holder = nil
		return
	}
	w := m.waiters[0]
	copy(m.waiters, m.waiters[1:])
	m.waiters[len(m.waiters)-1] = nil
	m.waiters = m.waiters[:len(m.waiters)-1]
	m.holder = w
	w.mu = nil
	m.s.ready(w)
}

// cond is the Sim's rt.Cond. Signal wakes the longest waiter, Broadcast
// all of them in the order they began waiting.
type cond struct {
	s       *Sim
	id      int
	site    string
	m       *mutex
	waiters []*g
}

// NewCond returns a condition variable bound to m, which must be a mutex
// made by this Sim's NewMutex.
func (s *Sim) NewCond(m rt.Mutex) rt.Cond {
	sm, ok := m.(*mutex)
	if !ok || sm.s != s {
		panic(fmt.Sprintf("simrt: NewCond needs a mutex made by the same Sim's NewMutex, got %T", m))
	}
	s.nCond++
	return &cond{s: s, id: s.nCond, site: callSite(), m: sm}
}

func (c *cond) Wait() { c.WaitFor(0) }

func (c *cond) WaitFor(d time.Duration) bool {
	s := c.s
	if s.phase == phaseUnwinding {
		runtime.Goexit()
	}
	cur := s.running("Cond.Wait")
	if c.m.holder != cur {
		panic(fmt.Sprintf("simrt: g%d %q waits on cond c%d without holding its mutex m%d", cur.id, cur.name, c.id, c.m.id))
	}
	c.waiters = append(c.waiters, cur)
	cur.block = blockedCond
	cur.cond = c
	cur.timedOut = false
	if d > 0 {
		cur.timer = s.addTimer(cur, d, c)
	}
	c.m.release()
	s.schedule(cur, reasonWait, c.id)
	cur.cond = nil
	timedOut := cur.timedOut
	cur.timedOut = false
	s.sleepOutStall(cur)
	if c.m.holder == nil {
		c.m.holder = cur
	} else {
		c.m.waiters = append(c.m.waiters, cur)
		cur.block = blockedMutex
		cur.mu = c.m
		s.schedule(cur, reasonLockBlock, c.m.id)
	}
	return !timedOut
}

func (c *cond) Signal() {
	if c.s.phase == phaseUnwinding || len(c.waiters) == 0 {
		return
	}
	w := c.waiters[0]
	c.remove(w)
	c.s.ready(w)
}

func (c *cond) Broadcast() {
	if c.s.phase == phaseUnwinding {
		return
	}
	ws := c.waiters
	c.waiters = nil
	for _, w := range ws {
		c.s.ready(w)
	}
}

// remove takes w off the waiter list (woken, or timed out).
func (c *cond) remove(w *g) {
	for i, x := range c.waiters {
		if x == w {
			copy(c.waiters[i:], c.waiters[i+1:])
			c.waiters[len(c.waiters)-1] = nil
			c.waiters = c.waiters[:len(c.waiters)-1]
			return
		}
	}
}

// callSite names the first caller outside packages rt and simrt, as
// "dir/file.go:line", for deadlock reports.
func callSite() string {
	var pcs [16]uintptr
	n := runtime.Callers(3, pcs[:])
	frames := runtime.CallersFrames(pcs[:n])
	for {
		f, more := frames.Next()
		fn := f.Function
		if !strings.HasPrefix(fn, "github.com/cpilab/cpilab/rt.") &&
			!strings.HasPrefix(fn, "github.com/cpilab/cpilab/simulator/simrt.") {
			return path.Join(path.Base(path.Dir(f.File)), path.Base(f.File)) + ":" + strconv.Itoa(f.Line)
		}
		if !more {
			return "unknown"
		}
	}
}
