package vmroot

import (
	"io/fs"
	"sort"
	"strings"
)

// dirEntry is a directory entry with its name and type only.
type dirEntry struct {
	name string
	typ  fs.FileMode
}

func (d dirEntry) Name() string               { return d.name }
func (d dirEntry) IsDir() bool                { return d.typ.IsDir() }
func (d dirEntry) Type() fs.FileMode          { return d.typ }
func (d dirEntry) Info() (fs.FileInfo, error) { return nil, fs.ErrInvalid }

func sortEntries(es []fs.DirEntry) {
	sort.Slice(es, func(i, j int) bool { return es[i].Name() < es[j].Name() })
}

// splitAll returns the components of a clean relative path.
func splitAll(r string) []string {
	if r == "." {
		return nil
	}
	return strings.Split(r, "/")
}
