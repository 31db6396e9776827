package suites

import (
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
)

// JUnit is a certify report as JUnit XML, the shape CI systems publish as
// test results: one testsuite per suite and row (a caller profile ×
// version context, or a reference-table row), one testcase per spec that
// ran or was not checked. Failures carry the clause id, the evidence and
// the rerun command; specs a filter left out and Ginkgo's own nodes are
// not there.
type JUnit struct {
	XMLName    xml.Name         `xml:"testsuites"`
	Name       string           `xml:"name,attr"`
	Tests      int              `xml:"tests,attr"`
	Failures   int              `xml:"failures,attr"`
	Errors     int              `xml:"errors,attr"`
	Skipped    int              `xml:"skipped,attr"`
	Time       float64          `xml:"time,attr"`
	Timestamp  string           `xml:"timestamp,attr,omitempty"`
	TestSuites []JUnitTestSuite `xml:"testsuite"`
}

// JUnitTestSuite is one suite × row.
type JUnitTestSuite struct {
	Name       string          `xml:"name,attr"`
	Package    string          `xml:"package,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Skipped    int             `xml:"skipped,attr"`
	Time       float64         `xml:"time,attr"`
	Properties []JUnitProperty `xml:"properties>property,omitempty"`
	TestCases  []JUnitTestCase `xml:"testcase"`
}

// JUnitProperty is a name and value.
type JUnitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

// JUnitTestCase is one spec.
type JUnitTestCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *JUnitFailure `xml:"failure,omitempty"`
	Error     *JUnitFailure `xml:"error,omitempty"`
	Skipped   *JUnitSkipped `xml:"skipped,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

// JUnitFailure is a failure or an error: message and type in attributes,
// the evidence in the body.
type JUnitFailure struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Body    string `xml:",chardata"`
}

// JUnitSkipped says why a spec was not checked.
type JUnitSkipped struct {
	Message string `xml:"message,attr"`
}

// JUnit builds the JUnit form of the report.
func (c *CertifyReport) JUnit() JUnit {
	j := JUnit{Name: cmp.Or(c.Title, "cpilab certify") + ": " + c.Target, Time: c.DurationSeconds}
	if !c.Started.IsZero() {
		j.Timestamp = c.Started.UTC().Format("2006-01-02T15:04:05")
	}
	idx := map[string]int{}
	for _, s := range c.Specs {
		key := s.Suite
		if s.Row != "" {
			key += " " + s.Row
		}
		i, ok := idx[key]
		if !ok {
			i = len(j.TestSuites)
			idx[key] = i
			ts := JUnitTestSuite{Name: key, Package: "cpilab." + s.Suite}
			ts.Properties = []JUnitProperty{{Name: "suite", Value: s.Suite}, {Name: "verdict", Value: c.Verdict}}
			if s.Row != "" {
				ts.Properties = append(ts.Properties, JUnitProperty{Name: "row", Value: s.Row})
			}
			if c.Partial != "" {
				ts.Properties = append(ts.Properties, JUnitProperty{Name: "partial", Value: c.Partial})
			}
			j.TestSuites = append(j.TestSuites, ts)
		}
		ts := &j.TestSuites[i]
		tc := JUnitTestCase{Name: caseName(s), Classname: strings.ReplaceAll(key, " ", "."), Time: s.DurationSeconds}
		switch s.State {
		case StateFailed:
			v := s.Violations[0]
			tc.Failure = &JUnitFailure{Message: c.ClauseText(v.Clause) + ": " + firstLine(v.Did), Type: v.Clause, Body: c.evidence(s)}
			ts.Failures++
		case StateInterrupted:
			tc.Error = &JUnitFailure{Message: s.Reason, Type: "interrupted", Body: c.evidence(s)}
			ts.Errors++
		case StateNotChecked:
			tc.Skipped = &JUnitSkipped{Message: s.Reason}
			ts.Skipped++
		}
		if len(s.Warnings) > 0 {
			var b strings.Builder
			for _, w := range s.Warnings {
				fmt.Fprintf(&b, "warning: %s: %s\n", w.Clause, w.Text)
			}
			tc.SystemOut = b.String()
		}
		ts.Tests++
		ts.Time += s.DurationSeconds
		ts.TestCases = append(ts.TestCases, tc)
	}
	for _, ts := range j.TestSuites {
		j.Tests += ts.Tests
		j.Failures += ts.Failures
		j.Errors += ts.Errors
		j.Skipped += ts.Skipped
	}
	return j
}

// caseName is the spec's name inside its testsuite: the spec text without
// the suite and row the testsuite already names.
func caseName(s SpecResult) string {
	name := s.Name
	for _, p := range []string{s.Suite, s.Row} {
		if p == "" {
			continue
		}
		if i := strings.Index(name, p+" "); i >= 0 {
			name = name[i+len(p)+1:]
		}
	}
	return name
}

// evidence is a failed spec's body in the JUnit report: every violation
// with what the CPI did, the request and response, then the rerun command.
func (c *CertifyReport) evidence(s SpecResult) string {
	kind := c.TargetKind
	var b strings.Builder
	for i, v := range s.Violations {
		if i > 0 {
			b.WriteString("\nalso broke: ")
		}
		fmt.Fprintf(&b, "%s\n%s\n", c.ClauseText(v.Clause), v.DetailsOf(kind))
	}
	if s.Sequence != nil {
		b.WriteString("\n")
		s.Sequence.writeText(&b, "")
	}
	if s.Rerun != "" {
		fmt.Fprintf(&b, "\nrerun only this spec: %s\n", s.Rerun)
	}
	return b.String()
}

// WriteJUnit writes the report as JUnit XML.
func (c *CertifyReport) WriteJUnit(w io.Writer) error {
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return err
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(c.JUnit()); err != nil {
		return err
	}
	_, err := io.WriteString(w, "\n")
	return err
}
