package flex

import (
	"context"
	"errors"
	"time"
)

// Outcome is one check's result.
type Outcome struct {
	Clause string
	// Violation is set when the check failed; Skip when it was not made.
	Violation *Violation
	Skip      *NotChecked
	// Err is any other failure (the harness's).
	Err      error
	Duration time.Duration
}

// Passed reports whether the check was made and held.
func (o Outcome) Passed() bool { return o.Violation == nil && o.Skip == nil && o.Err == nil }

// RunCheck runs c on s, cleaning up after it.
func (s *Session) RunCheck(ctx context.Context, c Check) Outcome {
	o := Outcome{Clause: c.Clause}
	if why := s.Skipped(c); why != "" {
		o.Skip = &NotChecked{Reason: why}
		return o
	}
	start := time.Now()
	err := c.Run(ctx, s)
	o.Duration = time.Since(start)
	var v *Violation
	var sk *NotChecked
	switch {
	case errors.As(err, &v):
		o.Violation = v
	case errors.As(err, &sk):
		o.Skip = sk
	case err != nil:
		o.Err = err
	}
	s.SetDirectorDown(false)
	if cerr := s.Cleanup(ctx); cerr != nil && o.Err == nil && o.Violation == nil {
		o.Err = cerr
	}
	return o
}

// RunAll prepares s and runs every check, in order. A failed Prepare is
// one outcome for the init clause, the other checks not made.
func (s *Session) RunAll(ctx context.Context) []Outcome {
	if err := s.Prepare(ctx); err != nil {
		var v *Violation
		o := Outcome{Clause: ClauseInitCapabilities, Err: err}
		if errors.As(err, &v) {
			o = Outcome{Clause: v.Clause, Violation: v}
		}
		return []Outcome{o}
	}
	var out []Outcome
	for _, c := range Checks() {
		out = append(out, s.RunCheck(ctx, c))
	}
	return out
}
