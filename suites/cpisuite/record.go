package cpisuite

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cpilab/cpilab/suites"

	. "github.com/onsi/ginkgo/v2"
)

// recorder collects the CPI calls of one spec, as they end (calls may run
// in parallel).
type recorder struct {
	mu    sync.Mutex
	calls []*Exchange
}

func (r *recorder) add(x *Exchange) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, x)
}

// methods returns the methods the spec itself called (clean-up calls
// left out), sorted, without duplicates.
func (r *recorder) methods() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, x := range r.calls {
		m := x.Method
		if m == unknownMethod {
			m = methodUnknown
		}
		if !x.Cleanup && !slices.Contains(out, m) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

func (r *recorder) records() []suites.CallRecord {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]suites.CallRecord, 0, len(r.calls))
	for _, x := range r.calls {
		out = append(out, callRecord(x))
	}
	return out
}

// report stores the spec's clause, methods and calls as report entries.
func (r *recorder) report(clause string) {
	AddReportEntry(suites.EntryClause, clause, ReportEntryVisibilityNever)
	AddReportEntry(suites.EntryMethods, r.methods(), ReportEntryVisibilityNever)
	AddReportEntry(suites.EntryCalls, r.records(), ReportEntryVisibilityNever)
}

func callRecord(x *Exchange) suites.CallRecord {
	c := suites.CallRecord{Method: x.Method, Request: excerpt(x.Request), Response: excerpt(bytes.TrimSpace(x.shownStdout())),
		StderrTail: suites.Tail(string(x.Stderr), 600), ExitCode: x.ExitCode, Start: x.Start, End: x.End, Elapsed: x.Elapsed, Cleanup: x.Cleanup}
	switch {
	case x.RunErr != nil:
		c.Error = x.RunErr.Error()
	case x.TimedOut:
		c.Error = "timed out"
	case len(x.Violations) > 0:
		c.Error = "invalid response: " + strings.Join(x.Violations, "; ")
	case x.Response.Error != nil:
		c.Error = string(x.Response.Error.Type)
	}
	return c
}

// secretViolation records, as a report entry, a violation of
// secrets.not-printed when one of the spec's calls printed a secret of the
// CPI's config (the first such call is named, with the secret redacted
// everywhere the report shows it), and returns it to fail the spec with.
func (r *recorder) secretViolation() *suites.Violation {
	r.mu.Lock()
	var leaky *Exchange
	for _, x := range r.calls {
		if len(x.Leaks) > 0 {
			leaky = x
			break
		}
	}
	r.mu.Unlock()
	if leaky == nil {
		return nil
	}
	v := violation(ClauseSecrets, fmt.Sprintf("%s printed a credential of its config (%s); a CPI's log and stderr go to the Director's task debug log, readable by every user of the deployment's team, and its error messages to the task result",
		leaky.Method, strings.Join(leaky.Leaks, "; ")), leaky)
	AddReportEntry(suites.ReportEntryViolation, v, ReportEntryVisibilityNever)
	return &v
}

// strict is Config.Strict of the registered suites (one run per process).
var strict atomic.Bool

// notChecked skips the running spec as not checked, saying why; in strict
// mode (Config.Strict) it fails it instead.
func notChecked(why string) {
	GinkgoHelper()
	skipWith("not checked: " + why)
}

// skipWith skips with msg as it is. In strict mode a "not checked" message
// fails the spec, under the spec's own clause; what does not apply
// ("not applicable: …") or what the Director handles ("handled: …") stays
// a skip.
func skipWith(msg string) {
	GinkgoHelper()
	if strict.Load() && strings.HasPrefix(msg, "not checked") {
		clause := ClauseOf(CurrentSpecReport().LeafNodeText)
		violate(suites.Violation{Clause: clause, Did: msg + " (strict mode counts what is not checked as failed)", ExitCode: -1})
	}
	Skip(msg)
}

// warn records a warning on the running spec (entry EntryWarning); it
// never fails the spec.
func warn(w suites.Warning) {
	AddReportEntry(suites.EntryWarning, w, ReportEntryVisibilityNever)
}

// mustUnread is mustOK for a call whose result no caller reads (reboot_vm,
// delete_*, set_*_metadata, detach_disk, resize_disk): a result other than
// null is a warning (results.unread), not a failure.
func mustUnread(x *Exchange, clause string) {
	GinkgoHelper()
	mustOK(x, clause)
	if r := string(bytes.TrimSpace(x.Response.Result)); r != "null" {
		warn(suites.Warning{Clause: ClauseUnreadResult, Method: x.Method, Response: excerpt(x.Stdout),
			Text: fmt.Sprintf("%s returned %s; the documentation says null, but no caller reads this result (see docs/contracts.md, %s)", x.Method, excerpt(x.Response.Result), ClauseUnreadResult)})
	}
}
