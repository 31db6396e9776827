package flexvolume

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cpilab/cpilab/internal/flock"
	"github.com/cpilab/cpilab/vmroot"
	mount "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"
)

// MountTableFile is where the vmroot mounter records mounts, inside the
// node's root (one JSON array of MountRecord).
const MountTableFile = "var/lib/cpilab-flex/mounts.json"

// imageMagic starts a disk image the vmroot mkfs formatted. The header is
// imageHeader bytes: magic, fstype, payload length and filesystem size in
// bytes (decimal), each on its own line; the payload (a tar of the filesystem's files) follows.
const (
	imageMagic  = "CPILABFS1\n"
	imageHeader = 4096
)

// MountRecord is one recorded mount in the vmroot mount table. Paths are
// node paths (inside the root).
type MountRecord struct {
	Source string   `json:"source"`
	Target string   `json:"target"`
	FSType string   `json:"fstype"`
	Opts   []string `json:"opts,omitempty"`
	Bind   bool     `json:"bind,omitempty"`
}

// VMRoot is a node's filesystem rooted at a cpilab VM root: it implements
// mount.Interface (recording mounts in the root's MountTableFile) and
// utilexec.Interface for blkid, mkfs.*, fsck, resize2fs and xfs_growfs (simulated on the disk's
// backing file), so that mount-utils' SafeFormatAndMount runs unchanged.
type VMRoot struct {
	Root string // the root directory on the host

}

// NewVMRoot returns the vmroot mounter of root.
func NewVMRoot(root string) *VMRoot { return &VMRoot{Root: root} }

// Host maps a node path to its host path; it never leaves the root.
func (v *VMRoot) Host(p string) string {
	return filepath.Join(v.Root, filepath.FromSlash(path.Clean("/"+p)))
}

// Resolve follows symlinks of node path p inside the root as the node
// would (absolute targets are node paths, ".." stops at the root), through
// the project's one VM-root resolver (vmroot), and returns the host path of
// what it names.
func (v *VMRoot) Resolve(p string) (string, error) {
	r, err := vmroot.Open(v.Root)
	if err != nil {
		return "", err
	}
	defer r.Close()
	guest, err := r.Resolve(p)
	if err != nil {
		return "", err
	}
	return v.Host(guest), nil
}

// lock takes the root's mount-table lock (an flock, across processes).
func (v *VMRoot) lock() (func(), error) {
	return flock.Lock(v.Host(MountTableFile + ".lock"))
}

// Mounts reads the mount table.
func (v *VMRoot) Mounts() ([]MountRecord, error) {
	raw, err := os.ReadFile(v.Host(MountTableFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []MountRecord
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, nil
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, fmt.Errorf("mount table %s: %w", MountTableFile, err)
	}
	return out, nil
}

func (v *VMRoot) writeMounts(ms []MountRecord) error {
	raw, err := json.MarshalIndent(ms, "", "  ")
	if err != nil {
		return err
	}
	p := v.Host(MountTableFile)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// Mount records a mount. A bind mount makes target a link to source's
// directory; a device mount unpacks the image's files into target.
func (v *VMRoot) Mount(source, target, fstype string, options []string) error {
	unlock, err := v.lock()
	if err != nil {
		return err
	}
	defer unlock()
	ms, err := v.Mounts()
	if err != nil {
		return err
	}
	target = path.Clean("/" + target)
	if slices.ContainsFunc(ms, func(m MountRecord) bool { return m.Target == target }) {
		return fmt.Errorf("mount %s: %s is already a mount point", source, target)
	}
	rec := MountRecord{Source: source, Target: target, FSType: fstype, Opts: options, Bind: slices.Contains(options, "bind")}
	th := v.Host(target)
	if rec.Bind {
		sh := v.Host(source)
		if fi, err := os.Stat(sh); err != nil || !fi.IsDir() {
			return fmt.Errorf("mount --bind %s %s: source is not a directory", source, target)
		}
		if err := os.Remove(th); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("mount --bind %s %s: target: %w", source, target, err)
		}
		rel, err := filepath.Rel(filepath.Dir(th), sh)
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(th), 0o755); err != nil {
			return err
		}
		if err := os.Symlink(rel, th); err != nil {
			return err
		}
	} else {
		dev, err := v.Resolve(source)
		if err != nil {
			return fmt.Errorf("mount %s %s: special device does not exist: %w", source, target, err)
		}
		typ, payload, err := readImage(dev)
		if err != nil {
			return fmt.Errorf("mount %s %s: %w", source, target, err)
		}
		if typ == "" {
			return fmt.Errorf("mount %s %s: wrong fs type, bad superblock (no filesystem)", source, target)
		}
		if err := os.MkdirAll(th, 0o755); err != nil {
			return err
		}
		if err := untar(payload, th); err != nil {
			return fmt.Errorf("mount %s %s: reading the filesystem: %w", source, target, err)
		}
	}
	return v.writeMounts(append(ms, rec))
}

