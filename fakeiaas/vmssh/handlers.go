package vmssh

import (
	"io"
	"io/fs"
	"os"
	"path"
	"syscall"
	"time"

	"github.com/pkg/sftp"
)

// handlers serves one SFTP session on one VM root. It implements the
// github.com/pkg/sftp request-server handler interfaces; every path goes
// through the jail.
type handlers struct {
	j *jail
}

var (
	_ sftp.FileReader           = (*handlers)(nil)
	_ sftp.OpenFileWriter       = (*handlers)(nil)
	_ sftp.PosixRenameFileCmder = (*handlers)(nil)
	_ sftp.LstatFileLister      = (*handlers)(nil)
	_ sftp.RealPathFileLister   = (*handlers)(nil)
	_ sftp.ReadlinkFileLister   = (*handlers)(nil)
)

func (h *handlers) sftpHandlers() sftp.Handlers {
	return sftp.Handlers{FileGet: h, FilePut: h, FileCmd: h, FileList: h}
}

// Fileread opens a file for reading, following symlinks inside the root.
func (h *handlers) Fileread(r *sftp.Request) (io.ReaderAt, error) {
	rel, err := h.j.resolve("open", r.Filepath, true)
	if err != nil {
		return nil, err
	}
	return h.j.root.OpenFile(rel, os.O_RDONLY, 0)
}

// Filewrite opens a file for writing.
func (h *handlers) Filewrite(r *sftp.Request) (io.WriterAt, error) {
	return h.open(r)
}

// OpenFile opens a file for reading and writing.
func (h *handlers) OpenFile(r *sftp.Request) (sftp.WriterAtReaderAt, error) {
	return h.open(r)
}

func (h *handlers) open(r *sftp.Request) (*os.File, error) {
	pf := r.Pflags()
	flags := os.O_WRONLY
	if pf.Read {
		flags = os.O_RDWR
	}
	if pf.Creat {
		flags |= os.O_CREATE
	}
	if pf.Trunc {
		flags |= os.O_TRUNC
	}
	// O_CREAT|O_EXCL does not follow a symlink in the last component.
	followLast := true
	if pf.Excl {
		flags |= os.O_EXCL
		followLast = false
	}
	// O_APPEND is left out on purpose: the request server writes with
	// WriteAt at the offsets the client sends, which O_APPEND forbids.
	perm := os.FileMode(0o644)
	if r.AttrFlags().Permissions {
		perm = r.Attributes().FileMode().Perm()
	}
	rel, err := h.j.resolve("open", r.Filepath, followLast)
	if err != nil {
		return nil, err
	}
	if flags&os.O_TRUNC != 0 && h.deviceNode(rel) {
		flags &^= os.O_TRUNC // as Linux ignores O_TRUNC on a block device: the disk keeps its data
	}
	return h.j.root.OpenFile(rel, flags, perm)
}

// Filecmd handles Setstat, Rename, Rmdir, Mkdir, Link, Symlink and Remove.
func (h *handlers) Filecmd(r *sftp.Request) error {
	switch r.Method {
	case "Setstat":
		return h.setstat(r)
	case "Rename":
		return h.rename(r, false)
	case "Rmdir":
		rel, err := h.j.resolve("rmdir", r.Filepath, false)
		if err != nil {
			return err
		}
		fi, err := h.j.root.Lstat(rel)
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return &fs.PathError{Op: "rmdir", Path: r.Filepath, Err: syscall.ENOTDIR}
		}
		return h.j.root.Remove(rel)
	case "Remove":
		rel, err := h.j.resolve("remove", r.Filepath, false)
		if err != nil {
			return err
		}
		return h.j.root.Remove(rel)
	case "Mkdir":
		rel, err := h.j.resolve("mkdir", r.Filepath, false)
		if err != nil {
			return err
		}
		perm := os.FileMode(0o755)
		if r.AttrFlags().Permissions {
			perm = r.Attributes().FileMode().Perm()
		}
		return h.j.root.Mkdir(rel, perm)
	case "Symlink":
		return h.symlink(r)
	case "Link":
		return h.link(r)
	}
	return sftp.ErrSSHFxOpUnsupported
}

// PosixRename renames, replacing an existing target.
func (h *handlers) PosixRename(r *sftp.Request) error {
	return h.rename(r, true)
}

func (h *handlers) rename(r *sftp.Request, replace bool) error {
	src, err := h.j.resolve("rename", r.Filepath, false)
	if err != nil {
		return err
	}
	dst, err := h.j.resolve("rename", r.Target, false)
	if err != nil {
		return err
	}
	if src == "." || dst == "." {
		return &fs.PathError{Op: "rename", Path: "/", Err: syscall.EBUSY}
	}
	if !replace {
		// SFTP v3 rename does not replace an existing target.
		if _, err := h.j.root.Lstat(dst); err == nil {
			return &fs.PathError{Op: "rename", Path: r.Target, Err: syscall.EEXIST}
		}
	}
	if err := h.j.checkMovedLinks("rename", src, dst); err != nil {
		return err
	}
	if underDev(src) {
		if fi, err := h.j.root.Lstat(src); err == nil && fi.Mode()&fs.ModeSymlink == 0 {
			return deviceErr("rename", r.Filepath, "device nodes (and dev/ itself) cannot be moved: detach would miss them")
		}
	}
	return h.j.root.Rename(src, dst)
}

