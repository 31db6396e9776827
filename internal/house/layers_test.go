package house

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// importGraph maps each package of the module (its directory relative to
// the module root) to the module packages its non-test files import.
func importGraph(t *testing.T) map[string][]string {
	t.Helper()
	g := map[string][]string{}
	for _, p := range packages(t) {
		for _, f := range p.files {
			for _, im := range f.Imports {
				path, _ := strconv.Unquote(im.Path.Value)
				if rel, ok := strings.CutPrefix(path, module+"/"); ok && !slices.Contains(g[p.rel], rel) {
					g[p.rel] = append(g[p.rel], rel)
				}
			}
		}
		if _, ok := g[p.rel]; !ok {
			g[p.rel] = nil
		}
	}
	return g
}

// importPath is the chain of imports by which from reaches a package that
// bad says is forbidden (from first, the forbidden package last), or nil
// when it reaches none.
func importPath(g map[string][]string, from string, bad func(string) bool) []string {
	seen := map[string]bool{from: true}
	var walk func(p string) []string
	walk = func(p string) []string {
		for _, q := range g[p] {
			if bad(q) {
				return []string{p, q}
			}
			if seen[q] {
				continue
			}
			seen[q] = true
			if rest := walk(q); rest != nil {
				return append([]string{p}, rest...)
			}
		}
		return nil
	}
	return walk(from)
}

// underSuites reports whether p is a suite package: one under suites/.
func underSuites(p string) bool { return strings.HasPrefix(p, "suites/") }

// TestSharedSuitesImportNoSuite: the package every suite uses (suites)
// reaches no suite package (nor do its tests import one), and the dynamic-disks, FlexVolume and CSI
// suites do not reach the CPI suite (suites/cpisuite), directly or through
// another package of the module.
func TestSharedSuitesImportNoSuite(t *testing.T) {
	g := importGraph(t)
	if _, ok := g["suites"]; !ok {
		t.Fatal("no package suites under the module root")
	}
	if _, ok := g["suites/cpisuite"]; !ok {
		t.Fatal("no package suites/cpisuite under the module root")
	}
	if chain := importPath(g, "suites", underSuites); chain != nil {
		t.Errorf("package suites reaches a suite package: %s", strings.Join(chain, " → "))
	}
	tests, err := filepath.Glob(filepath.Join(root, "suites", "*_test.go"))
	if err != nil || len(tests) == 0 {
		t.Fatalf("no tests of package suites (%v)", err)
	}
	for _, file := range tests {
		f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range f.Imports {
			path, _ := strconv.Unquote(im.Path.Value)
			if rel, ok := strings.CutPrefix(path, module+"/"); ok && underSuites(rel) {
				t.Errorf("%s: package suites' test imports the suite %s", filepath.Base(file), rel)
			}
		}
	}
	cpi := func(p string) bool { return p == "suites/cpisuite" || strings.HasPrefix(p, "suites/cpisuite/") }
	for _, s := range []string{"suites/dynamicdisks", "suites/flex", "suites/csisuite"} {
		if _, ok := g[s]; !ok {
			t.Errorf("no package %s under the module root", s)
			continue
		}
		if chain := importPath(g, s, cpi); chain != nil {
			t.Errorf("%s reaches the CPI suite: %s", s, strings.Join(chain, " → "))
		}
	}
}

// TestImportPathFindsIndirectImports: the check above sees an import made
// through another package, and names the chain.
func TestImportPathFindsIndirectImports(t *testing.T) {
	g := map[string][]string{
		"suites":        {"internal/termsafe", "testbed"},
		"testbed":       {"suites/cpisuite"},
		"suites/flex":   {"suites"},
		"suites/direct": {"suites/cpisuite"},
	}
	if got := importPath(g, "suites", underSuites); strings.Join(got, " ") != "suites testbed suites/cpisuite" {
		t.Errorf("indirect import: chain %q", got)
	}
	if got := importPath(g, "suites/flex", func(p string) bool { return p == "suites/cpisuite" }); got == nil {
		t.Error("suites/flex reaches suites/cpisuite through suites and testbed, but the check saw nothing")
	}
	if got := importPath(g, "suites/direct", func(p string) bool { return p == "suites/cpisuite" }); len(got) != 2 {
		t.Errorf("direct import: chain %q", got)
	}
	if got := importPath(g, "testbed", func(p string) bool { return p == "suites/flex" }); got != nil {
		t.Errorf("testbed does not reach suites/flex, the check says %q", got)
	}
}
