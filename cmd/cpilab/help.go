package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"slices"
	"strings"
)

// helpText is what a command's --help says around its flags.
type helpText struct {
	// usage are the synopsis lines, without "cpilab ".
	usage []string
	// about says what the command does, a paragraph.
	about string
	// env lists the environment variables the command reads.
	env []string
	// examples are command lines, each optionally followed by "  # why".
	examples []string
	// exit describes the exit statuses when they differ from the default.
	exit string
}

const defaultExit = "0 success · 1 a check failed · 2 usage or harness error, or interrupted (Ctrl-C)"

// helps holds every command's help text, in one place so that they read
// alike.
var helps = map[string]helpText{
	"certify": {
		usage: []string{"certify [--cpi PATH [--cloud fakeiaas|docker] | --config FILE] [flags] [--ginkgo.FLAG[=VALUE] …]", "certify --list [--label-filter EXPR]"},
		about: `Runs the CPI contract suite (every caller profile × api_version) and the Director × CPI × stemcell
reference-table matrix against a CPI and says ACCEPTED or REJECTED. Each failure names the clause of
docs/contracts.md that broke, what the CPI did instead (request, response, stderr) and a command that
reruns only that spec. Without --config the CPI runs on the embedded fake cloud and must speak its API
(the reference CPI does), or, with --cloud docker, the Docker Engine API of its Docker face (the
upstream BOSH Docker CPI; docs/docker.md); a CPI for a real cloud is certified with --config
(docs/real-cloud.md).
Ginkgo's own flags pass through as --ginkgo.NAME (e.g. --ginkgo.randomize-all, --ginkgo.seed 7,
--ginkgo.json-report FILE for Ginkgo's raw report).`,
		examples: []string{
			"cpilab certify                                   # the reference CPI on the embedded cloud",
			"cpilab certify --cpi ./bin/cpi --junit-report junit.xml --html-report report.html",
			"cpilab certify --cpi ./bin/cpi --label-filter 'area:errors && api:2'",
			"cpilab certify --cpi ./bosh-docker-cpi --cloud docker  # the upstream Docker CPI on the Docker face",
			"cpilab certify --config cloud.yml --strict --require-api-version 2",
			"cpilab certify --list --label-filter method:attach_disk",
		},
		exit: "0 ACCEPTED · 1 REJECTED (or nothing checked, or --strict with specs not checked) · 2 usage or harness error, or INTERRUPTED (Ctrl-C; the cloud is cleaned up first)",
	},
	"certify-director": {
		usage: []string{"certify-director [--url URL --admin-user U --admin-password P --disk-user U --disk-password P] [flags]"},
		about: `Runs the dynamic disks API suite against a director: an embedded reference director by default,
or any director given by --url (or BOSH_ENVIRONMENT).`,
		env: []string{
			"BOSH_ENVIRONMENT    the director's URL or host (https and port 25555 unless given): --url",
			"BOSH_CLIENT         a user with bosh.admin: --admin-user",
			"BOSH_CLIENT_SECRET  its secret: --admin-password",
			"BOSH_CA_CERT        the director's CA, a PEM file or the PEM itself: --ca-cert",
		},
		examples: []string{
			"cpilab certify-director                          # an embedded reference director",
			"cpilab certify-director --profile upstream       # the embedded director with upstream's behaviour",
			"BOSH_ENVIRONMENT=10.0.0.6 BOSH_CLIENT=admin BOSH_CLIENT_SECRET=… BOSH_CA_CERT=ca.pem \\\n    cpilab certify-director --disk-user disks --disk-password …",
		},
	},
	"director": {
		usage: []string{"director [flags]"},
		about: "Runs the reference Director (dynamic disks) with embedded NATS, SQLite and fakeiaas, until Ctrl-C.",
		examples: []string{
			"cpilab director --data-dir /var/tmp/cpilab-director",
			"cpilab director --profile upstream --cpi bin/fakeiaas-cpi",
		},
		exit: "0 stopped by Ctrl-C · 2 usage error or the director could not start",
	},
	"fakeiaas": {
		usage: []string{
			"fakeiaas [--data-dir DIR] [--listen ADDR] [--memory]      serve the fake cloud",
			"fakeiaas faults list    --url URL                        list fault rules and their counters",
			"fakeiaas faults add     --url URL 'RULE' ['RULE' …]      add rules (one-line form; '-' reads stdin)",
			"fakeiaas faults rm      --url URL ID                     remove a rule",
			"fakeiaas faults release --url URL ID                     release the calls a pause rule holds",
			"fakeiaas faults clear   --url URL                        remove every rule",
		},
		about: `Serves the fake cloud on loopback (HTTP API, registry, metadata service, oracle, NATS, SFTP, one agent
per VM) until Ctrl-C, or manages its fault rules. A rule:
  id=r1 op=attach_disk target=CID nth=2 prob=0.5 times=1
  effect=error|latency|rate_limit|lose_response|pause type=DiskNotFound ok_to_retry=true delay=250ms`,
		examples: []string{
			"cpilab fakeiaas --memory",
			"cpilab fakeiaas faults add --url http://127.0.0.1:PORT 'op=create_vm effect=error type=VMCreationFailed ok_to_retry=true times=1'",
		},
		exit: "0 stopped by Ctrl-C, or the faults verb succeeded · 2 usage error, or the cloud could not start or answer",
	},
	"agent": {
		usage: []string{"agent --root DIR --vm-cid CID [flags]"},
		about: "Runs one reference BOSH agent on a VM root directory, as its own process, until Ctrl-C.",
		examples: []string{
			"cpilab agent --root /tmp/vm-1 --vm-cid vm-1 --metadata-url http://127.0.0.1:PORT/metadata --device-resolver virtio",
		},
		exit: "0 stopped by Ctrl-C · 2 usage error or the agent could not start",
	},
	"simulate": {
		usage: []string{"simulate [--seed N] [flags]", "simulate --seeds A..B [--shard K/N] [--json-report FILE] [--keep-going] [flags]",
			"simulate merge [--json-report FILE] REPORT...",
			"simulate --workload storage [--seeds A..B] [--profile P] [flags]   (cpilab storage simulate --help)"},
		about: `Runs the director, one agent per VM, the fake cloud and the reference CPI in one process under a
virtual clock and a seeded scheduler: the same seed gives the same trace. One seed prints PASS or the
failure report: the seed, the fault schedule, a minimized trace file and the command that replays it.
A sweep runs every seed of A..B (with --shard K/N, the K-th of N contiguous blocks) on every core,
prints its progress on stderr (seeds done, failing seeds, rate, time left; --quiet for none), and
writes its verdict as JSON with --json-report. "merge" combines the reports of every shard of one
sweep into one verdict with each failing seed's replay command; it refuses reports of different
sweeps, two reports of one shard, and missing shards (docs/simulate-report.md).
--workload storage runs the storage-sizing controller's simulation instead, with the flags and output
of 'cpilab storage simulate' (docs/storage.md).`,
		examples: []string{
			"cpilab simulate --seed 42 --steps 200 --profile upstream --faults default",
			"cpilab simulate --seeds 1..10000 --faults default --keep-going",
			"cpilab simulate --seeds 1..1000000 --shard 3/16 --keep-going --json-report out-3.json",
			"cpilab simulate merge out-*.json",
			"cpilab simulate --workload storage --seeds 1..10000 --profile fork:no-cooldown",
		},
		exit: "0 every seed passed · 1 a seed failed (trace written) or a sweep did not finish · 2 usage or harness error",
	},
	"replay": {
		usage: []string{"replay [--rewrite] [--out DIR] FILE"},
		about: `Replays a scenario file (fixtures/scenarios) or a minimized trace that cpilab simulate wrote, and
compares every run's output with the file's expected output. A file whose first command is a storage
run (fixtures/scenarios/storage, or one 'cpilab storage simulate' wrote) is replayed as 'cpilab storage
replay' does; --out does not apply to it.`,
		examples: []string{
			"cpilab replay fixtures/scenarios/race-c.txt",
			"cpilab replay fixtures/scenarios/storage/fork-no-cooldown.txt",
			"cpilab replay --rewrite fixtures/scenarios/race-c.txt   # update the expected output",
		},
		exit: "0 every output as expected · 1 an output differs · 2 usage or harness error",
	},
	"storage": {
		usage: []string{
			"storage run --director URL --policy FILE --nats-url URL [flags]   size volumes through a Director, on the wall clock",
			"storage simulate [--seeds A..B] [--profile P] [flags]            the controller's simulation over a seed range",
			"storage replay [--rewrite] FILE                                  replay a storage scenario file",
		},
		about: `Convergent storage sizing over dynamic disks: a controller keeps each logical volume between its
request and its limit, converging toward a buffer of free space, within a maintenance window, a
cooldown, hysteresis and a sliding 24-hour action budget; emergency growth happens at once
(docs/storage.md). 'cpilab storage SUBCOMMAND --help' lists a subcommand's flags.`,
		examples: []string{
			"cpilab storage run --director https://127.0.0.1:25555 --ca-cert ca.pem --user admin --password … --nats-url nats://127.0.0.1:4222 --policy volumes.yml",
			"cpilab storage simulate --seeds 1..10000",
			"cpilab storage replay fixtures/scenarios/storage/fork-budget-reset.txt",
		},
		exit: "0 success (every seed held, every verdict as expected) · 1 a violation or a differing verdict · 2 usage or harness error",
	},
	"storage run": {
		usage: []string{"storage run --director URL --policy FILE --nats-url URL [flags]"},
		about: `Sizes the volumes of a policy file through a Director's dynamic disks API (resize included), reading
each disk's usage from its agent over the mbus, on the wall clock: every --interval it reconciles every
volume, prints one line per volume (state, action, every gate that held one back) and rewrites the
status file atomically (docs/storage.md).`,
		examples: []string{
			"cpilab storage run --director https://127.0.0.1:25555 --ca-cert ca.pem --user admin --password … --nats-url nats://127.0.0.1:4222 --policy volumes.yml",
			"cpilab storage run … --once --profile fork:budget-reset   # one reconciliation with a fork divergence",
		},
		exit: "0 stopped by Ctrl-C, or --once done · 2 usage error, a bad policy file, or the Director or mbus could not be reached",
	},
	"storage replay": {
		usage: []string{"storage replay [--rewrite] FILE", "replay [--rewrite] FILE   (the same, for a storage scenario)"},
		about: `Replays a storage scenario file (fixtures/scenarios/storage, or one 'cpilab storage simulate' wrote)
and compares every run's verdict with the file's expected output. A run without its verdict line (a
file cut short) is refused.`,
		examples: []string{
			"cpilab storage replay fixtures/scenarios/storage/fork-no-hysteresis.txt",
			"cpilab storage replay --rewrite storage-seed-16.txt   # write the actual verdicts",
		},
		exit: "0 every verdict as expected · 1 a verdict differs · 2 usage error, or a file that cannot be replayed",
	},
	"storage simulate":            storageSimulateHelp,
	"simulate --workload storage": storageSimulateHelp,
	"completion": {
		usage: []string{"completion bash|zsh"},
		about: "Prints a shell completion script for cpilab's commands and flags.",
		examples: []string{
			"source <(cpilab completion bash)",
			"cpilab completion zsh > \"${fpath[1]}/_cpilab\"",
		},
		exit: "0 script printed · 2 unknown shell",
	},
}

