package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/launch"
	directorfixtures "github.com/cpilab/cpilab/fixtures/director"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/dynamicdisks"
)

func init() {
	commands["certify-director"] = command{summary: "certify a director's dynamic disks API (an embedded reference director by default)", run: runCertifyDirector}
}

func runCertifyDirector(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certify-director", stderr)
	var cfg dynamicdisks.Config
	var opts dynamicdisks.RunOptions
	var caFile, instances, profile, usersFile, cloud, cloudSSH, cloudSSHKey string
	fs.StringVar(&cfg.URL, "url", "", "the director's URL (default: start an embedded reference director)")
	fs.StringVar(&caFile, "ca-cert", "", "PEM file of the CA the director's certificate is checked against")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "skip TLS verification")
	fs.StringVar(&cfg.Admin.Username, "admin-user", "", "user with bosh.admin (set-up and clean-up)")
	fs.StringVar(&cfg.Admin.Password, "admin-password", "", "its password")
	fs.StringVar(&cfg.Admin.Token, "admin-token", "", "or a bearer token with bosh.admin")
	fs.StringVar(&cfg.Disks.Username, "disk-user", "", "user holding only dynamic-disk scopes")
	fs.StringVar(&cfg.Disks.Password, "disk-password", "", "its password")
	fs.StringVar(&cfg.Disks.Token, "disk-token", "", "or a bearer token holding only dynamic-disk scopes")
	fs.StringVar(&usersFile, "users", "", "the director's users file (as `cpilab director --users` reads it): a user holding exactly each scope set gives the scope matrix its token")
	fs.StringVar(&cfg.Deployment, "deployment", "", "existing deployment to provide disks to (default: the suite deploys its own)")
	fs.StringVar(&instances, "instances", "", "two instance IDs of --deployment, comma-separated (default: its first two with VMs)")
	fs.StringVar(&cfg.DiskPool, "disk-pool", "", "disk_pool_name (a cloud-config disk_type)")
	fs.StringVar(&cfg.Setup.StemcellLocation, "stemcell", "", "stemcell directory or .tgz on the director's host, for the suite's own deployment")
	fs.StringVar(&cloud, "cloud", "", "URL of the `cpilab fakeiaas` the director runs on (its --cpi-config): the IaaS oracle and the gates that hold create_disk and create_vm")
	fs.StringVar(&cloudSSH, "cloud-ssh", "", "that fake cloud's SFTP address (`cpilab fakeiaas` prints it), to read the agents' disk links")
	fs.StringVar(&cloudSSHKey, "cloud-ssh-key", "", "that fake cloud's SSH client key file (`cpilab fakeiaas` prints it)")
	explore := fs.Bool("explore", false, "explore: 50 random lifecycles of about 30 requests over the model (default: one seeded lifecycle of about 8)")
	fs.IntVar(&cfg.Explore.Runs, "explore-runs", 0, "the number of random lifecycles (overrides --explore's 50; -1: none)")
	fs.IntVar(&cfg.Explore.Steps, "explore-steps", 0, "the average number of requests of one lifecycle")
	fs.Uint64Var(&cfg.Explore.Seed, "explore-seed", 0, "the seed of the first lifecycle (default 1); a failure's rapid.seed=N replays with --explore-seed N --explore-runs 1")
	fs.StringVar(&profile, "profile", "reference", "the embedded director's behaviour profile: reference or upstream")
	fs.DurationVar(&cfg.Timeouts.Task, "task-timeout", 60*time.Second, "how long one task may take, queued and running, before the spec fails naming the task")
	boshAliases(fs)
	var sel selection
	sel.register(fs)
	fs.BoolVar(&opts.Verbose, "v", false, "verbose Ginkgo output")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := sel.check(fs); err != nil {
		return err
	}
	opts.LabelFilter, opts.Focus, opts.Skip = sel.labelFilter, sel.focusList(), sel.skipList()
	if sel.list {
		specs, err := dynamicdisks.List(opts)
		if err != nil {
			return err
		}
		return writeSpecList(stdout, specs, sel.listJSON)
	}
	reportOut := stdout
	u := newUI(fs, stdout, stderr)
	if sel.reports.toStdout() {
		u = newUI(fs, stderr, stderr) // stdout holds the report alone
	}
	log, err := sel.reports.openDir(fs, &u)
	if err != nil {
		return err
	}
	defer log.Close()
	stdout, stderr = u.out, u.err
	if instances != "" {
		cfg.Instances = strings.Split(instances, ",")
	}
	if *explore {
		if cfg.Explore.Runs == 0 {
			cfg.Explore.Runs = 50
		}
		if cfg.Explore.Steps == 0 {
			cfg.Explore.Steps = 30
		}
	}
	if msg := certifyDirectorUsage(cfg, instances); msg != "" {
		fmt.Fprintf(stderr, "cpilab certify-director: %s\n", msg)
		return exitError(2)
	}
	if cloud != "" {
		if cfg.URL == "" {
			fmt.Fprintln(stderr, "cpilab certify-director: --cloud needs --url (the embedded director runs on a fake cloud of its own)")
			return exitError(2)
		}
		cfg.Oracle, cfg.Gates = dynamicdisks.FakeCloud(cloud)
	}
	if (cloudSSH == "") != (cloudSSHKey == "") {
		fmt.Fprintln(stderr, "cpilab certify-director: --cloud-ssh and --cloud-ssh-key go together")
		return exitError(2)
	}
	if cloudSSH != "" {
		links, err := dynamicdisks.SFTPLinks(cloudSSH, cloudSSHKey)
		if err != nil {
			return err
		}
		cfg.Links = links
	}
	if usersFile != "" {
		users, err := loadUsers(usersFile)
		if err != nil {
			return err
		}
		cfg.ScopeCredentials = dynamicdisks.ScopeCredentialsFor(users)
	}
	if caFile != "" {
		pem, err := readCACert(caFile)
		if err != nil {
			return err
		}
		cfg.CACertPEM = pem
	}
	if cfg.URL != "" && cfg.Deployment == "" && cfg.Setup.StemcellLocation == "" && len(cfg.Setup.StemcellManifest) == 0 {
		// The suite deploys its own instances: without a stemcell on the
		// director and none to upload, its set-up could only fail.
		if n, err := dynamicdisks.Stemcells(ctx, cfg); err == nil && n == 0 {
			return usageError(fs, "the director at %s has no stemcell, and the suite deploys its own instances: give --stemcell PATH (a stemcell directory or .tgz on the director's host), or -d/--deployment and --instances of a deployment of yours", cfg.URL)
		}
	}
	opts.Output = stdout
	prog := newProgress(stderr)
	prog.quiet = u.quiet
	var n int
	opts.Progress = func(r dynamicdisks.SpecResult) {
		n++
		outcome := outcomeFailed
		switch r.State {
		case "passed":
			outcome = outcomePassed
		case "skipped", "pending":
			outcome = outcomeSkipped
		}
		prog.spec(n, 0, outcome, r.Text)
	}

	start := time.Now() // I/O edge: the run's wall time, for the report
	if cfg.URL == "" {
		out := stdout
		if u.quiet {
			out = io.Discard
		}
		stop, err := embeddedDirector(ctx, &cfg, profile, out)
		if err != nil {
			return err
		}
		defer stop()
	}
	report, err := dynamicdisks.RunReport(ctx, cfg, opts)
	prog.done()
	if err != nil {
		return err
	}
	mod, commit, _ := version()
	rep := suites.NewCertifyReport(report, suites.ReportRun{Tool: suites.ToolInfo{Name: "cpilab", Version: mod, Commit: commit},
		Title: "cpilab certify-director", TargetKind: "Director", Areas: dynamicdisks.Areas, Row: "dynamic-disks",
		Target: cfg.URL, Command: append([]string{invokedAs()}, os.Args[1:]...), Started: start,
		Duration: time.Since(start).Round(time.Millisecond), Interrupted: ctx.Err() != nil && !report.SuiteSucceeded})
	sum := dynamicdisks.Summarize(report)
	if !u.quiet {
		sum.WriteText(stdout)
	}
	if err := sel.reports.write(rep, reportOut); err != nil {
		return err
	}
	if sum.HarnessOnly() {
		// No answer from the director, even on retries: a harness error,
		// never a verdict on the director.
		fmt.Fprintf(stdout, "NOT CERTIFIED: %d harness errors (no answer from the director), %d passed, %d not checked (%s)\n",
			sum.HarnessErrors, sum.Passed, sum.Skipped, time.Since(start).Round(time.Millisecond))
		fmt.Fprintf(stderr, "cpilab certify-director: %d harness errors (the director could not be reached, even on retries): nothing certified\n", sum.HarnessErrors)
		return exitError(2)
	}
	u.writeVerdict(rep)
	return verdictExit(rep)
}

