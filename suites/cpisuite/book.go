package cpisuite

import (
	"github.com/cpilab/cpilab/suites"
)

// Areas are the CPI report's columns (its matrix's areas), in order.
var Areas = []string{"setup", "protocol", "shapes", "errors", "truth", "hints", "parallel", "retry", "iaas",
	"vm", "settings", "agent", "disks", "data", "explore", "cleanup"}

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

// ReportAreas are Areas with their legend (AreaDocs), as a report's
// columns.
func ReportAreas() []suites.AreaDoc {
	out := make([]suites.AreaDoc, 0, len(Areas))
	for _, a := range Areas {
		out = append(out, suites.AreaDoc{ID: a, Title: AreaDocs[a]})
	}
	return out
}

// RowRank orders the CPI report's rows: contract contexts, then
// reference-table rows, each in their defined order, then anything else.
func RowRank(row, suite string) int {
	for i, c := range DefaultContexts {
		if c.Name == row {
			return i
		}
	}
	for i, t := range ReferenceTable {
		if t.Name == row {
			return 100 + i
		}
	}
	if suite == "contract" {
		return 99
	}
	return 1000
}

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
