package certifier

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/cpilab/cpilab/internal/termsafe"
	"github.com/cpilab/cpilab/suites"
)

// Certifier is one certifier as the runner runs it: what it certifies and
// its suite's two entry points, both over suites.RunOptions.
type Certifier struct {
	// Name is the command ("certify-flex"); the reports' title is
	// "cpilab NAME".
	Name string
	// TargetKind says what it certifies ("CPI", "FlexVolume driver").
	TargetKind string
	// Areas are its matrix's columns, in order, with their legend;
	// ClauseTitles the titles of its clauses, by id; RowRank the order of
	// its matrix's rows (nil: as they first appear); and Row the matrix
	// row of specs that carry no "row:" label ("": none).
	Areas        []suites.AreaDoc
	ClauseTitles map[string]string
	RowRank      func(row, suite string) int
	Row          string
	// StrictInSuite: the suite itself fails, under --strict, what it
	// cannot check (the CPI suites); otherwise the report does.
	StrictInSuite bool
	// List returns the specs opts selects, without running anything.
	List func(opts suites.RunOptions) ([]suites.SpecInfo, error)
	// Run starts what the suite runs against (a world, an embedded cloud
	// or director), runs the selected specs and returns what the report
	// needs. Its text (notes while it starts) goes to o.Out; o.Err has
	// the progress line. An error is a harness error: nothing certified.
	Run func(ctx context.Context, opts suites.RunOptions, o Output) (*Result, error)
}

// Result is a certifier's run, beyond Ginkgo's report.
type Result struct {
	Report types.Report
	// Target is what was certified (a CPI's command line, a driver's
	// path, a director's URL).
	Target string
	// Notes say how the run was set up; they are printed and in every
	// report.
	Notes []string
	// LeftIn, when set, names the embedded cloud whose contents after the
	// run LeftInCloud lists ("the embedded fakeiaas").
	LeftIn      string
	LeftInCloud []string
	// Rerun turns a spec's focus into the command that reruns it; Replay
	// a replay file into the command that replays it (nil: none).
	Rerun  func(focus string) string
	Replay func(file string) string
	// Body writes the suite's own part of the text before the notes, from
	// Ginkgo's report and cpilab's (nil: WriteSpecs).
	Body func(w io.Writer, r types.Report, rep *suites.CertifyReport)
	// HarnessOnly, when set, says in a line that every failure was the
	// harness's (the target could not be reached): the run prints it as
	// NOT CERTIFIED and exits 2 instead of giving a verdict.
	HarnessOnly string
	// Worker: this process ran a share of another's run, which reports;
	// nothing is printed or written here.
	Worker bool
}

// ErrNotStarted is a run interrupted before any spec ran (a Certifier's
// Run returns it): INTERRUPTED, exit status 2.
var ErrNotStarted = errors.New("interrupted before any spec ran")

// Output is where a certifier's run prints, and what it says about itself.
type Output struct {
	// Out gets the text (stderr when a report goes to stdout); Err the
	// progress line and Ginkgo's verbose output; Stdout a report named "-".
	Out, Err, Stdout io.Writer
	// Quiet keeps the failures and the verdict line only.
	Quiet bool
	// Paint colours a word ("green", "red"; nil: no colour).
	Paint func(word, color string) string
	// Progress makes the live progress line on w (nil: none).
	Progress func(w io.Writer) Progress
	// Tool is the cpilab that runs, Command its command line as typed.
	Tool    suites.ToolInfo
	Command []string
	// Now is the wall clock of the run's start and duration (nil:
	// time.Now): the runner is an I/O edge, not simulated logic.
	Now func() time.Time
}

// Progress is the live progress line of a run.
type Progress interface {
	Update(done, total int, sr *types.SpecReport)
	Done()
}

// The exit statuses of a certifier.
const (
	ExitAccepted = 0 // accepted
	ExitRejected = 1 // rejected, or nothing checked
	ExitHarness  = 2 // a usage error, a harness limit or error, an interrupt
)

// ExitCode is a certifier's exit status for its report's verdict.
func ExitCode(rep *suites.CertifyReport) int {
	switch rep.Verdict {
	case suites.VerdictAccepted:
		return ExitAccepted
	case suites.VerdictInterrupted:
		return ExitHarness
	}
	return ExitRejected
}

// Run runs certifier c as its flags f say and prints to o: the spec list
// for --list, else the run, its text, its reports and the verdict line.
// It returns the exit status; an error is a harness error (exit status
// 2), a *UsageError a misuse of the flags.
func Run(ctx context.Context, c Certifier, f Flags, o Output) (int, error) {
	if err := f.Check(); err != nil {
		return ExitHarness, err
	}
	opts := f.Options()
	if f.List {
		specs, err := c.List(opts)
		if err != nil {
			return ExitHarness, err
		}
		return ExitAccepted, WriteSpecList(o.Out, specs, c.ClauseTitles, f.ListJSON)
	}
	if o.Stdout == nil {
		o.Stdout = o.Out
	}
	log, err := f.Reports.OpenDir(&o)
	if err != nil {
		return ExitHarness, err
	}
	code, err := run(ctx, c, f, o, opts)
	if cerr := log.Close(); cerr != nil && err == nil {
		return ExitHarness, cerr
	}
	return code, err
}

