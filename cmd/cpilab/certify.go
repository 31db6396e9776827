package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/internal/termsafe"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/testbed"
)

func init() {
	commands["certify"] = command{summary: "certify a CPI against the contract suite and the reference table", run: runCertify}
}

// certifyFlags are certify's flags; they map onto suites.Config and
// suites.RunOptions and nothing else.
type certifyFlags struct {
	cpi, config, cloud                    string
	dockerHost, dockerAPI                 string              // --docker-host, --docker-api-version (certify_cloud.go)
	agent                                 string              // --agent reference|real (certify_agent.go)
	realDocker                            *testbed.RealDocker // the daemon of --docker-host, once dialled
	labelFilter, focus, skip              string
	junit, jsonReport, html, reportDir    string
	callTimeout, agentTimeout             time.Duration
	expectSwitch, verbose, failFast, list bool
	strict, listJSON                      bool
	requireAPIVersion                     int
	// ginkgo are the --ginkgo.NAME[=VALUE] arguments passed through to
	// Ginkgo, as given.
	ginkgo []string
	// set names the flags given on the command line.
	set map[string]bool
	// explore are the random lifecycles' flags (certify_explore.go).
	explore exploreFlags
}

func (f *certifyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cpi, "cpi", "", "CPI executable `PATH` to certify on the embedded fake cloud, run as PATH -configPath FILE with the config cpilab writes (default: bin/fakeiaas-cpi next to cpilab, else fakeiaas-cpi on PATH); it must speak fakeiaas's API, or with --cloud docker be the BOSH Docker CPI")
	fs.StringVar(&f.config, "config", "", "YAML `FILE` describing a real cloud (CPI command and config, stemcells, cloud properties, networks; docs/cloud.yml); the oracle checks are then not checked")
	fs.StringVar(&f.agent, "agent", agentReference, "the agent that resolves the CPI's disk hints on the embedded cloud: `reference` (cpilab's) or real (the upstream BOSH agent in a container on a private Docker daemon, docs/agent.md; the matrix rows only, unless --label-filter says otherwise; rows it cannot host are not checked)")
	fs.StringVar(&f.labelFilter, "label-filter", "", "run only the specs matching this Ginkgo label filter `EXPR`, e.g. 'area:errors && api:2'")
	fs.StringVar(&f.focus, "focus", "", "run only the specs whose full text matches this `REGEXP` (each failure prints one)")
	fs.StringVar(&f.skip, "skip", "", "leave out the specs whose full text matches this `REGEXP`")
	fs.BoolVar(&f.failFast, "fail-fast", false, "stop at the first failed spec (what it created is still cleaned up)")
	fs.BoolVar(&f.list, "list", false, "list the specs (id, clause, labels) that would run, without running anything")
	fs.BoolVar(&f.listJSON, "json", false, "with --list: print the specs as JSON")
	fs.BoolVar(&f.strict, "strict", false, "fail, instead of not checking, every spec that cannot check its clause here (no oracle, no agent, a row the CPI cannot be switched into); what does not apply at all stays not checked")
	fs.StringVar(&f.junit, "junit-report", "", "write a JUnit XML report (one testsuite per suite and row) to `FILE` (- for stdout; the text then goes to stderr)")
	fs.StringVar(&f.jsonReport, "json-report", "", "write cpilab's JSON report (docs/report.md) to `FILE` (- for stdout; the text then goes to stderr)")
	fs.StringVar(&f.html, "html-report", "", "write an HTML report (verdict, matrix linked to its specs, legend) to `FILE` (- for stdout; the text then goes to stderr)")
	fs.StringVar(&f.reportDir, "report-dir", "", reportDirUsage)
	fs.DurationVar(&f.callTimeout, "call-timeout", 60*time.Second, "bound on one CPI call; a CPI still running is killed with its whole process group and the call fails")
	fs.DurationVar(&f.agentTimeout, "agent-timeout", 30*time.Second, "bound on waiting for an agent to answer ping")
	fs.BoolVar(&f.expectSwitch, "expect-version-switch", false, "the CPI claims to honour debug.cpi.api_version: fail (instead of not checking) the rows it cannot be switched into (always on for the default reference CPI)")
	fs.BoolVar(&f.verbose, "v", false, "stream Ginkgo's verbose output to stderr")
	registerCertifyExtra(fs, f)
	registerCertifyCloud(fs, f)
	registerCertifyExplore(fs, f)
}

