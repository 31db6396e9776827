package simrt

import (
	"container/heap"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/cpilab/cpilab/rt"
)

// DefaultStart is the virtual time at which runs begin unless Config.Start
// says otherwise.
var DefaultStart = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC)

// Config configures a Sim. The zero value is usable: seed 0, no budgets,
// no trace text.
type Config struct {
	// Seed is the root seed. The scheduler and every Rand stream derive
	// from it.
	Seed uint64
	// MaxSteps ends the run with StepBudgetExhausted after this many
	// scheduling decisions. 0: no limit.
	MaxSteps int64
	// MaxTime ends the run with TimeBudgetExhausted when the clock would
	// pass this much virtual time. 0: no limit.
	MaxTime time.Duration
	// Start is the virtual time at which the run begins. Zero: DefaultStart.
	Start time.Time
	// Trace, when set, receives the trace as text, one event per line.
	// Writes happen on logical goroutines, one at a time; errors are
	// ignored. nil: only the hash is kept.
	Trace io.Writer
}

type phase uint8

const (
	phaseIdle phase = iota
	phaseRunning
	phaseEnded     // the outcome is decided; the token is going back to Run
	phaseUnwinding // Run is unwinding the goroutines left
	phaseDone      // Run has returned
)

// Sim is the deterministic rt.Runtime. Make one with New, start logical
// goroutines with Go (before or during the run), and call Run once.
//
// Exactly one logical goroutine runs at a time. At every scheduling point
// (Go, Yield, Sleep, Mutex.Lock, Cond.Wait/WaitFor, and a goroutine's
// exit) the scheduler picks the next goroutine to run, uniformly at random
// among the runnable ones, from a generator seeded by Config.Seed. Mutex.Lock
// is a scheduling point even when the mutex is free, so critical sections of
// different goroutines interleave at their boundaries. When nothing is
// runnable the clock jumps to the earliest timer; when no timer is pending
// either, the run ends as a deadlock.
//
// The methods of Sim and of the Mutex and Cond it makes must be called from
// its logical goroutines while Run is in progress. Outside a run (before Run,
// after it returns) Go registers goroutines for the run, NewMutex, NewCond,
// Rand and Now work, a free Mutex can be locked and unlocked, and anything
// that would block panics.
type Sim struct {
	cfg   Config
	start time.Time
	rng   *rand.Rand // scheduler stream; drawn only by the token holder

	streamsMu sync.Mutex
	streams   map[string]*rand.Rand // guarded by streamsMu

	// Everything below is touched only by the holder of the run token (the
	// running logical goroutine, or Run's goroutine before the run and while
	// unwinding); the token passes over channels, which orders the accesses.
	phase    phase
	now      time.Duration // virtual time since start
	cur      *g
	main     *g
	all      []*g // goroutines by ID; exited ones are compacted away
	started  int  // goroutines ever started (IDs given)
	live     int  // goroutines not yet exited
	runnable []*g // ready to run, cur excluded
	timers   timerHeap
	timerSeq uint64
	nMutex   int
	nCond    int
	stalls   map[string]time.Duration // goroutine name → stalled until (Stall)
	steps    int64
	switches int64
	hash     uint64
	result   Result
	done     chan struct{} // the last token holder signals Run
	unwound  chan struct{} // a goroutine being unwound signals Run
}

type blockKind uint8

const (
	notBlocked blockKind = iota
	blockedSleep
	blockedMutex
	blockedCond
)

// g is a logical goroutine.
type g struct {
	id       int
	name     string
	fn       func()
	wake     chan struct{} // receives the run token; buffered 1
	killed   bool          // set by Run while unwinding
	exited   bool
	block    blockKind
	mu       *mutex // blockedMutex: the mutex waited on
	cond     *cond  // blockedCond: the cond waited on
	timer    *timer // pending Sleep or WaitFor time-out
	timedOut bool   // WaitFor woke by its time-out
}

// New returns a Sim configured by cfg.
func New(cfg Config) *Sim {
	start := cfg.Start
	if start.IsZero() {
		start = DefaultStart
	}
	return &Sim{
		cfg:     cfg,
		start:   start,
		rng:     rand.New(rand.NewPCG(cfg.Seed, rt.StreamSeed(cfg.Seed, "simrt/scheduler"))),
		streams: map[string]*rand.Rand{},
		hash:    fnvOffset,
		done:    make(chan struct{}, 1),
		unwound: make(chan struct{}),
	}
}

// Run is New(cfg) followed by Sim.Run with main bound to the Sim.
func Run(cfg Config, main func(s *Sim)) Result {
	s := New(cfg)
	return s.Run(func() { main(s) })
}

