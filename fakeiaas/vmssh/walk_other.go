//go:build !unix

package vmssh

import (
	"io/fs"
	"strings"
	"sync/atomic"
)

// lookups counts the file system look-ups resolve makes.
var lookups atomic.Int64

type kind int

const (
	kindMissing kind = iota
	kindDir
	kindSymlink
	kindOther
)

// walk looks components up through the os.Root by their path from the
// root (no descriptors to keep: the cost is quadratic in depth here).
type walk struct {
	j    *jail
	path []string
}

func (j *jail) newWalk() (*walk, error) { return &walk{j: j}, nil }

func (w *walk) up(depth int) {
	if len(w.path) > depth {
		w.path = w.path[:depth]
	}
}

func (w *walk) lookup(depth int, c string) (kind, string, error) {
	if depth != len(w.path) {
		return kindMissing, "", nil
	}
	next := strings.Join(append(w.path, c), "/")
	lookups.Add(1)
	fi, err := w.j.root.Lstat(next)
	if err != nil {
		return kindMissing, "", nil
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := w.j.root.Readlink(next)
		return kindSymlink, target, err
	case fi.IsDir():
		w.path = append(w.path, c)
		return kindDir, "", nil
	}
	return kindOther, "", nil
}

func (w *walk) close() {}
