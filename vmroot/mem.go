package vmroot

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Mem is a file system in memory, a Host for a simulated world: its VM
// roots answer every call as roots on Linux do (the same errors, errnos
// included, the same modes after the umask, the same hop limit), with no
// system call. Paths given to the Host methods are host paths, made
// slash-separated and taken from Mem's own "/"; no symlink is followed in
// them. Times are zero. It is safe for concurrent use (one lock).
type Mem struct {
	mu    sync.Mutex
	top   *node
	umask fs.FileMode
}

// NewMem returns an empty memory file system whose umask (applied to the
// modes of what is created, as the kernel does) is umask.
func NewMem(umask fs.FileMode) *Mem {
	return &Mem{top: &node{mode: fs.ModeDir | 0o755, kids: map[string]*node{}}, umask: umask.Perm()}
}

// node is a file, directory or symlink. A hard link is a node under two
// names.
type node struct {
	mode   fs.FileMode // type bits and permissions
	data   []byte      // regular file: what was written
	size   int64       // regular file: its size (beyond data it reads as zeros)
	target string      // symlink
	kids   map[string]*node
	gone   bool // a directory removed from the tree: empty, and nothing can be made in it
}

func (n *node) isDir() bool  { return n.mode.IsDir() }
func (n *node) isLink() bool { return n.mode&fs.ModeSymlink != 0 }

// unlink removes d's entry name; a directory removed goes with everything
// under it, as from a root that still holds it open the kernel shows it
// (empty, and nothing can be made in it).
func unlink(d *node, name string) {
	k := d.kids[name]
	if k == nil {
		return
	}
	delete(d.kids, name)
	var drop func(n *node)
	drop = func(n *node) {
		if !n.isDir() {
			return
		}
		for _, c := range n.kids {
			drop(c)
		}
		n.kids, n.gone = map[string]*node{}, true
	}
	drop(k)
}

// makeIn is the error of making an entry in directory d: ENOENT once d is
// removed.
func makeIn(d *node) error {
	if d.gone {
		return syscall.ENOENT
	}
	return nil
}

// Linux's limits on a name and on a path.
const (
	nameMax = 255
	pathMax = 4096
)

// memRoot is a VM root in a Mem: like a directory descriptor, it keeps the
// directory it was opened on even if that is removed from the tree.
type memRoot struct {
	m      *Mem
	dir    string
	top    *node
	closed bool // guarded by m.mu
}

// hostRel turns a host path into Mem's clean relative path.
func hostRel(op, name string) (string, error) {
	return rel(op, filepath.ToSlash(name))
}

// Open opens directory dir of m as a root.
func (m *Mem) Open(dir string) (*Root, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	rd, err := hostRel("open root", dir)
	if err != nil {
		return nil, err
	}
	n, err := lookup(m.top, rd, true)
	if err != nil {
		return nil, &fs.PathError{Op: "open root", Path: dir, Err: err}
	}
	if !n.isDir() {
		return nil, &fs.PathError{Op: "open root", Path: dir, Err: syscall.ENOTDIR}
	}
	return &Root{b: &memRoot{m: m, dir: dir, top: n}}, nil
}

// host is a root at m's "/", for the Host methods.
func (m *Mem) host(name string) *memRoot { return &memRoot{m: m, dir: name, top: m.top} }

// MkdirAll makes directory dir and its missing parents.
func (m *Mem) MkdirAll(dir string, perm fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	rd, err := hostRel("mkdir", dir)
	if err != nil {
		return err
	}
	// As os.MkdirAll: an existing non-directory is ENOTDIR naming it.
	cur, at := m.top, ""
	for _, c := range splitAll(rd) {
		at += "/" + c
		if err := checkName(c); err != nil {
			return &fs.PathError{Op: "mkdir", Path: filepath.FromSlash(at), Err: err}
		}
		k := cur.kids[c]
		if k == nil {
			if err := makeIn(cur); err != nil {
				return &fs.PathError{Op: "mkdir", Path: filepath.FromSlash(at), Err: err}
			}
			k = m.newDir(perm)
			cur.kids[c] = k
		}
		if !k.isDir() {
			return &fs.PathError{Op: "mkdir", Path: filepath.FromSlash(at), Err: syscall.ENOTDIR}
		}
		cur = k
	}
	return nil
}

// Mkdir makes directory dir.
func (m *Mem) Mkdir(dir string, perm fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, name, err := m.host(dir).parent("mkdir", filepath.ToSlash(dir))
	if err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	if d.kids[name] != nil {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: syscall.EEXIST}
	}
	if err := makeIn(d); err != nil {
		return &fs.PathError{Op: "mkdir", Path: dir, Err: err}
	}
	d.kids[name] = m.newDir(perm)
	return nil
}

