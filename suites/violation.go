package suites

import (
	"bytes"
	"cmp"
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
)

// Violation is one broken clause, as a failure message and in the reports
// (a Ginkgo report entry named "violation").
type Violation struct {
	// Clause is the id of the clause that broke (docs/contracts.md), e.g.
	// "errors.delete-disk-missing".
	Clause string `json:"clause"`
	// Did says what the CPI did instead.
	Did string `json:"did"`
	// Method, Request, Response, Stderr and ExitCode describe the call that
	// showed it, when one did.
	Method   string `json:"method,omitempty"`
	Request  string `json:"request,omitempty"`
	Response string `json:"response,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
	ExitCode int    `json:"exit_code"`
}

// ReportEntryViolation is the name of the report entry holding a Violation.
const ReportEntryViolation = "violation"

// String is the clause, then the details.
func (v Violation) String() string {
	return ClauseText(v.Clause) + "\n" + v.Details()
}

// Details is the violation without its clause: what the CPI did instead,
// the request, the response and the tail of stderr, one item a line.
func (v Violation) Details() string { return v.DetailsOf("CPI") }

// DetailsOf is Details for a certifier whose target is a kind other than
// a CPI ("FlexVolume driver", "Director"): "the <kind> did instead".
func (v Violation) DetailsOf(kind string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  the %s did instead: %s", cmp.Or(kind, "CPI"), v.Did)
	if v.Request != "" {
		fmt.Fprintf(&b, "\n  request:  %s", v.Request)
		fmt.Fprintf(&b, "\n  response: %s (exit status %d)", v.Response, v.ExitCode)
	}
	if v.Stderr != "" {
		fmt.Fprintf(&b, "\n  stderr (tail): %s", tail(v.Stderr, 600))
	}
	return b.String()
}

// violate fails the current spec with v.
func violate(v Violation) {
	GinkgoHelper()
	AddReportEntry(ReportEntryViolation, v, ReportEntryVisibilityNever)
	Fail(v.String())
}

// violation builds a Violation from an exchange (x may be nil).
func violation(clause, did string, x *Exchange) Violation {
	v := Violation{Clause: clause, Did: did, ExitCode: -1}
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
		warn(Warning{Clause: ClauseUnreadResult, Method: x.Method, Response: excerpt(x.Stdout),
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

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
