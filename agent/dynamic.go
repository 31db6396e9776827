package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/cpilab/cpilab/vmroot"
)

// DynamicDiskLink is the in-guest path of a dynamic disk's symlink.
func DynamicDiskLink(diskCID string) string { return path.Join(dynamicDisksDir, diskCID) }

// dynamicDisksPerm is the dynamic_disks directory's mode, as upstream's
// SetupDataDir makes it (persistentDiskPermissions; root:vcap is not
// modelled).
const dynamicDisksPerm = 0o700

// prepareDynamicDisksDir makes var/vcap/data/dynamic_disks, mode 0700.
func (a *Agent) prepareDynamicDisksDir() error {
	if err := a.root.MkdirAll(path.Dir(dynamicDisksDir), 0o755); err != nil {
		return fmt.Errorf("agent: preparing %s: %w", dynamicDisksDir, err)
	}
	if err := a.root.MkdirAll(dynamicDisksDir, dynamicDisksPerm); err != nil {
		return fmt.Errorf("agent: preparing %s: %w", dynamicDisksDir, err)
	}
	if err := a.root.ChmodDir(dynamicDisksDir, dynamicDisksPerm); err != nil {
		return fmt.Errorf("agent: preparing %s: %w", dynamicDisksDir, err)
	}
	return nil
}

// addDynamicDisk reloads the settings (upstream LoadSettings: a failed
// fetch falls back to settings.json), resolves the device and links
// /var/vcap/data/dynamic_disks/<cid> to it. A link already pointing there is
// left alone; anything else at the name is replaced.
func (a *Agent) addDynamicDisk(args []json.RawMessage) (any, error) {
	ds, err := a.diskArgs(MethodAddDynamicDisk, args)
	if err != nil {
		return nil, err
	}
	a.diskMu.Lock()
	err = a.reloadSettingsLocked()
	a.diskMu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("Refreshing the settings: %w", err)
	}
	dev, err := a.resolver.Resolve(ds)
	if err != nil {
		return nil, fmt.Errorf("Setting up dynamic disk: Getting dynamic disk real device path: %w", err)
	}
	if !a.cfg.Knobs.LaxNames {
		if err := CheckGuestPath("device path", dev); err != nil {
			return nil, err
		}
	}
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	if err := a.linkDynamicDiskLocked(dev, ds.ID); err != nil {
		return nil, fmt.Errorf("Setting up dynamic disk: Symlinking dynamic disk real device path: %w", err)
	}
	return map[string]string{}, nil
}

// linkTarget is what link, a dynamic disk's link, holds for guest device
// dev: dev itself under Knobs.AbsoluteLinks, else dev relative to the
// link's directory.
func (a *Agent) linkTarget(dev, link string) string {
	if a.cfg.Knobs.AbsoluteLinks {
		return dev
	}
	up := strings.Repeat("../", strings.Count(path.Dir(link), "/"))
	return up + strings.TrimPrefix(path.Clean("/"+dev), "/")
}

// linkDynamicDiskLocked makes the disk's link point at guest device dev.
func (a *Agent) linkDynamicDiskLocked(dev, cid string) error {
	if err := a.prepareDynamicDisksDir(); err != nil {
		return err
	}
	link := DynamicDiskLink(cid)
	if dir := path.Dir(link); dir != dynamicDisksDir { // a lax CID "a/b": bosh-utils makes the directory
		if err := a.root.MkdirAll(dir, 0o700); err != nil {
			return err
		}
	}
	mode := vmroot.SymlinkAtomic
	if a.cfg.Knobs.NonAtomicLinks {
		mode = vmroot.SymlinkReplace
	}
	return a.root.Symlink(a.linkTarget(dev, link), link, mode)
}

// removeDynamicDisk removes whatever is at the disk's link, recursively
// (upstream CleanupDynamicDisk: RemoveAll); an absent link is success.
func (a *Agent) removeDynamicDisk(args []json.RawMessage) (any, error) {
	cid, err := a.cidArg(MethodRemoveDynamicDisk, args)
	if err != nil {
		return nil, err
	}
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	if err := a.root.RemoveAll(DynamicDiskLink(cid)); err != nil {
		return nil, fmt.Errorf("Setting up dynamic disk: Removing dynamic disk symlink %s: %w", cid, err)
	}
	return map[string]string{}, nil
}

// DiskUsage is one dynamic disk's usage, read from its device (in fakeiaas a
// hard link to the disk's sparse backing file).
type DiskUsage struct {
	// DiskCID names the disk (the symlink's name).
	DiskCID string `json:"disk_cid"`
	// Device is the guest path the link names ("/dev/sdc"), read from the
	// link's directory when its target is relative.
	Device string `json:"device"`
	// UsedBytes is the space allocated to the backing file (blocks × 512).
	UsedBytes int64 `json:"used_bytes"`
	// TotalBytes is the disk's size.
	TotalBytes int64 `json:"total_bytes"`
	// Error is set, and the byte counts zero, when the device cannot be read
	// (a dangling link).
	Error string `json:"error,omitempty"`
}

// DynamicDiskUsage reports every linked dynamic disk, sorted by CID.
func (a *Agent) DynamicDiskUsage() ([]DiskUsage, error) {
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	entries, err := a.root.ReadDir(dynamicDisksDir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("agent: reading %s: %w", dynamicDisksDir, err)
	}
	out := make([]DiskUsage, 0, len(entries))
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		u := DiskUsage{DiskCID: e.Name()}
		link := DynamicDiskLink(e.Name())
		target, err := a.root.Readlink(link)
		if err != nil {
			u.Error = err.Error()
			out = append(out, u)
			continue
		}
		if !path.IsAbs(target) {
			target = path.Join(dynamicDisksDir, target)
		}
		u.Device = target
		real, err := a.root.Resolve(link)
		if err != nil {
			u.Error = err.Error()
			out = append(out, u)
			continue
		}
		fi, err := a.root.Lstat(real)
		if err != nil {
			u.Error = err.Error()
			out = append(out, u)
			continue
		}
		if !fi.Mode().IsRegular() {
			u.Error = fmt.Sprintf("%s is not a device", real)
			out = append(out, u)
			continue
		}
		u.TotalBytes = fi.Size()
		u.UsedBytes = allocatedBytes(fi)
		out = append(out, u)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].DiskCID < out[j].DiskCID })
	return out, nil
}

func (a *Agent) dynamicDiskUsageAction([]json.RawMessage) (any, error) {
	return a.DynamicDiskUsage()
}
