package vmssh

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"strings"
	"syscall"

	"github.com/pkg/sftp"
)

// Limits on names, as Linux enforces them (NAME_MAX and PATH_MAX).
const (
	// MaxNameLen is the longest path component accepted, in bytes.
	MaxNameLen = 255
	// MaxPathLen is the longest path (or symlink target) accepted, in bytes.
	MaxPathLen = 4095
	// maxLinkHops bounds symlink expansions in one resolution, as the
	// kernel's MAXSYMLINKS does; more is reported as ELOOP.
	maxLinkHops = 40
)

// ErrEscape is the identity of errors for a request that would reach
// outside the VM root: a symlink created with an absolute target or with a
// relative target that climbs above the root, or a hard link or rename that
// would move such a link to where it climbs out. SFTP clients see it as
// permission denied (os.ErrPermission from a *sftp.Client).
//
// Paths themselves never produce ErrEscape: like a chroot, "/" is the VM
// root, ".." at the root stays at the root, and symlinks met while
// resolving are followed inside the root.
var ErrEscape = errors.New("vmssh: leaves the VM root")

// ErrInvalidName is the identity of errors for a path or symlink target
// that holds a NUL byte, is empty where a name is needed, or is longer than
// MaxNameLen per component or MaxPathLen in all. SFTP clients see it as a
// *sftp.StatusError whose FxCode is sftp.ErrSSHFxBadMessage, with this
// error's text.
var ErrInvalidName = errors.New("vmssh: invalid name")

// ErrDeviceNode is the identity of errors for a hard link to anything
// under dev/, or a rename of a device node or of dev/ itself: the fake
// cloud's device nodes are hard links to the disks' backing files, and a
// second name for one (or one moved where detach does not look) would keep
// a detached disk readable and writable from the VM. SFTP clients see it as
// permission denied.
var ErrDeviceNode = errors.New("vmssh: device node")

// underDev reports whether rel (relative to the root, symlink-free) is
// dev/ or lies under it.
func underDev(rel string) bool { return rel == "dev" || strings.HasPrefix(rel, "dev/") }

func deviceErr(op, name, why string) error {
	return fmt.Errorf("%w: %s %q: %s%w", ErrDeviceNode, op, name, why, wire(sftp.ErrSSHFxPermissionDenied))
}

// escapeErr builds an error that is ErrEscape for Go callers and
// permission denied on the SFTP wire.
func escapeErr(op, name, why string) error {
	return fmt.Errorf("%w: %s %q: %s%w", ErrEscape, op, name, why, wire(sftp.ErrSSHFxPermissionDenied))
}

// invalidErr builds an error that is ErrInvalidName for Go callers and a
// bad-message status on the SFTP wire.
func invalidErr(op, name, why string) error {
	return fmt.Errorf("%w: %s %q: %s%w", ErrInvalidName, op, name, why, wire(sftp.ErrSSHFxBadMessage))
}

// wire carries an SFTP status code in an error chain without adding text,
// so that the status message the client sees is the vmssh message alone.
type wireCode struct{ code error }

func wire(code error) error      { return wireCode{code} }
func (w wireCode) Error() string { return "" }
func (w wireCode) Unwrap() error { return w.code }

// checkName refuses NUL bytes and over-long paths or components.
func checkName(op, p string) error {
	if strings.IndexByte(p, 0) >= 0 {
		return invalidErr(op, shorten(p), "contains a NUL byte")
	}
	if len(p) > MaxPathLen {
		return invalidErr(op, shorten(p), fmt.Sprintf("path is %d bytes, more than %d", len(p), MaxPathLen))
	}
	for _, c := range strings.Split(p, "/") {
		if len(c) > MaxNameLen {
			return invalidErr(op, shorten(p), fmt.Sprintf("component is %d bytes, more than %d", len(c), MaxNameLen))
		}
	}
	return nil
}

// shorten keeps error messages readable for very long names.
func shorten(p string) string {
	if len(p) <= 64 {
		return p
	}
	return p[:32] + "…" + p[len(p)-16:]
}

// jail resolves virtual paths (as a process chrooted into the VM root would
// see them) to paths relative to the root, and does every file system call
// through an os.Root, so that even a component swapped for a symlink between
// resolution and use cannot lead outside the root.
type jail struct {
	root *os.Root
}

