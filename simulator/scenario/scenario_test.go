package scenario_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"flag"

	"github.com/cpilab/cpilab/simulator/scenario"
)

// rewrite: go test -run … -args -rewrite replaces the expected output in
// the scenario files with the actual output.
var rewrite = flag.Bool("rewrite", false, "rewrite the expected output in scenario files with the actual output")

type stack struct{ vals []int }

func (s *stack) String() string {
	parts := make([]string, len(s.vals))
	for i, v := range s.vals {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, " ")
}

func toy() *scenario.Registry[*stack] {
	r := scenario.NewRegistry[*stack]()
	r.Register("push", "push v=N", func(s *stack, c *scenario.Command) (string, error) {
		v, err := c.Int("v")
		if err != nil {
			return "", err
		}
		s.vals = append(s.vals, v)
		return s.String(), nil
	})
	r.Register("push-all", "push-all vs=(N, …)", func(s *stack, c *scenario.Command) (string, error) {
		vs, _ := c.Values("vs")
		for _, v := range vs {
			n, err := strconv.Atoi(v)
			if err != nil {
				return "", err
			}
			s.vals = append(s.vals, n)
		}
		return s.String(), nil
	})
	r.Register("pop", "pop", func(s *stack, c *scenario.Command) (string, error) {
		if len(s.vals) == 0 {
			return "", errors.New("stack empty")
		}
		v := s.vals[len(s.vals)-1]
		s.vals = s.vals[:len(s.vals)-1]
		return strconv.Itoa(v), nil
	})
	r.Register("add", "add", func(s *stack, c *scenario.Command) (string, error) {
		n := len(s.vals)
		s.vals = append(s.vals[:n-2], s.vals[n-2]+s.vals[n-1])
		return s.String(), nil
	})
	r.Register("sum", "sum (numbers as input lines)", func(s *stack, c *scenario.Command) (string, error) {
		total := 0
		for _, l := range strings.Fields(c.Input) {
			n, _ := strconv.Atoi(l)
			total += n
		}
		return strconv.Itoa(total), nil
	})
	r.Register("lines", "lines n=N [gap]", func(s *stack, c *scenario.Command) (string, error) {
		n, err := c.Int("n")
		if err != nil {
			return "", err
		}
		sep := "\n"
		if c.Has("gap") {
			sep = "\n\n"
		}
		var ls []string
		for i := 1; i <= n; i++ {
			ls = append(ls, fmt.Sprintf("line %d", i))
		}
		return strings.Join(ls, sep), nil
	})
	r.Register("wait", "wait d=DURATION [tag=TEXT]", func(s *stack, c *scenario.Command) (string, error) {
		d, err := c.Duration("d")
		if err != nil {
			return "", err
		}
		tag, err := c.ValueOr("tag", "-")
		return fmt.Sprintf("waited %v (%s)", d, tag), err
	})
	return r
}

func newStack() *stack { return &stack{} }

func TestToyScenarioPasses(t *testing.T) {
	scenario.RunTest(t, filepath.Join("testdata", "toy.txt"), toy(), newStack, *rewrite)
}

// recorder is a scenario.TB that records instead of failing.
type recorder struct{ errors, fatals []string }

func (r *recorder) Helper()                   {}
func (r *recorder) Logf(string, ...any)       {}
func (r *recorder) Errorf(f string, a ...any) { r.errors = append(r.errors, fmt.Sprintf(f, a...)) }
func (r *recorder) Fatalf(f string, a ...any) { r.fatals = append(r.fatals, fmt.Sprintf(f, a...)) }
func writeFile(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "s.txt")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestMismatchIsReportedWithBothOutputs(t *testing.T) {
	p := writeFile(t, "push v=1\n----\n1\n\npush v=2\n----\n1 3\n\npop\n----\n2\n")
	var rec recorder
	scenario.RunTest(&rec, p, toy(), newStack, *rewrite)
	if len(rec.fatals) != 0 || len(rec.errors) != 1 {
		t.Fatalf("errors %q, fatals %q; want exactly one error", rec.errors, rec.fatals)
	}
	e := rec.errors[0]
	for _, want := range []string{"s.txt:5", "push v=2", "1 3", "1 2"} {
		if !strings.Contains(e, want) {
			t.Errorf("mismatch report lacks %q:\n%s", want, e)
		}
	}
}

func TestRewriteRestoresTheExpectedOutput(t *testing.T) {
	golden, err := os.ReadFile(filepath.Join("testdata", "toy.txt"))
	if err != nil {
		t.Fatal(err)
	}
	// Corrupt every expected output: single lines, the doubled-separator
	// block, and an empty one.
	broken := strings.Replace(string(golden), "3 4\n", "wrong\n", 1)
	broken = strings.Replace(broken, "----\n----\nline 1\n\nline 2\n\nline 3\n----\n----\n", "----\nstale\n", 1)
	broken = strings.Replace(broken, "----\n6\n", "----\n", 1)
	if broken == string(golden) {
		t.Fatal("the test did not change the file")
	}
	p := writeFile(t, broken)
	rep, err := scenario.Run(p, toy(), newStack(), scenario.Options{})
	if err != nil || len(rep.Mismatches) != 3 {
		t.Fatalf("before rewrite: %v, %d mismatches; want 3", err, len(rep.Mismatches))
	}
	rep, err = scenario.Run(p, toy(), newStack(), scenario.Options{Rewrite: true})
	if err != nil || !rep.Rewritten {
		t.Fatalf("rewrite: %v %+v", err, rep)
	}
	got, _ := os.ReadFile(p)
	if string(got) != string(golden) {
		t.Fatalf("rewritten file differs from the golden one:\n%s", got)
	}
	rep, err = scenario.Run(p, toy(), newStack(), scenario.Options{Rewrite: true})
	if err != nil || rep.Rewritten {
		t.Fatalf("rewriting a correct file changed it: %v %+v", err, rep)
	}
}