// storageSimulateHelp is the help of the storage simulation under both its
// spellings.
var storageSimulateHelp = helpText{
	usage: []string{"storage simulate [--seeds A..B] [--profile P] [--keep-going] [--parallel N] [flags]",
		"simulate --workload storage [the same flags]"},
	about: `Runs the storage-sizing controller's model-level simulation (storage/storagesim) for every seed of
A..B on every core (--parallel): each seed draws a policy, a provider model, a fill workload and a
fault schedule and runs four virtual weeks under the invariant checkers. Progress goes to stderr
(--quiet for none); the summary gives runs, violations, seeds/s and simulated time over wall time.
The first violation (every one with --keep-going) is shrunk, saved as a scenario file in --out with
the same run under the reference profile beside it, and its replay command printed.`,
	examples: []string{
		"cpilab storage simulate --seeds 1..10000                         # the reference policy holds",
		"cpilab storage simulate --seeds 1..10000 --profile fork:budget-reset --out /tmp",
		"cpilab simulate --workload storage --seeds 1..100 --duration 72h",
	},
	exit: "0 every seed held · 1 a violation (scenario written) or the sweep was interrupted · 2 usage or harness error",
}

// writeUsage writes the list of commands.
func writeUsage(w io.Writer) {
	fmt.Fprint(w, `Usage:
  cpilab <command> [flags]
  cpilab help <command> | cpilab <command> --help
  cpilab --version

cpilab certifies BOSH CPIs and simulates the Director's dynamic-disk orchestration.

Commands:
`)
	for _, n := range commandNames() {
		fmt.Fprintf(w, "  %-17s %s\n", n, summaryOf(n))
	}
	fmt.Fprintf(w, `
Every command takes --help, --version, --no-color (or NO_COLOR=1) and --quiet.

Examples:
  cpilab certify --cpi ./bin/cpi --junit-report junit.xml
  cpilab simulate --seed 42 --profile upstream --faults default

Exit status: %s
`, defaultExit)
}

