package scenario

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Separator divides a command (and its input) from its expected output.
const Separator = "----"

// Arg is one argument of a command line: key, key=value or key=(v1, v2).
type Arg struct {
	// Key is the argument's name (or the bare word).
	Key string
	// Vals holds the value(s); nil for a bare word, empty for key=().
	Vals []string
}

// String writes the argument as a command line holds it.
func (a Arg) String() string {
	switch {
	case a.Vals == nil:
		return a.Key
	case len(a.Vals) == 1:
		return a.Key + "=" + quoteVal(a.Vals[0])
	}
	q := make([]string, len(a.Vals))
	for i, v := range a.Vals {
		q[i] = quoteVal(v)
	}
	return a.Key + "=(" + strings.Join(q, ", ") + ")"
}

func quoteVal(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\"(),=") {
		return strconv.Quote(v)
	}
	return v
}

// Command is one command of a scenario file.
type Command struct {
	// Pos is "file:line" of the command line.
	Pos string
	// Name is the command's first word.
	Name string
	// Args are the rest of the command line, in order.
	Args []Arg
	// Input holds the lines between the command line and the separator.
	Input string
	// Expected is the expected output as written in the file.
	Expected string
	line     string // the command line as written
}

// Has reports whether the command has the argument key.
func (c *Command) Has(key string) bool { return c.arg(key) != nil }

func (c *Command) arg(key string) *Arg {
	for i := range c.Args {
		if c.Args[i].Key == key {
			return &c.Args[i]
		}
	}
	return nil
}

// Values returns the values of argument key.
func (c *Command) Values(key string) ([]string, bool) {
	a := c.arg(key)
	if a == nil {
		return nil, false
	}
	return a.Vals, true
}

// Value returns the single value of argument key; it is an error for the
// argument to be missing or to have other than one value.
func (c *Command) Value(key string) (string, error) {
	a := c.arg(key)
	if a == nil {
		return "", fmt.Errorf("%s needs argument %s=VALUE", c.Name, key)
	}
	if len(a.Vals) != 1 {
		return "", fmt.Errorf("%s: argument %s wants one value, has %d", c.Name, key, len(a.Vals))
	}
	return a.Vals[0], nil
}

// ValueOr is Value with a default for a missing argument.
func (c *Command) ValueOr(key, def string) (string, error) {
	if !c.Has(key) {
		return def, nil
	}
	return c.Value(key)
}

// Int returns argument key as an integer.
func (c *Command) Int(key string) (int, error) {
	v, err := c.Value(key)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("%s: argument %s=%q is not an integer", c.Name, key, v)
	}
	return n, nil
}

// Duration returns argument key as a duration ("1.5s").
func (c *Command) Duration(key string) (time.Duration, error) {
	v, err := c.Value(key)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: argument %s=%q is not a duration", c.Name, key, v)
	}
	return d, nil
}

// Handler runs one command against the scenario's state S and returns its
// output. An error is output too, as "error: <message>", so a scenario
// can expect a command to fail.
type Handler[S any] func(state S, c *Command) (string, error)

// Registry maps command names to handlers.
type Registry[S any] struct {
	handlers map[string]entry[S]
}

type entry[S any] struct {
	usage string
	h     Handler[S]
}

// NewRegistry returns an empty registry.
func NewRegistry[S any]() *Registry[S] { return &Registry[S]{handlers: map[string]entry[S]{}} }

// Register adds the handler for command name; usage is a one-line synopsis
// ("provide vm=VM disk=NAME") shown when a file uses an unknown command.
// Registering a name twice panics.
func (r *Registry[S]) Register(name, usage string, h Handler[S]) {
	if _, dup := r.handlers[name]; dup {
		panic(fmt.Sprintf("scenario: command %q registered twice", name))
	}
	r.handlers[name] = entry[S]{usage: usage, h: h}
}