func runCertify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certify", stderr)
	var f certifyFlags
	f.register(fs)
	own, ginkgoArgs := splitGinkgoArgs(args)
	if err := parseFlags(fs, own); err != nil {
		return err
	}
	f.ginkgo = ginkgoArgs
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	u := newUI(fs, stdout, stderr)
	if f.reports().toStdout() {
		u = newUI(fs, stderr, stderr) // stdout holds the report alone
	}
	if err := f.check(fs); err != nil {
		return err
	}
	if err := passToGinkgo(fs, f); err != nil {
		return err
	}
	if f.list {
		return listSpecs(u, f)
	}
	if inSuitesWorker() {
		f.reportDir = "" // the process that started this worker keeps the log
	}
	log, err := f.reports().openDir(fs, &u)
	if err != nil {
		return err
	}
	defer log.Close()
	run := certifyRun{f: f, u: u, stdout: stdout, started: time.Now()}
	return run.certify(ctx)
}

// check refuses, before anything starts, flags that cannot work: each is a
// usage error (exit status 2) that says what was wrong.
func (f *certifyFlags) check(fs *flag.FlagSet) error {
	if f.cpi != "" && f.config != "" {
		return usageError(fs, "--cpi and --config exclude each other: --config names its own CPI command")
	}
	if err := f.checkCloud(fs); err != nil {
		return err
	}
	if err := f.checkExplore(fs); err != nil {
		return err
	}
	if err := f.checkAgent(fs); err != nil {
		return err
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
	if f.requireAPIVersion < 0 {
		return usageError(fs, "--require-api-version %d: want 0 (none) or a positive api_version", f.requireAPIVersion)
	}
	if f.callTimeout <= 0 || f.agentTimeout <= 0 {
		return usageError(fs, "--call-timeout and --agent-timeout must be positive, got %s and %s", f.callTimeout, f.agentTimeout)
	}
	if f.cpi != "" && !f.list {
		if err := checkCPI(f.cpi); err != nil {
			return usageError(fs, "%v", err)
		}
	}
	return nil
}

// oneLine keeps the first line of a Ginkgo error, without its colours.
func oneLine(s string) string {
	s = regexp.MustCompile("\x1b\\[[0-9;]*m").ReplaceAllString(s, "")
	var parts []string
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, " ")
}

// checkReportPath refuses a report path whose directory is missing or
// that names a directory, so that a report is never lost after a run.
func checkReportPath(p string) error {
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return errors.New("is a directory; give a file name")
	}
	dir := filepath.Dir(p)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist (create it first)", dir)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// checkCPI says precisely why path cannot be run as a CPI.
func checkCPI(path string) error {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("--cpi %s: no such file", path)
	case err != nil:
		return fmt.Errorf("--cpi %s: %w", path, err)
	case fi.IsDir():
		return fmt.Errorf("--cpi %s: is a directory, not a CPI executable", path)
	case fi.Mode()&0o111 == 0:
		return fmt.Errorf("--cpi %s: not executable (mode %s); chmod +x it", path, fi.Mode().Perm())
	}
	return nil
}

// certifyRun is one certify run.
type certifyRun struct {
	f       certifyFlags
	u       ui
	stdout  io.Writer // where a report named "-" goes
	started time.Time
	notes   []string
	target  string
	// realAgents is --agent real's upstream agent (nil otherwise).
	realAgents *testbed.RealAgents
}