// CreateExcl makes name an empty regular file.
func (m *Mem) CreateExcl(name string, perm fs.FileMode) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d, base, err := m.host(name).parent("open", filepath.ToSlash(name))
	if err != nil {
		return err
	}
	if err := checkName(base); err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	if d.kids[base] != nil {
		return &fs.PathError{Op: "open", Path: name, Err: syscall.EEXIST}
	}
	if err := makeIn(d); err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	d.kids[base] = &node{mode: perm.Perm() &^ m.umask}
	return nil
}

// Truncate sets the size of the regular file name.
func (m *Mem) Truncate(name string, size int64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	rp, err := hostRel("truncate", name)
	if err != nil {
		return err
	}
	n, err := lookup(m.top, rp, true)
	switch {
	case err != nil:
	case n.isDir():
		err = syscall.EISDIR
	case !n.mode.IsRegular():
		err = syscall.EINVAL
	case size < 0:
		err = syscall.EINVAL
	}
	if err != nil {
		return &fs.PathError{Op: "truncate", Path: name, Err: err}
	}
	n.size = size
	if int64(len(n.data)) > size {
		n.data = n.data[:size]
	}
	return nil
}

// Lstat describes name.
func (m *Mem) Lstat(name string) (fs.FileInfo, error) {
	return m.host(name).Lstat(filepath.ToSlash(name))
}

// ReadDir lists directory dir, sorted by name.
func (m *Mem) ReadDir(dir string) ([]fs.DirEntry, error) {
	return m.host(dir).ReadDir(filepath.ToSlash(dir))
}

// Remove removes the file, symlink or empty directory name.
func (m *Mem) Remove(name string) error { return m.host(name).Remove(filepath.ToSlash(name)) }

// RemoveAll removes name and everything under it.
func (m *Mem) RemoveAll(name string) error { return m.host(name).RemoveAll(filepath.ToSlash(name)) }

func (m *Mem) newDir(perm fs.FileMode) *node {
	return &node{mode: fs.ModeDir | perm.Perm()&^m.umask, kids: map[string]*node{}}
}

// checkName refuses a name longer than Linux allows.
func checkName(name string) error {
	if len(name) > nameMax {
		return syscall.ENAMETOOLONG
	}
	return nil
}

// lookup finds clean relative path rp under top as openat2 with
// RESOLVE_NO_SYMLINKS does: a symlink anywhere is ELOOP, a missing
// component ENOENT, a non-directory before the end ENOTDIR, a name or a
// path too long ENAMETOOLONG. With last false a symlink at the end is
// returned (not followed), as linkat(2) without AT_SYMLINK_FOLLOW takes it.
func lookup(top *node, rp string, last bool) (*node, error) {
	if len(rp) >= pathMax {
		return nil, syscall.ENAMETOOLONG
	}
	n := top
	if rp == "." {
		return n, nil
	}
	for rest := rp; ; {
		c, more, _ := strings.Cut(rest, "/")
		if err := checkName(c); err != nil {
			return nil, err
		}
		if !n.isDir() {
			return nil, syscall.ENOTDIR
		}
		k := n.kids[c]
		if k == nil {
			return nil, syscall.ENOENT
		}
		if k.isLink() && (last || more != "") {
			return nil, syscall.ELOOP
		}
		n = k
		if more == "" {
			return n, nil
		}
		rest = more
	}
}

// memErr is pathErr for the memory backend: a refused symlink wraps
// ErrSymlink, as the real backend's ELOOP does.
func memErr(op, p string, err error) error {
	if err == syscall.ELOOP || err == syscall.EXDEV {
		err = fmt.Errorf("%w (%w)", ErrSymlink, err)
	}
	return &fs.PathError{Op: op, Path: p, Err: err}
}

// look is lookup from the root; a closed root is EBADF, where the real
// backend's first call on its descriptor fails.
func (r *memRoot) look(rp string, last bool) (*node, error) {
	if r.closed {
		return nil, syscall.EBADF
	}
	return lookup(r.top, rp, last)
}

func (r *memRoot) Dir() string { return r.dir }

func (r *memRoot) Close() error {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	if r.closed {
		return syscall.EBADF
	}
	r.closed = true
	return nil
}

// openDir finds directory rd strictly; errors name rd, as the real
// backend's do.
func (r *memRoot) openDir(op, rd string) (*node, error) {
	n, err := r.look(rd, true)
	if err == nil && !n.isDir() {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return nil, memErr(op, rd, err)
	}
	return n, nil
}

// parent finds p's parent strictly and returns it with p's last component.
func (r *memRoot) parent(op, p string) (*node, string, error) {
	rp, err := rel(op, p)
	if err != nil {
		return nil, "", err
	}
	if rp == "." {
		return nil, "", &fs.PathError{Op: op, Path: p, Err: fmt.Errorf("the root itself")}
	}
	d, name := split(rp)
	n, err := r.openDir(op, d)
	return n, name, err
}

