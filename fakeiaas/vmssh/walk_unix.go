//go:build unix

package vmssh

import (
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// lookups counts the file system look-ups resolve makes (one fstatat, plus
// an open or a readlinkat per directory or link): the measure that must
// grow linearly with depth. Tests read it.
var lookups atomic.Int64

// kind is what a component turned out to be.
type kind int

const (
	kindMissing kind = iota // absent, or not looked up (under a missing one)
	kindDir
	kindSymlink
	kindOther
)

// walk holds a descriptor per directory of the path resolved so far:
// fds[i] is the directory reached after i components. Components past a
// missing one have no descriptor.
type walk struct {
	root *os.File
	fds  []int
}

func (j *jail) newWalk() (*walk, error) {
	f, err := j.root.Open(".")
	if err != nil {
		return nil, err
	}
	return &walk{root: f, fds: []int{int(f.Fd())}}, nil
}

// up drops the descriptors of directories deeper than depth components.
func (w *walk) up(depth int) {
	for len(w.fds) > depth+1 {
		unix.Close(w.fds[len(w.fds)-1])
		w.fds = w.fds[:len(w.fds)-1]
	}
}

// lookup examines component c of the directory depth components deep. A
// directory is opened (never through a symlink) and becomes the next
// level; a symlink's target is returned.
func (w *walk) lookup(depth int, c string) (kind, string, error) {
	if depth+1 != len(w.fds) {
		return kindMissing, "", nil // under a missing or non-directory component
	}
	parent := w.fds[depth]
	var st unix.Stat_t
	lookups.Add(1)
	if err := unix.Fstatat(parent, c, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return kindMissing, "", nil // the operation itself reports it
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFLNK:
		lookups.Add(1)
		buf := make([]byte, MaxPathLen+1)
		n, err := unix.Readlinkat(parent, c, buf)
		if err != nil {
			return 0, "", err
		}
		return kindSymlink, string(buf[:n]), nil
	case unix.S_IFDIR:
		lookups.Add(1)
		fd, err := openDir(parent, c)
		if err != nil {
			return kindMissing, "", nil // swapped meanwhile: leave it to the operation
		}
		if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			unix.Close(fd)
			return kindMissing, "", nil
		}
		w.fds = append(w.fds, fd)
		return kindDir, "", nil
	}
	return kindOther, "", nil
}

func (w *walk) close() {
	w.up(0)
	w.root.Close()
}
