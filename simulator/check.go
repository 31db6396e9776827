package simulator

import "fmt"

// Checker checks one invariant against a view V of the system.
// The view is built from outside the system under test: the fakeiaas oracle,
// the agents' VM roots, the Director's HTTP API as its user sees it and the
// workload's own record, never the Director's store. A checker neither
// changes the view nor the system.
type Checker[V any] interface {
	// Invariant names the invariant, as reports print it
	// ("disk-attached-to-one-vm").
	Invariant() string
	// Check returns nil when the invariant holds, else an error that says
	// what the view showed.
	Check(view V) error
}

// Invariant makes a Checker from a name and a function.
func Invariant[V any](name string, check func(view V) error) Checker[V] {
	return invariant[V]{name: name, check: check}
}

type invariant[V any] struct {
	name  string
	check func(V) error
}

// Invariant returns the name given to Invariant.
func (i invariant[V]) Invariant() string { return i.name }

// Check calls the function given to Invariant.
func (i invariant[V]) Check(view V) error { return i.check(view) }

// Phase says when a check ran.
type Phase string

const (
	// AfterStep: a safety check, after a workload step.
	AfterStep Phase = "after step"
	// AtQuiescence: a quiescent check, once faults have healed and the
	// system has settled (liveness, leaks, agreement between records).
	AtQuiescence Phase = "at quiescence"
	// WhenIdle: a quiescent check of the records, run while the workload
	// waits on nothing (every operation answered, every task it was given
	// seen to its end), before later operations can mend what a task left
	// wrong.
	WhenIdle Phase = "when idle after step"
)

// Violation is a violated invariant: which, when, in which run.
type Violation struct {
	// Invariant is the checker's Invariant().
	Invariant string
	// Phase is when it was found.
	Phase Phase
	// Step is the workload step after which it was found (for
	// AtQuiescence: the number of steps run).
	Step int
	// Seed is the run's root seed.
	Seed Seed
	// Err is what the checker reported.
	Err error
}

// Error names the invariant, the phase, the step and the seed, then the checker's error.
func (v *Violation) Error() string {
	return fmt.Sprintf("invariant %q violated %s %d (seed %s): %v", v.Invariant, v.Phase, v.Step, v.Seed, v.Err)
}

// Unwrap returns the checker's error.
func (v *Violation) Unwrap() error { return v.Err }

// Checkers runs the safety checkers after every step and the quiescent
// checkers at the end. The first violated invariant, in list order, is
// reported.
type Checkers[V any] struct {
	// Seed is the run's root seed, copied into violations.
	Seed Seed
	// Safety holds the checks run after every step.
	Safety []Checker[V]
	// Quiescent holds the checks run once the system is quiescent.
	Quiescent []Checker[V]
	// Idle holds the checks run whenever the workload is idle.
	Idle []Checker[V]
}

// AfterStep runs the safety checks on the view taken after step. It returns
// nil or a *Violation.
func (c *Checkers[V]) AfterStep(step int, view V) error {
	return c.run(c.Safety, AfterStep, step, view)
}

// AtQuiescence runs the quiescent checks after steps steps. It returns nil
// or a *Violation.
func (c *Checkers[V]) AtQuiescence(steps int, view V) error {
	return c.run(c.Quiescent, AtQuiescence, steps, view)
}

// WhenIdle runs the idle checks on the view taken after step. It returns
// nil or a *Violation.
func (c *Checkers[V]) WhenIdle(step int, view V) error {
	return c.run(c.Idle, WhenIdle, step, view)
}

func (c *Checkers[V]) run(list []Checker[V], phase Phase, step int, view V) error {
	for _, ch := range list {
		if err := ch.Check(view); err != nil {
			return &Violation{Invariant: ch.Invariant(), Phase: phase, Step: step, Seed: c.Seed, Err: err}
		}
	}
	return nil
}