// Seed returns the root seed.
func (s *Sim) Seed() uint64 { return s.cfg.Seed }

// Run runs main as the logical goroutine "main", together with the
// goroutines it (or anyone before Run) starts with Go, until main returns, a
// goroutine panics, the run deadlocks, or a budget runs out. Goroutines still
// alive then are unwound: each is woken inside its blocking call and exits
// through runtime.Goexit, running its deferred calls (in which blocking calls
// exit at once and Lock/Unlock do nothing). Run returns after every logical
// goroutine has ended. A Sim runs once.
func (s *Sim) Run(main func()) Result {
	if s.phase != phaseIdle {
		panic("simrt: Sim.Run called twice")
	}
	s.phase = phaseRunning
	s.main = s.spawn("main", main, nil)
	if next := s.pickNext(nil, reasonStart, 0); next != nil {
		s.cur = next
		next.wake <- struct{}{}
	} else {
		s.done <- struct{}{}
	}
	<-s.done
	s.cur = nil
	s.phase = phaseUnwinding
	for _, gr := range s.all {
		if gr.exited {
			continue
		}
		gr.killed = true
		gr.wake <- struct{}{}
		<-s.unwound
		s.result.Unwound++
	}
	s.phase = phaseDone
	s.result.Seed = s.cfg.Seed
	s.result.Steps = s.steps
	s.result.Switches = s.switches
	s.result.Elapsed = s.now
	s.result.Goroutines = s.started
	s.result.TraceHash = s.hash
	return s.result
}

// Now is the virtual time.
func (s *Sim) Now() time.Time { return s.start.Add(s.now) }

// Steps is the number of scheduling decisions made so far.
func (s *Sim) Steps() int64 { return s.steps }

// Elapsed is the virtual time since the run began.
func (s *Sim) Elapsed() time.Duration { return s.now }

