package main

import (
	"strings"
	"testing"

	"github.com/cpilab/cpilab/fixtures/buggycpi"
	"github.com/cpilab/cpilab/suites"
)

// reportOf is a certify report whose specs are in the given states with
// the given violation clauses.
func reportOf(specs ...suites.SpecResult) *suites.CertifyReport {
	return &suites.CertifyReport{Specs: specs}
}

func spec(state, clause string, violations ...string) suites.SpecResult {
	s := suites.SpecResult{State: state, Clause: clause}
	for _, c := range violations {
		s.Violations = append(s.Violations, suites.Violation{Clause: c})
	}
	return s
}

// The catalog counts a bug as caught only by a violation of its own
// clause, and refuses clauses the bug does not list.
func TestCatalogJudgesOnlyViolations(t *testing.T) {
	bug := buggycpi.Bug{Name: "b", Clause: "disk.attach-hint-device", AlsoBreaks: []string{"disk.detach"}}
	for _, c := range []struct {
		name string
		rep  *suites.CertifyReport
		want string // "" caught; else a piece of the miss
	}{
		{"a violation of its clause", reportOf(spec(suites.StateFailed, "disk.attach-hint-device", "disk.attach-hint-device")), ""},
		{"and a listed extra clause", reportOf(spec(suites.StateFailed, "disk.attach-hint-device", "disk.attach-hint-device", "disk.detach")), ""},
		{"a harness failure only", reportOf(spec(suites.StateFailed, "disk.attach-hint-device", suites.HarnessClause)), "no violation of clause"},
		{"an interrupted spec of its clause", reportOf(spec(suites.StateInterrupted, "disk.attach-hint-device")), "no violation of clause"},
		{"a failed spec of its clause with another violation", reportOf(spec(suites.StateFailed, "disk.attach-hint-device", "disk.detach")), "no violation of clause"},
		{"an unlisted extra clause", reportOf(spec(suites.StateFailed, "disk.attach-hint-device", "disk.attach-hint-device"), spec(suites.StateFailed, "vm.delete", "vm.delete")), "also named vm.delete"},
		{"a harness failure beside the catch", reportOf(spec(suites.StateFailed, "disk.attach-hint-device", "disk.attach-hint-device"), spec(suites.StateFailed, "setup.vm", suites.HarnessClause)), "also named harness"},
	} {
		got := judgeRejection(c.rep, bug)
		switch {
		case c.want == "" && got != "":
			t.Errorf("%s: missed (%s), want caught", c.name, got)
		case c.want != "" && !strings.Contains(got, c.want):
			t.Errorf("%s: %q, want a miss saying %q", c.name, got, c.want)
		}
	}
}
