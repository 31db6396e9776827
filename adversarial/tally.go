package adversarial

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
)

// Oracle names one category a finding is counted in.
type Oracle string

// The oracles, in the order the table prints them.
const (
	OracleCrash    Oracle = "crash"
	OracleDataLost Oracle = "data-lost"
	OracleLeak     Oracle = "leak"
	OracleEscape   Oracle = "escape"
	// OracleUnclear is an input that should have been refused with a clear
	// error and was not (accepted, or refused without saying why). It
	// lowers the clear-error rate; it is not one of the four zero figures.
	OracleUnclear Oracle = "unclear-error"
)

// Finding is one oracle's verdict on one input.
type Finding struct {
	Oracle Oracle `json:"oracle"`
	// Input describes the hostile input, short and printable.
	Input string `json:"input"`
	// Detail says what the oracle saw.
	Detail string `json:"detail"`
}

// Row is one area's tally.
type Row struct {
	Area string `json:"area"`
	// Tried counts the hostile inputs tried.
	Tried    int `json:"inputs_tried"`
	Crashes  int `json:"crashes"`
	DataLost int `json:"data_lost"`
	Leaks    int `json:"leaks"`
	Escapes  int `json:"escapes"`
	// ErrorsExpected counts the inputs that must be refused; ClearErrors
	// those refused with a clear error.
	ErrorsExpected int `json:"errors_expected"`
	ClearErrors    int `json:"clear_errors"`
	// Findings lists the first MaxFindings findings of each oracle.
	Findings []Finding `json:"findings,omitempty"`
	// Seconds is the area's wall time.
	Seconds float64 `json:"seconds"`
}

// ClearErrorRate is ClearErrors / ErrorsExpected (1 when none expected).
func (r Row) ClearErrorRate() float64 {
	if r.ErrorsExpected == 0 {
		return 1
	}
	return float64(r.ClearErrors) / float64(r.ErrorsExpected)
}

// Clean reports whether the row has no crash, data lost, leak or escape.
func (r Row) Clean() bool { return r.Crashes+r.DataLost+r.Leaks+r.Escapes == 0 }

// MaxFindings bounds the findings kept per area and oracle (the counts are
// always complete).
const MaxFindings = 20

// tally is a Row being filled, safe for concurrent use.
type tally struct {
	mu  sync.Mutex
	row Row
	per map[Oracle]int // findings kept, guarded by mu
}

func newTally(area string) *tally { return &tally{row: Row{Area: area}, per: map[Oracle]int{}} }

// tried counts one input.
func (t *tally) tried() {
	t.mu.Lock()
	t.row.Tried++
	t.mu.Unlock()
}

// expectError counts one input that must be refused; clear says whether it
// was, clearly. An unclear one is also a finding.
func (t *tally) expectError(input string, clear bool, detail string) {
	t.mu.Lock()
	t.row.ErrorsExpected++
	if clear {
		t.row.ClearErrors++
	}
	t.mu.Unlock()
	if !clear {
		t.add(OracleUnclear, input, detail)
	}
}

// add counts a finding.
func (t *tally) add(o Oracle, input, detail string, args ...any) {
	if len(args) > 0 {
		detail = fmt.Sprintf(detail, args...)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch o {
	case OracleCrash:
		t.row.Crashes++
	case OracleDataLost:
		t.row.DataLost++
	case OracleLeak:
		t.row.Leaks++
	case OracleEscape:
		t.row.Escapes++
	}
	if t.per[o] < MaxFindings {
		t.per[o]++
		t.row.Findings = append(t.row.Findings, Finding{Oracle: o, Input: shorten(input), Detail: shorten(detail)})
	}
}

// shorten keeps a description printable and short.
func shorten(s string) string {
	s = strings.ToValidUTF8(s, "\\x??")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '·'
		}
		return r
	}, s)
	if len(s) > 600 {
		s = s[:600] + fmt.Sprintf("…(%d bytes)", len(s))
	}
	return strings.ToValidUTF8(s, "")
}

// Report is a whole campaign's result.
type Report struct {
	Seed  int64  `json:"seed"`
	Scale string `json:"scale"`
	Rows  []Row  `json:"areas"`
	// Total sums the rows (Area "total").
	Total Row `json:"total"`
	// Seconds is the campaign's wall time.
	Seconds float64 `json:"seconds"`
	// Replay is the command that reruns this campaign.
	Replay string `json:"replay"`
}

// Clean reports whether no area found a crash, data lost, leak or escape.
func (r *Report) Clean() bool { return r.Total.Clean() }

func (r *Report) sum() {
	t := Row{Area: "total"}
	for _, x := range r.Rows {
		t.Tried += x.Tried
		t.Crashes += x.Crashes
		t.DataLost += x.DataLost
		t.Leaks += x.Leaks
		t.Escapes += x.Escapes
		t.ErrorsExpected += x.ErrorsExpected
		t.ClearErrors += x.ClearErrors
		t.Seconds += x.Seconds
	}
	r.Total = t
}

// WriteTable prints the tally table, then every finding.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "area\tinputs\tcrashes\tdata lost\tleaks\tescapes\tclear errors\tseconds\t")
	for _, x := range append(append([]Row(nil), r.Rows...), r.Total) {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d/%d (%.1f%%)\t%.1f\t\n", x.Area, x.Tried, x.Crashes, x.DataLost, x.Leaks, x.Escapes,
			x.ClearErrors, x.ErrorsExpected, 100*x.ClearErrorRate(), x.Seconds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, x := range r.Rows {
		for _, f := range x.Findings {
			fmt.Fprintf(w, "%s: %s: %s: %s\n", x.Area, f.Oracle, f.Input, f.Detail)
		}
	}
	_, err := fmt.Fprintf(w, "seed %d, scale %s, %.1f s; rerun: %s\n", r.Seed, r.Scale, r.Seconds, r.Replay)
	return err
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
