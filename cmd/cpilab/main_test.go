package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// ownCommands are the commands this test drives in full; the others
// (simulate, replay, director, certify-director) follow the same
// convention through newFlagSet and parseFlags.
var allCommands = []string{"agent", "certify", "certify-director", "director", "fakeiaas", "replay", "simulate"}

func runArgs(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestUnknownCommandIsAUsageError(t *testing.T) {
	code, out, errb := runArgs("no-such-command")
	if code != exitUsage || out != "" {
		t.Fatalf("exit status %d, want 2, nothing on stdout (got %q)", code, out)
	}
	if !strings.Contains(errb, `unknown command "no-such-command"`) || !strings.Contains(errb, "cpilab --help") {
		t.Fatalf("stderr does not name the unknown command and point at --help:\n%s", errb)
	}
}

func TestNoArgumentsPrintsUsageOnStderr(t *testing.T) {
	code, _, errb := runArgs()
	if code != exitUsage || !strings.Contains(errb, "cpilab <command> [flags]") {
		t.Fatalf("exit status %d, stderr:\n%s", code, errb)
	}
}

// Help goes to stdout, in one format for every command, with typed
// placeholders (never Go's "value"), examples and the exit statuses.
func TestHelpIsOnStdoutInOneFormat(t *testing.T) {
	code, out, _ := runArgs("--help")
	if code != 0 {
		t.Fatalf("cpilab --help: exit %d", code)
	}
	for _, c := range append(allCommands, "completion") {
		if !strings.Contains(out, "  "+c+" ") {
			t.Errorf("cpilab --help does not list %s:\n%s", c, out)
		}
	}
	for _, c := range allCommands {
		for _, args := range [][]string{{c, "--help"}, {c, "-h"}, {"help", c}} {
			code, out, errb := runArgs(args...)
			if code != 0 || errb != "" {
				t.Errorf("%q: exit %d, stderr %q; want 0 and nothing on stderr", args, code, errb)
			}
			for _, section := range []string{"Usage:\n  cpilab " + c, "\nFlags:\n", "  --version\n", "  --no-color\n", "  --quiet\n", "\nExamples:\n  cpilab ", "\nExit status: "} {
				if !strings.Contains(out, section) {
					t.Errorf("%q: help lacks %q:\n%s", args, section, out)
				}
			}
			if strings.Contains(out, " value\n") || strings.Contains(out, " value ") {
				t.Errorf("%q: help shows Go's placeholder 'value':\n%s", args, out)
			}
		}
	}
	_, out, _ = runArgs("certify", "--help")
	for _, want := range []string{"--junit-report FILE", "--call-timeout DURATION", "(default 1m0s)", "--label-filter EXPR", "--skip REGEXP",
		"--fail-fast", "--list", "--strict", "--ginkgo.", "0 ACCEPTED · 1 REJECTED", "2 usage or harness error, or INTERRUPTED"} {
		if !strings.Contains(out, want) {
			t.Errorf("certify --help lacks %q", want)
		}
	}
	_, out, _ = runArgs("certify-director", "--help")
	for _, env := range []string{"BOSH_ENVIRONMENT", "BOSH_CLIENT", "BOSH_CLIENT_SECRET", "BOSH_CA_CERT"} {
		if !strings.Contains(out, env) {
			t.Errorf("certify-director --help does not document %s", env)
		}
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}, {"certify", "--version"}, {"director", "--version"}} {
		code, out, _ := runArgs(args...)
		if code != 0 || !strings.HasPrefix(out, "cpilab ") || !strings.Contains(out, "commit ") {
			t.Errorf("%q: exit %d, stdout %q", args, code, out)
		}
	}
}

// A bad flag or a stray argument is a usage error (exit 2), said once, with
// a pointer to --help, and the command does not run.
func TestBadFlagsAreUsageErrors(t *testing.T) {
	for _, args := range [][]string{
		{"director", "--no-such-flag"},
		{"certify", "--no-such-flag"},
		{"certify", "stray"},
		{"certify-director", "--no-such-flag"},
		{"agent", "--no-such-flag"},
		{"fakeiaas", "--no-such-flag"},
		{"fakeiaas", "faults", "list", "--no-such-flag"},
		{"simulate", "--no-such-flag"},
		{"replay", "--no-such-flag"},
	} {
		code, out, errb := runArgs(args...)
		if code != exitUsage || out != "" {
			t.Errorf("%q: exit status %d, want 2 and nothing on stdout", args, code)
		}
		if strings.Count(errb, "no-such-flag")+strings.Count(errb, `"stray"`) != 1 || !strings.Contains(errb, "--help' for usage") {
			t.Errorf("%q: stderr should name the bad flag or argument once and point at --help:\n%s", args, errb)
		}
	}
	for _, args := range [][]string{{"agent"}, {"agent", "--root", "r", "--vm-cid", "v", "--mode", "odd"}, {"fakeiaas", "faults"},
		{"fakeiaas", "faults", "list"}, {"fakeiaas", "faults", "frobnicate", "--url", "http://x"}, {"completion"}, {"completion", "fish"}} {
		if code, _, errb := runArgs(args...); code != exitUsage || errb == "" {
			t.Errorf("%q: exit %d, stderr %q; want 2 with a message", args, code, errb)
		}
	}
}