// MountSensitive is Mount.
func (v *VMRoot) MountSensitive(source, target, fstype string, options, _ []string) error {
	return v.Mount(source, target, fstype, options)
}

// MountSensitiveWithoutSystemd is Mount.
func (v *VMRoot) MountSensitiveWithoutSystemd(source, target, fstype string, options, _ []string) error {
	return v.Mount(source, target, fstype, options)
}

// MountSensitiveWithoutSystemdWithMountFlags is Mount.
func (v *VMRoot) MountSensitiveWithoutSystemdWithMountFlags(source, target, fstype string, options, _, _ []string) error {
	return v.Mount(source, target, fstype, options)
}

// Unmount removes target's mount: a device mount's files are packed back
// into the image and the mount point left empty; a bind mount's link
// becomes an empty directory again.
func (v *VMRoot) Unmount(target string) error {
	unlock, err := v.lock()
	if err != nil {
		return err
	}
	defer unlock()
	ms, err := v.Mounts()
	if err != nil {
		return err
	}
	target = path.Clean("/" + target)
	i := slices.IndexFunc(ms, func(m MountRecord) bool { return m.Target == target })
	if i < 0 {
		return fmt.Errorf("umount %s: not mounted", target)
	}
	rec, th := ms[i], v.Host(target)
	if rec.Bind {
		if err := os.Remove(th); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if err := os.MkdirAll(th, 0o755); err != nil {
			return err
		}
	} else {
		dev, err := v.Resolve(rec.Source)
		if err != nil {
			return fmt.Errorf("umount %s: device %s is gone: %w", target, rec.Source, err)
		}
		var buf bytes.Buffer
		if err := tarDir(th, &buf); err != nil {
			return fmt.Errorf("umount %s: %w", target, err)
		}
		info, err := readHeader(dev)
		if err != nil {
			return fmt.Errorf("umount %s: %w", target, err)
		}
		if err := writeImage(dev, rec.FSType, buf.Bytes(), info.size); err != nil {
			return fmt.Errorf("umount %s: %w", target, err)
		}
		if err := os.RemoveAll(th); err != nil {
			return err
		}
		if err := os.MkdirAll(th, 0o755); err != nil {
			return err
		}
	}
	return v.writeMounts(slices.Delete(ms, i, i+1))
}

// List lists the recorded mounts.
func (v *VMRoot) List() ([]mount.MountPoint, error) {
	ms, err := v.Mounts()
	if err != nil {
		return nil, err
	}
	out := make([]mount.MountPoint, len(ms))
	for i, m := range ms {
		out[i] = mount.MountPoint{Device: m.Source, Path: m.Target, Type: m.FSType, Opts: m.Opts}
	}
	return out, nil
}

// IsLikelyNotMountPoint reports whether file is not a recorded mount
// point; fs.ErrNotExist when it does not exist.
func (v *VMRoot) IsLikelyNotMountPoint(file string) (bool, error) {
	if _, err := os.Lstat(v.Host(file)); err != nil {
		return true, err
	}
	ms, err := v.Mounts()
	if err != nil {
		return true, err
	}
	file = path.Clean("/" + file)
	return !slices.ContainsFunc(ms, func(m MountRecord) bool { return m.Target == file }), nil
}

// IsMountPoint is !IsLikelyNotMountPoint.
func (v *VMRoot) IsMountPoint(file string) (bool, error) {
	not, err := v.IsLikelyNotMountPoint(file)
	return !not, err
}

// CanSafelySkipMountPointCheck is false: Unmount of a non-mount errs.
func (v *VMRoot) CanSafelySkipMountPointCheck() bool { return false }

// GetMountRefs lists the other mount points of pathname's source.
func (v *VMRoot) GetMountRefs(pathname string) ([]string, error) {
	ms, err := v.Mounts()
	if err != nil {
		return nil, err
	}
	pathname = path.Clean("/" + pathname)
	var src string
	for _, m := range ms {
		if m.Target == pathname {
			src = m.Source
		}
	}
	var out []string
	for _, m := range ms {
		if m.Source == src && m.Target != pathname {
			out = append(out, m.Target)
		}
	}
	return out, nil
}

// imageInfo is a vmroot filesystem's header: its type ("" when the
// device is blank), the payload's length and the filesystem's size in
// bytes (what df shows; 0 in images written before sizes were recorded).
type imageInfo struct {
	typ    string
	length int
	size   int64
}

