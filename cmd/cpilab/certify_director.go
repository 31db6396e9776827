package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cpilab/cpilab/certifier"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/launch"
	directorfixtures "github.com/cpilab/cpilab/fixtures/director"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/dynamicdisks"
)

func init() {
	commands["certify-director"] = command{summary: "certify a director's dynamic disks API (an embedded reference director by default)", run: runCertifyDirector}
}

// certifyDirectorFlags are certify-director's flags: the shared ones, and
// what maps onto dynamicdisks.Config.
type certifyDirectorFlags struct {
	common                                                              certifier.Flags
	cfg                                                                 dynamicdisks.Config
	caFile, instances, profile, usersFile, cloud, cloudSSH, cloudSSHKey string
	explore                                                             bool
	// rerun builds a failure's rerun command.
	rerun func(focus string) string
}

func (f *certifyDirectorFlags) register(fs *flag.FlagSet) {
	cfg := &f.cfg
	fs.StringVar(&cfg.URL, "url", "", "the director's URL (default: start an embedded reference director)")
	fs.StringVar(&f.caFile, "ca-cert", "", "PEM file of the CA the director's certificate is checked against")
	fs.BoolVar(&cfg.Insecure, "insecure", false, "skip TLS verification")
	fs.StringVar(&cfg.Admin.Username, "admin-user", "", "user with bosh.admin (set-up and clean-up)")
	fs.StringVar(&cfg.Admin.Password, "admin-password", "", "its password")
	fs.StringVar(&cfg.Admin.Token, "admin-token", "", "or a bearer token with bosh.admin")
	fs.StringVar(&cfg.Disks.Username, "disk-user", "", "user holding only dynamic-disk scopes")
	fs.StringVar(&cfg.Disks.Password, "disk-password", "", "its password")
	fs.StringVar(&cfg.Disks.Token, "disk-token", "", "or a bearer token holding only dynamic-disk scopes")
	fs.StringVar(&f.usersFile, "users", "", "the director's users file (as `cpilab director --users` reads it): a user holding exactly each scope set gives the scope matrix its token")
	fs.StringVar(&cfg.Deployment, "deployment", "", "existing deployment to provide disks to (default: the suite deploys its own)")
	fs.StringVar(&f.instances, "instances", "", "two instance IDs of --deployment, comma-separated (default: its first two with VMs)")
	fs.StringVar(&cfg.DiskPool, "disk-pool", "", "disk_pool_name (a cloud-config disk_type)")
	fs.StringVar(&cfg.Setup.StemcellLocation, "stemcell", "", "stemcell directory or .tgz on the director's host, for the suite's own deployment")
	fs.StringVar(&f.cloud, "cloud", "", "URL of the `cpilab fakeiaas` the director runs on (its --cpi-config): the IaaS oracle and the gates that hold create_disk and create_vm")
	fs.StringVar(&f.cloudSSH, "cloud-ssh", "", "that fake cloud's SFTP address (`cpilab fakeiaas` prints it), to read the agents' disk links")
	fs.StringVar(&f.cloudSSHKey, "cloud-ssh-key", "", "that fake cloud's SSH client key file (`cpilab fakeiaas` prints it)")
	fs.BoolVar(&f.explore, "explore", false, "explore: 50 random lifecycles of about 30 requests over the model (default: one seeded lifecycle of about 8)")
	fs.IntVar(&cfg.Explore.Runs, "explore-runs", 0, "the number of random lifecycles (overrides --explore's 50; -1: none)")
	fs.IntVar(&cfg.Explore.Steps, "explore-steps", 0, "the average number of requests of one lifecycle")
	fs.Uint64Var(&cfg.Explore.Seed, "explore-seed", 0, "the seed of the first lifecycle (default 1); a failure's rapid.seed=N replays with --explore-seed N --explore-runs 1")
	fs.StringVar(&f.profile, "profile", "reference", "the embedded director's behaviour profile: reference or upstream")
	fs.DurationVar(&cfg.Timeouts.Task, "task-timeout", 60*time.Second, "how long one task may take, queued and running, before the spec fails naming the task")
	boshAliases(fs)
	f.common.Register(fs, map[string]string{"label-filter": "run only the specs matching this Ginkgo label filter `EXPR` (e.g. 'area:auth || race:a')"})
}

func runCertifyDirector(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("certify-director", stderr)
	var f certifyDirectorFlags
	f.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if !f.common.List {
		if err := f.configure(ctx, fs); err != nil {
			return err
		}
	}
	f.rerun = directorRerunCommand(fs, invokedAs())
	return runCertifier(ctx, fs, &f.common, certifier.Certifier{Name: "certify-director", TargetKind: "Director",
		Areas: dynamicdisks.Areas, Row: "dynamic-disks", List: dynamicdisks.List, Run: f.run}, stdout, stderr)
}