func (c *certifyRun) certify(ctx context.Context) error {
	f, u := c.f, c.u
	var cfg suites.Config
	var tb *testbed.Testbed
	switch {
	case f.config != "":
		rc, err := suites.LoadCloudFile(f.config)
		if err != nil {
			return err
		}
		if cfg, err = rc.Config(); err != nil {
			return err
		}
		c.target = strings.Join(cfg.CPI.Command, " ")
		c.notes = append(c.notes, "real cloud ("+f.config+"): the oracle checks (IaaS state, registry and user-data, leaks seen by the IaaS) and the fault-injection spec are not checked; rows that need another CPI config are not checked")
		if cfg.Agents == nil {
			c.notes = append(c.notes, "no mbus_url in the config: the agent steps of the matrix are not checked")
		}
		if cfg.Files == nil {
			c.notes = append(c.notes, "no ssh block in the config: the symlink and data steps of the matrix are not checked")
		}
	default:
		cpi, isDefault, err := findCPI(f.cpi)
		if err != nil {
			return err
		}
		if tb, cfg, err = f.startCloud(cpi); err != nil {
			return err
		}
		defer tb.Close()
		cfg.CPI.HonoursAPIVersionCap = isDefault || f.expectSwitch
		c.target = cpi
		c.notes = append(c.notes, f.cloudNote(tb))
		if f.agent == agentReal {
			box, note := startRealAgent(u.err)
			if box != nil {
				defer box.Close()
				ra := tb.RealAgents(box)
				cfg.Agents = ra
				c.realAgents = ra
			} else {
				cfg.Agents = notHostedAgents{why: note}
			}
			c.notes = append(c.notes, note)
		}
	}
	// A cloud file's timeouts hold unless a flag says otherwise.
	if f.config == "" || f.set["call-timeout"] || cfg.Timeouts.Call == 0 {
		cfg.Timeouts.Call = f.callTimeout
	}
	if f.config == "" || f.set["agent-timeout"] || cfg.Timeouts.Agent == 0 {
		cfg.Timeouts.Agent = f.agentTimeout
	}
	cfg.RerunCommand = rerunCommand(f, invokedAs())
	applyCertifyExtra(&cfg, f)

	opts := suites.RunOptions{LabelFilter: f.labelFilter, Verbose: f.verbose, Output: u.err}
	if f.agent == agentReal {
		// One process, one box: a worker process would start its own.
		opts.Workers = 1
		if !f.set["label-filter"] {
			opts.LabelFilter = realAgentRows
		}
	}
	if f.focus != "" {
		opts.Focus = []string{f.focus}
	}
	if f.failFast {
		opts.Workers = 1 // stop everything at the first failure, not each worker at its own
	}
	if note, err := applyCertifyExplore(&cfg, &opts, f); err != nil {
		return err
	} else if note != "" {
		c.notes = append(c.notes, note)
	}
	opts.JSONReport = ginkgoReporterConfig().JSONReport // --ginkgo.json-report: Ginkgo's raw report
	opts.Timeout = ginkgoSuiteConfig().Timeout
	if !u.quiet {
		// The notes come once, with the results (writeText).
		fmt.Fprintf(u.err, "cpilab certify: %s\n", c.target)
	}
	if ctx.Err() != nil { // interrupted while the cloud started
		fmt.Fprintln(u.out, u.paint("INTERRUPTED", "red")+": before any spec ran; nothing is certified")
		return exitError(exitUsage)
	}
	prog := newProgress(u.err)
	prog.quiet = u.quiet
	opts.Progress = prog.update
	report, err := suites.Run(cfg, opts)
	prog.done()
	if err != nil {
		return err
	}
	if ra := c.realAgents; ra != nil {
		c.notes = append(c.notes, fmt.Sprintf("--agent real: the upstream agent answered %d add_dynamic_disk and remove_dynamic_disk calls, its links in place of the reference agent's", ra.Hosted()))
	}
	interrupted := ctx.Err() != nil && !report.SuiteSucceeded
	if (interrupted || suites.TimedOut(report) || f.failFast && !report.SuiteSucceeded) && tb != nil {
		// An interrupt, the run's time limit or --fail-fast stops specs
		// (and the clean-up of the containers they were in) short: delete
		// what they left.
		c.sweep(cfg)
	}
	if inSuitesWorker() {
		// A worker process of suites.Run: its share's report went to the
		// process that started it, which prints and writes the reports.
		return nil
	}
	elapsed := time.Since(c.started).Round(time.Millisecond)

	var left []string
	if tb != nil {
		// What the run left behind, seen by the IaaS itself: clean-up is
		// checked even after failed specs and after Ctrl-C.
		inv, err := cfg.Oracle.Inventory(context.WithoutCancel(ctx))
		if err != nil {
			return fmt.Errorf("oracle inventory: %w", err)
		}
		left = append(append(append(append([]string{}, prefixed("stemcell", inv.Stemcells)...), prefixed("vm", inv.VMs)...),
			prefixed("disk", inv.Disks)...), prefixed("snapshot", inv.Snapshots)...)
	}
	mod, commit, _ := version()
	rep := suites.NewCertifyReport(report, suites.ReportRun{
		Tool: suites.ToolInfo{Name: "cpilab", Version: mod, Commit: commit}, Target: c.target,
		Command: append([]string{invokedAs()}, os.Args[1:]...), Notes: c.notes, Started: c.started, Duration: elapsed,
		Strict: f.strict, Interrupted: interrupted, Rerun: cfg.RerunCommand, LeftInCloud: left, FailFast: f.failFast,
	})
	c.writeText(rep, tb != nil)
	if err := c.f.reports().write(rep, c.stdout); err != nil {
		return err
	}
	return verdictExit(rep)
}