func (r *memRoot) Lstat(p string) (fs.FileInfo, error) {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	rp, err := rel("lstat", p)
	if err != nil {
		return nil, err
	}
	if rp == "." {
		if r.closed {
			return nil, memErr("lstat", p, syscall.EBADF)
		}
		return memInfo{name: "/", n: r.top}, nil
	}
	d, name, err := r.parent("lstat", p)
	if err != nil {
		return nil, err
	}
	if err := checkName(name); err != nil {
		return nil, memErr("lstat", p, err)
	}
	k := d.kids[name]
	if k == nil {
		return nil, memErr("lstat", p, syscall.ENOENT)
	}
	return memInfo{name: name, n: k}, nil
}

func (r *memRoot) Readlink(p string) (string, error) {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	d, name, err := r.parent("readlink", p)
	if err != nil {
		return "", err
	}
	k, err := child(d, name)
	if err == nil && !k.isLink() {
		err = syscall.EINVAL
	}
	if err != nil {
		return "", memErr("readlink", p, err)
	}
	return k.target, nil
}

// child is d's entry name, ENOENT when there is none.
func child(d *node, name string) (*node, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if k := d.kids[name]; k != nil {
		return k, nil
	}
	return nil, syscall.ENOENT
}

func (r *memRoot) ReadFile(p string) ([]byte, error) {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	rp, err := rel("read", p)
	if err != nil {
		return nil, err
	}
	n, err := r.look(rp, true)
	if err != nil {
		return nil, memErr("read", p, err)
	}
	if !n.mode.IsRegular() {
		return nil, memErr("read", p, ErrNotRegular)
	}
	if n.size > MaxReadSize {
		return nil, memErr("read", p, ErrTooLarge)
	}
	b := make([]byte, n.size)
	copy(b, n.data)
	return b, nil
}

func (r *memRoot) WriteFileAtomic(p string, data []byte, perm fs.FileMode) error {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	d, name, err := r.parent("write", p)
	if err != nil {
		return err
	}
	tmp := name + ".tmp"
	if len(tmp) > nameMax {
		return memErr("write", p, syscall.ENAMETOOLONG)
	}
	if k := d.kids[tmp]; k != nil {
		if k.isDir() {
			return memErr("write", p+".tmp", syscall.EISDIR)
		}
		delete(d.kids, tmp)
	}
	if err := makeIn(d); err != nil {
		return memErr("write", p+".tmp", err)
	}
	if k := d.kids[name]; k != nil && k.isDir() {
		// rename(2) of a file over a directory
		return memErr("write", p, syscall.EISDIR)
	}
	d.kids[name] = &node{mode: perm.Perm() &^ r.m.umask, data: append([]byte(nil), data...), size: int64(len(data))}
	return nil
}

func (r *memRoot) MkdirAll(p string, perm fs.FileMode) error {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	rp, err := rel("mkdir", p)
	if err != nil {
		return err
	}
	return r.mkdirAll(p, rp, perm)
}

// mkdirAll is MkdirAll with the lock held.
func (r *memRoot) mkdirAll(p, rp string, perm fs.FileMode) error {
	if rp == "." {
		return nil
	}
	if n, err := r.look(rp, true); err == nil && n.isDir() {
		return nil
	}
	if r.closed {
		return memErr("mkdir", p, syscall.EBADF)
	}
	cur := r.top
	for _, c := range splitAll(rp) {
		if err := checkName(c); err != nil {
			return memErr("mkdir", p, err)
		}
		k := cur.kids[c]
		if k == nil {
			if err := makeIn(cur); err != nil {
				return memErr("mkdir", p, err)
			}
			k = r.m.newDir(perm)
			cur.kids[c] = k
		}
		switch {
		case k.isLink():
			return memErr("mkdir", p, syscall.ELOOP)
		case !k.isDir():
			return memErr("mkdir", p, fmt.Errorf("%s is not a directory: %w", c, syscall.ENOTDIR))
		}
		cur = k
	}
	return nil
}

func (r *memRoot) ChmodDir(p string, perm fs.FileMode) error {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	rp, err := rel("chmod", p)
	if err != nil {
		return err
	}
	n, err := r.look(rp, true)
	if err == nil && !n.isDir() {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return memErr("chmod", p, err)
	}
	n.mode = fs.ModeDir | perm.Perm()
	return nil
}

