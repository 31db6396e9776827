package cpisuite

import (
	"github.com/cpilab/cpilab/suites"
	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"github.com/onsi/gomega"
)

// Register adds the CPI contract suite and the reference-table matrix suite
// to the current Ginkgo tree, for embedding in someone else's suite (call it
// at the top level of a _test.go file, or inside a Describe). The set of
// contexts and rows is read from cfg now; everything else is read when the
// specs run, so a BeforeSuite may still fill cfg in (csi-test GinkgoTest).
func Register(cfg *Config) bool {
	strict.Store(cfg.Strict)
	if cfg.RunID == "" {
		cfg.RunID = randomRunID() // one run, one ID, for every container
	}
	describeContract(cfg)
	describeMatrix(cfg)
	return true
}

// Test registers the suites and runs them inside a go test:
//
//	func TestMyCPI(t *testing.T) { cpisuite.Test(t, cfg) }
//
// Only one Test (or Run) per process: Ginkgo runs one suite per process.
// Ginkgo's flags (-ginkgo.label-filter, -ginkgo.focus, -ginkgo.v,
// -ginkgo.junit-report, …) apply.
func Test(t GinkgoTestingT, cfg Config) bool {
	gomega.RegisterFailHandler(Fail)
	Register(&cfg)
	return RunSpecs(t, "cpilab CPI certification")
}

// Run registers the suites and runs them outside go test (the cpilab
// certify path), returning Ginkgo's report. It owns the process's Ginkgo
// state: call it once per process.
func Run(cfg Config, opts suites.RunOptions) (types.Report, error) {
	run := func(opts suites.RunOptions) (types.Report, error) { return runTree(cfg, opts) }
	if report, rows, ok := suites.WorkerShare(); ok {
		return suites.RunWorker(opts, report, rows, run)
	}
	if n := workerCount(opts, cfg.withDefaults()); n > 1 {
		return suites.RunWorkers(shares(cfg.withDefaults(), n), opts, run)
	}
	return run(opts)
}

func runTree(cfg Config, opts suites.RunOptions) (types.Report, error) {
	strict.Store(cfg.Strict)
	return suites.RunTree("cpilab CPI certification", func() { Register(&cfg) }, opts)
}

// List returns every spec the suites would run for cfg and opts (label
// filter and focus applied), with labels and clause, without running
// anything or calling the CPI (a Ginkgo dry run). Like Run, it owns the
// process's Ginkgo state: call it once per process, instead of Run.
func List(cfg Config, opts suites.RunOptions) ([]suites.SpecInfo, error) {
	opts.DryRun = true
	opts.Workers = 1
	opts.JSONReport, opts.JUnitReport, opts.Progress = "", "", nil
	r, err := runTree(cfg, opts)
	if err != nil {
		return nil, err
	}
	return suites.SpecInfos(r, ClauseTitles), nil
}