// readHeader reads the filesystem header of the backing file dev.
func readHeader(dev string) (imageInfo, error) {
	f, err := os.Open(dev)
	if err != nil {
		return imageInfo{}, err
	}
	defer f.Close()
	hdr := make([]byte, imageHeader)
	n, err := io.ReadFull(f, hdr)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return imageInfo{}, err
	}
	hdr = hdr[:n]
	if !bytes.HasPrefix(hdr, []byte(imageMagic)) {
		return imageInfo{}, nil
	}
	lines := strings.SplitN(string(hdr[len(imageMagic):]), "\n", 4)
	if len(lines) < 3 {
		return imageInfo{}, fmt.Errorf("%s: corrupt filesystem header", dev)
	}
	length, err := strconv.Atoi(lines[1])
	if err != nil || length < 0 {
		return imageInfo{}, fmt.Errorf("%s: corrupt filesystem header (length %q)", dev, lines[1])
	}
	info := imageInfo{typ: lines[0], length: length}
	if len(lines) == 4 {
		info.size, _ = strconv.ParseInt(lines[2], 10, 64)
	}
	return info, nil
}

// readImage returns the filesystem type mkfs wrote on the backing file
// dev ("" when blank) and its payload.
func readImage(dev string) (string, []byte, error) {
	info, err := readHeader(dev)
	if err != nil || info.typ == "" {
		return "", nil, err
	}
	f, err := os.Open(dev)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	payload := make([]byte, info.length)
	if _, err := f.ReadAt(payload, imageHeader); err != nil && info.length > 0 {
		return "", nil, fmt.Errorf("%s: reading filesystem: %w", dev, err)
	}
	return info.typ, payload, nil
}

// writeImage writes a filesystem header and payload on dev, in place; the
// filesystem is size bytes.
func writeImage(dev, fstype string, payload []byte, size int64) error {
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	hdr := make([]byte, imageHeader)
	copy(hdr, fmt.Sprintf("%s%s\n%d\n%d\n", imageMagic, fstype, len(payload), size))
	if _, err := f.WriteAt(append(hdr, payload...), 0); err != nil {
		_ = f.Close()
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// growHeader sets the filesystem size recorded on dev to the backing
// file's size (resize2fs, xfs_growfs), leaving the payload in place; it
// returns the new size.
func growHeader(dev string) (int64, error) {
	info, err := readHeader(dev)
	if err != nil {
		return 0, err
	}
	if info.typ == "" {
		return 0, fmt.Errorf("%s: no filesystem to grow", dev)
	}
	fi, err := os.Stat(dev)
	if err != nil {
		return 0, err
	}
	f, err := os.OpenFile(dev, os.O_WRONLY, 0)
	if err != nil {
		return 0, err
	}
	hdr := make([]byte, imageHeader)
	copy(hdr, fmt.Sprintf("%s%s\n%d\n%d\n", imageMagic, info.typ, info.length, fi.Size()))
	if _, err := f.WriteAt(hdr, 0); err != nil {
		_ = f.Close()
		return 0, err
	}
	return fi.Size(), errors.Join(f.Sync(), f.Close())
}

// FSSize is the size in bytes of the filesystem mounted on node path
// target (a device mount, or a bind mount of one), as df shows it.
func (v *VMRoot) FSSize(target string) (int64, error) {
	ms, err := v.Mounts()
	if err != nil {
		return 0, err
	}
	target = path.Clean("/" + target)
	for range 8 {
		i := slices.IndexFunc(ms, func(m MountRecord) bool { return m.Target == target })
		if i < 0 {
			return 0, fmt.Errorf("df %s: not a mount point", target)
		}
		if !ms[i].Bind {
			dev, err := v.Resolve(ms[i].Source)
			if err != nil {
				return 0, fmt.Errorf("df %s: device %s: %w", target, ms[i].Source, err)
			}
			info, err := readHeader(dev)
			if err != nil {
				return 0, fmt.Errorf("df %s: %w", target, err)
			}
			return info.size, nil
		}
		target = path.Clean("/" + ms[i].Source)
	}
	return 0, fmt.Errorf("df %s: too many bind mounts", target)
}

// mountedDevice is the backing file of the device mounted on node path
// target.
func (v *VMRoot) mountedDevice(target string) (string, error) {
	ms, err := v.Mounts()
	if err != nil {
		return "", err
	}
	target = path.Clean("/" + target)
	i := slices.IndexFunc(ms, func(m MountRecord) bool { return m.Target == target && !m.Bind })
	if i < 0 {
		return "", fmt.Errorf("%s is not a mount point", target)
	}
	return v.Resolve(ms[i].Source)
}

func tarDir(dir string, w io.Writer) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		info, err := d.Info()
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() && !info.IsDir() {
			return nil
		}
		h, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	return errors.Join(err, tw.Close())
}

func untar(payload []byte, dir string) error {
	if len(payload) == 0 {
		return nil
	}
	tr := tar.NewReader(bytes.NewReader(payload))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		p := filepath.Join(dir, filepath.FromSlash(path.Clean("/"+h.Name)))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				return err
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			if err := os.WriteFile(p, b, h.FileInfo().Mode().Perm()); err != nil {
				return err
			}
		}
	}
}

