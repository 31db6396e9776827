package main

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/fixtures/buggycpi"
	"github.com/cpilab/cpilab/suites"
)

// The catalog test runs a default `cpilab certify --cpi` (no label filter)
// against every bug of fixtures/buggycpi, which must be rejected with the
// bug's own clause named, and every legal variant, which must be accepted.
//
//	CPILAB_CATALOG=hint-off-by-one,legal-pretty-json  only these (while developing)
//	CPILAB_CATALOG_PARALLEL=2                         certify processes at once (default 2;
//	                                                  more also needs go test -parallel)
func catalogSelection(t *testing.T) (bugs, variants []buggycpi.Bug) {
	t.Helper()
	sel := strings.FieldsFunc(os.Getenv("CPILAB_CATALOG"), func(r rune) bool { return r == ',' || r == ' ' })
	for _, n := range sel {
		if _, found := buggycpi.Lookup(n); !found {
			t.Fatalf("CPILAB_CATALOG names %q, which is neither a bug nor a variant of fixtures/buggycpi", n)
		}
	}
	pick := func(all []buggycpi.Bug) []buggycpi.Bug {
		if len(sel) == 0 {
			return all
		}
		var out []buggycpi.Bug
		for _, b := range all {
			if slices.Contains(sel, b.Name) {
				out = append(out, b)
			}
		}
		return out
	}
	return pick(buggycpi.Catalog), pick(buggycpi.Variants)
}

func catalogParallel(t *testing.T) int {
	t.Helper()
	s := os.Getenv("CPILAB_CATALOG_PARALLEL")
	if s == "" {
		return 2
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		t.Fatalf("CPILAB_CATALOG_PARALLEL=%q: want a positive number", s)
	}
	return n
}

// install makes the executable of a bug or a variant in dir.
func install(t *testing.T, dir string, b buggycpi.Bug) string {
	t.Helper()
	path, err := b.Install(dir)
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCertifyCatalog certifies every bug and every legal variant in
// parallel batches and prints the time the whole catalog took.
func TestCertifyCatalog(t *testing.T) {
	bugs, variants := catalogSelection(t)
	dir := buildCPIs(t)
	slots := make(chan struct{}, catalogParallel(t))
	var mu sync.Mutex
	var runs []string
	slot := func(t *testing.T, name string) func() {
		slots <- struct{}{}
		start := time.Now()
		return func() {
			<-slots
			mu.Lock()
			runs = append(runs, name+" "+time.Since(start).Round(100*time.Millisecond).String())
			mu.Unlock()
		}
	}
	start := time.Now()
	t.Run("group", func(t *testing.T) {
		for _, bug := range bugs {
			t.Run("bug/"+bug.Name, func(t *testing.T) {
				t.Parallel()
				defer slot(t, bug.Name)()
				certifyRejects(t, dir, bug)
			})
		}
		for _, v := range variants {
			t.Run("variant/"+v.Name, func(t *testing.T) {
				t.Parallel()
				defer slot(t, v.Name)()
				certifyAccepts(t, dir, v)
			})
		}
	})
	elapsed := time.Since(start).Round(time.Second)
	slices.Sort(runs)
	t.Logf("each certify run: %s", strings.Join(runs, ", "))
	t.Logf("catalog: %d bugs and %d legal variants certified in %s, %d at a time", len(bugs), len(variants), elapsed, cap(slots))
	os.Stderr.WriteString("catalog: " + strconv.Itoa(len(bugs)) + " bugs and " + strconv.Itoa(len(variants)) + " legal variants certified in " + elapsed.String() + "\n")
}

// certifyRejects checks that a default certify run rejects bug, naming its
// clause, with a rerun command, and cleans up after the failed specs.
func certifyRejects(t *testing.T, dir string, bug buggycpi.Bug) {
	t.Helper()
	link := install(t, dir, bug)
	js := filepath.Join(t.TempDir(), "r.json")
	args := append([]string{"--cpi", link, "--json-report", js}, bug.CertifyArgs...)
	code, stdout, stderr := certify(t, dir, args...)
	if code != 1 {
		t.Fatalf("certify exited %d, want 1 (rejected): %s\nstdout:\n%s\nstderr:\n%s", code, bug.Story, stdout, tail(stderr, 4000))
	}
	clauses := failedClauses(t, js)
	want := append([]string{bug.Clause}, bug.AlsoClauses...)
	if !slices.ContainsFunc(clauses, func(c string) bool { return slices.Contains(want, c) || slices.Contains(want, suites.ClauseOf(c)) }) {
		t.Fatalf("rejected, but no failure names clause %s (%s); clauses named:\n  %s\nstdout:\n%s", bug.Clause, bug.Story, strings.Join(clauses, "\n  "), stdout)
	}
	if !strings.Contains(stdout, bug.Clause) || !strings.Contains(stdout, "certify --cpi") {
		t.Errorf("the output does not show clause %s and a rerun command:\n%s", bug.Clause, stdout)
	}
	// Failed specs still clean up, unless the bug hides what it made.
	if !bug.Leaks && !strings.Contains(stdout, "left in the embedded fakeiaas after the run: nothing") {
		t.Errorf("resources left after the failed specs:\n%s", stdout)
	}
}

// certifyAccepts checks that a default certify run accepts a legal variant.
func certifyAccepts(t *testing.T, dir string, v buggycpi.Bug) {
	t.Helper()
	link := install(t, dir, v)
	code, stdout, stderr := certify(t, dir, "--cpi", link)
	if code != 0 || !strings.Contains(stdout, "ACCEPTED") {
		t.Fatalf("certify exited %d against a correct CPI (%s)\nstdout:\n%s\nstderr:\n%s", code, v.Story, stdout, tail(stderr, 4000))
	}
	if !strings.Contains(stdout, "left in the embedded fakeiaas after the run: nothing") {
		t.Errorf("resources left after the run:\n%s", stdout)
	}
	if v.Name == "legal-minimal-optional-methods" && !strings.Contains(stdout, "the CPI answers NotImplemented for has_vm") {
		t.Errorf("the checks the CPI opted out of are not listed as not checked:\n%s", stdout)
	}
}

// failedClauses returns the clauses a certify report shows broken: those
// of the failed specs and of every violation they found. (The report's
// schema is the CLI tests' business: this test judges verdicts.)
func failedClauses(t *testing.T, path string) []string {
	t.Helper()
	rep, err := suites.ReadCertifyReport(path)
	if err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	out := rep.FailedClauses()
	for _, s := range rep.Specs {
		if s.State == suites.StateFailed || s.State == suites.StateInterrupted {
			out = append(out, s.Clause)
		}
	}
	return out
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