// Completion scripts list every command and each command's real flags, and
// bash can source the bash one.
func TestCompletion(t *testing.T) {
	code, bash, _ := runArgs("completion", "bash")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, want := range append(allCommands, "--junit-report", "--label-filter", "--call-timeout", "--disk-user", "complete -o filenames -F _cpilab cpilab") {
		if !strings.Contains(bash, want) {
			t.Errorf("bash completion lacks %q", want)
		}
	}
	if sh, err := exec.LookPath("bash"); err == nil {
		script := filepath.Join(t.TempDir(), "c.bash")
		if err := os.WriteFile(script, []byte(bash+"\nCOMP_WORDS=(cpilab certify --junit); COMP_CWORD=2; _cpilab; echo \"${COMPREPLY[@]}\"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(sh, script).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "--junit-report" {
			t.Errorf("bash completing 'cpilab certify --junit': %v, %q", err, out)
		}
	}
	code, zsh, _ := runArgs("completion", "zsh")
	if code != 0 || !strings.HasPrefix(zsh, "#compdef cpilab") || !strings.Contains(zsh, "--html-report") {
		t.Errorf("zsh completion: exit %d\n%s", code, zsh)
	}
}

// certify-director takes the bosh CLI's environment: BOSH_ENVIRONMENT as a
// URL or a bare host, BOSH_CA_CERT as a file or as the PEM itself; a flag
// on the command line wins.
func TestBOSHEnvironment(t *testing.T) {
	for env, want := range map[string]string{
		"10.0.0.6":                  "https://10.0.0.6:25555",
		"director.example.com:8443": "https://director.example.com:8443",
		"https://10.0.0.6:25555":    "https://10.0.0.6:25555",
		"[fd00::6]":                 "https://[fd00::6]:25555",
	} {
		if got := directorURL(env); got != want {
			t.Errorf("BOSH_ENVIRONMENT=%s: %s, want %s", env, got, want)
		}
	}
	t.Setenv("BOSH_ENVIRONMENT", "10.0.0.6")
	t.Setenv("BOSH_CLIENT", "admin")
	t.Setenv("BOSH_CLIENT_SECRET", "s3cret")
	t.Setenv("BOSH_CA_CERT", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	fs := newFlagSet("certify-director", &bytes.Buffer{})
	url, user, secret, ca := fs.String("url", "", ""), fs.String("admin-user", "", ""), fs.String("admin-password", "", ""), fs.String("ca-cert", "", "")
	if err := parseFlags(fs, []string{"--admin-user", "other"}); err != nil {
		t.Fatal(err)
	}
	if *url != "https://10.0.0.6:25555" || *user != "other" || *secret != "s3cret" {
		t.Errorf("url %q user %q secret %q", *url, *user, *secret)
	}
	if pem, err := readCACert(*ca); err != nil || !bytes.HasPrefix(pem, []byte("-----BEGIN CERTIFICATE-----")) {
		t.Errorf("BOSH_CA_CERT as PEM: %v", err)
	}
	if _, err := readCACert(filepath.Join(t.TempDir(), "missing.pem")); err == nil || !strings.Contains(err.Error(), "BOSH_CA_CERT") {
		t.Errorf("a missing CA file: %v", err)
	}
	// Commands that do not talk to a director ignore the environment.
	other := newFlagSet("certify", &bytes.Buffer{})
	u := other.String("url", "", "")
	if err := parseFlags(other, nil); err != nil || *u != "" {
		t.Errorf("certify took BOSH_ENVIRONMENT: %q, %v", *u, err)
	}
}

// Colour only on a terminal without NO_COLOR or --no-color; ASCII glyphs
// when the locale is not UTF-8, the CPI's own text untouched.
func TestColorAndGlyphs(t *testing.T) {
	t.Setenv("LC_ALL", "C")
	var b bytes.Buffer
	w := asciiWriter(&b)
	// A rune split across two writes is still replaced.
	check := []byte("✔ 3  ✘ 1  – 2 → done; CPI said: ünïcode")
	w.Write(check[:1])
	w.Write(check[1:])
	if got := b.String(); got != "+ 3  x 1  - 2 -> done; CPI said: ünïcode" {
		t.Errorf("ASCII glyphs: %q", got)
	}
	fs := newFlagSet("certify", &bytes.Buffer{})
	if err := parseFlags(fs, []string{"--no-color"}); err != nil {
		t.Fatal(err)
	}
	u := newUI(fs, &bytes.Buffer{}, &bytes.Buffer{})
	if u.color || u.paint("ACCEPTED", "green") != "ACCEPTED" {
		t.Error("--no-color still paints")
	}
	if _, ok := u.out.(*glyphWriter); !ok {
		t.Error("LC_ALL=C: stdout does not get ASCII glyphs")
	}
	t.Setenv("LC_ALL", "en_US.UTF-8")
	if u := newUI(fs, &bytes.Buffer{}, &bytes.Buffer{}); u.color {
		t.Error("colour on a writer that is not a terminal")
	} else if _, ok := u.out.(*glyphWriter); ok {
		t.Error("a UTF-8 locale gets ASCII glyphs")
	}
}

// The bosh CLI's habits: -e/--environment, --client, --client-secret and
// -d set what --url, --admin-user, --admin-password and --deployment do,
// BOSH_DEPLOYMENT too; a mistyped command or flag gets a suggestion.
func TestBOSHAliasesAndSuggestions(t *testing.T) {
	t.Setenv("BOSH_DEPLOYMENT", "from-env")
	fs := newFlagSet("certify-director", &bytes.Buffer{})
	url, user, secret, dep := fs.String("url", "", ""), fs.String("admin-user", "", ""), fs.String("admin-password", "", ""), fs.String("deployment", "", "")
	boshAliases(fs)
	if err := parseFlags(fs, []string{"-e", "10.0.0.6", "--client", "admin", "--client-secret", "s3cret"}); err != nil {
		t.Fatal(err)
	}
	if *url != "https://10.0.0.6:25555" || *user != "admin" || *secret != "s3cret" || *dep != "from-env" {
		t.Errorf("-e, --client, --client-secret, BOSH_DEPLOYMENT: url %q user %q secret %q deployment %q", *url, *user, *secret, *dep)
	}
	fs = newFlagSet("certify-director", &bytes.Buffer{})
	dep = fs.String("deployment", "", "")
	url = fs.String("url", "", "")
	boshAliases(fs)
	if err := parseFlags(fs, []string{"-d", "cf", "--environment", "https://d:25555"}); err != nil || *dep != "cf" || *url != "https://d:25555" {
		t.Errorf("-d cf --environment: deployment %q url %q, %v", *dep, *url, err)
	}
	for args, want := range map[string]string{
		"certifi":                 "Did you mean 'cpilab certify'?",
		"simualte":                "Did you mean 'cpilab simulate'?",
		"certify --label-filer x": "Did you mean --label-filter?",
		"certify --fail-fats":     "Did you mean --fail-fast?",
	} {
		code, _, errs := runArgs(strings.Fields(args)...)
		if code != exitUsage || !strings.Contains(errs, want) {
			t.Errorf("cpilab %s: exit %d, stderr %q; want 2 and %q", args, code, errs, want)
		}
	}
}

// A build from a checkout (build info "(devel)") reports the version and
// commit the Makefile stamps, never "(devel)" when it has one.
func TestVersionFromTheMakefile(t *testing.T) {
	oldV, oldC := buildVersion, buildCommit
	defer func() { buildVersion, buildCommit = oldV, oldC }()
	buildVersion, buildCommit = "v0.0.0-20260101000000-0123456789ab", "0123456789ab"
	var b bytes.Buffer
	writeVersion(&b)
	if got := b.String(); !strings.HasPrefix(got, "cpilab v0.0.0-20260101000000-0123456789ab, commit ") || strings.Contains(got, "(devel)") {
		t.Errorf("--version with the Makefile's stamp: %q", got)
	}
}

// Go's flag errors name flags with one dash; cpilab says them as its help
// does, with two (a one-letter flag keeps one).
func TestFlagErrorsUseDoubleDashes(t *testing.T) {
	for args, want := range map[string]string{
		"certify --no-such-flag":     "flag provided but not defined: --no-such-flag",
		"certify --call-timeout":     "flag needs an argument: --call-timeout",
		"certify --call-timeout=abc": `invalid value "abc" for flag --call-timeout`,
		"certify -v=maybe":           `invalid boolean value "maybe" for -v`,
	} {
		code, _, errs := runArgs(strings.Fields(args)...)
		if code != exitUsage || !strings.Contains(errs, want) || strings.Count(errs, "flag") > 2 {
			t.Errorf("cpilab %s: exit %d, stderr %q; want 2 and %q, said once", args, code, errs, want)
		}
	}
}
