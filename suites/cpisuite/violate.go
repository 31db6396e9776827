package cpisuite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cpilab/cpilab/cpimodel/explore"
	"github.com/cpilab/cpilab/suites"
	. "github.com/onsi/ginkgo/v2"
)

// violate fails the current spec with v.
func violate(v suites.Violation) {
	GinkgoHelper()
	AddReportEntry(suites.ReportEntryViolation, v, ReportEntryVisibilityNever)
	Fail(violationText(v))
}

// violationText is v as a failure message: the clause with its title,
// then the details.
func violationText(v suites.Violation) string {
	return ClauseText(v.Clause) + "\n" + v.Details()
}

// violation builds a suites.Violation from an exchange (x may be nil).
func violation(clause, did string, x *Exchange) suites.Violation {
	v := suites.Violation{Clause: clause, Did: did, ExitCode: -1}
	if x != nil {
		v.Method = x.Method
		v.Request = excerpt(x.Request)
		v.Response = excerpt(bytes.TrimSpace(x.shownStdout()))
		v.Stderr = string(x.Stderr)
		v.ExitCode = x.ExitCode
	}
	return v
}

// checkWire fails the spec when x broke the wire protocol or could
// not be run.
func checkWire(x *Exchange) {
	GinkgoHelper()
	if x.RunErr != nil {
		violate(violation(ClauseRun, x.RunErr.Error(), x))
	}
	if x.TimedOut {
		violate(violation(ClauseTimeout, strings.Join(x.Violations, "; "), x))
	}
	if x.HeldPipes > 0 {
		violate(violation(ClauseTimeout, fmt.Sprintf("%s: the CPI exited but left %d process(es) holding its stdout or stderr; "+
			"the Director reads both to the end (Open3), so this call would hang until they exit (cpilab killed them)", x.Method, x.HeldPipes), x))
	}
	var exit, other []string
	for _, s := range x.Violations {
		if strings.HasPrefix(s, "exit status") {
			exit = append(exit, s)
		} else {
			other = append(other, s)
		}
	}
	if len(other) > 0 {
		violate(violation(ClauseProtocol, x.Method+": "+strings.Join(other, "; "), x))
	}
	if len(exit) > 0 {
		violate(violation(ClauseExitStatus, x.Method+": "+strings.Join(exit, "; "), x))
	}
	if r := x.Response.IgnoredResult; r != nil && x.Response.Error != nil {
		warn(suites.Warning{Clause: ClauseUnreadResult, Method: x.Method, Response: excerpt(x.Stdout),
			Text: fmt.Sprintf("%s returned %s beside its error; the documentation says null, but no caller reads a result beside an error (see docs/contracts.md, %s)", x.Method, excerpt(r), ClauseUnreadResult)})
	}
}

// mustOK fails the spec unless x is a valid response without error; clause
// is what the call was for.
func mustOK(x *Exchange, clause string) {
	GinkgoHelper()
	checkWire(x)
	if e := x.Response.Error; e != nil {
		violate(violation(clause, fmt.Sprintf("%s returned error %s: %q (ok_to_retry %v)", x.Method, e.Type, e.Message, e.OkToRetry), x))
	}
}

// mustNull is mustOK plus a null result.
func mustNull(x *Exchange, clause string) {
	GinkgoHelper()
	mustOK(x, clause)
	if string(x.Response.Result) != "null" {
		violate(violation(clause, fmt.Sprintf("%s must return null, returned %s", x.Method, excerpt(x.Response.Result)), x))
	}
}

// sequenceOf is f as a report shows it.
func sequenceOf(f *explore.Failure, replayFile string) suites.Sequence {
	s := suites.Sequence{Seed: f.Seed, ReplayFile: replayFile, Steps: []suites.SequenceStep{}, Broke: f.Violation.String()}
	if f.Error != "" {
		s.Broke = "could not run: " + f.Error
	}
	done := 0 // f.Done holds one entry per call: two for a concurrent step
	for i, st := range f.Steps {
		step := suites.SequenceStep{N: i + 1, Profile: st.Profile, Method: st.Method, Arguments: st.Args, Call: explore.Step{Profile: st.Profile, Method: st.Method, Args: st.Args}.String()}
		if step.Arguments == nil {
			step.Arguments = []json.RawMessage{}
		}
		if st.With != nil {
			step.Concurrent = st.With.String()
		}
		if done < len(f.Done) {
			step.Response = excerpt([]byte(f.Done[done].Response))
			done++
			if st.With != nil && done < len(f.Done) {
				done++
			}
		}
		s.Steps = append(s.Steps, step)
	}
	return s
}