func run(ctx context.Context, c Certifier, f Flags, o Output, opts suites.RunOptions) (int, error) {
	now := o.Now
	if now == nil {
		now = time.Now // I/O edge: the run's wall time, for the report
	}
	started := now()
	opts.Output = o.Err
	var prog Progress
	if o.Progress != nil && !o.Quiet {
		prog = o.Progress(o.Err)
		opts.Progress = prog.Update
	}
	res, err := c.Run(ctx, opts, o)
	if prog != nil {
		prog.Done()
	}
	if errors.Is(err, ErrNotStarted) {
		fmt.Fprintln(o.Out, paint(o, "INTERRUPTED", "red")+": before any spec ran; nothing is certified")
		return ExitHarness, nil
	}
	if err != nil {
		return ExitHarness, err
	}
	if res.Worker {
		return ExitAccepted, nil
	}
	rep := suites.NewCertifyReport(res.Report, suites.ReportRun{Tool: o.Tool, Title: "cpilab " + c.Name, TargetKind: c.TargetKind,
		Areas: c.Areas, Row: c.Row, ClauseTitles: c.ClauseTitles, RowRank: c.RowRank, Target: res.Target, Command: o.Command, Notes: res.Notes,
		Started: started, Duration: now().Sub(started).Round(time.Millisecond), Strict: f.Strict, StrictNotChecked: f.Strict && !c.StrictInSuite, FailFast: f.FailFast,
		Interrupted: ctx.Err() != nil && !res.Report.SuiteSucceeded, Rerun: res.Rerun, Replay: res.Replay, LeftInCloud: res.LeftInCloud})
	writeText(o, res, rep)
	if err := f.Reports.Write(rep, o.Stdout); err != nil {
		return ExitHarness, err
	}
	if res.HarnessOnly != "" {
		fmt.Fprintf(o.Out, "NOT CERTIFIED: %s (%s)\n", res.HarnessOnly, duration(rep))
		return ExitHarness, nil
	}
	WriteVerdict(o, rep)
	return ExitCode(rep), nil
}

// writeText prints the run for a person: the suite's body, the notes,
// what is left in the embedded cloud, warnings, then each failure with its
// rerun command. --quiet keeps the failures.
func writeText(o Output, res *Result, rep *suites.CertifyReport) {
	if !o.Quiet {
		body := res.Body
		if body == nil {
			body = WriteSpecs
		}
		body(o.Out, res.Report, rep)
		for _, n := range rep.Notes {
			fmt.Fprintf(o.Out, "note: %s\n", termsafe.String(n))
		}
		if res.LeftIn != "" {
			left := strings.Join(rep.LeftInCloud, ", ")
			if left == "" {
				left = "nothing"
			}
			fmt.Fprintf(o.Out, "left in %s after the run: %s\n", res.LeftIn, left)
		}
		rep.WriteWarningsText(o.Out)
	}
	rep.WriteFailuresText(o.Out)
}

// WriteSpecs writes each spec that ran with its mark (✔ passed, ✘ failed,
// – not checked) and its text, then WriteCounts.
func WriteSpecs(w io.Writer, r types.Report, rep *suites.CertifyReport) {
	tw := termsafe.NewWriter(w) // a target's text shown escaped
	for _, sr := range r.SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt || !suites.Ran(sr) {
			continue
		}
		fmt.Fprintf(tw, "%s %s\n", Mark(sr), sr.LeafNodeText)
	}
	WriteCounts(w, rep)
}

// Mark is a spec's mark in a list: ✔ passed, – not checked, ✘ otherwise.
func Mark(sr types.SpecReport) string {
	switch {
	case sr.State.Is(types.SpecStatePassed):
		return "✔"
	case sr.State.Is(types.SpecStateSkipped | types.SpecStatePending):
		return "–"
	}
	return "✘"
}

// WriteCounts writes the counts, the reasons specs were not checked, and
// how many never started.
func WriteCounts(w io.Writer, rep *suites.CertifyReport) {
	reasons := map[string]int{}
	for _, n := range rep.NotChecked {
		reasons[n.Reason] = n.Count
	}
	suites.WriteCounts(w, rep.Counts.Passed, rep.Counts.Failed, rep.Counts.NotChecked, reasons)
	if rep.Counts.NotRun > 0 {
		fmt.Fprintf(w, "%d not run: the run stopped before they started (neither passes nor failures)\n", rep.Counts.NotRun)
	}
}

// WriteVerdict prints a certifier's last line: the verdict word (coloured
// on a terminal), why, PARTIAL when the run did not cover its whole suite,
// and how long it took. `tail -1` is this line.
func WriteVerdict(o Output, rep *suites.CertifyReport) {
	color := "red"
	if rep.Verdict == suites.VerdictAccepted {
		color = "green"
	}
	word, rest, _ := strings.Cut(rep.VerdictLine(), ":")
	fmt.Fprintf(o.Out, "%s:%s (%s)\n", paint(o, word, color), rest, duration(rep))
}

func duration(rep *suites.CertifyReport) time.Duration {
	return time.Duration(rep.DurationSeconds * float64(time.Second)).Round(time.Millisecond)
}

func paint(o Output, word, color string) string {
	if o.Paint == nil {
		return word
	}
	return o.Paint(word, color)
}
