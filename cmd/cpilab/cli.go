package main

// The one CLI convention every cpilab command follows (docs/cli.md):
//
//   - help (-h, --help, `cpilab help CMD`) goes to stdout, in one format:
//     usage, what the command does, flags with typed placeholders, the
//     environment it reads, examples, exit statuses;
//   - a usage error names what was wrong on stderr, points at --help and
//     exits 2; a harness error exits 2; a rejection exits 1;
//   - every command takes --version, --no-color and --quiet; NO_COLOR in
//     the environment turns colour off too, and a terminal that is not UTF-8
//     gets ASCII glyphs;
//   - a command that talks to a Director reads BOSH_ENVIRONMENT,
//     BOSH_CLIENT, BOSH_CLIENT_SECRET and BOSH_CA_CERT as the bosh CLI does.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"sync"
	"unicode/utf8"
)

// commonFlags are the flags newFlagSet gives every command.
type commonFlags struct {
	version, noColor, quiet bool
}

var flagSets struct {
	mu sync.Mutex
	// common maps each FlagSet newFlagSet made to its common flags.
	common map[*flag.FlagSet]*commonFlags
	// last is the last FlagSet made for each command name, for --help and
	// completion.
	last map[string]*flag.FlagSet
}

// errVersionShown ends a command whose --version was given: run prints
// the version on stdout.
var errVersionShown = errors.New("--version")

// newFlagSet returns a FlagSet for command name that reports errors instead
// of exiting, with the common flags (--version, --no-color, --quiet). Its
// help is printed by run, on stdout, when parseFlags returns flag.ErrHelp.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("cpilab "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {} // run prints the help on stdout; errors get a pointer to it
	c := &commonFlags{}
	fs.BoolVar(&c.version, "version", false, "print cpilab's version and commit, then exit")
	fs.BoolVar(&c.noColor, "no-color", false, "no ANSI colour in the output (also: NO_COLOR set in the environment)")
	fs.BoolVar(&c.quiet, "quiet", false, "print only what matters to a script: failures and the final verdict line")
	flagSets.mu.Lock()
	defer flagSets.mu.Unlock()
	if flagSets.common == nil {
		flagSets.common = map[*flag.FlagSet]*commonFlags{}
		flagSets.last = map[string]*flag.FlagSet{}
	}
	flagSets.common[fs] = c
	flagSets.last[name] = fs
	return fs
}

// commonOf returns fs's common flags (zero for a FlagSet newFlagSet did not
// make).
func commonOf(fs *flag.FlagSet) commonFlags {
	flagSets.mu.Lock()
	defer flagSets.mu.Unlock()
	if c := flagSets.common[fs]; c != nil {
		return *c
	}
	return commonFlags{}
}

// lastFlagSet returns the last FlagSet made for command name (nil: none).
func lastFlagSet(name string) *flag.FlagSet {
	flagSets.mu.Lock()
	defer flagSets.mu.Unlock()
	return flagSets.last[name]
}

// parseFlags parses args with fs and refuses positional arguments. A bad
// flag or argument is a usage error: exit status 2, said once, with a
// pointer to --help. -h returns flag.ErrHelp and --version errVersionShown
// (run prints the help or the version on stdout).
// A command that talks to a Director takes its defaults from the BOSH_*
// environment first (boshEnv).
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := parseOnly(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fs, "unexpected arguments %q", fs.Args())
	}
	return nil
}

