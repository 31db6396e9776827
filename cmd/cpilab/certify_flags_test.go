package main

import (
	"bytes"
	"context"
	"flag"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// parseCertify parses certify's flags as runCertify does.
func parseCertify(t *testing.T, args ...string) (certifyFlags, error) {
	t.Helper()
	fs := newFlagSet("certify", &bytes.Buffer{})
	var f certifyFlags
	f.register(fs)
	own, g := splitGinkgoArgs(args)
	if err := parseFlags(fs, own); err != nil {
		return f, err
	}
	f.ginkgo = g
	f.set = map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	return f, nil
}

// The rerun command keeps every flag that changes what a spec does, drops
// the ones that only change reporting, and survives a shell.
func TestRerunCommandKeepsTheRunsFlags(t *testing.T) {
	f, err := parseCertify(t, "--cpi", "my cpi's dir/cpi", "--call-timeout", "41s", "--agent-timeout", "2m0s", "--strict",
		"--require-api-version", "2", "--expect-version-switch", "--junit-report", "j.xml", "--quiet", "--label-filter", "api:2",
		"--ginkgo.flake-attempts", "2", "--ginkgo.json-report=g.json", "--ginkgo.randomize-all")
	if err != nil {
		t.Fatal(err)
	}
	cmd := rerunCommand(f, "/opt/cpilab bin/cpilab")(` CPI contract cli\.api2 x's \(y\)$`)
	abs, _ := filepath.Abs("my cpi's dir/cpi")
	for _, want := range []string{`'/opt/cpilab bin/cpilab' certify `, "--cpi " + shellWord(abs), "--call-timeout 41s", "--agent-timeout 2m0s",
		"--strict", "--require-api-version 2", "--expect-version-switch", "--ginkgo.flake-attempts=2", "--ginkgo.randomize-all=true",
		`--focus ' CPI contract cli\.api2 x'\''s \(y\)$'`} {
		if !strings.Contains(cmd, want) {
			t.Errorf("rerun %q lacks %q", cmd, want)
		}
	}
	for _, unwanted := range []string{"junit", "json-report", "--quiet", "--label-filter"} {
		if strings.Contains(cmd, unwanted) {
			t.Errorf("rerun %q keeps %q, which does not change the spec", cmd, unwanted)
		}
	}
	// A shell splits it back into the words that were meant.
	out, err := exec.Command("sh", "-c", `for a in `+strings.TrimPrefix(cmd, `'/opt/cpilab bin/cpilab' `)+`; do echo "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	words := strings.Split(strings.TrimSpace(string(out)), "\n")
	if !slices.Contains(words, abs) || words[len(words)-1] != ` CPI contract cli\.api2 x's \(y\)$` {
		t.Errorf("the shell reads %q", words)
	}
	// Defaults stay out: a plain run reruns with --focus alone.
	f, _ = parseCertify(t)
	if got := rerunCommand(f, "cpilab")("x"); got != "cpilab certify --focus x" {
		t.Errorf("plain rerun %q", got)
	}
}

func TestSplitGinkgoArgs(t *testing.T) {
	own, g := splitGinkgoArgs([]string{"--cpi", "x", "--ginkgo.seed", "7", "-ginkgo.randomize-all", "--ginkgo.timeout=2h", "--ginkgo.nope", "--strict"})
	if !slices.Equal(own, []string{"--cpi", "x", "--strict"}) {
		t.Errorf("own %q", own)
	}
	if !slices.Equal(g, []string{"--ginkgo.seed=7", "--ginkgo.randomize-all=true", "--ginkgo.timeout=2h", "--ginkgo.nope"}) {
		t.Errorf("ginkgo %q", g)
	}
}

// A Ginkgo pass-through flag with a value parses whether Ginkgo's library
// has it or not: --ginkgo.procs 2 (a ginkgo CLI flag) is refused by name,
// not taken for a stray argument.
func TestGinkgoFlagsWithValuesParse(t *testing.T) {
	own, g := splitGinkgoArgs([]string{"--ginkgo.procs", "2", "--strict"})
	if !slices.Equal(own, []string{"--strict"}) || !slices.Equal(g, []string{"--ginkgo.procs=2"}) {
		t.Errorf("--ginkgo.procs 2: own %q, ginkgo %q", own, g)
	}
	code, _, errs := runArgs("certify", "--ginkgo.procs", "2", "--list")
	if code != exitUsage || !strings.Contains(errs, "--ginkgo.procs: a flag of the ginkgo CLI") || strings.Contains(errs, "unexpected arguments") {
		t.Errorf("certify --ginkgo.procs 2: exit %d, stderr %q", code, errs)
	}
}

// Every certifier takes the shared flags, with the same names: one runner
// (package certifier) behind the four commands.
func TestEveryCertifierTakesTheSharedFlags(t *testing.T) {
	shared := []string{"--label-filter", "--focus", "--skip", "--list", "--json", "--fail-fast", "--strict", "--quiet",
		"--json-report", "--junit-report", "--html-report", "--report-dir", "--v"}
	for _, name := range []string{"certify", "certify-director", "certify-flex", "certify-csi"} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{name, "--help"}, &stdout, &stderr); code != 0 {
			t.Fatalf("%s --help: exit %d\n%s", name, code, stderr.String())
		}
		for _, f := range shared {
			if !regexp.MustCompile(`(?m)^\s+` + regexp.QuoteMeta(f) + `\b`).MatchString(stdout.String()) {
				t.Errorf("%s --help lacks %s:\n%s", name, f, stdout.String())
			}
		}
		// The shared checks hold for each: --json without --list is a
		// usage error before anything starts.
		stdout.Reset()
		stderr.Reset()
		if code := run(context.Background(), []string{name, "--json"}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "--json goes with --list") {
			t.Errorf("%s --json: exit %d, stderr %q; want a usage error", name, code, stderr.String())
		}
	}
}
