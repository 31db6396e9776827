//go:build linux

package vmroot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// osRoot is a VM root in a directory of the host's file system. Its
// methods are safe for concurrent use; Close ends its use.
type osRoot struct {
	dir string
	fd  int
}

const (
	strict = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS
	inRoot = unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS
)

// Open opens the directory dir (a host path) as a root on the host's file
// system (OS.Open).
func Open(dir string) (*Root, error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open root", Path: dir, Err: err}
	}
	return &Root{b: &osRoot{dir: dir, fd: fd}}, nil
}

// Dir is the root's host path, as given to Open.
func (r *osRoot) Dir() string { return r.dir }

// Close releases the root.
func (r *osRoot) Close() error { return unix.Close(r.fd) }

// pathErr wraps errno for guest path p, adding ErrSymlink to the chain
// where openat2 refused a symlink.
func pathErr(op, p string, err error) error {
	if errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) {
		err = fmt.Errorf("%w (%w)", ErrSymlink, err)
	}
	return &fs.PathError{Op: op, Path: p, Err: err}
}

// dirErr is pathErr for opening directory p, naming a symlink met at its
// end (which O_DIRECTORY|O_NOFOLLOW reports as ENOTDIR) as ErrSymlink.
func (r *osRoot) dirErr(op, p string, err error) error {
	if err == unix.ENOTDIR {
		if fi, lerr := r.Lstat(p); lerr == nil && fi.Mode()&fs.ModeSymlink != 0 {
			err = unix.ELOOP
		}
	}
	return pathErr(op, p, err)
}

func openat2(dirfd int, name string, flags uint64, resolve uint64) (int, error) {
	// EAGAIN: a rename raced the look-up; retry a bounded number of times.
	for i := 0; ; i++ {
		fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{Flags: flags | unix.O_CLOEXEC, Resolve: resolve})
		if (err == unix.EINTR || err == unix.EAGAIN) && i < 64 {
			continue
		}
		return fd, err
	}
}

// openDir opens the relative directory rd strictly, as an O_PATH descriptor.
func (r *osRoot) openDir(op, p, rd string) (int, error) {
	fd, err := openat2(r.fd, rd, unix.O_PATH|unix.O_DIRECTORY, strict)
	if err != nil {
		return -1, r.dirErr(op, rd, err)
	}
	return fd, nil
}

// parent opens p's parent strictly and returns it with p's last component.
func (r *osRoot) parent(op, p string) (int, string, error) {
	rp, err := rel(op, p)
	if err != nil {
		return -1, "", err
	}
	if rp == "." {
		return -1, "", &fs.PathError{Op: op, Path: p, Err: errors.New("the root itself")}
	}
	d, name := split(rp)
	fd, err := r.openDir(op, p, d)
	return fd, name, err
}

// Lstat describes p without following a symlink at its end.
func (r *osRoot) Lstat(p string) (fs.FileInfo, error) {
	rp, err := rel("lstat", p)
	if err != nil {
		return nil, err
	}
	var st unix.Stat_t
	if rp == "." {
		if err := unix.Fstat(r.fd, &st); err != nil {
			return nil, pathErr("lstat", p, err)
		}
		return fileInfo{name: "/", st: st}, nil
	}
	dfd, name, err := r.parent("lstat", p)
	if err != nil {
		return nil, err
	}
	defer unix.Close(dfd)
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, pathErr("lstat", p, err)
	}
	return fileInfo{name: name, st: st}, nil
}

// Readlink returns the target of the symlink p, as stored.
func (r *osRoot) Readlink(p string) (string, error) {
	dfd, name, err := r.parent("readlink", p)
	if err != nil {
		return "", err
	}
	defer unix.Close(dfd)
	buf := make([]byte, 4096)
	n, err := unix.Readlinkat(dfd, name, buf)
	if err != nil {
		return "", pathErr("readlink", p, err)
	}
	return string(buf[:n]), nil
}

