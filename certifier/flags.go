package certifier

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/cpilab/cpilab/suites"
)

// Flags are the flags every certifier takes, with the same names and
// meanings: which specs run (--label-filter, --focus, --skip), --list
// [--json], --fail-fast, --strict, -v, and the reports (--json-report,
// --junit-report, --html-report, --report-dir). --quiet and --no-color are
// every cpilab command's.
type Flags struct {
	LabelFilter, Focus, Skip string
	List, ListJSON           bool
	FailFast, Strict         bool
	Verbose                  bool
	Reports                  Reports
}

// Usage are the flags' help texts; a certifier may say more about one of
// them (Register's more).
var Usage = map[string]string{
	"label-filter": "run only the specs matching this Ginkgo label filter `EXPR` (e.g. 'area:errors')",
	"focus":        "run only the specs whose full text matches this `REGEXP` (each failure prints one)",
	"skip":         "leave out the specs whose full text matches this `REGEXP`",
	"list":         "list the specs (id, clause, labels) that would run, without running anything",
	"json":         "with --list: print the specs as JSON",
	"fail-fast":    "stop at the first failed spec (what the specs that ran created is still cleaned up); the verdict is then PARTIAL",
	"strict":       "fail, instead of not checking, every spec that cannot check its clause here; what does not apply at all stays not checked",
	"v":            "stream Ginkgo's verbose output to stderr",
	"junit-report": "write a JUnit XML report (one testsuite per suite and row) to `FILE` (- for stdout; the text then goes to stderr)",
	"json-report":  "write cpilab's JSON report (docs/report.md) to `FILE` (- for stdout; the text then goes to stderr)",
	"html-report":  "write an HTML report (verdict, matrix linked to its specs, legend) to `FILE` (- for stdout; the text then goes to stderr)",
	"report-dir":   reportDirUsage,
}

// Register adds the flags to fs; more overrides the help of some of them
// for one certifier (nil: Usage).
func (f *Flags) Register(fs *flag.FlagSet, more map[string]string) {
	use := func(name string) string {
		if u, ok := more[name]; ok {
			return u
		}
		return Usage[name]
	}
	fs.StringVar(&f.LabelFilter, "label-filter", "", use("label-filter"))
	fs.StringVar(&f.Focus, "focus", "", use("focus"))
	fs.StringVar(&f.Skip, "skip", "", use("skip"))
	fs.BoolVar(&f.List, "list", false, use("list"))
	fs.BoolVar(&f.ListJSON, "json", false, use("json"))
	fs.BoolVar(&f.FailFast, "fail-fast", false, use("fail-fast"))
	fs.BoolVar(&f.Strict, "strict", false, use("strict"))
	fs.BoolVar(&f.Verbose, "v", false, use("v"))
	fs.StringVar(&f.Reports.JUnit, "junit-report", "", use("junit-report"))
	fs.StringVar(&f.Reports.JSON, "json-report", "", use("json-report"))
	fs.StringVar(&f.Reports.HTML, "html-report", "", use("html-report"))
	fs.StringVar(&f.Reports.Dir, "report-dir", "", use("report-dir"))
}

// Check refuses, as a *UsageError, a malformed filter, --json without
// --list, and a report that could not be written.
func (f *Flags) Check() error {
	if f.LabelFilter != "" {
		if _, err := types.ParseLabelFilter(f.LabelFilter); err != nil {
			return usagef("--label-filter %q: %s", f.LabelFilter, OneLine(err.Error()))
		}
	}
	for _, r := range []struct{ name, re string }{{"--focus", f.Focus}, {"--skip", f.Skip}} {
		if _, err := regexp.Compile(r.re); err != nil {
			return usagef("%s %q: %v", r.name, r.re, err)
		}
	}
	if f.ListJSON && !f.List {
		return usagef("--json goes with --list")
	}
	return f.Reports.Check()
}

// Options are the suites.RunOptions the flags select: the filters,
// --fail-fast and -v.
func (f *Flags) Options() suites.RunOptions {
	opts := suites.RunOptions{LabelFilter: f.LabelFilter, FailFast: f.FailFast, Verbose: f.Verbose}
	if f.Focus != "" {
		opts.Focus = []string{f.Focus}
	}
	if f.Skip != "" {
		opts.Skip = []string{f.Skip}
	}
	return opts
}

// UsageError is a misuse of a certifier's flags, said in a line; the
// command prints it with a pointer to --help and exits 2.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

func usagef(format string, args ...any) error {
	return &UsageError{Msg: fmt.Sprintf(format, args...)}
}

var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// OneLine is a Ginkgo error on one line, without its colours.
func OneLine(s string) string {
	s = ansi.ReplaceAllString(s, "")
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

// WriteSpecList prints what --list found: for a person, each spec's id,
// text, clause and labels and the count; with --json, one JSON object
// {"specs": [...], "count": N} for a program. titles are the suite's
// clause titles (Certifier.ClauseTitles).
func WriteSpecList(w io.Writer, specs []suites.SpecInfo, titles map[string]string, asJSON bool) error {
	if asJSON {
		type listed struct {
			ID string `json:"id"`
			suites.SpecInfo
		}
		out := struct {
			Specs []listed `json:"specs"`
			Count int      `json:"count"`
		}{Specs: []listed{}, Count: len(specs)}
		for _, s := range specs {
			out.Specs = append(out.Specs, listed{ID: suites.SpecID(s.Text), SpecInfo: s})
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for _, s := range specs {
		fmt.Fprintf(w, "%s  %s\n    clause: %s\n    labels: %s\n", suites.SpecID(s.Text), s.Text, suites.TitledClause(s.Clause, titles), strings.Join(s.Labels, ", "))
	}
	fmt.Fprintf(w, "%d %s\n", len(specs), suites.Plural(len(specs), "spec", "specs"))
	return nil
}
