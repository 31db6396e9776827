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
	"path/filepath"
	"strings"
	"time"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/cpilab/cpilab/certifier"
	"github.com/cpilab/cpilab/internal/shellword"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/cpisuite"
	"github.com/cpilab/cpilab/testbed"
)

func init() {
	commands["certify"] = command{summary: "certify a CPI against the contract suite and the reference table", run: runCertify}
}

// certifyFlags are certify's flags; they map onto cpisuite.Config and
// suites.RunOptions and nothing else.
type certifyFlags struct {
	// common are the flags every certifier shares (package certifier).
	common                    certifier.Flags
	cpi, config, cloud        string
	dockerHost, dockerAPI     string              // --docker-host, --docker-api-version (certify_cloud.go)
	agent                     string              // --agent reference|real (certify_agent.go)
	realDocker                *testbed.RealDocker // the daemon of --docker-host, once dialled
	callTimeout, agentTimeout time.Duration
	expectSwitch              bool
	noModelReads              bool
	requireAPIVersion         int
	// ginkgo are the --ginkgo.NAME[=VALUE] arguments passed through to
	// Ginkgo, as given.
	ginkgo []string
	// set names the flags given on the command line.
	set map[string]bool
	// explore are the random lifecycles' flags (certify_explore.go).
	explore exploreFlags
}

// certifyUsage is what certify says more than certifier.Usage about the
// shared flags.
var certifyUsage = map[string]string{
	"label-filter": "run only the specs matching this Ginkgo label filter `EXPR`, e.g. 'area:errors && api:2'",
	"fail-fast":    "stop at the first failed spec (it then runs in one process; what the specs that ran created is still cleaned up, and what an interrupted call left is swept); the verdict is then PARTIAL",
	"strict":       "fail, instead of not checking, every spec that cannot check its clause here (no oracle, no agent, a row the CPI cannot be switched into); what does not apply at all stays not checked",
}

func (f *certifyFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.cpi, "cpi", "", "CPI executable `PATH` to certify on the embedded fake cloud, run as PATH -configPath FILE with the config cpilab writes (default: bin/fakeiaas-cpi next to cpilab, else fakeiaas-cpi on PATH); it must speak fakeiaas's API, or with --cloud docker be the BOSH Docker CPI")
	fs.StringVar(&f.config, "config", "", "YAML `FILE` describing a real cloud (CPI command and config, stemcells, cloud properties, networks; docs/cloud.yml); the oracle checks are then not checked")
	f.common.Register(fs, certifyUsage)
	fs.StringVar(&f.agent, "agent", agentReference, "the agent that resolves the CPI's disk hints on the embedded cloud: `reference` (cpilab's) or real (the upstream BOSH agent in a container on a private Docker daemon, docs/agent.md; the matrix rows only, unless --label-filter says otherwise; rows it cannot host are not checked)")
	fs.DurationVar(&f.callTimeout, "call-timeout", 60*time.Second, "bound on one CPI call; a CPI still running is killed with its whole process group and the call fails")
	fs.DurationVar(&f.agentTimeout, "agent-timeout", 30*time.Second, "bound on waiting for an agent to answer ping")
	fs.BoolVar(&f.expectSwitch, "expect-version-switch", false, "the CPI claims to honour debug.cpi.api_version: fail (instead of not checking) the rows it cannot be switched into (always on for the default reference CPI)")
	fs.BoolVar(&f.noModelReads, "no-model-reads", false, "with --config: do not read the cloud through the CPI's own has_vm, has_disk and get_disks around every call (the contract's model is then not checked)")
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
	if err := f.check(fs); err != nil {
		return err
	}
	if err := passToGinkgo(fs, f); err != nil {
		return err
	}
	if inSuitesWorker() {
		f.common.Reports.Dir = "" // the process that started this worker keeps the log
	}
	run := &certifyRun{f: f}
	return runCertifier(ctx, fs, &f.common, certifier.Certifier{Name: "certify", TargetKind: "CPI", StrictInSuite: true,
		Areas: cpisuite.ReportAreas(), ClauseTitles: cpisuite.ClauseTitles, RowRank: cpisuite.RowRank,
		List: func(opts suites.RunOptions) ([]suites.SpecInfo, error) {
			return cpisuite.List(cpisuite.Config{CPI: cpisuite.Target{Command: []string{"cpi"}}}, opts)
		},
		Run: run.run}, stdout, stderr)
}