func commandNames() []string {
	names := []string{"completion"}
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

func summaryOf(name string) string {
	if name == "completion" {
		return "print a shell completion script (bash or zsh)"
	}
	return commands[name].summary
}

// writeHelp writes command name's help: usage, what it does, its flags,
// environment, examples and exit statuses.
func writeHelp(w io.Writer, name string) {
	h := helps[name]
	fmt.Fprintln(w, "Usage:")
	if len(h.usage) == 0 {
		h.usage = []string{name + " [flags]"}
	}
	for _, u := range h.usage {
		fmt.Fprintf(w, "  cpilab %s\n", u)
	}
	about := h.about
	if about == "" {
		about = summaryOf(name)
	}
	fmt.Fprintf(w, "\n%s\n", about)
	if fs := flagSetOf(name); fs != nil {
		fmt.Fprintln(w, "\nFlags:")
		writeFlags(w, fs)
	}
	if len(h.env) > 0 {
		fmt.Fprintln(w, "\nEnvironment:")
		for _, e := range h.env {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	if len(h.examples) > 0 {
		fmt.Fprintln(w, "\nExamples:")
		for _, e := range h.examples {
			fmt.Fprintf(w, "  %s\n", e)
		}
	}
	exit := h.exit
	if exit == "" {
		exit = defaultExit
	}
	fmt.Fprintf(w, "\nExit status: %s\n", exit)
}

// flagSetOf returns the flags of command name, making them by asking the
// command for its help if it has not run yet in this process.
func flagSetOf(name string) *flag.FlagSet {
	if fs := lastFlagSet(name); fs != nil {
		return fs
	}
	if cmd, ok := commands[name]; ok {
		_ = cmd.run(context.Background(), []string{"-h"}, io.Discard, io.Discard)
	}
	return lastFlagSet(name)
}

// writeFlags lists fs's flags, two dashes, a typed placeholder and the
// default when it is not the zero value.
func writeFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		arg, usage := flagArg(f)
		line := "  --" + f.Name
		if arg != "" {
			line += " " + arg
		}
		if d := f.DefValue; d != "" && d != "0" && d != "false" && d != "0s" && d != "[]" {
			usage += fmt.Sprintf(" (default %s)", d)
		}
		fmt.Fprintf(w, "%s\n      %s\n", line, strings.ReplaceAll(usage, "\n", "\n      "))
	})
}