// sweep deletes, through the CPI, what an interrupted run left in the
// embedded cloud: a call in flight when Ctrl-C came may create a VM or a
// disk after its spec's clean-up has run. The note says what it deleted.
func (c *certifyRun) sweep(cfg suites.Config) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*cfg.Timeouts.Call)
	defer cancel()
	inv, err := cfg.Oracle.Inventory(ctx)
	if err != nil || len(inv.Stemcells)+len(inv.VMs)+len(inv.Disks)+len(inv.Snapshots) == 0 {
		return
	}
	cl, _, err := suites.NewClient(ctx, cfg, cpiv2.ProfileDirectorCurrent, suites.Switch{})
	if err != nil {
		c.notes = append(c.notes, fmt.Sprintf("interrupted: could not clean up what calls in flight created (%v)", err))
		return
	}
	tr := suites.NewTracker(cl)
	var names []string
	for _, g := range []struct {
		kind suites.Kind
		cids []string
	}{{suites.KindStemcell, inv.Stemcells}, {suites.KindVM, inv.VMs}, {suites.KindDisk, inv.Disks}, {suites.KindSnapshot, inv.Snapshots}} {
		for _, cid := range g.cids {
			tr.Add(suites.Resource{Kind: g.kind, CID: cid})
			names = append(names, string(g.kind)+" "+cid)
		}
	}
	note := "stopped short: deleted through the CPI what the run left when an interrupt, its time limit or --fail-fast stopped it: " + strings.Join(names, ", ")
	if err := tr.Cleanup(ctx); err != nil {
		note += fmt.Sprintf(" (not all: %v)", err)
	}
	c.notes = append(c.notes, note)
}

// writeText prints the run for a person: the matrix, notes, what is left in
// the cloud, warnings, each failure with its rerun command, and the
// verdict line (last, so that `tail -1` is the verdict). --quiet keeps the
// failures and the verdict.
func (c *certifyRun) writeText(rep *suites.CertifyReport, embedded bool) {
	u := c.u
	if !u.quiet {
		fmt.Fprintln(u.out)
		rep.WriteMatrixText(u.out)
		for _, n := range c.notes {
			fmt.Fprintf(u.out, "note: %s\n", termsafe.String(n))
		}
		if embedded {
			left := strings.Join(rep.LeftInCloud, ", ")
			if left == "" {
				left = "nothing"
			}
			fmt.Fprintf(u.out, "left in the embedded fakeiaas after the run: %s\n", left)
		}
		rep.WriteWarningsText(u.out)
	}
	rep.WriteFailuresText(u.out)
	u.writeVerdict(rep)
}