// ReadFile reads the regular file p (strict), up to MaxReadSize bytes.
func (r *osRoot) ReadFile(p string) ([]byte, error) {
	rp, err := rel("read", p)
	if err != nil {
		return nil, err
	}
	fd, err := openat2(r.fd, rp, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, strict)
	if err != nil {
		return nil, pathErr("read", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, pathErr("read", p, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, pathErr("read", p, ErrNotRegular)
	}
	if st.Size > MaxReadSize {
		return nil, pathErr("read", p, ErrTooLarge)
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxReadSize+1))
	if err != nil {
		return nil, pathErr("read", p, err)
	}
	if len(b) > MaxReadSize {
		return nil, pathErr("read", p, ErrTooLarge)
	}
	return b, nil
}

// WriteFileAtomic replaces p with a regular file holding data: it creates
// "<name>.tmp" next to it afresh (removing any entry of that name first,
// never writing through it) and renames it over p. p's parent must exist.
func (r *osRoot) WriteFileAtomic(p string, data []byte, perm fs.FileMode) error {
	dfd, name, err := r.parent("write", p)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	tmp := name + ".tmp"
	if len(tmp) > 255 {
		return pathErr("write", p, unix.ENAMETOOLONG)
	}
	if err := unix.Unlinkat(dfd, tmp, 0); err != nil && err != unix.ENOENT {
		return pathErr("write", p+".tmp", err)
	}
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return pathErr("write", p+".tmp", err)
	}
	f := os.NewFile(uintptr(fd), p+".tmp")
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = unix.Renameat(dfd, tmp, dfd, name)
	}
	if werr != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return pathErr("write", p, werr)
	}
	return nil
}

// MkdirAll makes directory p and its missing parents with perm (before the
// umask); every existing component must be a real directory.
func (r *osRoot) MkdirAll(p string, perm fs.FileMode) error {
	rp, err := rel("mkdir", p)
	if err != nil {
		return err
	}
	// Already there: a strict open of the whole path succeeds only when
	// every component is a real directory, which is all the walk below
	// would find. One look-up instead of three system calls per component.
	if rp != "." {
		if fd, err := openat2(r.fd, rp, unix.O_PATH|unix.O_DIRECTORY, strict); err == nil {
			unix.Close(fd)
			return nil
		}
	}
	cur, err := unix.Dup(r.fd)
	if err != nil {
		return pathErr("mkdir", p, err)
	}
	defer func() { unix.Close(cur) }()
	if rp == "." {
		return nil
	}
	for _, c := range splitAll(rp) {
		if err := unix.Mkdirat(cur, c, uint32(perm.Perm())); err != nil && err != unix.EEXIST {
			return pathErr("mkdir", p, err)
		}
		// No O_NOFOLLOW with O_PATH: together they open a trailing symlink
		// itself, where RESOLVE_NO_SYMLINKS alone refuses it (ELOOP).
		next, err := openat2(cur, c, unix.O_PATH|unix.O_DIRECTORY, strict)
		if err != nil {
			var st unix.Stat_t
			if err == unix.ENOTDIR && unix.Fstatat(cur, c, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK {
				err = unix.ELOOP
			}
			if err == unix.ENOTDIR {
				err = fmt.Errorf("%s is not a directory: %w", c, err)
			}
			return pathErr("mkdir", p, err)
		}
		unix.Close(cur)
		cur = next
	}
	return nil
}

// ChmodDir sets the permission bits of directory p (never a symlink).
func (r *osRoot) ChmodDir(p string, perm fs.FileMode) error {
	rp, err := rel("chmod", p)
	if err != nil {
		return err
	}
	fd, err := openat2(r.fd, rp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, strict)
	if err != nil {
		return r.dirErr("chmod", p, err)
	}
	defer unix.Close(fd)
	if err := unix.Fchmod(fd, uint32(perm.Perm())); err != nil {
		return pathErr("chmod", p, err)
	}
	return nil
}

// Symlink makes p a symlink to target, doing nothing when it already is
// one; mode says how an existing entry is replaced. p's parent must exist.
func (r *osRoot) Symlink(target, p string, mode SymlinkMode) error {
	dfd, name, err := r.parent("symlink", p)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	buf := make([]byte, 4096)
	if n, err := unix.Readlinkat(dfd, name, buf); err == nil && string(buf[:n]) == target {
		return nil
	}
	if mode == SymlinkReplace {
		if err := removeAllAt(dfd, name); err != nil {
			return pathErr("symlink", p, err)
		}
		if err := unix.Symlinkat(target, dfd, name); err != nil {
			return pathErr("symlink", p, err)
		}
		return nil
	}
	rp, _ := rel("symlink", p)
	d, _ := split(rp)
	tmpDir := d + ".tmp"
	if d == "." {
		tmpDir = ".tmp"
	}
	if err := r.MkdirAll(tmpDir, 0o700); err != nil {
		return err
	}
	tfd, err := r.openDir("symlink", p, tmpDir)
	if err != nil {
		return err
	}
	defer unix.Close(tfd)
	if err := removeAllAt(tfd, name); err != nil {
		return pathErr("symlink", p, err)
	}
	if err := unix.Symlinkat(target, tfd, name); err != nil {
		return pathErr("symlink", p, err)
	}
	if err := unix.Renameat(tfd, name, dfd, name); err != nil {
		_ = unix.Unlinkat(tfd, name, 0)
		return pathErr("symlink", p, err)
	}
	return nil
}

// LinkFrom makes p a hard link to the host file hostPath (the fake cloud's
// device nodes). An existing entry at p is an error (fs.ErrExist).
func (r *osRoot) LinkFrom(hostPath, p string) error {
	dfd, name, err := r.parent("link", p)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := unix.Linkat(unix.AT_FDCWD, hostPath, dfd, name, 0); err != nil {
		return pathErr("link", p, err)
	}
	return nil
}

// Remove removes the file, symlink or empty directory p.
func (r *osRoot) Remove(p string) error {
	dfd, name, err := r.parent("remove", p)
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	err = unix.Unlinkat(dfd, name, 0)
	if err == unix.EISDIR || err == unix.EPERM {
		if err2 := unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR); err2 != unix.ENOTDIR {
			err = err2
		}
	}
	if err != nil {
		return pathErr("remove", p, err)
	}
	return nil
}

