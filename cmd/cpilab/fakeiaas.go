package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/cpilab/cpilab/datadir"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/dockerapi"
	"github.com/cpilab/cpilab/testbed"
)

func init() {
	commands["fakeiaas"] = command{summary: "run the fake cloud (agents, NATS, SFTP included), or manage its fault rules", run: runFakeIaaS}
}

func runFakeIaaS(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "faults" {
		return runFaults(ctx, args[1:], stdout, stderr)
	}
	fs := newFlagSet("fakeiaas", stderr)
	dataDir := fs.String("data-dir", "", "state directory: the cloud's database, VM roots, disk files, cpi.json (default: the user's cache dir + cpilab/fakeiaas)")
	listen := fs.String("listen", "127.0.0.1:0", "loopback address of the HTTP API")
	memory := fs.Bool("memory", false, "keep state in memory only (nothing survives a restart); without --data-dir, its files go to a temporary directory removed at exit")
	noAgents := fs.Bool("no-agents", false, "do not boot a reference agent on each VM")
	dockerSocket := fs.String("docker-socket", "", "also serve a Docker Engine API face of the cloud on this unix socket, for the BOSH Docker CPI (docs/docker.md)")
	fs.String("url", "", "the fakeiaas `URL` printed at start (faults verbs; required there)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	u := newUI(fs, stdout, stderr)
	// Refused before anything is created: a refused start leaves no data dir.
	if err := fakeiaas.CheckListen(*listen); err != nil {
		return usageErrorf(fs, "%v", err)
	}
	switch {
	case *dataDir == "" && *memory:
		// Nothing is to survive: the VM roots, keys and cpi.json go to a
		// directory of this run's own, removed at exit, never the cache.
		d, err := os.MkdirTemp("", "cpilab-fakeiaas-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		*dataDir = d
	case *dataDir == "":
		d, err := fakeiaas.DefaultDataDir()
		if err != nil {
			return err
		}
		*dataDir = d
	}
	// One fake cloud per data dir: a second one would overwrite the first
	// one's keys, cpi.json and state. kill -9 releases the lock too.
	lock, err := datadir.Acquire(*dataDir, "cpilab fakeiaas")
	if err != nil {
		return err
	}
	defer lock.Release()
	store := "sqlite"
	if *memory {
		store = "memory"
	}
	tb, err := testbed.Start(testbed.Config{Dir: *dataDir, Store: store, Listen: *listen, NoAgents: *noAgents})
	if err != nil {
		return err
	}
	defer tb.Close()
	cpiJSON, err := tb.CPIConfig(testbed.CPISetup{})
	if err != nil {
		return err
	}
	if u.quiet {
		stdout = io.Discard
	}
	fmt.Fprintf(stdout, "fakeiaas listening on %s (data dir %s, %s store)\n", tb.URL(), *dataDir, store)
	fmt.Fprintf(stdout, "  registry: %s/registry  metadata: %s/metadata  oracle: %s/oracle/state\n", tb.URL(), tb.URL(), tb.URL())
	fmt.Fprintf(stdout, "  mbus: %s  ssh key: %s  sftp: %s\n", tb.MbusURL(), tb.SSHKeyPath(), tb.SSH.Addr())
	fmt.Fprintf(stdout, "  reference CPI: bin/fakeiaas-cpi -configPath %s\n", cpiJSON)
	fmt.Fprintf(stdout, "  faults: cpilab fakeiaas faults list --url %s\n", tb.URL())
	if *dockerSocket != "" {
		face, err := dockerapi.New(dockerapi.Config{Cloud: tb.IaaS.Cloud()})
		if err != nil {
			return err
		}
		dsrv, err := dockerapi.Serve(face, *dockerSocket)
		if err != nil {
			return err
		}
		defer dsrv.Close()
		fmt.Fprintf(stdout, "  docker: %s (the Docker CPI's actions.docker.host, api_version %s at most)\n", dsrv.Host(), dockerapi.MaxAPIVersion)
	}
	<-ctx.Done()
	return nil
}

func runFaults(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, "cpilab fakeiaas faults: want a verb: list, add, rm, release or clear\nRun 'cpilab fakeiaas --help' for usage.\n")
		return exitError(exitUsage)
	}
	verb := args[0]
	fs := newFlagSet("fakeiaas", stderr)
	url := fs.String("url", "", "the fakeiaas `URL` printed at start (faults verbs; required there)")
	if err := parseOnly(fs, args[1:]); err != nil {
		return err
	}
	if *url == "" {
		return usageError(fs, "faults %s: --url is required", verb)
	}
	c := fakeiaas.NewClient(*url)
	rest := fs.Args()
	switch verb {
	case "list":
		rules, err := c.Faults(ctx)
		if err != nil {
			return err
		}
		for _, r := range rules {
			fmt.Fprintf(stdout, "%s  # matched=%d fired=%d paused=%d\n", r.Rule, r.Matched, r.Fired, r.Paused)
		}
		if len(rules) == 0 {
			fmt.Fprintln(stdout, "no fault rules")
		}
		return nil
	case "add":
		text := strings.Join(rest, "\n")
		if len(rest) == 1 && rest[0] == "-" {
			b, err := io.ReadAll(os.Stdin)
			if err != nil {
				return err
			}
			text = string(b)
		}
		// Parse here first so a typo is reported before anything is sent.
		if _, err := fakeiaas.ParseRules(text); err != nil {
			return err
		}
		added, err := c.AddFaultText(ctx, text)
		if err != nil {
			return err
		}
		for _, r := range added {
			fmt.Fprintln(stdout, r)
		}
		return nil
	case "rm", "release":
		if len(rest) != 1 {
			return usageError(fs, "faults %s: want exactly one rule ID, got %d", verb, len(rest))
		}
		if verb == "rm" {
			return c.RemoveFault(ctx, rest[0])
		}
		return c.ReleaseFault(ctx, rest[0])
	case "clear":
		return c.ClearFaults(ctx)
	default:
		return usageError(fs, "faults: unknown verb %q (want list, add, rm, release or clear)", verb)
	}
}
