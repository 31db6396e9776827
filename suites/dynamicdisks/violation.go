package dynamicdisks

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
)

// Violation is one broken clause, as the failure message and as a Ginkgo
// report entry named ReportEntryViolation. Its JSON fields are those of
// package suites' Violation, so reports of both suites read alike.
type Violation struct {
	// Clause cites the contract.
	Clause string `json:"clause"`
	// Did says what the director did instead.
	Did string `json:"did"`
	// Request and Response are the HTTP exchange (or task) that showed it.
	Request  string `json:"request,omitempty"`
	Response string `json:"response,omitempty"`
}

// ReportEntryViolation names the report entry holding a Violation.
const ReportEntryViolation = "violation"

// String is the clause, then what the director did, the request and the
// response, one a line.
func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n  the director did instead: %s", v.Clause, v.Did)
	if v.Request != "" {
		fmt.Fprintf(&b, "\n  request:  %s", v.Request)
	}
	if v.Response != "" {
		fmt.Fprintf(&b, "\n  response: %s", v.Response)
	}
	return b.String()
}

// violate fails the current spec with v.
func violate(v Violation) {
	GinkgoHelper()
	if failHook != nil {
		failHook(v)
	}
	AddReportEntry(ReportEntryViolation, v, ReportEntryVisibilityNever)
	Fail(v.String())
}

// violatef fails the current spec: clause broke, x showed it (nil: no
// exchange), and did says how.
//
// When the exchange got no answer, or an argument is an error reaching the
// director, it is a harness error instead: the suite could not ask.
func violatef(clause string, x *Exchange, format string, args ...any) {
	GinkgoHelper()
	if x != nil && x.Err != nil {
		harnessf("%s: %s: %s", x.RequestString(), x.ResponseString(), fmt.Sprintf(format, args...))
	}
	for _, a := range args {
		if err, ok := a.(error); ok && transportErr(err) {
			harnessf("%s", fmt.Sprintf(format, args...))
		}
	}
	v := Violation{Clause: clause, Did: fmt.Sprintf(format, args...)}
	if x != nil {
		v.Request, v.Response = x.RequestString(), x.ResponseString()
	}
	violate(v)
}
