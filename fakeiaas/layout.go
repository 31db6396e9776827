package fakeiaas

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
)

// cidPattern is the only shape of name fakeiaas ever turns into a path: its
// own CIDs (kind prefix + UUID). A caller's string that does not match
// (`..`, `/`, NUL, …) is simply not found and never reaches the file system.
var cidPattern = regexp.MustCompile(`^(vm|disk|sc|snap)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func safeCID(cid string) bool { return cidPattern.MatchString(cid) }

// rootDirs are created in every VM root at create_vm (docs/seams.md).
var rootDirs = []string{"dev", "dev/disk/by-id", "sys/bus/scsi/devices", "var/vcap/bosh", "var/vcap/data", "var/vcap/store"}

// scsiHost is the SCSI host number of every attached disk.
const scsiHost = 2

func (c *Cloud) vmDir(cid string) string    { return filepath.Join(c.dataDir, "vms", cid) }
func (c *Cloud) vmRoot(cid string) string   { return filepath.Join(c.dataDir, "vms", cid, "root") }
func (c *Cloud) diskFile(cid string) string { return filepath.Join(c.dataDir, "disks", cid+".img") }

func mustSafe(cid string) error {
	if !safeCID(cid) {
		return fmt.Errorf("refusing to use %q as a path component", cid)
	}
	return nil
}

func (c *Cloud) makeRoot(cid string) error {
	if err := mustSafe(cid); err != nil {
		return err
	}
	root := c.vmRoot(cid)
	for _, d := range rootDirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cloud) removeVMDir(cid string) error {
	if err := mustSafe(cid); err != nil {
		return err
	}
	return os.RemoveAll(c.vmDir(cid))
}

func (c *Cloud) createDiskFile(cid string, sizeMiB int) error {
	if err := mustSafe(cid); err != nil {
		return err
	}
	f, err := os.OpenFile(c.diskFile(cid), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	if err := f.Truncate(int64(sizeMiB) << 20); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (c *Cloud) growDiskFile(cid string, sizeMiB int) error {
	if err := mustSafe(cid); err != nil {
		return err
	}
	return os.Truncate(c.diskFile(cid), int64(sizeMiB)<<20)
}

func (c *Cloud) removeDiskFile(cid string) error {
	if err := mustSafe(cid); err != nil {
		return err
	}
	err := os.Remove(c.diskFile(cid))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// letterLUN maps a device letter to its LUN: c → 2, d → 3, ….
func letterLUN(letter byte) int { return int(letter - 'a') }

// byIDName is the virtio by-id link name for a disk CID.
func byIDName(diskCID string) string {
	id := diskCID
	if len(id) > 20 {
		id = id[:20]
	}
	return "virtio-" + id
}

func scsiDir(root string, lun int, dev string) string {
	return filepath.Join(root, "sys/bus/scsi/devices", strconv.Itoa(scsiHost)+":0:"+strconv.Itoa(lun)+":0", "block", dev)
}

// layoutAttach lays out disk diskCID as dev in VM vmCID's root: the hard
// link, the by-id symlink and the SCSI sys entry.
func (c *Cloud) layoutAttach(vmCID, diskCID, dev string, lun int) error {
	if err := mustSafe(vmCID); err != nil {
		return err
	}
	if err := mustSafe(diskCID); err != nil {
		return err
	}
	root := c.vmRoot(vmCID)
	devPath := filepath.Join(root, "dev", dev)
	_ = os.Remove(devPath)
	if err := os.Link(c.diskFile(diskCID), devPath); err != nil {
		return err
	}
	link := filepath.Join(root, "dev/disk/by-id", byIDName(diskCID))
	_ = os.Remove(link)
	if err := os.Symlink("../../"+dev, link); err != nil {
		return err
	}
	return os.MkdirAll(scsiDir(root, lun, dev), 0o755)
}

// layoutDetach removes what layoutAttach made.
func (c *Cloud) layoutDetach(vmCID, diskCID, dev string, lun int) error {
	if err := mustSafe(vmCID); err != nil {
		return err
	}
	if err := mustSafe(diskCID); err != nil {
		return err
	}
	root := c.vmRoot(vmCID)
	var errs []error
	for _, p := range []string{filepath.Join(root, "dev", dev), filepath.Join(root, "dev/disk/by-id", byIDName(diskCID))} {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(filepath.Dir(filepath.Dir(scsiDir(root, lun, dev)))); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// reconcileLocked makes the data dir match the loaded state after a
// restart: every VM root exists with exactly its attached devices, every
// disk has its backing file, and files left by operations that never
// committed are removed.
func (c *Cloud) reconcileLocked() error {
	for _, d := range []string{"vms", "disks"} {
		if err := os.MkdirAll(filepath.Join(c.dataDir, d), 0o755); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(filepath.Join(c.dataDir, "disks"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		cid := name[:len(name)-len(filepath.Ext(name))]
		if _, ok := c.disks[cid]; !ok || filepath.Ext(name) != ".img" {
			if err := os.RemoveAll(filepath.Join(c.dataDir, "disks", name)); err != nil {
				return err
			}
		}
	}
	for cid, d := range c.disks {
		if _, err := os.Stat(c.diskFile(cid)); err != nil {
			if err := c.createDiskFile(cid, d.SizeMiB); err != nil {
				return err
			}
		}
	}
	entries, err = os.ReadDir(filepath.Join(c.dataDir, "vms"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, ok := c.vms[e.Name()]; !ok {
			if err := os.RemoveAll(filepath.Join(c.dataDir, "vms", e.Name())); err != nil {
				return err
			}
		}
	}
	for cid := range c.vms {
		if err := c.makeRoot(cid); err != nil {
			return err
		}
		root := c.vmRoot(cid)
		want := c.devs[cid]
		devs, err := os.ReadDir(filepath.Join(root, "dev"))
		if err != nil {
			return err
		}
		for _, de := range devs {
			if _, ok := want[de.Name()]; de.Type().IsRegular() && !ok {
				_ = os.Remove(filepath.Join(root, "dev", de.Name()))
			}
		}
		ids, _ := os.ReadDir(filepath.Join(root, "dev/disk/by-id"))
		for _, de := range ids {
			_ = os.Remove(filepath.Join(root, "dev/disk/by-id", de.Name()))
		}
		scsi, _ := os.ReadDir(filepath.Join(root, "sys/bus/scsi/devices"))
		for _, de := range scsi {
			_ = os.RemoveAll(filepath.Join(root, "sys/bus/scsi/devices", de.Name()))
		}
		for dev, dcid := range want {
			if err := c.layoutAttach(cid, dcid, dev, c.disks[dcid].LUN); err != nil {
				return err
			}
		}
	}
	return nil
}
