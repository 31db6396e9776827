package main

import (
	"fmt"
	"maps"
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
	"github.com/cpilab/cpilab/suites/cpisuite"
)

// The catalog test runs `cpilab certify --cpi` against every bug of
// fixtures/buggycpi, which must be rejected with the bug's own clause named,
// and every legal variant, which must be accepted.
//
// A legal variant that names the methods it varies (Bug.Varies: create_vm,
// attach_disk, set_vm_metadata, …) is accepted by a run of the contract
// specs labelled with one of those methods, every contract context's setup
// and clean-up, the explore row (random lifecycles checking the model after
// every step), and the whole reference table when a row is labelled with
// one of them: the specs a bug of those methods is rejected by. The run
// must show a spec calling each varied method, or the scope misses what
// the variant changes and the test fails; TestCatalogVariantScopesRejectABug
// checks that the scope holds every spec of the clause of a bug of those
// methods. A variant that changes every call
// (pretty-printed JSON, CRLF line ends, its log, error messages) or the whole
// CPI (api_version 1 only, bosh-cpi-go, the Ruby library) gets the default
// run. What make test thus leaves to make catalog: a scoped variant is not
// run through the specs of the methods it does not vary (a false failure
// there would show only in make catalog), as a scoped bug is not.
//
// A bug whose clause belongs to certain areas (disk.attach-hint-device: the
// hints area of the contract suite) is certified with a label filter that
// keeps those areas and their contexts' setup and clean-up
// (--label-filter '(suite:contract && (area:setup || area:cleanup ||
// area:hints))'; a reference-table clause keeps the whole table): the same
// specs, contexts and checks a default run makes for that clause, at a
// fraction of the cost; when that run does
// not show the bug (a spec of another area may report its clause), the
// default run must. A bug of a model.* clause is scoped to the explore row
// (which reports every model clause) with the contract contexts' setup and
// clean-up. A bug that any spec may catch (wire.* clauses, setup,
// clean-up), a bug that another clause may catch first (AlsoClauses), or one
// whose clause no spec lists, is certified with the whole contract suite
// first (--label-filter suite:contract), then the same way;
// CPILAB_CATALOG_FULL=1 gives every bug and every variant the default run
// (make catalog).
//
//	CPILAB_CATALOG=hint-off-by-one,legal-pretty-json  only these (while developing)
//	CPILAB_CATALOG_PARALLEL=2                         certify processes at once (default 2;
//	                                                  more also needs go test -parallel)
//	CPILAB_CATALOG_FULL=1                             every bug and variant in a default run
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
	scopes := clauseScopes(t, dir)
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
				certifyRejects(t, dir, bug, scopes.filter(bug))
			})
		}
		for _, v := range variants {
			t.Run("variant/"+v.Name, func(t *testing.T) {
				t.Parallel()
				defer slot(t, v.Name)()
				certifyAccepts(t, dir, v, scopes.variantFilter(v))
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
func certifyRejects(t *testing.T, dir string, bug buggycpi.Bug, labelFilter string) {
	t.Helper()
	link := install(t, dir, bug)
	if labelFilter != "" {
		// A violation may be reported by a spec of another area (a
		// detach made by a hint spec shows disk.detach): when the scoped
		// run does not show the bug, the default run must.
		missed, stdout := rejects(t, dir, link, bug, "--label-filter", labelFilter)
		if missed == "" {
			checkRejectionOutput(t, bug, stdout)
			return
		}
		first, _, _ := strings.Cut(missed, "\n")
		t.Logf("the run scoped to %q %s; certifying with the default run", labelFilter, strings.TrimSuffix(first, "; stderr:"))
	}
	missed, stdout := rejects(t, dir, link, bug)
	if missed != "" {
		t.Fatalf("the default run %s: %s\nstdout:\n%s", missed, bug.Story, stdout)
	}
	checkRejectionOutput(t, bug, stdout)
}

// rejects certifies the bug's executable with its CertifyArgs and extra
// and says how the run missed the bug ("" when judgeRejection accepts the
// run as catching it).
func rejects(t *testing.T, dir, link string, bug buggycpi.Bug, extra ...string) (missed, stdout string) {
	t.Helper()
	js := filepath.Join(t.TempDir(), "r.json")
	// The verdict and the clause are what the catalog checks: a failing
	// random lifecycle is reported as found (TestCertifyExploreAndReplay
	// keeps checking the shrinking).
	args := append(append([]string{"--cpi", link, "--json-report", js, "--no-shrink"}, bug.CertifyArgs...), extra...)
	code, stdout, stderr := certify(t, dir, args...)
	if code != 1 {
		return fmt.Sprintf("exited %d, want 1 (rejected); stderr:\n%s", code, tail(stderr, 4000)), stdout
	}
	rep, err := suites.ReadCertifyReport(js)
	if err != nil {
		t.Fatalf("JSON report: %v", err)
	}
	recordBreaks(t, bug, rep)
	return judgeRejection(rep, bug), stdout
}

// judgeRejection says how a rejecting run's report misses bug ("" when it
// catches it): a bug is caught only by a violation of its clause (or of
// one of its AlsoClauses) that a spec reported, never by a failed or
// interrupted spec of that clause alone, nor by a harness failure; and
// the run must name no clause outside the bug's MayBreak (its AlsoBreaks
// list what it breaks elsewhere).
func judgeRejection(rep *suites.CertifyReport, bug buggycpi.Bug) string {
	own := append([]string{bug.Clause}, bug.AlsoClauses...)
	may := bug.MayBreak()
	in := func(set []string, c string) bool {
		return slices.Contains(set, c) || slices.Contains(set, cpisuite.ClauseOf(c))
	}
	caught := false
	var extras []string
	for _, c := range rep.FailedClauses() {
		if c != suites.HarnessClause && in(own, c) {
			caught = true
		}
		if !in(may, c) {
			extras = append(extras, c)
		}
	}
	switch {
	case !caught:
		return fmt.Sprintf("rejected, but no violation of clause %s was reported; clauses of the violations:\n  %s", bug.Clause, strings.Join(rep.FailedClauses(), "\n  "))
	case len(extras) > 0:
		return fmt.Sprintf("rejected with clause %s, but also named %s, which the bug does not list (fixtures/buggycpi/breaks.go; CPILAB_CATALOG_RECORD=FILE records them)", bug.Clause, strings.Join(extras, ", "))
	}
	return ""
}

// recordBreaks appends, with CPILAB_CATALOG_RECORD=FILE, the clauses a
// rejecting run named beyond the bug's own, one "name clause" line each,
// to update fixtures/buggycpi/breaks.go from.
func recordBreaks(t *testing.T, bug buggycpi.Bug, rep *suites.CertifyReport) {
	file := os.Getenv("CPILAB_CATALOG_RECORD")
	if file == "" {
		return
	}
	own := append([]string{bug.Clause}, bug.AlsoClauses...)
	var b strings.Builder
	for _, c := range rep.FailedClauses() {
		if !slices.Contains(own, c) && !slices.Contains(own, cpisuite.ClauseOf(c)) {
			b.WriteString(bug.Name + " " + c + "\n")
		}
	}
	recordMu.Lock()
	defer recordMu.Unlock()
	f, err := os.OpenFile(file, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(b.String()); err != nil {
		t.Fatal(err)
	}
}

var recordMu sync.Mutex

// checkRejectionOutput checks what a rejecting run printed: the clause, a
// rerun command, and nothing left in the cloud.
func checkRejectionOutput(t *testing.T, bug buggycpi.Bug, stdout string) {
	t.Helper()
	if !strings.Contains(stdout, bug.Clause) || !strings.Contains(stdout, "certify --cpi") {
		t.Errorf("the output does not show clause %s and a rerun command:\n%s", bug.Clause, stdout)
	}
	// Failed specs still clean up, unless the bug hides what it made.
	if !bug.Leaks && !strings.Contains(stdout, "left in the embedded fakeiaas after the run: nothing") {
		t.Errorf("resources left after the failed specs:\n%s", stdout)
	}
}

// certifyAccepts checks that a certify run accepts a legal variant: the
// default run, or the run scoped by labelFilter to the specs of the
// methods it varies, which must then call each of them.
func certifyAccepts(t *testing.T, dir string, v buggycpi.Bug, labelFilter string) {
	t.Helper()
	link := install(t, dir, v)
	args := []string{"--cpi", link}
	js := filepath.Join(t.TempDir(), "a.json")
	if labelFilter != "" {
		args = append(args, "--label-filter", labelFilter, "--json-report", js)
	}
	code, stdout, stderr := certify(t, dir, args...)
	if code != 0 || !strings.Contains(stdout, "ACCEPTED") {
		t.Fatalf("certify %s exited %d against a correct CPI (%s)\nstdout:\n%s\nstderr:\n%s", strings.Join(args[2:], " "), code, v.Story, stdout, tail(stderr, 4000))
	}
	if labelFilter != "" {
		rep, err := suites.ReadCertifyReport(js)
		if err != nil {
			t.Fatalf("JSON report: %v", err)
		}
		if missing := uncalled(rep, v.Varies); len(missing) > 0 {
			t.Errorf("the run scoped to %q accepted the variant without a spec calling %s, which it varies: the scope does not exercise what the variant changes", labelFilter, strings.Join(missing, ", "))
		}
	}
	if !strings.Contains(stdout, "left in the embedded fakeiaas after the run: nothing") {
		t.Errorf("resources left after the run:\n%s", stdout)
	}
	if v.Name == "legal-minimal-optional-methods" && !strings.Contains(stdout, "the CPI answers NotImplemented for has_vm") {
		t.Errorf("the checks the CPI opted out of are not listed as not checked:\n%s", stdout)
	}
	// What callers tolerate but the documentation does not ask for is
	// accepted with a warning that says so.
	if v.Name == "legal-result-beside-error" && !strings.Contains(stdout, "beside its error; the documentation says null") {
		t.Errorf("a result beside an error is accepted without the results.unread warning:\n%s", stdout)
	}
	// A CPI fixed at api_version 2 (bosh-cpi-go's) is accepted with the
	// version 1 and version 3 rows listed as not checked, saying why.
	if v.Name == "legal-bosh-cpi-go" {
		for _, why := range []string{"the CPI cannot be switched to api_version 1", "needs a CPI at api_version 3, the CPI's info reports 2"} {
			if !strings.Contains(stdout, why) {
				t.Errorf("the rows a CPI fixed at api_version 2 cannot serve are not listed as not checked (%q):\n%s", why, stdout)
			}
		}
	}
}

// uncalled lists the methods no spec of the report called (a spec a
// NotImplemented or NotSupported answer leaves not checked counts: the
// run saw the variant's answer).
func uncalled(rep *suites.CertifyReport, methods []string) []string {
	called := map[string]bool{}
	for _, s := range rep.Specs {
		for _, m := range s.Methods {
			called[m] = true
		}
	}
	var out []string
	for _, m := range methods {
		if !called[m] {
			out = append(out, m)
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

// catalogScopes maps each clause to the suites and areas of the specs that
// check it, as `cpilab certify --list` shows them.
type catalogScopes struct {
	areas   map[string]map[string][]string // clause → suite → areas
	methods map[string][]string            // method → suites of the specs labelled with it
	specs   map[string][][]string          // clause → the method labels of each of its contract specs
	full    bool
}

func clauseScopes(t *testing.T, dir string) catalogScopes {
	t.Helper()
	sc := catalogScopes{areas: map[string]map[string][]string{}, methods: map[string][]string{}, specs: map[string][][]string{}, full: os.Getenv("CPILAB_CATALOG_FULL") == "1"}
	code, stdout, stderr := certify(t, dir, "--list")
	if code != 0 {
		t.Fatalf("certify --list exited %d: %s", code, stderr)
	}
	clause := ""
	for _, line := range strings.Split(stdout, "\n") {
		line = strings.TrimSpace(line)
		if c, ok := strings.CutPrefix(line, "clause: "); ok {
			clause, _, _ = strings.Cut(c, ":")
			continue
		}
		labels, ok := strings.CutPrefix(line, "labels: ")
		if !ok || clause == "" {
			continue
		}
		suite, area := "", ""
		var methods []string
		for _, l := range strings.Split(labels, ", ") {
			if v, ok := strings.CutPrefix(l, "suite:"); ok {
				suite = v
			}
			if v, ok := strings.CutPrefix(l, "area:"); ok {
				area = v
			}
			if v, ok := strings.CutPrefix(l, "method:"); ok {
				methods = append(methods, v)
			}
		}
		if suite == "contract" {
			sc.specs[clause] = append(sc.specs[clause], methods)
		}
		for _, m := range methods {
			if !slices.Contains(sc.methods[m], suite) {
				sc.methods[m] = append(sc.methods[m], suite)
			}
		}
		if sc.areas[clause] == nil {
			sc.areas[clause] = map[string][]string{}
		}
		if !slices.Contains(sc.areas[clause][suite], area) {
			sc.areas[clause][suite] = append(sc.areas[clause][suite], area)
		}
	}
	if len(sc.areas) < 20 || len(sc.areas["disk.attach-hint-device"]["contract"]) == 0 || len(sc.areas["table.registry"]["matrix"]) == 0 ||
		!slices.Contains(sc.methods["attach_disk"], "matrix") || !slices.Contains(sc.methods["set_vm_metadata"], "contract") {
		t.Fatalf("certify --list does not show the suites and areas of the clauses (%d clauses):\n%s", len(sc.areas), stdout)
	}
	return sc
}

// filter is the label filter bug is certified with ("" for the default
// run). A clause checked in the reference table keeps the whole table (its
// rows are ordered steps, each needing the one before); one checked in
// contract contexts keeps those contexts' setup, clean-up and specs of its
// areas. The other suite does not run at all.
func (sc catalogScopes) filter(bug buggycpi.Bug) string {
	suites, found := sc.areas[bug.Clause]
	if strings.HasPrefix(bug.Clause, "model.") && !found {
		// The explore row reports every model.* clause, though --list
		// names it with model.effect only; the model's other clauses have
		// no spec of their own and would scope to the whole contract
		// suite.
		suites, found = sc.areas[cpisuite.ClauseModelEffect]
	}
	switch {
	case sc.full:
		return ""
	case !found || len(bug.AlsoClauses) > 0 || strings.HasPrefix(bug.Clause, "wire.") ||
		strings.HasPrefix(bug.Clause, "setup.") || strings.HasPrefix(bug.Clause, "cleanup."):
		// Any spec may show it: the contract suite first (every method,
		// every caller profile), the default run when that does not.
		return "suite:contract"
	}
	var keep []string
	for _, suite := range slices.Sorted(maps.Keys(suites)) {
		if suite == "matrix" {
			keep = append(keep, "suite:matrix")
			continue
		}
		areas := []string{"area:setup", "area:cleanup"}
		for _, a := range suites[suite] {
			if a != "setup" && a != "cleanup" {
				areas = append(areas, "area:"+a)
			}
		}
		keep = append(keep, "(suite:"+suite+" && ("+strings.Join(areas, " || ")+"))")
	}
	return strings.Join(keep, " || ")
}

// variantFilter is the label filter a legal variant is accepted with (""
// for the default run): for a variant that names the methods it varies,
// the contract specs labelled with one of them, every contract context's
// setup and clean-up, the explore row (the random lifecycles call every
// method and check the model after each step), and the whole reference
// table when one of its rows is labelled with one of them (its rows are
// ordered steps). That is the run that rejects a bug of those methods,
// whose clause lives in their specs' areas.
func (sc catalogScopes) variantFilter(v buggycpi.Bug) string {
	if sc.full || len(v.Varies) == 0 {
		return ""
	}
	keep := []string{"area:setup", "area:cleanup", "area:explore"}
	matrix := false
	for _, m := range v.Varies {
		keep = append(keep, "method:"+m)
		matrix = matrix || slices.Contains(sc.methods[m], "matrix")
	}
	filter := "(suite:contract && (" + strings.Join(keep, " || ") + "))"
	if matrix {
		filter += " || suite:matrix"
	}
	return filter
}

// resembles names a bug of the catalog that a run with the variant's
// filter would reject: one whose clause is a contract clause (not the wire,
// setup or clean-up, no AlsoClauses) and each of whose specs is labelled
// with a method the variant varies; "" when there is none. Of several, the
// one whose specs call the fewest other methods (the clause most about the
// varied methods: disk.create-as-asked for create_disk, not a snapshot
// clause whose specs also create a disk).
func (sc catalogScopes) resembles(v buggycpi.Bug) string {
	best, fewest := "", 0.0
	for _, b := range buggycpi.Catalog {
		specs := sc.specs[b.Clause]
		if len(specs) == 0 || sc.filter(b) == "suite:contract" {
			continue
		}
		all, labels := true, 0
		for _, methods := range specs {
			all = all && slices.ContainsFunc(methods, func(m string) bool { return slices.Contains(v.Varies, m) })
			labels += len(methods)
		}
		if per := float64(labels) / float64(len(specs)); all && (best == "" || per < fewest) {
			best, fewest = b.Name, per
		}
	}
	return best
}

// TestCatalogVariantScopesRejectABug: the specs make test accepts a
// scoped legal variant with are all the specs of the clause of at least
// one bug of the catalog (a bug of the methods the variant varies), so the
// scoped run is one that rejects a real bug of the kind the variant
// resembles.
func TestCatalogVariantScopesRejectABug(t *testing.T) {
	sc := clauseScopes(t, buildCPIs(t))
	sc.full = false
	scoped := 0
	for _, v := range buggycpi.Variants {
		if len(v.Varies) == 0 {
			continue
		}
		scoped++
		if b := sc.resembles(v); b == "" {
			t.Errorf("variant %s (varies %s): no bug of the catalog has a clause whose every contract spec is labelled with one of those methods; its scoped run %q is not shown to reject a bug of its kind", v.Name, strings.Join(v.Varies, ", "), sc.variantFilter(v))
		} else {
			t.Logf("%s: accepted by the specs that reject %s", v.Name, b)
		}
	}
	if scoped == 0 {
		t.Fatal("no legal variant names the methods it varies")
	}
}