func TestUnknownCommandAndBadFilesAreErrors(t *testing.T) {
	p := writeFile(t, "push v=1\n----\n1\n\nfrobnicate x=1\n----\n")
	_, err := scenario.Run(p, toy(), newStack(), scenario.Options{})
	if !errors.Is(err, scenario.ErrUnknownCommand) || !strings.Contains(err.Error(), "s.txt:5") ||
		!strings.Contains(err.Error(), "push: push v=N") {
		t.Fatalf("err = %v; want ErrUnknownCommand at s.txt:5 listing the registered commands", err)
	}
	pp := writeFile(t, "add\n----\n")
	if _, err := scenario.Run(pp, toy(), newStack(), scenario.Options{}); !errors.Is(err, scenario.ErrHandlerPanicked) ||
		!strings.Contains(err.Error(), "s.txt:1") {
		t.Fatalf("a panicking handler gave %v; want ErrHandlerPanicked at s.txt:1", err)
	}
	var rec recorder
	scenario.RunTest(&rec, p, toy(), newStack, *rewrite)
	if len(rec.fatals) != 1 {
		t.Fatalf("RunTest on an unknown command: fatals %q", rec.fatals)
	}
	for name, text := range map[string]string{
		"no separator":       "push v=1\n1\n",
		"unclosed double":    "lines n=2 gap\n----\n----\nline 1\n",
		"unterminated quote": "wait d=1s tag=\"x\n----\n",
		"unclosed paren":     "push-all vs=(1, 2\n----\n",
		"empty key":          "push =3\n----\n",
	} {
		if _, err := scenario.Parse("f.txt", text); err == nil {
			t.Errorf("%s: Parse accepted %q", name, text)
		}
	}
	if _, err := scenario.Run(filepath.Join(t.TempDir(), "missing.txt"), toy(), newStack(), scenario.Options{}); err == nil {
		t.Error("Run of a missing file reported no error")
	}
}

func TestParseArguments(t *testing.T) {
	f, err := scenario.Parse("f.txt", "cmd bare k=v q=\"a b\" l=(x, \"y, z\") e=()\nin 1\nin 2\n----\nout\n")
	if err != nil {
		t.Fatal(err)
	}
	cs := f.Commands()
	if len(cs) != 1 {
		t.Fatalf("%d commands", len(cs))
	}
	c := cs[0]
	var args []string
	for _, a := range c.Args {
		args = append(args, a.String())
	}
	if got := strings.Join(args, " "); got != `bare k=v q="a b" l=(x, "y, z") e=()` {
		t.Fatalf("args = %s", got)
	}
	if l, _ := c.Values("l"); len(l) != 2 || l[1] != "y, z" {
		t.Fatalf("l = %q", l)
	}
	if _, err := c.Value("l"); err == nil {
		t.Fatal("Value of a two-value argument gave no error")
	}
	if _, err := c.Value("missing"); err == nil {
		t.Fatal("Value of a missing argument gave no error")
	}
	if c.Input != "in 1\nin 2" || c.Expected != "out" || c.Pos != "f.txt:1" || !c.Has("bare") {
		t.Fatalf("command = %+v", c)
	}
}

func TestFilesListsScenarioFiles(t *testing.T) {
	fs, err := scenario.Files("testdata")
	if err != nil || len(fs) != 1 || filepath.Base(fs[0]) != "toy.txt" {
		t.Fatalf("Files = %v, %v", fs, err)
	}
}

func TestKeyValuesReadsEachKeyOnceUnquoted(t *testing.T) {
	var got []string
	seen, err := scenario.KeyValues([]string{`a=1`, `b="x y"`, `c=`}, func(k, v string) error {
		got = append(got, k+"|"+v)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"a|1", "b|x y", "c|"}; !slices.Equal(got, want) {
		t.Errorf("pairs %q, want %q", got, want)
	}
	if !seen["a"] || !seen["b"] || !seen["c"] || len(seen) != 3 {
		t.Errorf("seen %v, want a, b and c", seen)
	}
	refused := errors.New("refused by the caller")
	for words, want := range map[string]string{
		"a=1 a=2":  `key "a" given twice`,
		"a=1 b":    `want key=value, got "b"`,
		`a="open`:  "key a: invalid syntax",
		"a=1 no=2": "refused by the caller",
	} {
		ws, err := scenario.SplitWords(words)
		if err != nil {
			ws = []string{words}
		}
		_, err = scenario.KeyValues(ws, func(k, v string) error {
			if k == "no" {
				return refused
			}
			return nil
		})
		if err == nil || err.Error() != want {
			t.Errorf("KeyValues(%q) = %v, want %q", words, err, want)
		}
	}
}
