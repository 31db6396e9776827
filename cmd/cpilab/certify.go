package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/testbed"
	"github.com/onsi/ginkgo/v2/types"
)

func init() {
	commands["certify"] = command{summary: "certify a CPI against the contract suite and the reference table", run: runCertify}
}

// certifyFlags are certify's flags; they map onto suites.Config and
// suites.RunOptions and nothing else.
type certifyFlags struct {
	cpi, config                           string
	labelFilter, focus                    string
	junit, jsonReport, html               string
	callTimeout, agentTimeout             time.Duration
	expectSwitch, noExpectSwitch, verbose bool
}

func runCertify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certify", stderr)
	var f certifyFlags
	fs.StringVar(&f.cpi, "cpi", "", "CPI executable `PATH` to certify, run as PATH -configPath FILE with the cpi.json cpilab writes for its embedded fakeiaas (default: bin/fakeiaas-cpi next to cpilab, else fakeiaas-cpi on PATH)")
	fs.StringVar(&f.config, "config", "", "YAML `FILE` describing a real cloud (CPI command and config, stemcells, cloud properties, networks); the oracle checks are then skipped")
	fs.StringVar(&f.labelFilter, "label-filter", "", "run only the specs matching this Ginkgo label filter, e.g. 'area:errors && api:2'")
	fs.StringVar(&f.focus, "focus", "", "run only the specs whose full text matches this regexp (each failure prints one)")
	fs.StringVar(&f.junit, "junit-report", "", "write a JUnit XML report to `FILE`")
	fs.StringVar(&f.jsonReport, "json-report", "", "write Ginkgo's JSON report to `FILE`")
	fs.StringVar(&f.html, "html-report", "", "write an HTML report (verdict, matrix, failures) to `FILE`")
	fs.DurationVar(&f.callTimeout, "call-timeout", 60*time.Second, "bound on one CPI call; a CPI still running is killed and the call fails")
	fs.DurationVar(&f.agentTimeout, "agent-timeout", 30*time.Second, "bound on waiting for an agent to answer ping")
	fs.BoolVar(&f.expectSwitch, "expect-version-switch", false, "the CPI claims to honour debug.cpi.api_version: fail (instead of skipping) the rows it cannot be switched into (always on for the default reference CPI)")
	fs.BoolVar(&f.verbose, "v", false, "stream Ginkgo's verbose output to stderr")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: cpilab certify [--cpi PATH | --config FILE] [flags]\n\nRuns the CPI contract suite and the reference-table matrix (CONTRACTS §1–§4).\nExit status 0 only when nothing failed.\n\nflags:")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if f.cpi != "" && f.config != "" {
		return errors.New("--cpi and --config exclude each other: --config names its own CPI command")
	}

	var notes []string
	var cfg suites.Config
	var tb *testbed.Testbed
	var target string
	switch {
	case f.config != "":
		rc, err := suites.LoadCloudFile(f.config)
		if err != nil {
			return err
		}
		if cfg, err = rc.Config(); err != nil {
			return err
		}
		target = strings.Join(cfg.CPI.Command, " ")
		notes = append(notes, "real cloud ("+f.config+"): the oracle checks (IaaS state, registry and user-data, leaks seen by the IaaS) and the fault-injection spec are skipped; rows that need another CPI config are skipped")
		if cfg.Agents == nil {
			notes = append(notes, "no mbus_url in the config: the agent steps of the matrix are skipped")
		}
		if cfg.Files == nil {
			notes = append(notes, "no ssh block in the config: the symlink and data steps of the matrix are skipped")
		}
	default:
		cpi, isDefault, err := findCPI(f.cpi)
		if err != nil {
			return err
		}
		tb, err = testbed.Start(testbed.Config{})
		if err != nil {
			return err
		}
		defer tb.Close()
		if cfg, err = tb.SuiteConfig([]string{cpi}); err != nil {
			return err
		}
		cfg.CPI.HonoursAPIVersionCap = isDefault || f.expectSwitch
		target = cpi
		notes = append(notes, fmt.Sprintf("embedded fakeiaas at %s, NATS at %s, SFTP at %s", tb.URL(), tb.MbusURL(), tb.SSH.Addr()))
	}
	cfg.Timeouts = suites.Timeouts{Call: f.callTimeout, Agent: f.agentTimeout}
	cfg.RerunCommand = rerunCommand(f)

	opts := suites.RunOptions{LabelFilter: f.labelFilter, JUnitReport: f.junit, JSONReport: f.jsonReport,
		Verbose: f.verbose, Output: stderr}
	if f.focus != "" {
		opts.Focus = []string{f.focus}
	}
	prog := newProgress(stderr)
	opts.Progress = prog.update
	fmt.Fprintf(stderr, "cpilab certify: %s\n", target)
	for _, n := range notes {
		fmt.Fprintf(stderr, "  note: %s\n", n)
	}
	start := time.Now()
	report, err := suites.Run(cfg, opts)
	prog.done()
	if err != nil {
		return err
	}
	elapsed := time.Since(start).Round(time.Millisecond)
	sum := suites.Summarize(report)
	fails := suites.Failures(report, cfg.RerunCommand)

	fmt.Fprintln(stdout)
	sum.WriteText(stdout)
	for _, n := range notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	if tb != nil {
		// What the run left behind, seen by the IaaS itself: clean-up is
		// checked even after failed specs.
		inv, err := cfg.Oracle.Inventory(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("oracle inventory: %w", err)
		}
		left := strings.Join(append(append(append(prefixed("stemcell", inv.Stemcells), prefixed("vm", inv.VMs)...),
			prefixed("disk", inv.Disks)...), prefixed("snapshot", inv.Snapshots)...), ", ")
		if left == "" {
			left = "nothing"
		}
		fmt.Fprintf(stdout, "left in the embedded fakeiaas after the run: %s\n", left)
	}
	if len(fails) > 0 {
		fmt.Fprintf(stdout, "\nFailures (%d):\n\n", len(fails))
		for _, fl := range fails {
			fl.WriteText(stdout)
			fmt.Fprintln(stdout)
		}
	}
	if f.html != "" {
		if err := writeHTML(f.html, suites.HTMLReport{Title: "cpilab CPI certification", Target: target, Notes: notes,
			Started: start, Duration: elapsed, Summary: sum, Failures: fails}); err != nil {
			return err
		}
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

func prefixed(kind string, cids []string) []string {
	out := make([]string, len(cids))
	for i, c := range cids {
		out[i] = kind + " " + c
	}
	return out
}

// findCPI returns the CPI to certify and whether it is the default
// reference CPI.
func findCPI(flagPath string) (string, bool, error) {
	if flagPath != "" {
		p, err := filepath.Abs(flagPath)
		if err != nil {
			return "", false, err
		}
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", false, fmt.Errorf("--cpi %s: not an executable file", flagPath)
		}
		return p, false, nil
	}
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "fakeiaas-cpi")
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, true, nil
		}
	}
	if p, err := exec.LookPath("fakeiaas-cpi"); err == nil {
		abs, err := filepath.Abs(p)
		return abs, true, err
	}
	return "", false, errors.New("no CPI to certify: fakeiaas-cpi is neither next to cpilab nor on PATH (run `make build`, or give --cpi PATH)")
}

