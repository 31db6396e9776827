package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
)

// DynamicDiskLink is the in-guest path of a dynamic disk's symlink.
func DynamicDiskLink(diskCID string) string { return path.Join(dynamicDisksDir, diskCID) }

// addDynamicDisk resolves the device and links
// /var/vcap/data/dynamic_disks/<cid> to its in-guest path. A link already
// pointing there is left alone; one pointing elsewhere is replaced.
func (a *Agent) addDynamicDisk(args []json.RawMessage) (any, error) {
	ds, err := diskArgs(MethodAddDynamicDisk, args)
	if err != nil {
		return nil, err
	}
	dev, err := a.resolver.Resolve(ds)
	if err != nil {
		return nil, fmt.Errorf("Setting up dynamic disk %s: %w", ds.ID, err)
	}
	if err := CheckGuestPath("device path", dev); err != nil {
		return nil, err
	}
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	if err := a.symlinkLocked(dev, DynamicDiskLink(ds.ID)); err != nil {
		return nil, fmt.Errorf("Setting up dynamic disk %s: %w", ds.ID, err)
	}
	return map[string]string{}, nil
}

// symlinkLocked makes guest link point at guest target, atomically, doing
// nothing if it already does (bosh-utils Symlink). The new link is made
// under the same name in a sibling directory (<dir>.tmp) and renamed into
// place: a name derived in link's own directory ("<cid>.new") could be
// another disk's link, and could exceed NAME_MAX for a 255-byte CID.
func (a *Agent) symlinkLocked(target, link string) error {
	h := a.root.host(link)
	if cur, err := os.Readlink(h); err == nil && cur == target {
		return nil
	}
	if err := os.MkdirAll(a.root.host(path.Dir(link)), 0o755); err != nil {
		return err
	}
	tmpDir := a.root.host(path.Dir(link) + ".tmp")
	if err := os.MkdirAll(tmpDir, 0o755); err != nil {
		return err
	}
	tmp := filepath.Join(tmpDir, path.Base(link))
	_ = os.Remove(tmp)
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, h); err != nil {
		_ = os.Remove(tmp)
		return err
	}
	return nil
}

// removeDynamicDisk deletes the disk's symlink; an absent link is success.
func (a *Agent) removeDynamicDisk(args []json.RawMessage) (any, error) {
	cid, err := cidArg(MethodRemoveDynamicDisk, args)
	if err != nil {
		return nil, err
	}
	a.diskMu.Lock()
	defer a.diskMu.Unlock()
	if err := os.Remove(a.root.host(DynamicDiskLink(cid))); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("Removing dynamic disk %s: %w", cid, err)
	}
	return map[string]string{}, nil
}

// DiskUsage is one dynamic disk's usage, read from its device (in fakeiaas a
// hard link to the disk's sparse backing file).
type DiskUsage struct {
	// DiskCID names the disk (the symlink's name).
	DiskCID string `json:"disk_cid"`
	// Device is the link's in-guest target.
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
	entries, err := os.ReadDir(a.root.host(dynamicDisksDir))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("agent: reading %s: %w", dynamicDisksDir, err)
	}
	out := make([]DiskUsage, 0, len(entries))
	for _, e := range entries {
		if e.Type()&fs.ModeSymlink == 0 {
			continue
		}
		u := DiskUsage{DiskCID: e.Name()}
		target, err := os.Readlink(a.root.host(DynamicDiskLink(e.Name())))
		if err != nil {
			u.Error = err.Error()
			out = append(out, u)
			continue
		}
		u.Device = target
		if err := CheckGuestPath("link target", target); err != nil {
			u.Error = err.Error()
			out = append(out, u)
			continue
		}
		real, err := a.root.resolve(target)
		if err != nil {
			u.Error = err.Error()
			out = append(out, u)
			continue
		}
		fi, err := os.Stat(a.root.host(real))
		if err != nil {
			u.Error = err.Error()
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
