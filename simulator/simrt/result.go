package simrt

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Outcome says how a run ended.
type Outcome int

const (
	// Completed: the main function returned (or called runtime.Goexit).
	Completed Outcome = iota
	// Panicked: a logical goroutine panicked; Result.Err is a *PanicError.
	Panicked
	// Deadlocked: nothing was runnable and no timer was pending; Result.Err
	// is a *DeadlockError.
	Deadlocked
	// StepBudgetExhausted: Config.MaxSteps scheduling decisions were made;
	// Result.Err is a *BudgetError.
	StepBudgetExhausted
	// TimeBudgetExhausted: the next timer lay beyond Config.MaxTime of
	// virtual time; Result.Err is a *BudgetError.
	TimeBudgetExhausted
)

var outcomeNames = [...]string{"completed", "panicked", "deadlocked", "step budget exhausted", "time budget exhausted"}

// String names the outcome as traces and reports print it.
func (o Outcome) String() string {
	if o >= 0 && int(o) < len(outcomeNames) {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result describes a finished run.
type Result struct {
	// Outcome says how the run ended.
	Outcome Outcome
	// Err is nil when Outcome is Completed, else a *PanicError,
	// *DeadlockError or *BudgetError.
	Err error
	// Seed is the root seed of the run (Config.Seed).
	Seed uint64
	// Steps counts scheduling decisions, the unit of Config.MaxSteps.
	Steps int64
	// Switches counts the decisions that handed the run token to a
	// different goroutine (real context switches).
	Switches int64
	// Elapsed is the virtual time the run took.
	Elapsed time.Duration
	// Goroutines counts the logical goroutines started, main included.
	Goroutines int
	// Unwound counts the goroutines still alive when the run ended; each
	// was unwound (runtime.Goexit from its blocking call) before Run
	// returned.
	Unwound int
	// TraceHash is the FNV-1a hash of the run's trace events (the binary
	// encoding of every scheduling decision, clock jump, goroutine start and
	// exit, and annotation). Same seed and same code give the same hash.
	TraceHash uint64
}

// OK reports whether the run completed.
func (r Result) OK() bool { return r.Outcome == Completed }

// String is a one-line summary: outcome, seed, steps, virtual time, hash.
func (r Result) String() string {
	return fmt.Sprintf("%s: seed %d, %d steps, %d switches, %v virtual, %d goroutines, trace %016x",
		r.Outcome, r.Seed, r.Steps, r.Switches, r.Elapsed, r.Goroutines, r.TraceHash)
}

// PanicError is a panic captured in a logical goroutine.
type PanicError struct {
	// ID is the goroutine's number (main is the first started by Run).
	ID int
	// Name is the name given to Go ("main" for Run's main function).
	Name string
	// Value is what was passed to panic.
	Value any
	// Stack is the goroutine's stack at the panic (debug.Stack output).
	Stack []byte
}

// Error names the goroutine and the panic value, then the stack.
func (e *PanicError) Error() string {
	return fmt.Sprintf("simrt: goroutine g%d %q panicked: %v\n%s", e.ID, e.Name, e.Value, e.Stack)
}

// Unwrap returns the panic value when it is an error.
func (e *PanicError) Unwrap() error {
	if err, ok := e.Value.(error); ok {
		return err
	}
	return nil
}

// Blocked describes one blocked goroutine in a deadlock report.
type Blocked struct {
	// ID is the goroutine's number.
	ID int
	// Name is the name given to Go.
	Name string
	// WaitsOn says what it waits on, e.g. `mutex m3 (made at director/locks.go:40) held by g2 "worker"`.
	WaitsOn string
}

// DeadlockError reports that no goroutine could run and no timer was pending.
type DeadlockError struct {
	// At is the virtual time of the deadlock.
	At time.Duration
	// Blocked lists every live goroutine, by ID.
	Blocked []Blocked
}

// Error lists every blocked goroutine and what it waits on, one per line.
func (e *DeadlockError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "simrt: deadlock at +%v: %d goroutine(s) blocked, no timer pending", e.At, len(e.Blocked))
	for _, g := range e.Blocked {
		fmt.Fprintf(&b, "\n\tg%d %q waits on %s", g.ID, g.Name, g.WaitsOn)
	}
	return b.String()
}

// BudgetError reports that a run used up its step or virtual-time budget.
type BudgetError struct {
	// Budget is "steps" or "virtual time".
	Budget string
	// Steps is the number of scheduling decisions made.
	Steps int64
	// Elapsed is the virtual time reached.
	Elapsed time.Duration
}

// Error names the budget and the figures reached.
func (e *BudgetError) Error() string {
	return fmt.Sprintf("simrt: %s budget exhausted after %d steps, +%v virtual", e.Budget, e.Steps, e.Elapsed)
}

// ErrDeadlock, ErrBudget and ErrPanic classify a Result.Err with errors.Is.
var (
	ErrDeadlock = errors.New("simrt: deadlock")
	ErrBudget   = errors.New("simrt: budget exhausted")
	ErrPanic    = errors.New("simrt: panic in a logical goroutine")
)

// Is makes errors.Is(err, ErrDeadlock) true.
func (e *DeadlockError) Is(target error) bool { return target == ErrDeadlock }

// Is makes errors.Is(err, ErrBudget) true.
func (e *BudgetError) Is(target error) bool { return target == ErrBudget }

// Is makes errors.Is(err, ErrPanic) true.
func (e *PanicError) Is(target error) bool { return target == ErrPanic }
