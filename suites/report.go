package suites

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/cpilab/cpilab/internal/termsafe"
)

// Cell counts the specs of one row and area.
type Cell struct {
	Passed, Failed, Skipped int
}

// Mark is the cell as one glyph and counts: "✔ 4", "✘ 1/4", "– 2", "".
func (c Cell) Mark() string {
	switch {
	case c.Failed > 0:
		return fmt.Sprintf("✘ %d/%d", c.Failed, c.Passed+c.Failed+c.Skipped)
	case c.Passed > 0 && c.Skipped > 0:
		return fmt.Sprintf("✔ %d –%d", c.Passed, c.Skipped)
	case c.Passed > 0:
		return fmt.Sprintf("✔ %d", c.Passed)
	case c.Skipped > 0:
		return fmt.Sprintf("– %d", c.Skipped)
	}
	return ""
}

// LabelValue is the value of spec sr's "key:" label ("" when it has none).
func LabelValue(sr types.SpecReport, key string) string {
	for _, l := range sr.Labels() {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			return v
		}
	}
	return ""
}

// WriteCounts writes a run's closing lines: the counts, then every reason
// a spec was not checked with how many it kept out, so that nothing
// unchecked reads as a pass. Every cpilab suite's summary ends with it.
func WriteCounts(w io.Writer, passed, failed, notChecked int, reasons map[string]int) {
	w = termsafe.NewWriter(w) // untrusted text (a CPI's, a driver's) shown escaped
	fmt.Fprintf(w, "\n%d passed, %d failed, %d not checked\n", passed, failed, notChecked)
	if len(reasons) == 0 {
		return
	}
	fmt.Fprintln(w, "\nNot checked (these are not passes):")
	for _, r := range slices.Sorted(maps.Keys(reasons)) {
		fmt.Fprintf(w, "  %3d × %s\n", reasons[r], r)
	}
}

// Failure is one failed spec as certify reports it.
type Failure struct {
	Spec      string    `json:"spec"`
	Row       string    `json:"row"`
	Violation Violation `json:"violation"`
	// Also are further violations found after the first (by the clean-up
	// that followed it, say).
	Also []Violation `json:"also,omitempty"`
	// Message is Ginkgo's failure message (the violation's text, or a
	// harness error).
	Message  string `json:"message"`
	Location string `json:"location"`
	// Focus is the regexp that selects only this spec; Rerun the command
	// that reruns it.
	Focus string `json:"focus"`
	Rerun string `json:"rerun,omitempty"`
}

// Failures lists the failed specs with their violations. rerun, when not
// nil, turns a focus regexp into a command line.
func Failures(r types.Report, rerun func(focus string) string) []Failure {
	var out []Failure
	for _, sr := range r.SpecReports {
		if !sr.Failed() {
			continue
		}
		f := Failure{Spec: sr.FullText(), Row: LabelValue(sr, "row"), Message: sr.Failure.Message,
			Location: sr.Failure.Location.String()}
		if f.Spec == "" {
			f.Spec = fmt.Sprintf("%s %s", sr.LeafNodeType, sr.LeafNodeText)
		}
		var vs []Violation
		for _, e := range sr.ReportEntries {
			if e.Name != ReportEntryViolation {
				continue
			}
			if v, ok := e.Value.GetRawValue().(Violation); ok {
				vs = append(vs, v)
				continue
			}
			var v Violation
			if json.Unmarshal([]byte(e.Value.AsJSON), &v) == nil {
				vs = append(vs, v)
			}
		}
		if len(vs) > 0 {
			// The spec's own failure first; a clean-up after it may add more.
			f.Violation, f.Also = vs[0], vs[1:]
		}
		if f.Violation.Clause == "" {
			f.Violation = Violation{Clause: "(harness) " + firstLine(sr.Failure.Message), Did: sr.Failure.Message, ExitCode: -1}
		}
		f.Focus = SpecFocus(r, sr)
		if rerun != nil {
			f.Rerun = rerun(f.Focus)
		}
		out = append(out, f)
	}
	return out
}

// Clauses returns the distinct clauses of fs (first and further
// violations), sorted.
func Clauses(fs []Failure) []string {
	var out []string
	for _, f := range fs {
		for _, v := range append([]Violation{f.Violation}, f.Also...) {
			if !slices.Contains(out, v.Clause) {
				out = append(out, v.Clause)
			}
		}
	}
	sort.Strings(out)
	return out
}

// WriteText writes one failure for a terminal: the spec, the clause when
// the spec text does not already name it, the details and the rerun
// command.
func (f Failure) WriteText(w io.Writer) {
	w = termsafe.NewWriter(w) // untrusted text (a CPI's, a driver's) shown escaped
	fmt.Fprintf(w, "✘ %s\n", f.Spec)
	if !strings.Contains(f.Spec, f.Violation.Clause) {
		fmt.Fprintf(w, "  broke: %s\n", f.Violation.Clause)
	}
	fmt.Fprintf(w, "%s\n", f.Violation.Details())
	for _, v := range f.Also {
		fmt.Fprintf(w, "  also broke: %s\n  %s\n", v.Clause, strings.ReplaceAll(v.Details(), "\n", "\n  "))
	}
	if f.Rerun != "" {
		fmt.Fprintf(w, "  rerun only this spec: %s\n", f.Rerun)
	}
}

// LabelSteps marks an Ordered container whose specs are steps: each needs
// what the specs before it made (a reference-table row, whose step 4
// attaches a disk to the VM of step 1).
const LabelSteps = "steps"

// SpecFocus is the --focus regexp that reruns spec sr of report r: the
// spec alone, or, in a container of steps (LabelSteps), the spec with
// every spec of its container that ran before it, so that the rerun
// builds what the spec needs and fails the same way. Ginkgo matches focus
// against "<suite description> <container texts> <spec text>".
func SpecFocus(r types.Report, sr types.SpecReport) string {
	if !slices.Contains(sr.Labels(), LabelSteps) || len(sr.ContainerHierarchyTexts) == 0 {
		return regexp.QuoteMeta(" "+sr.FullText()) + "$"
	}
	var steps []string
	for _, o := range r.SpecReports {
		if o.LeafNodeType != types.NodeTypeIt || !Ran(o) || !slices.Equal(o.ContainerHierarchyTexts, sr.ContainerHierarchyTexts) {
			continue
		}
		if o.LeafNodeLocation == sr.LeafNodeLocation && o.LeafNodeText == sr.LeafNodeText {
			break
		}
		steps = append(steps, regexp.QuoteMeta(o.LeafNodeText))
	}
	steps = append(steps, regexp.QuoteMeta(sr.LeafNodeText))
	prefix := regexp.QuoteMeta(" " + strings.Join(sr.ContainerHierarchyTexts, " ") + " ")
	if len(steps) == 1 {
		return prefix + steps[0] + "$"
	}
	return prefix + "(?:" + strings.Join(steps, "|") + ")$"
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
