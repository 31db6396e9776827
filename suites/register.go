package suites

import (
	"fmt"
	"io"
	"time"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/formatter"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
)

// RunOptions configure a suite's run (RunTree, ListTree and each suite's
// own Run).
type RunOptions struct {
	// LabelFilter is a Ginkgo label filter, e.g. "area:errors && api:2".
	LabelFilter string
	// Focus are regexps on the full spec text; only matching specs run.
	Focus []string
	// Skip are regexps on the full spec text; matching specs do not run
	// (empty: Ginkgo's own --ginkgo.skip holds).
	Skip []string
	// JUnitReport and JSONReport are files Ginkgo writes its reports to.
	JUnitReport, JSONReport string
	// Output receives Ginkgo's own verbose output when Verbose is set
	// (default: discarded; Run's callers print their own summary).
	Output  io.Writer
	Verbose bool
	// Progress is called before the first spec with the number that will
	// run (done = 0, spec nil), then after each spec.
	Progress func(done, total int, spec *types.SpecReport)
	// Timeout bounds the whole run (default 1 h).
	Timeout time.Duration
	// Workers is how many processes a suite that runs in workers (the CPI
	// suites: cpisuite.Run) spreads its containers over: 0 picks
	// $CPILAB_SUITES_WORKERS, else NumCPU + 1, at most one per contract
	// context (always 1 inside a test binary); 1 runs everything in this
	// process. Workers re-run the current program with its arguments, so a
	// program calling that Run must reach it again the same way (cpilab
	// certify does).
	Workers int
	// FailFast stops the run at the first failed spec; what the specs
	// that ran created is still cleaned up (their AfterAll and
	// DeferCleanup nodes run).
	FailFast bool
	// DryRun lists the specs without running anything (Ginkgo's dry run):
	// every spec is reported as passed, with its labels.
	DryRun bool
}

type fakeT struct{ failed bool }

func (t *fakeT) Fail() { t.failed = true }

// RunTree runs the specs register adds to the Ginkgo tree, outside go
// test, with opts, and returns Ginkgo's report: the runner behind every
// cpilab suite's Run (cpisuite, dynamicdisks, flex, csisuite). It owns the
// process's Ginkgo state: call it once per process.
func RunTree(description string, register func(), opts RunOptions) (types.Report, error) {
	gomega.RegisterFailHandler(Fail)
	register()
	var report types.Report
	var total, done int
	ReportBeforeSuite(func(r types.Report) {
		total = r.PreRunStats.SpecsThatWillRun
		if opts.Progress != nil {
			opts.Progress(0, total, nil)
		}
	})
	ReportAfterEach(func(sr types.SpecReport) {
		if !Ran(sr) {
			return
		}
		done++
		if opts.Progress != nil {
			opts.Progress(done, total, &sr)
		}
	})
	ReportAfterSuite(description+" summary", func(r types.Report) { report = r })

	suiteConfig, reporterConfig := GinkgoConfiguration()
	suiteConfig.LabelFilter = opts.LabelFilter
	suiteConfig.FocusStrings = opts.Focus
	if len(opts.Skip) > 0 {
		suiteConfig.SkipStrings = opts.Skip
	}
	suiteConfig.DryRun = opts.DryRun
	suiteConfig.FailFast = suiteConfig.FailFast || opts.FailFast
	suiteConfig.Timeout = opts.Timeout
	if suiteConfig.Timeout <= 0 {
		suiteConfig.Timeout = time.Hour
	}
	reporterConfig.JUnitReport = opts.JUnitReport
	reporterConfig.JSONReport = opts.JSONReport
	reporterConfig.NoColor = true
	out := opts.Output
	if !opts.Verbose || out == nil {
		out = io.Discard
	} else {
		reporterConfig.Verbose = true
	}
	formatter.ColorableStdOut = out
	RunSpecs(&fakeT{}, description, suiteConfig, reporterConfig)
	if report.SuiteDescription == "" {
		return report, fmt.Errorf("suites: Ginkgo produced no report for %q", description)
	}
	return report, nil
}

// Ran reports whether a spec ran: a spec filtered out by labels or focus
// is reported as skipped with no message.
func Ran(sr types.SpecReport) bool {
	return !(sr.State == types.SpecStateSkipped && sr.Failure.Message == "")
}