// certifyDirectorUsage says, in flag names, what a run against --url lacks
// ("" : nothing).
func certifyDirectorUsage(cfg dynamicdisks.Config, instances string) string {
	var missing []string
	if cfg.URL == "" {
		if cfg.Deployment != "" || instances != "" {
			return "--deployment and --instances need --url (the embedded director deploys its own)"
		}
		return ""
	}
	if cfg.Admin.Token == "" && (cfg.Admin.Username == "" || cfg.Admin.Password == "") {
		missing = append(missing, "--admin-token (or --admin-user and --admin-password)")
	}
	if cfg.Disks.Token == "" && (cfg.Disks.Username == "" || cfg.Disks.Password == "") {
		missing = append(missing, "--disk-token (or --disk-user and --disk-password)")
	}
	if cfg.Deployment != "" && cfg.DiskPool == "" {
		missing = append(missing, "--disk-pool (a disk_type of the director's cloud config)")
	}
	if len(cfg.Instances) == 1 {
		missing = append(missing, "a second instance ID in --instances")
	}
	if cfg.Deployment == "" && instances != "" {
		missing = append(missing, "--deployment (for --instances)")
	}
	if len(missing) == 0 {
		return ""
	}
	return "against --url " + cfg.URL + " it needs " + strings.Join(missing, ", ")
}