// Rand returns the stream named stream, seeded from the root seed with
// rt.StreamSeed exactly as rt.Real does, so draws on one stream never shift
// another. The scheduler's own stream is private.
func (s *Sim) Rand(stream string) *rand.Rand {
	s.streamsMu.Lock()
	defer s.streamsMu.Unlock()
	if r, ok := s.streams[stream]; ok {
		return r
	}
	r := rand.New(&lockedSource{src: rand.NewPCG(s.cfg.Seed, rt.StreamSeed(s.cfg.Seed, stream))})
	s.streams[stream] = r
	return r
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

// Go starts fn as a logical goroutine named name and is a scheduling point.
// Before Run it only registers fn; while Run unwinds it does nothing.
func (s *Sim) Go(name string, fn func()) {
	switch s.phase {
	case phaseIdle:
		s.spawn(name, fn, nil)
	case phaseRunning:
		cur := s.cur
		ng := s.spawn(name, fn, cur)
		s.runnable = append(s.runnable, cur)
		s.schedule(cur, reasonGo, ng.id)
	case phaseUnwinding:
	default:
		panic(fmt.Sprintf("simrt: Go(%q) after the run ended", name))
	}
}

// Yield is a scheduling point: the caller stays runnable and the scheduler
// picks among it and every other runnable goroutine.
func (s *Sim) Yield() {
	if s.phase == phaseUnwinding {
		return
	}
	cur := s.running("Yield")
	s.runnable = append(s.runnable, cur)
	s.schedule(cur, reasonYield, 0)
}

// Sleep blocks the caller for d of virtual time; d ≤ 0 is a Yield.
func (s *Sim) Sleep(d time.Duration) {
	if s.phase == phaseUnwinding {
		runtime.Goexit()
	}
	if d <= 0 {
		s.Yield()
		return
	}
	cur := s.running("Sleep")
	cur.block = blockedSleep
	cur.timer = s.addTimer(cur, d, nil)
	s.schedule(cur, reasonSleep, 0)
	s.sleepOutStall(cur)
}

// Stall keeps the logical goroutines named name (those running now and
// any started under that name before it ends) from coming back from a
// Sleep or a Cond wait until d from now: one woken earlier (its time is
// up, or it was signalled) sleeps on until then, holding no mutex, and
// only then takes its cond's mutex back. It models a thread of a process
// that stops being scheduled (a blocked thread, a pause of the process)
// while the rest of the world goes on. A later Stall of the same name
// that ends sooner does not shorten it. Without a Stall nothing changes:
// the scheduler makes the same decisions.
func (s *Sim) Stall(name string, d time.Duration) {
	if d <= 0 {
		return
	}
	if s.stalls == nil {
		s.stalls = map[string]time.Duration{}
	}
	if until := s.now + d; until > s.stalls[name] {
		s.stalls[name] = until
	}
	s.mixWord(evStall)
	s.mixString(name)
	s.mixWord(uint64(s.now + d))
	if s.cfg.Trace != nil {
		fmt.Fprintf(s.cfg.Trace, "stall +%v %q until +%v\n", s.now, name, s.stalls[name])
	}
}

// sleepOutStall is called by cur just woken from a Sleep or a Cond wait:
// while its name is stalled it sleeps on until the stall ends.
func (s *Sim) sleepOutStall(cur *g) {
	if len(s.stalls) == 0 {
		return
	}
	for {
		until, ok := s.stalls[cur.name]
		if !ok {
			return
		}
		if until <= s.now {
			delete(s.stalls, cur.name)
			return
		}
		cur.block = blockedSleep
		cur.timer = s.addTimer(cur, until-s.now, nil)
		s.schedule(cur, reasonStall, 0)
	}
}

// Trace adds a user annotation to the trace (and its hash), tagged with the
// virtual time and the calling goroutine.
func (s *Sim) Trace(event string) {
	if s.phase != phaseRunning || s.cur == nil {
		return
	}
	s.mixWord(evNote)
	s.mixWord(uint64(s.cur.id))
	s.mixString(event)
	if s.cfg.Trace != nil {
		fmt.Fprintf(s.cfg.Trace, "note +%v g%d: %s\n", s.now, s.cur.id, event)
	}
}

// Annotate calls Trace when r is a *Sim and does nothing otherwise, so code
// written against rt.Runtime can annotate simulated runs.
func Annotate(r rt.Runtime, event string) {
	if s, ok := r.(*Sim); ok {
		s.Trace(event)
	}
}

// running returns the token holder, panicking when called outside a run.
func (s *Sim) running(op string) *g {
	if s.phase != phaseRunning || s.cur == nil {
		panic(fmt.Sprintf("simrt: %s called outside Sim.Run (it would block)", op))
	}
	return s.cur
}

// spawn creates a goroutine, runnable, parked until it first gets the token.
func (s *Sim) spawn(name string, fn func(), parent *g) *g {
	ng := &g{id: s.started, name: name, fn: fn, wake: make(chan struct{}, 1)}
	s.started++
	s.live++
	if len(s.all) >= 64 && len(s.all) >= 2*s.live {
		s.all = slices.DeleteFunc(s.all, func(x *g) bool { return x.exited })
	}
	s.all = append(s.all, ng)
	s.runnable = append(s.runnable, ng)
	pid := -1
	if parent != nil {
		pid = parent.id
	}
	s.mixWord(evGo)
	s.mixWord(uint64(ng.id))
	s.mixWord(uint64(int64(pid)))
	s.mixString(name)
	if s.cfg.Trace != nil {
		fmt.Fprintf(s.cfg.Trace, "go g%d %q by g%d\n", ng.id, name, pid)
	}
	go s.body(ng)
	return ng
}

func (s *Sim) body(gr *g) {
	<-gr.wake
	if gr.killed {
		gr.exited = true
		s.live--
		s.unwound <- struct{}{}
		return
	}
	defer s.exit(gr)
	defer func() {
		if p := recover(); p != nil && s.phase == phaseRunning {
			s.finish(Panicked, &PanicError{ID: gr.id, Name: gr.name, Value: p, Stack: debug.Stack()})
		}
	}()
	fn := gr.fn
	gr.fn = nil
	fn()
}

func (s *Sim) exit(gr *g) {
	gr.exited = true
	s.live--
	if s.phase == phaseUnwinding {
		s.unwound <- struct{}{}
		return
	}
	s.mixWord(evExit)
	s.mixWord(uint64(gr.id))
	if s.cfg.Trace != nil {
		fmt.Fprintf(s.cfg.Trace, "exit g%d\n", gr.id)
	}
	if gr == s.main && s.phase == phaseRunning {
		s.finish(Completed, nil)
	}
	if s.phase != phaseRunning {
		s.done <- struct{}{}
		return
	}
	s.schedule(gr, reasonExit, 0)
}

// finish decides the outcome; the token then goes back to Run.
func (s *Sim) finish(o Outcome, err error) {
	s.phase = phaseEnded
	s.result.Outcome = o
	s.result.Err = err
	s.mixWord(evEnd)
	s.mixWord(uint64(o))
	if s.cfg.Trace != nil {
		fmt.Fprintf(s.cfg.Trace, "end +%v %s\n", s.now, o)
	}
}

// schedule is called by the token holder cur once it has recorded its own
// state: runnable (appended to s.runnable), blocked, or exited. It picks the
// next goroutine and passes it the token, then waits until cur is picked
// again (or returns at once when cur has exited).
func (s *Sim) schedule(cur *g, why reason, obj int) {
	exited := cur.exited
	next := s.pickNext(cur, why, obj)
	if next == cur {
		return
	}
	if next == nil {
		s.done <- struct{}{}
	} else {
		s.switches++
		s.cur = next
		next.wake <- struct{}{}
	}
	if exited {
		return
	}
	<-cur.wake
	if cur.killed {
		runtime.Goexit()
	}
}

// pickNext makes one scheduling decision, advancing the clock when nothing
// is runnable. It returns nil when the run ends instead.
func (s *Sim) pickNext(cur *g, why reason, obj int) *g {
	for len(s.runnable) == 0 {
		if !s.advanceClock() {
			return nil
		}
	}
	s.steps++
	if s.cfg.MaxSteps > 0 && s.steps > s.cfg.MaxSteps {
		s.steps--
		s.finish(StepBudgetExhausted, &BudgetError{Budget: "steps", Steps: s.steps, Elapsed: s.now})
		return nil
	}
	i := 0
	if n := len(s.runnable); n > 1 {
		i = int(s.rng.Uint64N(uint64(n)))
	}
	next := s.runnable[i]
	last := len(s.runnable) - 1
	s.runnable[i] = s.runnable[last]
	s.runnable[last] = nil
	s.runnable = s.runnable[:last]
	next.block = notBlocked
	from := -1
	if cur != nil {
		from = cur.id
	}
	s.mixWord(evDecision)
	s.mixWord(uint64(int64(from)))
	s.mixWord(uint64(why))
	s.mixWord(uint64(obj))
	s.mixWord(uint64(next.id))
	if s.cfg.Trace != nil {
		s.writeDecision(from, why, obj, next.id)
	}
	return next
}

// advanceClock fires the earliest timers. It returns false when the run
// ends instead: a deadlock, or the time budget.
func (s *Sim) advanceClock() bool {
	if len(s.timers) == 0 {
		s.finish(Deadlocked, s.deadlockError())
		return false
	}
	when := s.timers[0].when
	if s.cfg.MaxTime > 0 && when > s.cfg.MaxTime {
		s.finish(TimeBudgetExhausted, &BudgetError{Budget: "virtual time", Steps: s.steps, Elapsed: s.now})
		return false
	}
	s.now = when
	s.mixWord(evClock)
	s.mixWord(uint64(when))
	if s.cfg.Trace != nil {
		fmt.Fprintf(s.cfg.Trace, "clock +%v\n", when)
	}
	for len(s.timers) > 0 && s.timers[0].when == when {
		t := heap.Pop(&s.timers).(*timer)
		gr := t.g
		gr.timer = nil
		if t.cond != nil {
			t.cond.remove(gr)
			gr.timedOut = true
		}
		s.runnable = append(s.runnable, gr)
	}
	return true
}

func (s *Sim) addTimer(gr *g, d time.Duration, c *cond) *timer {
	s.timerSeq++
	t := &timer{when: s.now + d, seq: s.timerSeq, g: gr, cond: c}
	heap.Push(&s.timers, t)
	return t
}

func (s *Sim) cancelTimer(gr *g) {
	if gr.timer != nil {
		heap.Remove(&s.timers, gr.timer.index)
		gr.timer = nil
	}
}

// ready makes a blocked goroutine runnable.
func (s *Sim) ready(gr *g) {
	s.cancelTimer(gr)
	s.runnable = append(s.runnable, gr)
}

func (s *Sim) deadlockError() *DeadlockError {
	e := &DeadlockError{At: s.now}
	for _, gr := range s.all {
		if gr.exited {
			continue
		}
		e.Blocked = append(e.Blocked, Blocked{ID: gr.id, Name: gr.name, WaitsOn: gr.waitsOn()})
	}
	return e
}

func (gr *g) waitsOn() string {
	switch gr.block {
	case blockedMutex:
		m := gr.mu
		holder := "nobody"
		if m.holder != nil {
			holder = fmt.Sprintf("g%d %q", m.holder.id, m.holder.name)
		}
		return fmt.Sprintf("mutex m%d (made at %s) held by %s", m.id, m.site, holder)
	case blockedCond:
		c := gr.cond
		return fmt.Sprintf("cond c%d (made at %s) of mutex m%d", c.id, c.site, c.m.id)
	case blockedSleep:
		return "sleep"
	}
	return "nothing (runnable)"
}

// timer wakes a sleeping goroutine, or times out a WaitFor.
type timer struct {
	when  time.Duration
	seq   uint64
	g     *g
	cond  *cond // WaitFor time-out; nil for Sleep
	index int
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].when != h[j].when {
		return h[i].when < h[j].when
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	n := len(old)
	t := old[n-1]
	old[n-1] = nil
	*h = old[:n-1]
	return t
}
