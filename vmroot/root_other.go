//go:build !linux

package vmroot

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
)

// osRoot is a VM root in a directory of the host's file system. Its
// methods are safe for concurrent use; Close ends its use.
//
// Outside Linux it is an os.Root, which never lets a path or a symlink
// lead outside the root, plus a check that no component of a strict path
// is a symlink (made before the call, so a component swapped in between can
// still redirect a strict call, but only inside the root).
type osRoot struct {
	dir string
	r   *os.Root
}

// Open opens the directory dir (a host path) as a root on the host's file
// system (OS.Open).
func Open(dir string) (*Root, error) {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	return &Root{b: &osRoot{dir: dir, r: r}}, nil
}

// Dir is the root's host path, as given to Open.
func (r *osRoot) Dir() string { return r.dir }

// Close releases the root.
func (r *osRoot) Close() error { return r.r.Close() }

// strict returns p's clean relative path after checking that no component
// (the last one too when last is set) is a symlink.
func (r *osRoot) strict(op, p string, last bool) (string, error) {
	rp, err := rel(op, p)
	if err != nil || rp == "." {
		return rp, err
	}
	cs := splitAll(rp)
	n := len(cs)
	if !last {
		n--
	}
	for i := 1; i <= n; i++ {
		fi, err := r.r.Lstat(strings.Join(cs[:i], "/"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				break
			}
			return "", &fs.PathError{Op: op, Path: p, Err: err}
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", &fs.PathError{Op: op, Path: p, Err: ErrSymlink}
		}
	}
	return rp, nil
}

// Lstat describes p without following a symlink at its end.
func (r *osRoot) Lstat(p string) (fs.FileInfo, error) {
	rp, err := r.strict("lstat", p, false)
	if err != nil {
		return nil, err
	}
	return r.r.Lstat(rp)
}

// Readlink returns the target of the symlink p, as stored.
func (r *osRoot) Readlink(p string) (string, error) {
	rp, err := r.strict("readlink", p, false)
	if err != nil {
		return "", err
	}
	return r.r.Readlink(rp)
}

// ReadFile reads the regular file p (strict), up to MaxReadSize bytes.
func (r *osRoot) ReadFile(p string) ([]byte, error) {
	rp, err := r.strict("read", p, true)
	if err != nil {
		return nil, err
	}
	f, err := r.r.OpenFile(rp, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, &fs.PathError{Op: "read", Path: p, Err: ErrNotRegular}
	}
	b, err := io.ReadAll(io.LimitReader(f, MaxReadSize+1))
	if err == nil && len(b) > MaxReadSize {
		err = &fs.PathError{Op: "read", Path: p, Err: ErrTooLarge}
	}
	return b, err
}

// WriteFileAtomic replaces p with a regular file holding data, through a
// fresh "<name>.tmp" renamed over p.
func (r *osRoot) WriteFileAtomic(p string, data []byte, perm fs.FileMode) error {
	rp, err := r.strict("write", p, false)
	if err != nil {
		return err
	}
	tmp := rp + ".tmp"
	if err := r.r.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := r.r.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, perm)
	if err != nil {
		return err
	}
	_, werr := f.Write(data)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = r.r.Rename(tmp, rp)
	}
	if werr != nil {
		_ = r.r.Remove(tmp)
	}
	return werr
}

// MkdirAll makes directory p and its missing parents with perm.
func (r *osRoot) MkdirAll(p string, perm fs.FileMode) error {
	rp, err := r.strict("mkdir", p, true)
	if err != nil {
		return err
	}
	return r.r.MkdirAll(rp, perm)
}

// ChmodDir sets the permission bits of directory p (never a symlink).
func (r *osRoot) ChmodDir(p string, perm fs.FileMode) error {
	rp, err := r.strict("chmod", p, true)
	if err != nil {
		return err
	}
	return r.r.Chmod(rp, perm)
}

// Symlink makes p a symlink to target, doing nothing when it already is
// one; mode says how an existing entry is replaced.
func (r *osRoot) Symlink(target, p string, mode SymlinkMode) error {
	rp, err := r.strict("symlink", p, false)
	if err != nil {
		return err
	}
	if cur, err := r.r.Readlink(rp); err == nil && cur == target {
		return nil
	}
	if mode == SymlinkReplace {
		if err := r.r.RemoveAll(rp); err != nil {
			return err
		}
		return r.r.Symlink(target, rp)
	}
	d, name := split(rp)
	tmpDir := d + ".tmp"
	if d == "." {
		tmpDir = ".tmp"
	}
	if err := r.MkdirAll(tmpDir, 0o700); err != nil {
		return err
	}
	tmp := path.Join(tmpDir, name)
	if err := r.r.RemoveAll(tmp); err != nil {
		return err
	}
	if err := r.r.Symlink(target, tmp); err != nil {
		return err
	}
	if err := r.r.Rename(tmp, rp); err != nil {
		_ = r.r.Remove(tmp)
		return err
	}
	return nil
}

// LinkFrom makes p a hard link to the host file hostPath.
func (r *osRoot) LinkFrom(hostPath, p string) error {
	rp, err := r.strict("link", p, false)
	if err != nil {
		return err
	}
	return os.Link(hostPath, path.Join(r.dir, rp))
}

// Remove removes the file, symlink or empty directory p.
func (r *osRoot) Remove(p string) error {
	rp, err := r.strict("remove", p, false)
	if err != nil {
		return err
	}
	return r.r.Remove(rp)
}

// RemoveAll removes p and everything under it, never following a symlink;
// an absent p is success.
func (r *osRoot) RemoveAll(p string) error {
	rp, err := r.strict("removeall", p, false)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if rp == "." {
		return &fs.PathError{Op: "removeall", Path: p, Err: fmt.Errorf("the root itself")}
	}
	return r.r.RemoveAll(rp)
}

// ReadDir lists directory p (strict), sorted by name.
func (r *osRoot) ReadDir(p string) ([]fs.DirEntry, error) {
	rp, err := r.strict("readdir", p, true)
	if err != nil {
		return nil, err
	}
	f, err := r.r.Open(rp)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ents, err := f.ReadDir(-1)
	if err != nil {
		return nil, err
	}
	out := make([]fs.DirEntry, len(ents))
	for i, e := range ents {
		out[i] = dirEntry{name: e.Name(), typ: e.Type()}
	}
	sortEntries(out)
	return out, nil
}

// fileID: outside Linux, SameFile falls back to os.SameFile.
func fileID(fs.FileInfo) (dev, ino uint64, ok bool) { return 0, 0, false }