// check refuses, before anything starts, flags that cannot work: each is a
// usage error (exit status 2) that says what was wrong. The flags every
// certifier shares are checked by the runner.
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
	if f.requireAPIVersion < 0 {
		return usageError(fs, "--require-api-version %d: want 0 (none) or a positive api_version", f.requireAPIVersion)
	}
	if f.callTimeout <= 0 || f.agentTimeout <= 0 {
		return usageError(fs, "--call-timeout and --agent-timeout must be positive, got %s and %s", f.callTimeout, f.agentTimeout)
	}
	if f.cpi != "" && !f.common.List {
		if err := checkCPI(f.cpi); err != nil {
			return usageError(fs, "%v", err)
		}
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
	f      certifyFlags
	notes  []string
	target string
	// realAgents is --agent real's upstream agent (nil otherwise).
	realAgents *testbed.RealAgents
}

// setUp finds the CPI and what it runs on: the embedded cloud (tb, closed
// by the caller) or the real cloud of --config.
func (c *certifyRun) setUp() (cpisuite.Config, *testbed.Testbed, error) {
	f := c.f
	if f.config != "" {
		rc, err := cpisuite.LoadCloudFile(f.config)
		if err != nil {
			return cpisuite.Config{}, nil, err
		}
		cfg, err := rc.Config()
		if err != nil {
			return cfg, nil, err
		}
		c.target = strings.Join(cfg.CPI.Command, " ")
		c.notes = append(c.notes, "real cloud ("+f.config+"): the oracle checks (IaaS state, registry and user-data, leaks seen by the IaaS) and the fault-injection spec are not checked; rows that need another CPI config are not checked")
		cfg.NoModelReads = f.noModelReads
		if f.noModelReads {
			c.notes = append(c.notes, "--no-model-reads: the contract's model is not checked")
		} else {
			c.notes = append(c.notes, "the contract's model checks what the CPI's own has_vm, has_disk and get_disks show around every call (stemcells, snapshots, metadata, sizes and the registry are not seen)")
		}
		if cfg.Agents == nil {
			c.notes = append(c.notes, "no mbus_url in the config: the agent steps of the matrix are not checked")
		}
		if cfg.Files == nil {
			c.notes = append(c.notes, "no ssh block in the config: the symlink and data steps of the matrix are not checked")
		}
		return cfg, nil, nil
	}
	cpi, isDefault, err := findCPI(f.cpi)
	if err != nil {
		return cpisuite.Config{}, nil, err
	}
	tb, cfg, err := f.startCloud(cpi)
	if err != nil {
		return cfg, nil, err
	}
	cfg.CPI.HonoursAPIVersionCap = isDefault || f.expectSwitch
	c.target = cpi
	c.notes = append(c.notes, f.cloudNote(tb))
	return cfg, tb, nil
}

