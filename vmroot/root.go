package vmroot

import (
	"io/fs"
	"os"
)

// Root is an open VM root: a directory of the host's file system (Open,
// OS.Open) or of a memory file system (Mem.Open). Both backends answer
// every call the same way, down to the errors (docs/seams.md). Its methods
// are safe for concurrent use; Close ends its use.
type Root struct {
	b backend
}

// backend is what a Root is made of: the strict calls. The guest view
// (Resolve, Glob, Exists, ReadFileIn) is built on Lstat, Readlink and
// ReadDir, the same for every backend.
type backend interface {
	Dir() string
	Close() error
	Lstat(p string) (fs.FileInfo, error)
	Readlink(p string) (string, error)
	ReadFile(p string) ([]byte, error)
	WriteFileAtomic(p string, data []byte, perm fs.FileMode) error
	MkdirAll(p string, perm fs.FileMode) error
	ChmodDir(p string, perm fs.FileMode) error
	Symlink(target, p string, mode SymlinkMode) error
	LinkFrom(hostPath, p string) error
	Remove(p string) error
	RemoveAll(p string) error
	ReadDir(p string) ([]fs.DirEntry, error)
}

// Dir is the root's host path, as given to Open.
func (r *Root) Dir() string { return r.b.Dir() }

// Close releases the root.
func (r *Root) Close() error { return r.b.Close() }

// Lstat describes p without following a symlink at its end.
func (r *Root) Lstat(p string) (fs.FileInfo, error) { return r.b.Lstat(p) }

// Readlink returns the target of the symlink p, as stored.
func (r *Root) Readlink(p string) (string, error) { return r.b.Readlink(p) }

// ReadFile reads the regular file p (strict), up to MaxReadSize bytes.
func (r *Root) ReadFile(p string) ([]byte, error) { return r.b.ReadFile(p) }

// WriteFileAtomic replaces p with a regular file holding data: it creates
// "<name>.tmp" next to it afresh (removing any entry of that name first,
// never writing through it) and renames it over p. p's parent must exist.
func (r *Root) WriteFileAtomic(p string, data []byte, perm fs.FileMode) error {
	return r.b.WriteFileAtomic(p, data, perm)
}

// MkdirAll makes directory p and its missing parents with perm (before the
// umask); every existing component must be a real directory.
func (r *Root) MkdirAll(p string, perm fs.FileMode) error { return r.b.MkdirAll(p, perm) }

// ChmodDir sets the permission bits of directory p (never a symlink).
func (r *Root) ChmodDir(p string, perm fs.FileMode) error { return r.b.ChmodDir(p, perm) }

// Symlink makes p a symlink to target, doing nothing when it already is
// one; mode says how an existing entry is replaced. p's parent must exist.
func (r *Root) Symlink(target, p string, mode SymlinkMode) error {
	return r.b.Symlink(target, p, mode)
}

// LinkFrom makes p a hard link to the host file hostPath (the fake cloud's
// device nodes), a path of the file system the root is on. An existing
// entry at p is an error (fs.ErrExist).
func (r *Root) LinkFrom(hostPath, p string) error { return r.b.LinkFrom(hostPath, p) }

// Remove removes the file, symlink or empty directory p.
func (r *Root) Remove(p string) error { return r.b.Remove(p) }

// RemoveAll removes p and everything under it, never following a symlink;
// an absent p is success.
func (r *Root) RemoveAll(p string) error { return r.b.RemoveAll(p) }

// ReadDir lists directory p (strict), sorted by name. Entries carry their
// type only (Info is not available).
func (r *Root) ReadDir(p string) ([]fs.DirEntry, error) { return r.b.ReadDir(p) }

// Host is the file system VM roots live in: OS, the machine's own, or a
// memory one (NewMem) for a simulated world that should touch no disk.
// The fake cloud makes and removes its VM directories and disk files
// through it, and agents and checkers open VM roots through it. Paths are
// host paths; the memory file system follows no symlink in them.
type Host interface {
	// Open opens directory dir as a VM root.
	Open(dir string) (*Root, error)
	// MkdirAll makes directory dir and its missing parents (os.MkdirAll).
	MkdirAll(dir string, perm fs.FileMode) error
	// Mkdir makes directory dir; anything already there is fs.ErrExist.
	Mkdir(dir string, perm fs.FileMode) error
	// CreateExcl makes name an empty regular file; anything already there
	// is fs.ErrExist.
	CreateExcl(name string, perm fs.FileMode) error
	// Truncate sets the size of the regular file name (sparse when grown).
	Truncate(name string, size int64) error
	// Lstat describes name without following a symlink at its end.
	Lstat(name string) (fs.FileInfo, error)
	// ReadDir lists directory dir, sorted by name.
	ReadDir(dir string) ([]fs.DirEntry, error)
	// Remove removes the file, symlink or empty directory name.
	Remove(name string) error
	// RemoveAll removes name and everything under it; absent is success.
	RemoveAll(name string) error
}

// OS is the machine's file system: what certify, the testbed, real agents
// and CPIs use, and the default wherever a Host can be given.
var OS Host = osHost{}

// HostOrOS is h, or OS when h is nil.
func HostOrOS(h Host) Host {
	if h == nil {
		return OS
	}
	return h
}

type osHost struct{}

func (osHost) Open(dir string) (*Root, error)              { return Open(dir) }
func (osHost) MkdirAll(dir string, perm fs.FileMode) error { return os.MkdirAll(dir, perm) }
func (osHost) Mkdir(dir string, perm fs.FileMode) error    { return os.Mkdir(dir, perm) }
func (osHost) Truncate(name string, size int64) error      { return os.Truncate(name, size) }
func (osHost) Lstat(name string) (fs.FileInfo, error)      { return os.Lstat(name) }
func (osHost) ReadDir(dir string) ([]fs.DirEntry, error)   { return os.ReadDir(dir) }
func (osHost) Remove(name string) error                    { return os.Remove(name) }
func (osHost) RemoveAll(name string) error                 { return os.RemoveAll(name) }

func (osHost) CreateExcl(name string, perm fs.FileMode) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	return f.Close()
}

// SameFile reports whether a and b (from a Root's or a Host's Lstat)
// describe the same file: the same inode on the machine's file system, the
// same node of a memory one.
func SameFile(a, b fs.FileInfo) bool {
	ma, aok := a.(memInfo)
	mb, bok := b.(memInfo)
	if aok || bok {
		return aok && bok && ma.n == mb.n
	}
	if da, ia, ok := fileID(a); ok {
		if db, ib, ok := fileID(b); ok {
			return da == db && ia == ib
		}
	}
	return os.SameFile(a, b)
}