// parseOnly is parseFlags for a command that takes positional arguments.
func parseOnly(fs *flag.FlagSet, args []string) error {
	if err := applyBOSHEnv(fs); err != nil {
		return usageError(fs, "%v", err)
	}
	out := fs.Output()
	fs.SetOutput(io.Discard) // its errors name flags with one dash; parseOnly says them with two
	err := fs.Parse(args)
	fs.SetOutput(out)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		fmt.Fprintf(out, "%s: %s\n", fs.Name(), doubleDash(err.Error()))
		if name, ok := strings.CutPrefix(err.Error(), "flag provided but not defined: "); ok {
			name = strings.TrimLeft(name, "-")
			var names []string
			fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
			if s := closest(name, names); s != "" {
				fmt.Fprintf(fs.Output(), "Did you mean --%s?\n", s)
			}
		}
		fmt.Fprintf(fs.Output(), "Run '%s --help' for usage.\n", fs.Name())
		return exitError(exitUsage)
	}
	if commonOf(fs).version {
		return errVersionShown // run prints it on stdout
	}
	return nil
}

// boshEnv maps the bosh CLI's environment variables to the flags of a
// command that talks to a Director. A flag on the command line wins.
var boshEnv = []struct{ env, flag string }{
	{"BOSH_ENVIRONMENT", "url"},
	{"BOSH_CLIENT", "admin-user"},
	{"BOSH_CLIENT_SECRET", "admin-password"},
	{"BOSH_CA_CERT", "ca-cert"},
	{"BOSH_DEPLOYMENT", "deployment"},
}

// boshAliases adds, to a command that talks to a Director, the bosh CLI's
// names for its flags: -e/--environment (a URL or a host, as bosh -e
// takes it) for --url, --client and --client-secret for --admin-user and
// --admin-password, -d for --deployment. Each sets the flag it aliases.
func boshAliases(fs *flag.FlagSet) {
	alias := func(name, of string, conv func(string) string) {
		fs.Func(name, "the bosh CLI's name for --"+of, func(v string) error {
			if fs.Lookup(of) == nil {
				return fmt.Errorf("no --%s", of)
			}
			return fs.Set(of, conv(v))
		})
	}
	same := func(v string) string { return v }
	alias("e", "url", directorURL)
	alias("environment", "url", directorURL)
	alias("client", "admin-user", same)
	alias("client-secret", "admin-password", same)
	alias("d", "deployment", same)
}

// talksToDirector names the commands that read boshEnv.
var talksToDirector = map[string]bool{"cpilab certify-director": true}

func applyBOSHEnv(fs *flag.FlagSet) error {
	if !talksToDirector[fs.Name()] {
		return nil
	}
	for _, e := range boshEnv {
		v := os.Getenv(e.env)
		if v == "" || fs.Lookup(e.flag) == nil {
			continue
		}
		if e.env == "BOSH_ENVIRONMENT" {
			v = directorURL(v)
		}
		if err := fs.Set(e.flag, v); err != nil {
			return fmt.Errorf("%s=%q: %w", e.env, v, err)
		}
	}
	return nil
}

// directorURL turns BOSH_ENVIRONMENT (a URL, or a host as the bosh CLI
// takes it) into a URL: https and port 25555 unless given.
func directorURL(env string) string {
	if strings.Contains(env, "://") {
		return env
	}
	host := env
	if !strings.Contains(strings.TrimPrefix(host, "["), ":") || strings.HasSuffix(host, "]") {
		host += ":25555"
	}
	return "https://" + host
}

// usageError reports a misuse of fs's command: said once, with a pointer to
// --help, exit status 2.
func usageError(fs *flag.FlagSet, format string, args ...any) error {
	fmt.Fprintf(fs.Output(), "%s: %s\nRun '%s --help' for usage.\n", fs.Name(), fmt.Sprintf(format, args...), fs.Name())
	return exitError(exitUsage)
}

// ui is how a command prints: colour only on a terminal without NO_COLOR or
// --no-color, cpilab's glyphs as ASCII on a terminal that is not UTF-8.
type ui struct {
	out, err io.Writer
	color    bool
	quiet    bool
}

