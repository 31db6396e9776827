package store_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Only the Director (package director and the packages under director/,
// its launcher among them) imports its store: every other package reaches
// one through director.Store, director.MemoryStore, director.GuardedStore or
// launch.OpenPostgres, and so cannot read the Director's records. Test files
// may import it to plant a Director that lies only in its store.
func TestOnlyTheDirectorImportsItsStore(t *testing.T) {
	const storePath = "github.com/cpilab/cpilab/director/store"
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	scanned, inDirector := 0, 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "vendor") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		scanned++
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		for _, im := range f.Imports {
			if path, _ := strconv.Unquote(im.Path.Value); path != storePath {
				continue
			}
			if strings.HasPrefix(rel, "director/") {
				inDirector++
				continue
			}
			t.Errorf("%s imports the Director's store (%s): reach it through package director or its launcher", rel, storePath)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if scanned < 200 || inDirector == 0 {
		t.Fatalf("scanned %d files, %d imports in director/: the guard looked in the wrong tree", scanned, inDirector)
	}
}
