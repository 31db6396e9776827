package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/flex"
	"github.com/onsi/ginkgo/v2/types"
)

func init() {
	commands["certify-flex"] = command{summary: "certify a Kubernetes FlexVolume driver (the project's BOSH dynamic disks driver by default) against an embedded director, agents and fake cloud", run: runCertifyFlex}
}

type certifyFlexFlags struct {
	driver, plugin, backend  string
	labelFilter, focus, skip string
	junit, jsonReport, html  string
	reportDir                string
	callTimeout              time.Duration
	verbose, lenientExit     bool
	list, listJSON           bool
}

func runCertifyFlex(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certify-flex", stderr)
	var f certifyFlexFlags
	fs.StringVar(&f.driver, "driver", "", "the FlexVolume driver executable (default: bosh-flexvolume next to cpilab or on PATH)")
	fs.StringVar(&f.plugin, "plugin-name", "", "its plugin directory name, vendor~driver (default: its directory's name when it has a ~, else cpilab~<executable name>)")
	fs.StringVar(&f.backend, "backend", flex.BackendBOSH, "bosh: the driver stores volumes as the director's dynamic disks (cloud and fault checks made); none: it does not")
	fs.DurationVar(&f.callTimeout, "call-timeout", 60*time.Second, "time-out of each call-out (the driver is killed after it)")
	fs.StringVar(&f.labelFilter, "label-filter", "", "run only the specs matching this Ginkgo label filter `EXPR` (e.g. area:attach)")
	fs.StringVar(&f.focus, "focus", "", "run only the specs whose full text matches this `REGEXP` (each failure prints one)")
	fs.StringVar(&f.skip, "skip", "", "leave out the specs whose full text matches this `REGEXP`")
	fs.BoolVar(&f.list, "list", false, "list the specs (id, clause, labels) that would run, without running anything")
	fs.BoolVar(&f.listJSON, "json", false, "with --list: print the specs as JSON")
	fs.StringVar(&f.junit, "junit-report", "", "write a JUnit report to `FILE` (- for stdout; the text then goes to stderr)")
	fs.StringVar(&f.jsonReport, "json-report", "", "write a JSON report to `FILE` (- for stdout; the text then goes to stderr)")
	fs.StringVar(&f.html, "html-report", "", "write an HTML report (verdict, summary, failures) to `FILE` (- for stdout; the text then goes to stderr)")
	fs.StringVar(&f.reportDir, "report-dir", "", reportDirUsage)
	fs.BoolVar(&f.lenientExit, "lenient-exit", false, "accept Failure with exit status 0, as kubelet does (default: Failure must exit non-zero, as the FlexVolume doc says)")
	fs.BoolVar(&f.verbose, "v", false, "verbose Ginkgo output, with every call-out and its output")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.backend != flex.BackendBOSH && f.backend != flex.BackendNone {
		fmt.Fprintf(stderr, "cpilab certify-flex: --backend must be %s or %s, not %q\n", flex.BackendBOSH, flex.BackendNone, f.backend)
		return exitError(2)
	}
	if err := checkFilters(fs, f.labelFilter, f.focus, f.skip); err != nil {
		return err
	}
	if f.listJSON && !f.list {
		return usageError(fs, "--json goes with --list")
	}
	if err := f.reports().check(fs); err != nil {
		return err
	}
	if f.list {
		specs, err := suites.ListTree(flex.Description, func() { flex.Register(&flex.RunConfig{}) }, f.runOptions())
		if err != nil {
			return err
		}
		return writeSpecList(stdout, specs, f.listJSON)
	}
	reportOut := stdout
	if f.reports().toStdout() {
		stdout = stderr // stdout holds the report alone
	}
	driver, own, err := findFlexDriver(f.driver)
	if err != nil {
		return err
	}
	plugin := f.plugin
	if plugin == "" && own {
		plugin = "cpilab~bosh-disk"
	}
	rc := flex.RunConfig{Config: flex.Config{Driver: driver, PluginName: plugin, Backend: f.backend, CallTimeout: f.callTimeout,
		LenientExit: f.lenientExit},
		EnvOut: stdout}
	u := newUI(fs, stdout, stderr)
	log, err := f.reports().openDir(fs, &u)
	if err != nil {
		return err
	}
	defer log.Close()
	stdout, stderr = u.out, u.err
	opts := f.runOptions()
	opts.Output, opts.Verbose = stdout, f.verbose
	prog := newProgress(stderr)
	prog.quiet = u.quiet
	opts.Progress = prog.update
	if !u.quiet {
		fmt.Fprintf(stdout, "certifying FlexVolume driver %s (backend %s)\n", driver, f.backend)
	}
	start := time.Now() // I/O edge: the run's wall time, for the report
	report, err := flex.Run(ctx, rc, opts)
	prog.done()
	if err != nil {
		return err
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	mod, commit, _ := version()
	rep := suites.NewCertifyReport(report, suites.ReportRun{Tool: suites.ToolInfo{Name: "cpilab", Version: mod, Commit: commit},
		Title: "cpilab certify-flex", TargetKind: "FlexVolume driver", Areas: flex.Areas, ClauseTitles: flex.ClauseTitles,
		Target: driver, Command: append([]string{invokedAs()}, os.Args[1:]...),
		Notes: []string{"FlexVolume driver certification, backend " + f.backend}, Started: start, Duration: elapsed,
		Interrupted: ctx.Err() != nil && !report.SuiteSucceeded, Rerun: flexRerunCommand(f, invokedAs(), driver, fs)})
	if !u.quiet {
		writeFlexSpecs(stdout, report)
		reasons := map[string]int{}
		for _, n := range rep.NotChecked {
			reasons[n.Reason] = n.Count
		}
		suites.WriteCounts(stdout, rep.Counts.Passed, rep.Counts.Failed, rep.Counts.NotChecked, reasons)
		if rep.Counts.NotRun > 0 {
			fmt.Fprintf(stdout, "%d not run: the run stopped before they started (neither passes nor failures)\n", rep.Counts.NotRun)
		}
	}
	rep.WriteFailuresText(u.out)
	if err := f.reports().write(rep, reportOut); err != nil {
		return err
	}
	u.writeVerdict(rep)
	return verdictExit(rep)
}

// runOptions are the Ginkgo selection of the run: label filter, focus,
// skip.
func (f certifyFlexFlags) runOptions() suites.RunOptions {
	opts := suites.RunOptions{LabelFilter: f.labelFilter}
	if f.focus != "" {
		opts.Focus = []string{f.focus}
	}
	if f.skip != "" {
		opts.Skip = []string{f.skip}
	}
	return opts
}

// writeFlexSpecs lists each spec that ran with its mark.
func writeFlexSpecs(w io.Writer, r types.Report) {
	for _, sr := range r.SpecReports {
		if sr.LeafNodeType != types.NodeTypeIt || !suites.Ran(sr) {
			continue
		}
		mark := "✔"
		switch {
		case sr.State.Is(types.SpecStateSkipped | types.SpecStatePending):
			mark = "–"
		case sr.Failed():
			mark = "✘"
		}
		fmt.Fprintf(w, "%s %s\n", mark, sr.LeafNodeText)
	}
}

// flexRerunCommand returns the command line that reruns one spec, runnable
// as printed from any directory: the cpilab the user ran (argv0), the
// driver's absolute path, and every flag that changes what a spec does.
func flexRerunCommand(f certifyFlexFlags, argv0, driver string, fs *flag.FlagSet) func(focus string) string {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	return func(focus string) string {
		parts := []string{shellWord(argv0), "certify-flex"}
		if f.driver != "" {
			parts = append(parts, "--driver", shellWord(driver))
		}
		if f.plugin != "" {
			parts = append(parts, "--plugin-name", shellWord(f.plugin))
		}
		if f.backend != flex.BackendBOSH {
			parts = append(parts, "--backend", f.backend)
		}
		if f.lenientExit {
			parts = append(parts, "--lenient-exit")
		}
		if set["call-timeout"] {
			parts = append(parts, "--call-timeout", f.callTimeout.String())
		}
		return strings.Join(append(parts, "--focus", shellWord(focus)), " ")
	}
}

// findFlexDriver returns the driver to certify and whether it is the
// project's own.
func findFlexDriver(flagPath string) (string, bool, error) {
	if flagPath != "" {
		p, err := filepath.Abs(flagPath)
		if err != nil {
			return "", false, err
		}
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", false, fmt.Errorf("--driver %s: not an executable file", flagPath)
		}
		return p, false, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "bosh-flexvolume")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, true, nil
		}
	}
	if p, err := exec.LookPath("bosh-flexvolume"); err == nil {
		abs, err := filepath.Abs(p)
		return abs, true, err
	}
	return "", false, errors.New("no FlexVolume driver to certify: bosh-flexvolume is neither next to cpilab nor on PATH (run `make build`, or give --driver PATH)")
}