// Usage lists the registered commands' synopses, sorted.
func (r *Registry[S]) Usage() string {
	var lines []string
	for name, e := range r.handlers {
		lines = append(lines, name+": "+e.usage)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// Options configures Run.
type Options struct {
	// Rewrite replaces every expected output in the file with the actual
	// output instead of comparing them.
	Rewrite bool
}

// Mismatch is a command whose output differed from the expected output.
type Mismatch struct {
	// Pos is the command's "file:line".
	Pos string
	// Command is the command line.
	Command string
	// Expected and Actual are the two outputs.
	Expected, Actual string
}

// String gives the position, the command and both outputs, indented.
func (m Mismatch) String() string {
	return fmt.Sprintf("%s: %s\nexpected:\n%s\nactual:\n%s", m.Pos, m.Command, indent(m.Expected), indent(m.Actual))
}

func indent(s string) string {
	if s == "" {
		return "    (nothing)"
	}
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// Report is the outcome of running one file.
type Report struct {
	// Path is the file run.
	Path string
	// Commands counts the commands run.
	Commands int
	// Mismatches lists the commands whose output differed (none when
	// rewriting).
	Mismatches []Mismatch
	// Rewritten reports that the file was rewritten.
	Rewritten bool
}

// ErrUnknownCommand is wrapped by the error Run returns for a command no
// handler is registered for.
var ErrUnknownCommand = errors.New("unknown command")

// Run runs the scenario file at path: each command through its handler, in
// order, on state. It compares each output with the expected output, or with
// opts.Rewrite writes the actual outputs back into the file. The error is for
// a file that cannot be read, parsed or written, or an unknown command;
// differing outputs are Report.Mismatches.
func Run[S any](path string, r *Registry[S], state S, opts Options) (*Report, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	f, err := Parse(path, string(data))
	if err != nil {
		return nil, err
	}
	rep := &Report{Path: path}
	var out strings.Builder
	for _, it := range f.items {
		if it.cmd == nil {
			out.WriteString(it.text + "\n")
			continue
		}
		c := it.cmd
		e, ok := r.handlers[c.Name]
		if !ok {
			return rep, fmt.Errorf("%s: %w %q; registered:\n%s", c.Pos, ErrUnknownCommand, c.Name, r.Usage())
		}
		rep.Commands++
		actual, herr, perr := call(e.h, state, c)
		if perr != nil {
			return rep, perr
		}
		if herr != nil {
			if actual != "" && !strings.HasSuffix(actual, "\n") {
				actual += "\n"
			}
			actual += "error: " + herr.Error()
		}
		actual = strings.TrimRight(actual, "\n")
		if !opts.Rewrite && actual != c.Expected {
			rep.Mismatches = append(rep.Mismatches, Mismatch{Pos: c.Pos, Command: c.line, Expected: c.Expected, Actual: actual})
		}
		writeBlock(&out, c, actual)
	}
	if opts.Rewrite {
		text := strings.TrimSuffix(out.String(), "\n")
		if f.finalNewline {
			text += "\n"
		}
		if text != string(data) {
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				return rep, err
			}
			rep.Rewritten = true
		}
	}
	return rep, nil
}

// ErrHandlerPanicked is wrapped by the error Run returns when a handler
// panics.
var ErrHandlerPanicked = errors.New("handler panicked")

// call runs h, turning a panic into an error that stops the file.
func call[S any](h Handler[S], state S, c *Command) (out string, err, panicErr error) {
	defer func() {
		if p := recover(); p != nil {
			panicErr = fmt.Errorf("%s: %s: %w: %v\n%s", c.Pos, c.line, ErrHandlerPanicked, p, debug.Stack())
		}
	}()
	out, err = h(state, c)
	return out, err, nil
}

func writeBlock(out *strings.Builder, c *Command, actual string) {
	out.WriteString(c.line + "\n")
	if c.Input != "" {
		out.WriteString(c.Input + "\n")
	}
	out.WriteString(Separator + "\n")
	if needsDoubleSeparator(actual) {
		out.WriteString(Separator + "\n" + actual + "\n" + Separator + "\n" + Separator + "\n")
		return
	}
	if actual != "" {
		out.WriteString(actual + "\n")
	}
}

// needsDoubleSeparator: output with a blank line (or one that is itself a
// separator) goes between doubled separators, as in etcd's datadriven.
func needsDoubleSeparator(s string) bool {
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) == "" && s != "" || l == Separator {
			return true
		}
	}
	return false
}

// TB is the part of testing.TB that RunTest uses.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
}

// RunTest runs the file at path as a test: each mismatch is a test error
// naming the command and both outputs; an unreadable file or unknown command
// is fatal. With rewrite it rewrites the file instead (a test passes its own
// -rewrite flag: go test ./... -args -rewrite). newState makes the state the
// commands share.
func RunTest[S any](t TB, path string, r *Registry[S], newState func() S, rewrite bool) {
	t.Helper()
	rep, err := Run(path, r, newState(), Options{Rewrite: rewrite})
	if err != nil {
		t.Fatalf("scenario %s: %v", path, err)
		return
	}
	if rep.Rewritten {
		t.Logf("scenario %s: rewrote the expected output", path)
	}
	for _, m := range rep.Mismatches {
		t.Errorf("scenario %s", m)
	}
}

// Files lists the scenario files in dir (*.txt), sorted, for running each
// as a subtest.
func Files(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".txt") {
			out = append(out, dir+string(os.PathSeparator)+e.Name())
		}
	}
	slices.Sort(out)
	return out, nil
}