// newUI returns the ui for a command whose flags fs parsed.
func newUI(fs *flag.FlagSet, stdout, stderr io.Writer) ui {
	c := commonOf(fs)
	u := ui{out: stdout, err: stderr, quiet: c.quiet}
	u.color = !c.noColor && os.Getenv("NO_COLOR") == "" && os.Getenv("TERM") != "dumb" && isTerminal(stdout)
	if !utf8Locale() {
		u.out, u.err = asciiWriter(stdout), asciiWriter(stderr)
	}
	return u
}

// paint wraps s in an ANSI colour when u has colour: "green", "red",
// "yellow" or "bold".
func (u ui) paint(s, color string) string {
	if !u.color {
		return s
	}
	code := map[string]string{"green": "1;32", "red": "1;31", "yellow": "1;33", "bold": "1"}[color]
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// utf8Locale reports whether the locale's character set is UTF-8: the
// first of LC_ALL, LC_CTYPE and LANG that is set decides, as for any POSIX
// program; none set is the C locale, which is not.
func utf8Locale() bool {
	for _, k := range []string{"LC_ALL", "LC_CTYPE", "LANG"} {
		if v := os.Getenv(k); v != "" {
			v = strings.ToLower(v)
			return strings.Contains(v, "utf-8") || strings.Contains(v, "utf8")
		}
	}
	return false
}

// asciiGlyphs are cpilab's own glyphs and their ASCII stand-ins. Text that
// is not cpilab's (a CPI's error message) passes through unchanged.
var asciiGlyphs = strings.NewReplacer(
	"✔", "+", "✘", "x", "–", "-", "—", "--", "…", "...", "·", "|", "×", "x",
	"→", "->", "≥", ">=", "≤", "<=", "§", "S",
)

// asciiWriter returns w with asciiGlyphs replaced. A rune split across
// writes is held until its end arrives.
func asciiWriter(w io.Writer) io.Writer { return &glyphWriter{w: w} }

type glyphWriter struct {
	w    io.Writer
	mu   sync.Mutex
	held []byte
}

func (g *glyphWriter) Write(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	buf := append(g.held, p...)
	cut := len(buf)
	// Hold back an incomplete rune at the end.
	for i := len(buf) - 1; i >= 0 && i >= len(buf)-utf8.UTFMax; i-- {
		if utf8.RuneStart(buf[i]) {
			if !utf8.FullRune(buf[i:]) {
				cut = i
			}
			break
		}
	}
	g.held = append([]byte(nil), buf[cut:]...)
	if _, err := io.WriteString(g.w, asciiGlyphs.Replace(string(buf[:cut]))); err != nil {
		return 0, err
	}
	return len(p), nil
}

// readCACert reads --ca-cert (or BOSH_CA_CERT): a PEM file, or the PEM
// itself, as the bosh CLI takes it.
func readCACert(v string) ([]byte, error) {
	if strings.HasPrefix(strings.TrimSpace(v), "-----BEGIN") {
		return []byte(v), nil
	}
	pem, err := os.ReadFile(v)
	if err != nil {
		return nil, fmt.Errorf("--ca-cert (or BOSH_CA_CERT): %w", err)
	}
	return pem, nil
}

// closest returns the candidate nearest to word, when it is near enough
// to be a typo of it (at most a third of its letters edited, or word a
// prefix of it); "" when none is.
func closest(word string, candidates []string) string {
	best, bestD := "", len(word)/3+1
	for _, c := range candidates {
		d := editDistance(word, c)
		if len(word) >= 3 && strings.HasPrefix(c, word) {
			d = min(d, 1)
		}
		if d < bestD || d == bestD && best != "" && c < best {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// goFlagName is a flag named in one of Go's flag errors ("…: -name",
// "for flag -name:", "for -name:").
var goFlagName = regexp.MustCompile(`(: |flag |for )-([A-Za-z0-9][A-Za-z0-9._-]+)`)

// doubleDash rewrites Go's flag errors to name flags as cpilab's help
// does: --name (a one-letter flag keeps its one dash).
func doubleDash(msg string) string {
	return goFlagName.ReplaceAllString(msg, "$1--$2")
}