// Exec is the vmroot's utilexec.Interface: blkid, mkfs.<type> and fsck on
// devices inside the root, simulated on their backing files. Any other
// command fails.
func (v *VMRoot) Exec() utilexec.Interface { return vmExec{v} }

type vmExec struct{ v *VMRoot }

func (e vmExec) Command(cmd string, args ...string) utilexec.Cmd {
	return &vmCmd{v: e.v, name: cmd, args: args}
}

func (e vmExec) CommandContext(_ context.Context, cmd string, args ...string) utilexec.Cmd {
	return e.Command(cmd, args...)
}

func (e vmExec) LookPath(file string) (string, error) {
	switch {
	case file == "blkid", file == "fsck", file == "resize2fs", file == "xfs_growfs", strings.HasPrefix(file, "mkfs."):
		return "/sbin/" + file, nil
	}
	return "", utilexec.ErrExecutableNotFound
}

// vmCmd is one simulated command.
type vmCmd struct {
	v      *VMRoot
	name   string
	args   []string
	stdout io.Writer
}

func (c *vmCmd) run() ([]byte, error) {
	if len(c.args) == 0 {
		return nil, &utilexec.CodeExitError{Err: fmt.Errorf("%s: no device", c.name), Code: 1}
	}
	dev := c.args[len(c.args)-1]
	var host string
	var err error
	if c.name == "xfs_growfs" {
		// xfs_growfs -d <mount point>
		host, err = c.v.mountedDevice(dev)
	} else {
		host, err = c.v.Resolve(dev)
	}
	if err != nil {
		return []byte(err.Error()), &utilexec.CodeExitError{Err: err, Code: 2}
	}
	switch {
	case c.name == "blkid":
		typ, _, err := readImage(host)
		if err != nil {
			return []byte(err.Error()), &utilexec.CodeExitError{Err: err, Code: 4}
		}
		if typ == "" {
			return nil, &utilexec.CodeExitError{Err: errors.New("blkid: nothing found"), Code: 2}
		}
		return []byte("DEVNAME=" + dev + "\nTYPE=" + typ + "\n"), nil
	case strings.HasPrefix(c.name, "mkfs."):
		fi, err := os.Stat(host)
		if err == nil {
			err = writeImage(host, strings.TrimPrefix(c.name, "mkfs."), nil, fi.Size())
		}
		if err != nil {
			return []byte(err.Error()), &utilexec.CodeExitError{Err: err, Code: 1}
		}
		return nil, nil
	case c.name == "fsck":
		if _, _, err := readImage(host); err != nil {
			return []byte(err.Error()), &utilexec.CodeExitError{Err: err, Code: 4}
		}
		return nil, nil
	case c.name == "resize2fs", c.name == "xfs_growfs":
		size, err := growHeader(host)
		if err != nil {
			return []byte(err.Error()), &utilexec.CodeExitError{Err: err, Code: 1}
		}
		return []byte(fmt.Sprintf("The filesystem on %s is now %d bytes long.\n", dev, size)), nil
	}
	err = fmt.Errorf("%s: not available on a vmroot node", c.name)
	return []byte(err.Error()), &utilexec.CodeExitError{Err: err, Code: 127}
}

func (c *vmCmd) Run() error {
	out, err := c.run()
	if c.stdout != nil {
		_, _ = c.stdout.Write(out)
	}
	return err
}
func (c *vmCmd) CombinedOutput() ([]byte, error)    { return c.run() }
func (c *vmCmd) Output() ([]byte, error)            { return c.run() }
func (c *vmCmd) SetDir(string)                      {}
func (c *vmCmd) SetStdin(io.Reader)                 {}
func (c *vmCmd) SetStdout(w io.Writer)              { c.stdout = w }
func (c *vmCmd) SetStderr(io.Writer)                {}
func (c *vmCmd) SetEnv([]string)                    {}
func (c *vmCmd) StdoutPipe() (io.ReadCloser, error) { return nil, errors.New("vmroot exec: no pipes") }
func (c *vmCmd) StderrPipe() (io.ReadCloser, error) { return nil, errors.New("vmroot exec: no pipes") }
func (c *vmCmd) Start() error                       { return errors.New("vmroot exec: use Run") }
func (c *vmCmd) Wait() error                        { return errors.New("vmroot exec: use Run") }
func (c *vmCmd) Stop()                              {}

var _ mount.Interface = (*VMRoot)(nil)
