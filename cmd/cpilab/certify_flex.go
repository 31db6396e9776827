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
	driver, plugin, backend string
	labelFilter, focus      string
	junit, jsonReport, html string
	callTimeout             time.Duration
	verbose, lenientExit    bool
}

func runCertifyFlex(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certify-flex", stderr)
	var f certifyFlexFlags
	fs.StringVar(&f.driver, "driver", "", "the FlexVolume driver executable (default: bosh-flexvolume next to cpilab or on PATH)")
	fs.StringVar(&f.plugin, "plugin-name", "", "its plugin directory name, vendor~driver (default: its directory's name when it has a ~, else cpilab~<executable name>)")
	fs.StringVar(&f.backend, "backend", flex.BackendBOSH, "bosh: the driver stores volumes as the director's dynamic disks (cloud and fault checks made); none: it does not")
	fs.DurationVar(&f.callTimeout, "call-timeout", 60*time.Second, "time-out of each call-out (the driver is killed after it)")
	fs.StringVar(&f.labelFilter, "label-filter", "", "run only specs matching this Ginkgo label filter (e.g. area:attach)")
	fs.StringVar(&f.focus, "focus", "", "run only specs whose text matches this regexp")
	fs.StringVar(&f.junit, "junit-report", "", "write a JUnit report to `FILE` (- for stdout; the text then goes to stderr)")
	fs.StringVar(&f.jsonReport, "json-report", "", "write a JSON report to `FILE` (- for stdout; the text then goes to stderr)")
	fs.StringVar(&f.html, "html-report", "", "write an HTML report (verdict, summary, failures) to `FILE` (- for stdout; the text then goes to stderr)")
	fs.BoolVar(&f.lenientExit, "lenient-exit", false, "accept Failure with exit status 0, as kubelet does (default: Failure must exit non-zero, as the FlexVolume doc says)")
	fs.BoolVar(&f.verbose, "v", false, "verbose Ginkgo output, with every call-out and its output")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.backend != flex.BackendBOSH && f.backend != flex.BackendNone {
		fmt.Fprintf(stderr, "cpilab certify-flex: --backend must be %s or %s, not %q\n", flex.BackendBOSH, flex.BackendNone, f.backend)
		return exitError(2)
	}
	if err := f.reports().check(fs); err != nil {
		return err
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
	opts := suites.RunOptions{LabelFilter: f.labelFilter, Output: stdout, Verbose: f.verbose}
	if f.focus != "" {
		opts.Focus = []string{f.focus}
	}
	prog := newProgress(stderr)
	opts.Progress = prog.update
	fmt.Fprintf(stdout, "certifying FlexVolume driver %s (backend %s)\n", driver, f.backend)
	start := time.Now() // I/O edge: the run's wall time, for the report
	report, err := flex.Run(ctx, rc, opts)
	prog.done()
	if err != nil {
		return err
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	sum := suites.Summarize(report)
	rerun := flexRerunCommand(f, invokedAs(), driver, fs)
	fails := suites.Failures(report, rerun)
	writeFlexSpecs(stdout, report)
	suites.WriteCounts(stdout, sum.Passed, sum.Failed, sum.Skipped, sum.NotChecked)
	if len(fails) > 0 {
		fmt.Fprintf(stdout, "\nFailures (%d):\n\n", len(fails))
		for _, fl := range fails {
			fl.WriteText(stdout)
			fmt.Fprintln(stdout)
		}
	}
	rep := suites.NewCertifyReport(report, suites.ReportRun{Target: driver, Command: os.Args,
		Notes: []string{"FlexVolume driver certification, backend " + f.backend}, Started: start, Duration: elapsed,
		Rerun: rerun})
	if err := f.reports().write(rep, reportOut); err != nil {
		return err
	}
	switch {
	case len(fails) > 0 || sum.Failed > 0 || !report.SuiteSucceeded:
		fmt.Fprintf(stdout, "REJECTED: %d failed, %d passed, %d not checked (%s)\n", max(sum.Failed, len(fails)), sum.Passed, sum.Skipped, elapsed)
		return exitError(1)
	case sum.Passed == 0:
		fmt.Fprintf(stdout, "NOTHING CHECKED: no spec ran and passed (%d not checked; check --label-filter/--focus) (%s)\n", sum.Skipped, elapsed)
		return exitError(1)
	}
	fmt.Fprintf(stdout, "ACCEPTED: %d passed, %d not checked (%s)\n", sum.Passed, sum.Skipped, elapsed)
	return nil
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
