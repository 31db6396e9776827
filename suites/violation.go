package suites

import (
	"cmp"
	"fmt"
	"strings"
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

// String is the clause, then the details (a suite shows the clause with
// its title: TitledClause).
func (v Violation) String() string {
	return v.Clause + "\n" + v.Details()
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
		fmt.Fprintf(&b, "\n  stderr (tail): %s", Tail(v.Stderr, 600))
	}
	return b.String()
}

// Tail is the last n bytes of s after an ellipsis (s itself when it is
// no longer).
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