// run is certify's certifier.Certifier Run: the contract and matrix suites
// (spread over worker processes) against the CPI.
func (c *certifyRun) run(ctx context.Context, opts suites.RunOptions, o certifier.Output) (*certifier.Result, error) {
	f := c.f
	cfg, tb, err := c.setUp()
	if err != nil {
		return nil, err
	}
	if tb != nil {
		defer tb.Close()
		if f.agent == agentReal {
			box, note := startRealAgent(o.Err)
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
	if f.agent == agentReal {
		// One process, one box: a worker process would start its own.
		opts.Workers = 1
		if !f.set["label-filter"] {
			opts.LabelFilter = realAgentRows
		}
	}
	if f.common.FailFast {
		opts.Workers = 1 // stop everything at the first failure, not each worker at its own
	}
	if note, err := applyCertifyExplore(&cfg, &opts, f); err != nil {
		return nil, err
	} else if note != "" {
		c.notes = append(c.notes, note)
	}
	opts.JSONReport = ginkgoReporterConfig().JSONReport // --ginkgo.json-report: Ginkgo's raw report
	opts.Timeout = ginkgoSuiteConfig().Timeout
	if !o.Quiet {
		// The notes come once, with the results.
		fmt.Fprintf(o.Err, "cpilab certify: %s\n", c.target)
	}
	if ctx.Err() != nil { // interrupted while the cloud started
		return nil, certifier.ErrNotStarted
	}
	report, err := cpisuite.Run(cfg, opts)
	if err != nil {
		return nil, err
	}
	if ra := c.realAgents; ra != nil {
		c.notes = append(c.notes, fmt.Sprintf("--agent real: the upstream agent answered %d add_dynamic_disk and remove_dynamic_disk calls, its links in place of the reference agent's", ra.Hosted()))
	}
	interrupted := ctx.Err() != nil && !report.SuiteSucceeded
	if (interrupted || suites.TimedOut(report) || f.common.FailFast && !report.SuiteSucceeded) && tb != nil {
		// An interrupt, the run's time limit or --fail-fast stops specs
		// (and the clean-up of the containers they were in) short: delete
		// what they left.
		if note := cpisuite.Sweep(cfg); note != "" {
			c.notes = append(c.notes, note)
		}
	}
	if inSuitesWorker() {
		// A worker process of cpisuite.Run: its share's report went to the
		// process that started it, which prints and writes the reports.
		return &certifier.Result{Worker: true}, nil
	}
	res := &certifier.Result{Report: report, Target: c.target, Rerun: cfg.RerunCommand, Replay: replayCommand(f, invokedAs()),
		Body: func(w io.Writer, _ types.Report, rep *suites.CertifyReport) {
			fmt.Fprintln(w)
			rep.WriteMatrixText(w)
		}}
	if tb != nil {
		// What the run left behind, seen by the IaaS itself: clean-up is
		// checked even after failed specs and after Ctrl-C.
		inv, err := cfg.Oracle.Inventory(context.WithoutCancel(ctx))
		if err != nil {
			return nil, fmt.Errorf("oracle inventory: %w", err)
		}
		res.LeftIn = "the embedded fakeiaas"
		res.LeftInCloud = append(append(append(append([]string{}, prefixed("stemcell", inv.Stemcells)...), prefixed("vm", inv.VMs)...),
			prefixed("disk", inv.Disks)...), prefixed("snapshot", inv.Snapshots)...)
	}
	res.Notes = c.notes
	return res, nil
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
		return strings.Join(append(certifyShaping(f, argv0), "--focus", shellWord(focus)), " ")
	}
}

// replayCommand returns the command line that runs a replay file of a
// shrunk random lifecycle alone: the same cpilab and shaping flags as
// rerunCommand, and --replay FILE.
func replayCommand(f certifyFlags, argv0 string) func(file string) string {
	return func(file string) string {
		if p, err := filepath.Abs(file); err == nil {
			file = p
		}
		return strings.Join(append(certifyShaping(f, argv0), "--replay", shellWord(file)), " ")
	}
}

// certifyShaping is "cpilab certify" as the user ran it with every flag
// of the run that changes what a spec does (not the selection, the
// reports or the output).
func certifyShaping(f certifyFlags, argv0 string) []string {
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
	if f.common.Strict {
		parts = append(parts, "--strict")
	}
	if f.noModelReads {
		parts = append(parts, "--no-model-reads")
	}
	parts = append(parts, rerunCloud(f)...)
	parts = append(parts, rerunExtra(f)...)
	for _, g := range f.ginkgo {
		if !ginkgoOutputOnly(g) {
			parts = append(parts, shellWord(g))
		}
	}
	return parts
}

// shellWord quotes s for a POSIX shell when it needs it.
func shellWord(s string) string { return shellword.Quote(s) }

// inSuitesWorker reports whether this process is one of the worker
// processes cpisuite.Run starts by running the same certify command again
// (suites/workers.go names its share in CPILAB_SUITES_WORKER).
func inSuitesWorker() bool { return os.Getenv("CPILAB_SUITES_WORKER") != "" }
