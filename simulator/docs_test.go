package simulator

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/simulator/faults"
)

// docTable returns the first column's `name` of each row of the table under
// the "## title" section of docs/simulate.md, and each row whole.
func docTable(t *testing.T, doc, title string) map[string]string {
	t.Helper()
	_, sect, ok := strings.Cut(doc, "\n## "+title+"\n")
	if !ok {
		t.Fatalf("docs/simulate.md has no section %q", title)
	}
	if i := strings.Index(sect, "\n## "); i >= 0 {
		sect = sect[:i]
	}
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9-]+)` \\|.*$").FindAllStringSubmatch(sect, -1) {
		rows[m[1]] = m[0]
	}
	return rows
}

// invariantNames are the values of the Inv* constants of this package.
func invariantNames(t *testing.T) []string {
	t.Helper()
	fset := token.NewFileSet()
	var names []string
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, sp := range gd.Specs {
				vs := sp.(*ast.ValueSpec)
				for i, n := range vs.Names {
					if !strings.HasPrefix(n.Name, "Inv") || i >= len(vs.Values) {
						continue
					}
					if lit, ok := vs.Values[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
						v, _ := strconv.Unquote(lit.Value)
						names = append(names, v)
					}
				}
			}
		}
	}
	return names
}

// docs/simulate.md lists every invariant a violation can name, every fault
// kind and every workload shape, and nothing else; every test it cites as
// proof exists.
func TestSimulateDocListsEveryInvariantFaultAndShape(t *testing.T) {
	b, err := os.ReadFile("../docs/simulate.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	invs := invariantNames(t)
	if len(invs) < 10 {
		t.Fatalf("found only %d Inv* constants: %v", len(invs), invs)
	}
	var kinds, shapes []string
	for _, k := range faults.Kinds {
		kinds = append(kinds, string(k))
	}
	for _, s := range Shapes {
		if s != ShapeMixed {
			shapes = append(shapes, s)
		}
	}
	var tests []string
	for title, want := range map[string][]string{"Invariants": invs, "Fault kinds": kinds, "Workload shapes": shapes} {
		rows := docTable(t, doc, title)
		for _, name := range want {
			if _, ok := rows[name]; !ok {
				t.Errorf("docs/simulate.md, %s: no row for %q", title, name)
			}
		}
		for name, row := range rows {
			if !slices.Contains(want, name) {
				t.Errorf("docs/simulate.md, %s: row %q names nothing the simulator has", title, name)
			}
			for _, m := range regexp.MustCompile("`(Test[A-Za-z0-9_]+)`").FindAllStringSubmatch(row, -1) {
				tests = append(tests, m[1])
			}
		}
	}
	var src strings.Builder
	for _, glob := range []string{"*_test.go", "*/*_test.go"} {
		files, _ := filepath.Glob(glob)
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	for _, name := range tests {
		if !strings.Contains(src.String(), "func "+name+"(") {
			t.Errorf("docs/simulate.md cites %s, which no test of the simulator defines", name)
		}
	}
	for _, m := range regexp.MustCompile("scenarios? `([a-z0-9-]+\\.txt)`|`(race-[a-z]\\.txt)`").FindAllStringSubmatch(doc, -1) {
		f := m[1] + m[2]
		if _, err := os.Stat(filepath.Join("..", "fixtures", "scenarios", f)); err != nil {
			t.Errorf("docs/simulate.md cites scenario %s: %v", f, err)
		}
	}
}