// embeddedDirector starts a reference director with an admin and a
// disk-scoped user, points cfg at it, and returns its stop function.
func embeddedDirector(ctx context.Context, cfg *dynamicdisks.Config, profile string, stdout io.Writer) (func(), error) {
	dir, err := os.MkdirTemp("", "cpilab-certify-director-")
	if err != nil {
		return nil, err
	}
	// The stemcell the suite uploads when it deploys its own instances,
	// written next to the embedded director (its location is a path on the
	// director's host).
	stemcell := filepath.Join(dir, "stemcell")
	if err := directorfixtures.WriteStemcell(stemcell); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded director: %w", err)
	}
	users := append([]director.User{
		{Name: "admin", Password: "admin", Scopes: []string{director.ScopeAdmin}},
		{Name: "disks", Password: "disks", Scopes: director.DiskScopes},
	}, dynamicdisks.ScopeUsers("scope-", "scope")...)
	ctx, cancel := context.WithCancel(ctx)
	ready := make(chan launch.Info, 1)
	done := make(chan error, 1)
	go func() { // the embedded director serves until the suite is done
		done <- launch.Run(ctx, launch.Config{DataDir: filepath.Join(dir, "director"), Listen: "127.0.0.1:0",
			Out: io.Discard, Profile: profile, Ready: func(i launch.Info) { ready <- i },
			Users: users})
	}()
	stop := func() {
		cancel()
		<-done
		_ = os.RemoveAll(dir)
	}
	select {
	case info := <-ready:
		fmt.Fprintf(stdout, "embedded reference director (profile %s) at %s\n", profile, info.URL)
		cfg.URL, cfg.CACertPEM = info.URL, info.CACertPEM
		cfg.Admin = dynamicdisks.Credentials{Username: "admin", Password: "admin"}
		cfg.Disks = dynamicdisks.Credentials{Username: "disks", Password: "disks"}
		cfg.Setup.StemcellLocation = stemcell
		cfg.ScopeCredentials = dynamicdisks.ScopeCredentialsFor(users)
		if info.Cloud != nil && cfg.Oracle == nil {
			// The fake cloud runs in this process: the suite reads it,
			// the agents' links in its VM roots, and holds its operations.
			cfg.Oracle, cfg.Links, cfg.Gates = dynamicdisks.InProcessCloud(info.Cloud)
		}
		return stop, nil
	case err := <-done:
		cancel()
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("embedded director: %w", err)
	}
}