func (r *memRoot) Symlink(target, p string, mode SymlinkMode) error {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	d, name, err := r.parent("symlink", p)
	if err != nil {
		return err
	}
	if k, err := child(d, name); err == nil && k.isLink() && k.target == target {
		return nil
	}
	link := func() (*node, error) {
		if err := checkName(name); err != nil {
			return nil, err
		}
		if target == "" {
			return nil, syscall.ENOENT
		}
		if len(target) >= pathMax {
			return nil, syscall.ENAMETOOLONG
		}
		return &node{mode: fs.ModeSymlink | 0o777, target: target}, nil
	}
	if mode == SymlinkReplace {
		if err := checkName(name); err != nil {
			return memErr("symlink", p, err)
		}
		unlink(d, name)
		l, err := link()
		if err == nil {
			err = makeIn(d)
		}
		if err != nil {
			return memErr("symlink", p, err)
		}
		d.kids[name] = l
		return nil
	}
	rp, _ := rel("symlink", p)
	dr, _ := split(rp)
	tmpDir := dr + ".tmp"
	if dr == "." {
		tmpDir = ".tmp"
	}
	if err := r.mkdirAll(tmpDir, tmpDir, 0o700); err != nil {
		return err
	}
	td, err := r.openDir("symlink", tmpDir)
	if err != nil {
		return err
	}
	if err := checkName(name); err != nil {
		return memErr("symlink", p, err)
	}
	unlink(td, name) // what a failed rename left
	l, err := link()
	if err == nil {
		err = makeIn(td)
	}
	if err != nil {
		return memErr("symlink", p, err)
	}
	if err := makeIn(d); err != nil {
		return memErr("symlink", p, err)
	}
	if k := d.kids[name]; k != nil && k.isDir() {
		// rename(2) of a symlink over a directory
		return memErr("symlink", p, syscall.EISDIR)
	}
	d.kids[name] = l
	return nil
}

func (r *memRoot) LinkFrom(hostPath, p string) error {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	d, name, err := r.parent("link", p)
	if err != nil {
		return err
	}
	src, err := hostRel("link", hostPath)
	if err != nil {
		return err
	}
	n, err := lookup(r.m.top, src, false)
	switch {
	case err != nil:
	case n.isDir():
		err = syscall.EPERM
	default:
		err = checkName(name)
	}
	if err == nil && d.kids[name] != nil {
		err = syscall.EEXIST
	}
	if err == nil {
		err = makeIn(d)
	}
	if err != nil {
		return memErr("link", p, err)
	}
	d.kids[name] = n
	return nil
}

func (r *memRoot) Remove(p string) error {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	d, name, err := r.parent("remove", p)
	if err != nil {
		return err
	}
	k, err := child(d, name)
	if err == nil && k.isDir() && len(k.kids) > 0 {
		err = syscall.ENOTEMPTY
	}
	if err != nil {
		return memErr("remove", p, err)
	}
	unlink(d, name)
	return nil
}

func (r *memRoot) RemoveAll(p string) error {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	d, name, err := r.parent("removeall", p)
	if err != nil {
		if isNotExist(err) {
			return nil
		}
		return err
	}
	if err := checkName(name); err != nil {
		return memErr("removeall", p, err)
	}
	unlink(d, name)
	return nil
}

func isNotExist(err error) bool {
	pe, ok := err.(*fs.PathError)
	return ok && pe.Err == syscall.ENOENT
}

func (r *memRoot) ReadDir(p string) ([]fs.DirEntry, error) {
	r.m.mu.Lock()
	defer r.m.mu.Unlock()
	rp, err := rel("readdir", p)
	if err != nil {
		return nil, err
	}
	n, err := r.look(rp, true)
	if err == nil && !n.isDir() {
		err = syscall.ENOTDIR
	}
	if err != nil {
		return nil, memErr("readdir", p, err)
	}
	out := make([]fs.DirEntry, 0, len(n.kids))
	for name, k := range n.kids {
		out = append(out, dirEntry{name: name, typ: k.mode.Type()})
	}
	sortEntries(out)
	return out, nil
}

// MemStat is what a memory file's FileInfo.Sys holds.
type MemStat struct {
	// Blocks is the 512-byte blocks the file occupies: its written bytes,
	// in 4 KiB pages (a sparse file's hole takes none).
	Blocks int64
}

// memInfo is an fs.FileInfo of a memory node, as Lstat sees it.
type memInfo struct {
	name string
	n    *node
}

func (f memInfo) Name() string       { return f.name }
func (f memInfo) Mode() fs.FileMode  { return f.n.mode }
func (f memInfo) ModTime() time.Time { return time.Time{} }
func (f memInfo) IsDir() bool        { return f.n.isDir() }
func (f memInfo) Sys() any {
	return &MemStat{Blocks: (int64(len(f.n.data)) + 4095) / 4096 * 8}
}
func (f memInfo) Size() int64 {
	switch {
	case f.n.isLink():
		return int64(len(f.n.target))
	case f.n.isDir():
		return 0
	}
	return f.n.size
}