// symlink creates a symlink. Request.Filepath is the target (raw, as the
// client sent it) and Request.Target the link's path.
func (h *handlers) symlink(r *sftp.Request) error {
	link, err := h.j.resolve("symlink", r.Target, false)
	if err != nil {
		return err
	}
	if err := checkNewLinkTarget(r.Filepath, depth(link)); err != nil {
		return err
	}
	return h.j.root.Symlink(r.Filepath, link)
}

// link creates a hard link r.Target to r.Filepath. As link(2) on Linux, a
// symlink in the last component of the old name is linked itself. Nothing
// under dev/ can be linked (ErrDeviceNode).
func (h *handlers) link(r *sftp.Request) error {
	oldRel, err := h.j.resolve("link", r.Filepath, false)
	if err != nil {
		return err
	}
	newRel, err := h.j.resolve("link", r.Target, false)
	if err != nil {
		return err
	}
	if err := h.j.checkMovedLinks("link", oldRel, newRel); err != nil {
		return err
	}
	if underDev(oldRel) {
		return deviceErr("link", r.Filepath, "hard links to device nodes are refused: one would keep the disk readable after detach")
	}
	return h.j.root.Link(oldRel, newRel)
}

// deviceNode reports whether rel (resolved) is a device node under dev/.
func (h *handlers) deviceNode(rel string) bool {
	if !underDev(rel) {
		return false
	}
	fi, err := h.j.root.Lstat(rel)
	return err == nil && isDeviceNode(fi)
}

func (h *handlers) setstat(r *sftp.Request) error {
	rel, err := h.j.resolve("setstat", r.Filepath, true)
	if err != nil {
		return err
	}
	if h.deviceNode(rel) {
		return deviceErr("setstat", r.Filepath, "a device node's size, mode, owner and times are its disk's backing file's and cannot be changed")
	}
	flags, attrs := r.AttrFlags(), r.Attributes()
	if flags.Size {
		f, err := h.j.root.OpenFile(rel, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		err = f.Truncate(int64(attrs.Size))
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	if flags.Permissions {
		if err := h.j.root.Chmod(rel, attrs.FileMode().Perm()); err != nil {
			return err
		}
	}
	if flags.UidGid {
		if err := h.j.root.Chown(rel, int(attrs.UID), int(attrs.GID)); err != nil {
			return err
		}
	}
	if flags.Acmodtime {
		atime := time.Unix(int64(attrs.Atime), 0)
		mtime := time.Unix(int64(attrs.Mtime), 0)
		if err := h.j.root.Chtimes(rel, atime, mtime); err != nil {
			return err
		}
	}
	return nil
}

// Filelist handles List and Stat (Readlink and Lstat have their own
// methods below).
func (h *handlers) Filelist(r *sftp.Request) (sftp.ListerAt, error) {
	switch r.Method {
	case "List":
		rel, err := h.j.resolve("opendir", r.Filepath, true)
		if err != nil {
			return nil, err
		}
		d, err := h.j.root.Open(rel)
		if err != nil {
			return nil, err
		}
		defer d.Close()
		fis, err := d.Readdir(-1)
		if err != nil {
			return nil, err
		}
		return listerAt(fis), nil
	case "Stat":
		return h.stat("stat", r.Filepath, true)
	}
	return nil, sftp.ErrSSHFxOpUnsupported
}

// Lstat stats a path without following a symlink in its last component.
func (h *handlers) Lstat(r *sftp.Request) (sftp.ListerAt, error) {
	return h.stat("lstat", r.Filepath, false)
}

func (h *handlers) stat(op, p string, followLast bool) (sftp.ListerAt, error) {
	rel, err := h.j.resolve(op, p, followLast)
	if err != nil {
		return nil, err
	}
	fi, err := h.j.root.Lstat(rel)
	if err != nil {
		return nil, err
	}
	if rel == "." {
		fi = renamed{fi, "/"}
	}
	return listerAt{fi}, nil
}

// Readlink returns a symlink's target as stored, as readlink(2) inside a
// chroot would: an absolute target is meant from the VM root.
func (h *handlers) Readlink(p string) (string, error) {
	rel, err := h.j.resolve("readlink", p, false)
	if err != nil {
		return "", err
	}
	return h.j.root.Readlink(rel)
}

// RealPath returns the canonical virtual path of p, with every symlink
// resolved inside the root.
func (h *handlers) RealPath(p string) (string, error) {
	if err := checkName("realpath", p); err != nil {
		return "", err
	}
	rel, err := h.j.resolve("realpath", path.Join("/", p), true)
	if err != nil {
		return "", err
	}
	return path.Join("/", rel), nil
}

// listerAt serves a fixed list of entries.
type listerAt []os.FileInfo

func (l listerAt) ListAt(dst []os.FileInfo, off int64) (int, error) {
	if off >= int64(len(l)) {
		return 0, io.EOF
	}
	n := copy(dst, l[off:])
	if n < len(dst) {
		return n, io.EOF
	}
	return n, nil
}

// renamed reports another name for a FileInfo, so that the root is not
// shown under its host directory name.
type renamed struct {
	os.FileInfo
	name string
}

func (r renamed) Name() string { return r.name }
