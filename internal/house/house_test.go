package house

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// root is the module's root directory (this package is internal/house).
const root = "../.."

const module = "github.com/cpilab/cpilab"

// pkg is one package of the module, parsed without its tests.
type pkg struct {
	rel   string // directory relative to the module root
	fset  *token.FileSet
	files map[string]*ast.File
}

// packages parses every non-test Go package under the module root (the same
// set `go list ./...` gives: no testdata, no hidden or underscore
// directories).
func packages(t *testing.T) []pkg {
	t.Helper()
	var out []pkg
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
			return filepath.SkipDir
		}
		fset := token.NewFileSet()
		parsed, err := parser.ParseDir(fset, path, func(fi fs.FileInfo) bool {
			return !strings.HasSuffix(fi.Name(), "_test.go")
		}, parser.ParseComments)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		for _, p := range parsed {
			out = append(out, pkg{rel: filepath.ToSlash(rel), fset: fset, files: p.Files})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out) < 40 {
		t.Fatalf("found only %d packages under the module root; is the test running from internal/house?", len(out))
	}
	return out
}

// TestSynopsisIsOneShortSentence: go doc's synopsis of every package (its
// first sentence) is there and under 200 characters, so `go doc` and
// pkg.go.dev listings read as one line each.
func TestSynopsisIsOneShortSentence(t *testing.T) {
	for _, p := range packages(t) {
		var text string
		for _, f := range p.files {
			if f.Doc != nil {
				text = f.Doc.Text()
			}
		}
		syn := doc.Synopsis(text)
		switch {
		case syn == "":
			t.Errorf("%s: no package doc", p.rel)
		case len(syn) >= 200:
			t.Errorf("%s: the package doc's first sentence is %d characters (under 200, please):\n%s", p.rel, len(syn), syn)
		case !strings.HasPrefix(syn, "Package ") && !strings.HasPrefix(syn, "Command ") && !strings.HasPrefix(syn, "Cpilab ") && !strings.HasPrefix(syn, "Bosh-") && !strings.HasPrefix(syn, "Fakeiaas-"):
			// Commands may start with their own name; libraries say "Package x".
			if !strings.HasPrefix(p.rel, "cmd/") && !strings.Contains(p.rel, "/cmd/") {
				t.Errorf("%s: the package doc does not start with \"Package …\": %q", p.rel, syn)
			}
		}
	}
}

// longFunctionsAllowed are the functions that may run over maxLines: tables
// written as code, whose length is the length of the table.
var longFunctionsAllowed = map[string]string{
	"fakeiaas/http.go Handler": "the fake cloud's route table, one line per route",
}

const maxLines = 150

// TestNoFunctionOver150Lines: a function is short enough to read in one
// sitting; the long ones are split into parts named for what they do.
func TestNoFunctionOver150Lines(t *testing.T) {
	for _, p := range packages(t) {
		for path, f := range p.files {
			file := filepath.Base(path)
			ast.Inspect(f, func(n ast.Node) bool {
				fd, ok := n.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					return true
				}
				lines := p.fset.Position(fd.Body.End()).Line - p.fset.Position(fd.Body.Pos()).Line
				key := p.rel + "/" + file + " " + fd.Name.Name
				if lines > maxLines {
					if _, ok := longFunctionsAllowed[key]; !ok {
						t.Errorf("%s is %d lines (at most %d): split it into parts named for what they do", key, lines, maxLines)
					}
				}
				return true
			})
		}
	}
}

// TestAllowedLongFunctionsStillExist keeps the allow-list honest: an entry
// whose function is gone or shorter is removed.
func TestAllowedLongFunctionsStillExist(t *testing.T) {
	seen := map[string]bool{}
	for _, p := range packages(t) {
		for path, f := range p.files {
			for _, d := range f.Decls {
				if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
					lines := p.fset.Position(fd.Body.End()).Line - p.fset.Position(fd.Body.Pos()).Line
					if lines > maxLines {
						seen[p.rel+"/"+filepath.Base(path)+" "+fd.Name.Name] = true
					}
				}
			}
		}
	}
	for key := range longFunctionsAllowed {
		if !seen[key] {
			t.Errorf("longFunctionsAllowed lists %q, which is no longer over %d lines: remove it", key, maxLines)
		}
	}
}

// TestNoMachinePaths: code, docs and scripts name no path of the machine
// they were written on (its work directory, a sibling checkout by name).
func TestNoMachinePaths(t *testing.T) {
	// Built from parts so that this file does not name them itself.
	forbidden := []string{"/" + "work/", "../" + "shared", "/tmp/" + "bash_jobs"}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (strings.HasPrefix(name, ".") && name != ".ci" && name != ".github" && name != ".gitlab" || name == "bin" || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".go", ".md", ".sh", ".yml", ".yaml", ".json", ".txt":
		default:
			if name != "Makefile" && name != "run" {
				return nil
			}
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, s := range forbidden {
			if i := strings.Index(string(b), s); i >= 0 {
				line := 1 + strings.Count(string(b[:i]), "\n")
				t.Errorf("%s:%d names a machine path (%q)", filepath.ToSlash(rel), line, s)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