// writeVerdict prints a certifier's last line: the verdict word (coloured
// on a terminal), why, PARTIAL when the run did not cover its whole suite,
// and how long it took. `tail -1` is this line.
func (u ui) writeVerdict(rep *suites.CertifyReport) {
	color := "red"
	if rep.Verdict == suites.VerdictAccepted {
		color = "green"
	}
	word, rest, _ := strings.Cut(rep.VerdictLine(), ":")
	fmt.Fprintf(u.out, "%s:%s (%s)\n", u.paint(word, color), rest, time.Duration(rep.DurationSeconds*float64(time.Second)).Round(time.Millisecond))
}

// writeFile writes a report to path. It opens path write-only: opened
// read-write, a path such as /dev/stdout that names a pipe would make this
// process a reader of its own pipe, and a write would block for good once
// the real reader left. A signal stops a write that blocks (writeOrSignal).
func writeFile(path string, write func(io.Writer) error) error {
	return writeOrSignal(path, func() error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			f.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return f.Close()
	})
}

// writeOrSignal runs write, returning early with an error when SIGINT or
// SIGTERM arrives while it runs: writing to a pipe or a slow file never
// keeps Ctrl-C from ending cpilab (the run's own interrupt came before, and
// the reports of an interrupted run are still written).
func writeOrSignal(what string, write func() error) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan error, 1)
	go func() { done <- write() }() // I/O edge: the write may block on a pipe
	select {
	case err := <-done:
		return err
	case sig := <-sigs:
		return fmt.Errorf("writing %s: stopped by %v; the report is incomplete", what, sig)
	}
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
		if err := checkCPI(flagPath); err != nil {
			return "", false, err
		}
		p, err := filepath.Abs(flagPath)
		return p, false, err
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

// invokedAs is how the user ran cpilab: os.Args[0] as typed when it was
// found on PATH or is absolute, else made absolute so that a printed
// command runs from any directory.
func invokedAs() string {
	p := os.Args[0]
	if strings.ContainsRune(p, filepath.Separator) && !filepath.IsAbs(p) {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	return p
}

// rerunCommand returns the command line that reruns one spec: the cpilab
// the user ran, every flag of the run that changes what a spec does, and
// --focus.
func rerunCommand(f certifyFlags, argv0 string) func(focus string) string {
	return func(focus string) string {
		parts := []string{shellWord(argv0), "certify"}
		if f.cpi != "" {
			p, err := filepath.Abs(f.cpi)
			if err != nil {
				p = f.cpi
			}
			parts = append(parts, "--cpi", shellWord(p))
		}
		if f.config != "" {
			p, err := filepath.Abs(f.config)
			if err != nil {
				p = f.config
			}
			parts = append(parts, "--config", shellWord(p))
		}
		if f.set["call-timeout"] {
			parts = append(parts, "--call-timeout", f.callTimeout.String())
		}
		if f.set["agent-timeout"] {
			parts = append(parts, "--agent-timeout", f.agentTimeout.String())
		}
		if f.agent == agentReal {
			parts = append(parts, "--agent", agentReal)
		}
		if f.expectSwitch {
			parts = append(parts, "--expect-version-switch")
		}
		if f.strict {
			parts = append(parts, "--strict")
		}
		parts = append(parts, rerunCloud(f)...)
		parts = append(parts, rerunExtra(f)...)
		for _, g := range f.ginkgo {
			if !ginkgoOutputOnly(g) {
				parts = append(parts, shellWord(g))
			}
		}
		return strings.Join(append(parts, "--focus", shellWord(focus)), " ")
	}
}

// shellWord quotes s for a POSIX shell when it needs it.
func shellWord(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// inSuitesWorker reports whether this process is one of the worker
// processes suites.Run starts by running the same certify command again
// (suites/workers.go names its share in CPILAB_SUITES_WORKER).
func inSuitesWorker() bool { return os.Getenv("CPILAB_SUITES_WORKER") != "" }