// resolve maps the virtual path p to a path relative to the root that holds
// no symlink (at the time of resolution). Every symlink met is expanded
// inside the root: an absolute target restarts from the root, ".." never
// climbs above it. The last component is expanded only when followLast is
// set. Components that do not exist are kept as they are, so that the
// caller's operation reports ENOENT or creates them.
//
// The walk keeps a descriptor of every directory on the current path and
// looks each component up relative to its parent's, so its cost is linear
// in the number of components walked (the path's and the link targets'),
// not quadratic in the depth (see lookups).
func (j *jail) resolve(op, p string, followLast bool) (string, error) {
	if err := checkName(op, p); err != nil {
		return "", err
	}
	w, err := j.newWalk()
	if err != nil {
		return "", err
	}
	defer w.close()
	var cur []string
	rest := splitPath(p)
	hops := 0
	for len(rest) > 0 {
		c := rest[0]
		rest = rest[1:]
		if c == ".." {
			if len(cur) > 0 {
				cur = cur[:len(cur)-1]
				w.up(len(cur))
			}
			continue
		}
		if len(rest) == 0 && !followLast {
			cur = append(cur, c)
			break
		}
		kind, target, err := w.lookup(len(cur), c)
		if err != nil {
			return "", &fs.PathError{Op: op, Path: p, Err: err}
		}
		if kind != kindSymlink {
			cur = append(cur, c)
			continue
		}
		hops++
		if hops > maxLinkHops {
			return "", &fs.PathError{Op: op, Path: p, Err: syscall.ELOOP}
		}
		if path.IsAbs(target) {
			cur = cur[:0]
			w.up(0)
		}
		rest = append(splitPath(target), rest...)
	}
	return joinRel(cur), nil
}

// splitPath returns the components of p without empty and "." ones.
func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// joinRel joins components into an os.Root name; the root itself is ".".
func joinRel(cs []string) string {
	if len(cs) == 0 {
		return "."
	}
	return strings.Join(cs, "/")
}

// depth is the number of directories between the root and rel's parent.
func depth(rel string) int {
	return len(splitPath(path.Dir(rel)))
}

// checkNewLinkTarget refuses a symlink target, given by a client, that
// would not stay inside the root even for a process outside the jail
// following it with the kernel's rules: absolute targets (the host would
// read them as host paths), targets whose leading ".." climb above the root
// from the link's directory (dirDepth levels below the root), and ".."
// after a name (through a symlink, "name/.." is not where it looks).
func checkNewLinkTarget(target string, dirDepth int) error {
	if target == "" {
		return invalidErr("symlink", target, "empty target")
	}
	if err := checkName("symlink", target); err != nil {
		return err
	}
	if path.IsAbs(target) {
		return escapeErr("symlink", target, "absolute symlink targets are refused (outside the jail they are host paths)")
	}
	ups, named := 0, false
	for _, c := range splitPath(target) {
		if c != ".." {
			named = true
			continue
		}
		if named {
			return escapeErr("symlink", target, `".." after a name is refused`)
		}
		ups++
	}
	if ups > dirDepth {
		return escapeErr("symlink", target, fmt.Sprintf("climbs %d levels from a directory %d below the root", ups, dirDepth))
	}
	return nil
}

// climb reports how many levels above its directory a relative symlink
// target reaches, read lexically; absolute targets climb nothing (the jail
// reads them from the root wherever the link lives).
func climb(target string) int {
	if path.IsAbs(target) {
		return 0
	}
	level, lowest := 0, 0
	for _, c := range splitPath(target) {
		if c == ".." {
			level--
			lowest = min(lowest, level)
		} else {
			level++
		}
	}
	return -lowest
}

// checkMovedLinks refuses moving src (relative to the root) to dst when a
// symlink at or under src would then climb above the root: a link keeps its
// target, so moving it closer to the root makes the same ".." reach further.
func (j *jail) checkMovedLinks(op, src, dst string) error {
	delta := depth(dst) - depth(src)
	if delta >= 0 {
		return nil
	}
	fi, err := j.root.Lstat(src)
	if err != nil {
		return nil // the operation itself reports it
	}
	check := func(link string, newDirDepth int) error {
		target, err := j.root.Readlink(link)
		if err != nil {
			return err
		}
		if c := climb(target); c > newDirDepth {
			return escapeErr(op, link, fmt.Sprintf("symlink to %q would climb %d levels from a directory %d below the root", target, c, newDirDepth))
		}
		return nil
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return check(src, depth(dst))
	}
	if !fi.IsDir() {
		return nil
	}
	return fs.WalkDir(j.root.FS(), src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		return check(p, depth(p)+delta)
	})
}