// RemoveAll removes p and everything under it, never following a symlink;
// an absent p is success.
func (r *osRoot) RemoveAll(p string) error {
	dfd, name, err := r.parent("removeall", p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer unix.Close(dfd)
	if err := removeAllAt(dfd, name); err != nil {
		return pathErr("removeall", p, err)
	}
	return nil
}

// removeAllAt removes name under the directory dfd recursively; absent is
// success.
func removeAllAt(dfd int, name string) error {
	err := unix.Unlinkat(dfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	fd, err := openat2(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, strict)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), name)
	names, err := f.Readdirnames(-1)
	if err != nil {
		f.Close()
		return err
	}
	for _, n := range names {
		if err := removeAllAt(fd, n); err != nil {
			f.Close()
			return err
		}
	}
	f.Close()
	err = unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR)
	if err == unix.ENOENT {
		return nil
	}
	return err
}

// ReadDir lists directory p (strict), sorted by name. Entries carry their
// type only (Info is not available).
func (r *osRoot) ReadDir(p string) ([]fs.DirEntry, error) {
	rp, err := rel("readdir", p)
	if err != nil {
		return nil, err
	}
	fd, err := openat2(r.fd, rp, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, strict)
	if err != nil {
		return nil, r.dirErr("readdir", p, err)
	}
	f := os.NewFile(uintptr(fd), p)
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, pathErr("readdir", p, err)
	}
	out := make([]fs.DirEntry, len(ents))
	for i, e := range ents {
		out[i] = dirEntry{name: e.Name(), typ: e.Type()}
	}
	sortEntries(out)
	return out, nil
}

// fileInfo is an fs.FileInfo from a stat.
type fileInfo struct {
	name string
	st   unix.Stat_t
}

func (f fileInfo) Name() string       { return f.name }
func (f fileInfo) Size() int64        { return f.st.Size }
func (f fileInfo) ModTime() time.Time { return time.Unix(f.st.Mtim.Unix()) }
func (f fileInfo) IsDir() bool        { return f.Mode().IsDir() }
func (f fileInfo) Sys() any           { return &f.st }
func (f fileInfo) Mode() fs.FileMode {
	m := fs.FileMode(f.st.Mode & 0o777)
	switch f.st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		m |= fs.ModeDir
	case unix.S_IFLNK:
		m |= fs.ModeSymlink
	case unix.S_IFIFO:
		m |= fs.ModeNamedPipe
	case unix.S_IFSOCK:
		m |= fs.ModeSocket
	case unix.S_IFCHR:
		m |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFBLK:
		m |= fs.ModeDevice
	}
	return m
}

// fileID is the device and inode of a host file's FileInfo (from os or
// from a Root).
func fileID(fi fs.FileInfo) (dev, ino uint64, ok bool) {
	switch st := fi.Sys().(type) {
	case *unix.Stat_t:
		return st.Dev, st.Ino, true
	case *syscall.Stat_t:
		return st.Dev, st.Ino, true
	}
	return 0, 0, false
}
