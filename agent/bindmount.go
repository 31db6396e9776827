package agent

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/cpilab/cpilab/vmroot"
)

// ErrNotBindable is wrapped by mount_disk's error when a persistent disk
// that should be a directory (Config.BindMountPersistentDisk) is not one, or
// its mount point holds files.
var ErrNotBindable = errors.New("agent: cannot bind the persistent disk")

// Directory disks (Config.BindMountPersistentDisk). Upstream, on warden and
// docker stemcells, mount_disk runs `mount --bind /warden-cpi-dev/<disk>
// /var/vcap/store` (platform/disk/linux_bind_mounter.go, with
// UsePreformattedPersistentDisk: no partitioning, no formatting). A fake VM
// has no mount table, so the bind is a symlink: the mount point becomes a
// link, relative to it, to the disk's directory, so that the guest (and a
// process on the host, or SFTP) writing under /var/vcap/store writes onto
// the disk, and the files follow the disk to the next VM. unmount_disk puts
// an empty directory back. The mount point must be empty or absent: a
// symlink cannot hide what a bind mount would shadow, and replacing it would
// lose data, so a mount point with files is refused (ErrNotBindable).

// isBindLink reports whether guest path p is a symlink (a directory disk
// bound there).
func (a *Agent) isBindLink(p string) bool {
	fi, err := a.root.Lstat(p)
	return err == nil && fi.Mode()&fs.ModeSymlink != 0
}

// bindTarget is what the mount point mp's link holds for directory dir:
// dir relative to mp's parent ("../../warden-cpi-dev/vol-1" for
// /var/vcap/store).
func bindTarget(dir, mp string) string {
	up := strings.Repeat("../", strings.Count(path.Dir(mp), "/"))
	return up + strings.TrimPrefix(path.Clean("/"+dir), "/")
}

// checkBindSourceLocked checks that guest path dir is a directory of the
// VM (links followed inside the root, as the guest's mount would).
func (a *Agent) checkBindSourceLocked(cid, dir string) error {
	real, err := a.root.Resolve(dir)
	if err != nil {
		return fmt.Errorf("%w %s: its path %s is not in the VM: %v", ErrNotBindable, cid, dir, err)
	}
	fi, err := a.root.Lstat(real)
	if err != nil {
		return fmt.Errorf("%w %s: %v", ErrNotBindable, cid, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("%w %s: %s is not a directory (the VM's persistent disks are bind-mounted directories)", ErrNotBindable, cid, dir)
	}
	return nil
}

// bindLocked binds directory dir at mount point mp. diskMu is held.
func (a *Agent) bindLocked(cid, dir, mp string) error {
	if err := a.checkBindSourceLocked(cid, dir); err != nil {
		return err
	}
	target := bindTarget(dir, mp)
	fi, err := a.root.Lstat(mp)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := a.root.MkdirAll(path.Dir(mp), 0o755); err != nil {
			return fmt.Errorf("agent: binding %s at %s: %w", dir, mp, err)
		}
	case err != nil:
		return fmt.Errorf("agent: binding %s at %s: %w", dir, mp, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		// Bound before (this disk or a stale one): Symlink replaces it.
	case fi.IsDir():
		entries, err := a.root.ReadDir(mp)
		if err != nil {
			return fmt.Errorf("agent: binding %s at %s: %w", dir, mp, err)
		}
		if len(entries) > 0 {
			return fmt.Errorf("%w %s: the mount point %s holds %d entries (first %q)", ErrNotBindable, cid, mp, len(entries), entries[0].Name())
		}
		if err := a.root.Remove(mp); err != nil {
			return fmt.Errorf("agent: binding %s at %s: %w", dir, mp, err)
		}
	default:
		return fmt.Errorf("%w %s: the mount point %s is a file", ErrNotBindable, cid, mp)
	}
	if err := a.root.Symlink(target, mp, vmroot.SymlinkReplace); err != nil {
		return fmt.Errorf("agent: binding %s at %s: %w", dir, mp, err)
	}
	return nil
}

// unbindLocked undoes bindLocked: the link at mp goes, an empty directory
// takes its place. A mount point that is no link is left alone. diskMu is
// held.
func (a *Agent) unbindLocked(mp string) error {
	if !a.isBindLink(mp) {
		return nil
	}
	if err := a.root.Remove(mp); err != nil {
		return fmt.Errorf("agent: unbinding %s: %w", mp, err)
	}
	if err := a.root.MkdirAll(mp, 0o755); err != nil {
		return fmt.Errorf("agent: unbinding %s: %w", mp, err)
	}
	return nil
}