// rerunCommand returns the command line that reruns one spec.
func rerunCommand(f certifyFlags) func(focus string) string {
	return func(focus string) string {
		parts := []string{"cpilab", "certify"}
		if f.cpi != "" {
			parts = append(parts, "--cpi", shellQuote(f.cpi))
		}
		if f.config != "" {
			parts = append(parts, "--config", shellQuote(f.config))
		}
		if f.expectSwitch {
			parts = append(parts, "--expect-version-switch")
		}
		return strings.Join(append(parts, "--focus", shellQuote(focus)), " ")
	}
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func writeHTML(path string, r suites.HTMLReport) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := suites.WriteHTML(f, r); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

// progress is the live progress line.
type progress struct {
	w                io.Writer
	tty              bool
	pass, fail, skip int
	lastLine         int
	lastPrint        time.Time
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w}
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) update(done, total int, sr *types.SpecReport) {
	if sr == nil {
		fmt.Fprintf(p.w, "running %d specs\n", total)
		return
	}
	switch {
	case sr.State.Is(types.SpecStatePassed):
		p.spec(done, total, outcomePassed, sr.FullText())
	case sr.State.Is(types.SpecStateSkipped | types.SpecStatePending):
		p.spec(done, total, outcomeSkipped, sr.FullText())
	default:
		p.spec(done, total, outcomeFailed, sr.FullText())
	}
}

// The outcomes the progress line counts.
const (
	outcomePassed = iota
	outcomeFailed
	outcomeSkipped
)

// spec counts one finished spec and shows it: in place on a terminal, else
// a line per failure and a summary line every few seconds. total 0: unknown.
func (p *progress) spec(done, total, outcome int, text string) {
	switch outcome {
	case outcomePassed:
		p.pass++
	case outcomeSkipped:
		p.skip++
	default:
		p.fail++
	}
	count := fmt.Sprint(done)
	if total > 0 {
		count = fmt.Sprintf("%d/%d", done, total)
	}
	line := fmt.Sprintf("[%s] ✔ %d  ✘ %d  – %d  %s", count, p.pass, p.fail, p.skip, shorten(text, 70))
	if p.tty {
		pad := max(0, p.lastLine-len([]rune(line)))
		fmt.Fprintf(p.w, "\r%s%s", line, strings.Repeat(" ", pad))
		p.lastLine = len([]rune(line))
		return
	}
	if outcome == outcomeFailed {
		fmt.Fprintf(p.w, "✘ %s\n", text)
	}
	if done == total || time.Since(p.lastPrint) > 5*time.Second {
		fmt.Fprintln(p.w, line)
		p.lastPrint = time.Now()
	}
}

func (p *progress) done() {
	if p.tty && p.lastLine > 0 {
		fmt.Fprintln(p.w)
	}
}

func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
