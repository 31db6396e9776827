package suites

import (
	"encoding/json"
	"time"

	"github.com/onsi/ginkgo/v2/types"
)

// The report entries every spec carries (Ginkgo report entries with
// visibility Never, so they are in the JSON report but not in Ginkgo's
// console output). Reporters read them by these names.
const (
	// EntryClause holds the clause id the spec checks (a string, e.g.
	// "errors.delete-disk-missing").
	EntryClause = "clause"
	// EntryMethods holds the CPI methods the spec really called, sorted,
	// without duplicates ([]string), recorded at run time.
	EntryMethods = "methods"
	// EntryCalls holds every CPI call the spec made ([]CallRecord), in the
	// order they ended.
	EntryCalls = "calls"
	// EntryViolation holds a Violation: a clause the CPI broke.
	EntryViolation = ReportEntryViolation
	// EntryWarning holds a Warning: something a caller tolerates but the
	// documentation advises against.
	EntryWarning = "warning"
)

// CallRecord is one CPI call as a report shows it.
type CallRecord struct {
	Method string `json:"method"`
	// Request is the request as sent; Response the CPI's stdout (both cut
	// to a few hundred bytes).
	Request  string `json:"request"`
	Response string `json:"response"`
	// StderrTail is the end of the CPI's stderr.
	StderrTail string `json:"stderr_tail,omitempty"`
	// ExitCode is the exit status, -1 when the process did not exit by
	// itself.
	ExitCode int `json:"exit_code"`
	// Start and End are when the process started and when its call ended
	// (wall clock).
	Start time.Time `json:"start"`
	End   time.Time `json:"end"`
	// Elapsed is the CPI process's own run time (nanoseconds in JSON).
	Elapsed time.Duration `json:"elapsed"`
	// Error is the error type the CPI returned, or how the call failed
	// ("" when it succeeded).
	Error string `json:"error,omitempty"`
	// Cleanup marks a call made by the clean-up after the spec.
	Cleanup bool `json:"cleanup,omitempty"`
}

// Warning is a clause a CPI bends in a way every caller tolerates: it is
// reported (entry EntryWarning and the text output), never failed.
type Warning struct {
	// Clause is the clause id, e.g. "results.unread".
	Clause string `json:"clause"`
	// Text says what the CPI did and why it is only a warning.
	Text string `json:"text"`
	// Method is the call that showed it.
	Method   string `json:"method,omitempty"`
	Response string `json:"response,omitempty"`
}

// DecodeEntry decodes a report entry's value into v, whether the report
// is the one a suite's Run returned (values in memory) or was read back from JSON
// (values as JSON).
func DecodeEntry(e types.ReportEntry, v any) error {
	b := []byte(e.Value.AsJSON)
	if raw := e.Value.GetRawValue(); raw != nil {
		var err error
		if b, err = json.Marshal(raw); err != nil {
			return err
		}
	}
	return json.Unmarshal(b, v)
}
