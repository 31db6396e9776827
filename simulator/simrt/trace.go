package simrt

import "fmt"

// Trace events, as hashed. The text form (Config.Trace) has one line per
// event:
//
//	go g3 "worker" by g0           goroutine g3 started by g0 (by g-1: before Run)
//	#12 +1.5s g0 lock m2 -> g3     decision 12: g0 reached Lock of m2; g3 runs next
//	clock +1.5s                     nothing runnable: the clock jumped to +1.5s
//	note +1.5s g3: provide disk-a   an annotation (Sim.Trace)
//	exit g3                         g3 returned
//	end +2s completed               the run's outcome
const (
	evDecision uint64 = iota + 1
	evClock
	evGo
	evExit
	evNote
	evEnd
	evStall
)

// reason is what the goroutine giving up the token was doing.
type reason uint8

const (
	reasonStart     reason = iota // Run picking the first goroutine
	reasonYield                   // Yield
	reasonGo                      // Go (obj: the new goroutine)
	reasonSleep                   // Sleep
	reasonLock                    // Lock, before trying (obj: mutex)
	reasonLockBlock               // Lock on a held mutex (obj: mutex)
	reasonWait                    // Cond Wait/WaitFor (obj: cond)
	reasonExit                    // the goroutine returned
	reasonStall                   // woken while stalled (Sim.Stall): sleeps on
)

var reasonText = [...]string{"start", "yield", "go g", "sleep", "lock m", "blocked m", "wait c", "exit", "stalled"}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

func (s *Sim) mixWord(w uint64) {
	h := s.hash
	for range 8 {
		h ^= w & 0xff
		h *= fnvPrime
		w >>= 8
	}
	s.hash = h
}

func (s *Sim) mixString(v string) {
	s.mixWord(uint64(len(v)))
	h := s.hash
	for i := 0; i < len(v); i++ {
		h ^= uint64(v[i])
		h *= fnvPrime
	}
	s.hash = h
}

func (s *Sim) writeDecision(from int, why reason, obj int, to int) {
	what := reasonText[why]
	switch why {
	case reasonGo, reasonLock, reasonLockBlock, reasonWait:
		fmt.Fprintf(s.cfg.Trace, "#%d +%v g%d %s%d -> g%d\n", s.steps, s.now, from, what, obj, to)
	default:
		fmt.Fprintf(s.cfg.Trace, "#%d +%v g%d %s -> g%d\n", s.steps, s.now, from, what, to)
	}
}