// configure maps the flags onto f.cfg, refusing as usage errors what
// cannot work (a run against --url that lacks a credential, a director
// with no stemcell for the suite's own deployment) and reading the files
// the flags name.
func (f *certifyDirectorFlags) configure(ctx context.Context, fs *flag.FlagSet) error {
	cfg := &f.cfg
	if f.instances != "" {
		cfg.Instances = strings.Split(f.instances, ",")
	}
	if f.explore {
		cfg.Explore.Runs = cmp.Or(cfg.Explore.Runs, 50)
		cfg.Explore.Steps = cmp.Or(cfg.Explore.Steps, 30)
	}
	switch {
	case certifyDirectorUsage(*cfg, f.instances) != "":
		return usageError(fs, "%s", certifyDirectorUsage(*cfg, f.instances))
	case f.cloud != "" && cfg.URL == "":
		return usageError(fs, "--cloud needs --url (the embedded director runs on a fake cloud of its own)")
	case (f.cloudSSH == "") != (f.cloudSSHKey == ""):
		return usageError(fs, "--cloud-ssh and --cloud-ssh-key go together")
	}
	if f.cloud != "" {
		cfg.Oracle, cfg.Gates = dynamicdisks.FakeCloud(f.cloud)
	}
	if f.cloudSSH != "" {
		links, err := dynamicdisks.SFTPLinks(f.cloudSSH, f.cloudSSHKey)
		if err != nil {
			return err
		}
		cfg.Links = links
	}
	if f.usersFile != "" {
		users, err := loadUsers(f.usersFile)
		if err != nil {
			return err
		}
		cfg.ScopeCredentials = dynamicdisks.ScopeCredentialsFor(users)
	}
	if f.caFile != "" {
		pem, err := readCACert(f.caFile)
		if err != nil {
			return err
		}
		cfg.CACertPEM = pem
	}
	if cfg.URL != "" && cfg.Deployment == "" && cfg.Setup.StemcellLocation == "" && len(cfg.Setup.StemcellManifest) == 0 {
		// The suite deploys its own instances: without a stemcell on the
		// director and none to upload, its set-up could only fail.
		if n, err := dynamicdisks.Stemcells(ctx, *cfg); err == nil && n == 0 {
			return usageError(fs, "the director at %s has no stemcell, and the suite deploys its own instances: give --stemcell PATH (a stemcell directory or .tgz on the director's host), or -d/--deployment and --instances of a deployment of yours", cfg.URL)
		}
	}
	return nil
}

// run is certify-director's certifier.Certifier Run: the dynamic disks
// suite against the director of --url, or an embedded reference director.
func (f *certifyDirectorFlags) run(ctx context.Context, opts suites.RunOptions, o certifier.Output) (*certifier.Result, error) {
	cfg := f.cfg
	if cfg.URL == "" {
		out := o.Out
		if o.Quiet {
			out = io.Discard
		}
		stop, err := embeddedDirector(ctx, &cfg, f.profile, out)
		if err != nil {
			return nil, err
		}
		defer stop()
	}
	report, err := dynamicdisks.RunReport(ctx, cfg, opts)
	if err != nil {
		return nil, err
	}
	res := &certifier.Result{Report: report, Target: cfg.URL, Rerun: f.rerun}
	if sum := dynamicdisks.Summarize(report); sum.HarnessOnly() {
		// No answer from the director, even on retries: a harness error,
		// never a verdict on the director.
		res.HarnessOnly = fmt.Sprintf("%d harness errors (no answer from the director, even on retries), %d passed, %d not checked",
			sum.HarnessErrors, sum.Passed, sum.Skipped)
	}
	return res, nil
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

// directorShaping are certify-director's flags that change what a spec
// does, in the order a rerun command gives them; directorPaths name local
// files (made absolute in a rerun), directorSecrets credentials (never
// printed: a rerun reads them from the environment variable named).
var (
	directorShaping = []string{"url", "ca-cert", "insecure", "admin-user", "admin-password", "admin-token", "disk-user", "disk-password",
		"disk-token", "users", "deployment", "instances", "disk-pool", "stemcell", "cloud", "cloud-ssh", "cloud-ssh-key",
		"explore", "explore-runs", "explore-steps", "explore-seed", "profile", "task-timeout", "strict"}
	directorPaths   = map[string]bool{"ca-cert": true, "users": true, "cloud-ssh-key": true}
	directorSecrets = map[string]string{"admin-password": "CPILAB_ADMIN_PASSWORD", "admin-token": "CPILAB_ADMIN_TOKEN",
		"disk-password": "CPILAB_DISK_PASSWORD", "disk-token": "CPILAB_DISK_TOKEN"}
)

// directorRerunCommand returns the command line that reruns one spec: the
// cpilab the user ran (argv0), every flag of fs that shaped the run (given
// or from a BOSH_* variable), and --focus. A credential is never printed:
// the command reads it from $CPILAB_ADMIN_PASSWORD (and the like), which
// it asks for when unset; a run on the embedded director needs none.
func directorRerunCommand(fs *flag.FlagSet, argv0 string) func(focus string) string {
	set := map[string]string{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = fl.Value.String() })
	return func(focus string) string {
		parts := []string{shellWord(argv0), "certify-director"}
		for _, name := range directorShaping {
			v, ok := set[name]
			switch {
			case !ok:
				continue
			case v == "true" && isBoolFlag(fs.Lookup(name)):
				parts = append(parts, "--"+name)
				continue
			case directorSecrets[name] != "":
				env := directorSecrets[name]
				parts = append(parts, "--"+name, `"${`+env+`:?set `+env+` to the --`+name+` of the run}"`)
				continue
			case directorPaths[name] && !strings.HasPrefix(strings.TrimSpace(v), "-----BEGIN"):
				v = absPath(v)
			}
			parts = append(parts, "--"+name, shellWord(v))
		}
		return strings.Join(append(parts, "--focus", shellWord(focus)), " ")
	}
}

// isBoolFlag reports whether f is a boolean flag.
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}