// flagArg returns the placeholder of f's value ("" for a switch) and its
// usage text: a `NAME` quoted in the usage, else one from the value's type,
// else the flag's name in capitals.
func flagArg(f *flag.Flag) (string, string) {
	name, usage := flag.UnquoteUsage(f)
	if bf, ok := f.Value.(interface{ IsBoolFlag() bool }); ok && bf.IsBoolFlag() {
		return "", usage
	}
	switch name {
	case "duration":
		return "DURATION", usage
	case "int", "uint", "int64", "uint64":
		return "N", usage
	case "float":
		return "X", usage
	case "string", "value", "":
		return strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_")), usage
	}
	return name, usage
}

// buildCommit is the commit cpilab was built from, set by the Makefile
// (-ldflags -X main.buildCommit=…) when the Go toolchain could not stamp
// it (-buildvcs=false).
var buildCommit string

// buildVersion is the version the Makefile stamps (-X main.buildVersion=…:
// the tag, else the commit's pseudo-version) for a build from a checkout,
// whose build info says only "(devel)".
var buildVersion string

// version returns cpilab's module version and the commit it was built
// from ("unknown" when neither the build info nor the Makefile says).
func version() (mod, commit string, modified bool) {
	mod, commit = cmp.Or(buildVersion, "(devel)"), buildCommit
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && (bi.Main.Version != "(devel)" || buildVersion == "") {
			mod = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				commit = s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	if commit == "" {
		commit = "unknown"
	}
	return mod, commit, modified
}

func writeVersion(w io.Writer) {
	mod, commit, modified := version()
	if modified {
		commit += " (modified)"
	}
	fmt.Fprintf(w, "cpilab %s, commit %s\n", mod, commit)
}
