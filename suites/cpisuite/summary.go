package cpisuite

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/cpilab/cpilab/internal/termsafe"
	"github.com/cpilab/cpilab/suites"
	"github.com/onsi/ginkgo/v2/types"
)

// Areas are the summary's columns, in order.
var Areas = []string{"setup", "protocol", "shapes", "errors", "truth", "hints", "parallel", "retry", "iaas",
	"vm", "settings", "agent", "disks", "data", "explore", "cleanup"}

// SummaryRow is one caller profile × version row.
type SummaryRow struct {
	Name  string
	Suite string // "contract" or "matrix"
	Cells map[string]suites.Cell
}

// Summary is the at-a-glance matrix: rows are contract contexts and
// reference-table rows, columns are Areas.
type Summary struct {
	Rows                    []SummaryRow
	Passed, Failed, Skipped int
	// NotChecked counts the specs skipped for each reason.
	NotChecked map[string]int
}

// Summarize builds the summary from a Ginkgo report.
func Summarize(r types.Report) Summary {
	s := Summary{NotChecked: map[string]int{}}
	idx := map[string]int{}
	for _, sr := range r.SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt {
			continue
		}
		if sr.State == types.SpecStateSkipped && sr.Failure.Message == "" {
			continue // filtered out
		}
		row, area, suite := suites.LabelValue(sr, "row"), suites.LabelValue(sr, "area"), suites.LabelValue(sr, "suite")
		if row == "" {
			continue
		}
		i, ok := idx[row]
		if !ok {
			i = len(s.Rows)
			idx[row] = i
			s.Rows = append(s.Rows, SummaryRow{Name: row, Suite: suite, Cells: map[string]suites.Cell{}})
		}
		c := s.Rows[i].Cells[area]
		switch {
		case sr.State.Is(types.SpecStatePassed):
			c.Passed++
			s.Passed++
		case sr.State.Is(types.SpecStateSkipped | types.SpecStatePending):
			c.Skipped++
			s.Skipped++
			s.NotChecked[sr.Failure.Message]++
		default:
			c.Failed++
			s.Failed++
		}
		s.Rows[i].Cells[area] = c
	}
	sort.SliceStable(s.Rows, func(i, j int) bool { return rowRank(s.Rows[i]) < rowRank(s.Rows[j]) })
	return s
}

// rowRank orders summary rows: contract contexts, then reference-table
// rows, each in their defined order, then anything else.
func rowRank(r SummaryRow) int {
	for i, c := range DefaultContexts {
		if c.Name == r.Name {
			return i
		}
	}
	for i, t := range ReferenceTable {
		if t.Name == r.Name {
			return 100 + i
		}
	}
	if r.Suite == "contract" {
		return 99
	}
	return 1000
}

// WriteText writes the summary table and the not-checked list.
func (s Summary) WriteText(w io.Writer) {
	w = termsafe.NewWriter(w) // untrusted text (a CPI's, a driver's) shown escaped
	cols := s.usedAreas()
	width := 16
	for _, r := range s.Rows {
		width = max(width, len(r.Name)+1)
	}
	fmt.Fprintf(w, "%-*s", width, "row")
	for _, a := range cols {
		fmt.Fprintf(w, " %-9s", a)
	}
	fmt.Fprintln(w)
	for _, r := range s.Rows {
		fmt.Fprintf(w, "%-*s", width, r.Name)
		for _, a := range cols {
			fmt.Fprintf(w, " %-9s", padMark(r.Cells[a].Mark()))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "\nrows: contract contexts <caller profile>.<api version>; reference-table rows d<Director>.c<CPI>.s<stemcell>")
	fmt.Fprintln(w, "cells: ✔ passed · ✘ failed/total · – not checked (never a pass)")
	suites.WriteCounts(w, s.Passed, s.Failed, s.Skipped, s.NotChecked)
}

func (s Summary) usedAreas() []string {
	var cols []string
	for _, a := range Areas {
		for _, r := range s.Rows {
			if _, ok := r.Cells[a]; ok {
				cols = append(cols, a)
				break
			}
		}
	}
	return cols
}

// AreaDocs says in a line what each of Areas checks (the legend of the
// matrix).
var AreaDocs = map[string]string{
	"setup":    "a context's or row's set-up: info, stemcell, the VMs and disks its specs share",
	"protocol": "the wire protocol: one JSON object on stdout, the three keys, exit status 0",
	"shapes":   "the result of each method has the shape its api_version asks for",
	"errors":   "error types for missing things, unknown methods and malformed requests",
	"truth":    "answers agree with what exists (has_vm, has_disk, get_disks)",
	"hints":    "attach_disk's disk hint names the device the IaaS attached",
	"parallel": "overlapping calls, each its own process, without crossed results",
	"retry":    "the Director's create_vm retry on VMCreationFailed with ok_to_retry",
	"iaas":     "IaaS state seen by the oracle matches what the CPI answered",
	"vm":       "create_vm and the VM as the reference table expects it",
	"settings": "agent settings in the registry or user-data, as the reference table says",
	"agent":    "the agent boots from those settings and answers over the mbus",
	"disks":    "the agent finds attached disks through the hint; the dynamic-disk link",
	"data":     "data written on a disk is read back on another VM after a move",
	"explore":  "random lifecycles of calls, the contract's model checked after every step",
	"cleanup":  "teardown of what a context shared, and nothing left in the IaaS",
}

// padMark keeps columns aligned despite multi-byte glyphs.
func padMark(m string) string { return m + strings.Repeat(" ", len(m)-len([]rune(m))) }

// ReportAreas are Areas with their legend (AreaDocs), as a report's
// columns.
func ReportAreas() []suites.AreaDoc {
	out := make([]suites.AreaDoc, 0, len(Areas))
	for _, a := range Areas {
		out = append(out, suites.AreaDoc{ID: a, Title: AreaDocs[a]})
	}
	return out
}

// RowRank orders a report's rows as the summary does (rowRank).
func RowRank(row, suite string) int { return rowRank(SummaryRow{Name: row, Suite: suite}) }

// Book is run with what the reports know of the CPI suites wherever run
// leaves it out: their clause titles, their areas and the order of their
// rows.
func Book(run suites.ReportRun) suites.ReportRun {
	if run.Areas == nil {
		run.Areas = ReportAreas()
	}
	if run.ClauseTitles == nil {
		run.ClauseTitles = ClauseTitles
	}
	if run.RowRank == nil {
		run.RowRank = RowRank
	}
	return run
}
