package fakeiaas

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/cpilab/cpilab/vmroot"
)

// cidPattern is the only shape of name fakeiaas ever turns into a path: its
// own CIDs (kind prefix + UUID). A caller's string that does not match
// (`..`, `/`, NUL, …) is simply not found and never reaches the file system.
var cidPattern = regexp.MustCompile(`^(vm|disk|sc|snap)-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func safeCID(cid string) bool { return cidPattern.MatchString(cid) }

// rootDirs are created in every VM root at create_vm (docs/seams.md).
var rootDirs = []string{"dev", "dev/disk/by-id", "sys/bus/scsi/devices", "var/vcap/bosh", "var/vcap/data", "var/vcap/store"}

// scsiHost is the SCSI host number of the root disk and every attached disk.
const scsiHost = 2

// VMBusDevice is the Hyper-V vmbus device every fake VM's SCSI host hangs
// off (sys/bus/vmbus/devices/<VMBusDevice>), as Azure's data-disk
// controller does; its device_id file holds VMBusDeviceID.
const VMBusDevice = "f8b3781b-1e82-4818-a1c3-63d806ec15bb"

// VMBusDeviceID is the content of the vmbus device's device_id: the
// host_device_id the reference CPI's "lun" hints carry.
const VMBusDeviceID = "2"

// Guest paths of the SCSI and vmbus layout (docs/seams.md).
const (
	vmbusDir     = "/sys/devices/vmbus/" + VMBusDevice
	scsiHostDir  = vmbusDir + "/host2"
	rootDiskName = "sda"
)

func (c *Cloud) vmDir(cid string) string    { return filepath.Join(c.dataDir, "vms", cid) }
func (c *Cloud) vmRoot(cid string) string   { return filepath.Join(c.dataDir, "vms", cid, "root") }
func (c *Cloud) diskFile(cid string) string { return filepath.Join(c.dataDir, "disks", cid+".img") }

func mustSafe(cid string) error {
	if !safeCID(cid) {
		return fmt.Errorf("refusing to use %q as a path component", cid)
	}
	return nil
}

// openRoot opens VM cid's root for confined operations: nothing fakeiaas
// does inside a root follows a symlink, whatever an SFTP user has made.
func (c *Cloud) openRoot(cid string) (*vmroot.Root, error) {
	if err := mustSafe(cid); err != nil {
		return nil, err
	}
	return vmroot.Open(c.vmRoot(cid))
}

func (c *Cloud) makeRoot(cid string) error {
	if err := mustSafe(cid); err != nil {
		return err
	}
	if err := os.MkdirAll(c.vmRoot(cid), 0o755); err != nil {
		return err
	}
	r, err := c.openRoot(cid)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, d := range rootDirs {
		if err := r.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	return layoutSCSI(r, rootDiskName, 0)
}

// scsiAddr is a device's SCSI address on the fake host: "2:0:<lun>:0".
func scsiAddr(lun int) string { return strconv.Itoa(scsiHost) + ":0:" + strconv.Itoa(lun) + ":0" }

// layoutSCSI lays out the sysfs view of SCSI device dev at lun: its
// directory under the vmbus device's host, and the links
// sys/bus/scsi/devices/<addr> and sys/class/block/<dev> to it, as Linux
// shows them; plus, once, the vmbus device's device_id and the host's scan
// file.
func layoutSCSI(r *vmroot.Root, dev string, lun int) error {
	addr := scsiAddr(lun)
	dir := scsiHostDir + "/" + addr
	for _, d := range []string{dir + "/block/" + dev, "/sys/bus/scsi/devices", "/sys/class/block", "/sys/bus/vmbus/devices", "/sys/class/scsi_host/host2"} {
		if err := r.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	if _, err := r.Lstat(vmbusDir + "/device_id"); err != nil {
		if err := r.WriteFileAtomic(vmbusDir+"/device_id", []byte(VMBusDeviceID+"\n"), 0o444); err != nil {
			return err
		}
	}
	if _, err := r.Lstat("/sys/class/scsi_host/host2/scan"); err != nil {
		if err := r.WriteFileAtomic("/sys/class/scsi_host/host2/scan", nil, 0o200); err != nil {
			return err
		}
	}
	// Relative targets, so that the links lead to the same place inside the
	// root for a process on the host.
	inSys := strings.TrimPrefix(dir, "/sys/")
	links := []struct{ target, link string }{
		{"../../../devices/vmbus/" + VMBusDevice, "/sys/bus/vmbus/devices/" + VMBusDevice},
		{"../../../" + inSys, "/sys/bus/scsi/devices/" + addr},
		{"../../" + inSys + "/block/" + dev, "/sys/class/block/" + dev},
	}
	for _, l := range links {
		if err := r.Symlink(l.target, l.link, vmroot.SymlinkAtomic); err != nil {
			return err
		}
	}
	return nil
}

// removeSCSI removes what layoutSCSI made for dev at lun.
func removeSCSI(r *vmroot.Root, dev string, lun int) error {
	addr := scsiAddr(lun)
	var errs []error
	for _, p := range []string{"/sys/bus/scsi/devices/" + addr, "/sys/class/block/" + dev, scsiHostDir + "/" + addr} {
		if err := r.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
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

// scsiByIDName is the SCSI by-id link name for a disk CID, as udev names
// a disk by its serial ("scsi-<CID without dashes>"): what the scsi
// resolver's look-up by id globs for.
func scsiByIDName(diskCID string) string { return "scsi-" + strings.ReplaceAll(diskCID, "-", "") }

// layoutAttach lays out disk diskCID as dev in VM vmCID's root: the hard
// link to the backing file, the by-id symlinks and the SCSI sysfs entries.
// Every call is confined to the root (vmroot): none follows a symlink.
func (c *Cloud) layoutAttach(vmCID, diskCID, dev string, lun int) error {
	if err := mustSafe(diskCID); err != nil {
		return err
	}
	r, err := c.openRoot(vmCID)
	if err != nil {
		return err
	}
	defer r.Close()
	for _, d := range []string{"/dev/disk/by-id"} {
		if err := r.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	devPath := "/dev/" + dev
	if err := r.RemoveAll(devPath); err != nil {
		return err
	}
	if err := r.LinkFrom(c.diskFile(diskCID), devPath); err != nil {
		return err
	}
	for _, name := range []string{byIDName(diskCID), scsiByIDName(diskCID)} {
		if err := r.Symlink("../../"+dev, "/dev/disk/by-id/"+name, vmroot.SymlinkAtomic); err != nil {
			return err
		}
	}
	return layoutSCSI(r, dev, lun)
}

// layoutDetach removes what layoutAttach made.
func (c *Cloud) layoutDetach(vmCID, diskCID, dev string, lun int) error {
	if err := mustSafe(diskCID); err != nil {
		return err
	}
	r, err := c.openRoot(vmCID)
	if err != nil {
		return err
	}
	defer r.Close()
	var errs []error
	for _, p := range []string{"/dev/" + dev, "/dev/disk/by-id/" + byIDName(diskCID), "/dev/disk/by-id/" + scsiByIDName(diskCID)} {
		if err := r.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := removeSCSI(r, dev, lun); err != nil {
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
		if err := c.clearDevicesLocked(cid); err != nil {
			return err
		}
		for dev, dcid := range c.devs[cid] {
			if err := c.layoutAttach(cid, dcid, dev, c.disks[dcid].LUN); err != nil {
				return err
			}
		}
	}
	return nil
}

// clearDevicesLocked removes from VM cid's root every device fakeiaas lays
// out on attach that its state does not hold, and every by-id link and
// SCSI entry but the root disk's (they are laid out again).
func (c *Cloud) clearDevicesLocked(cid string) error {
	r, err := c.openRoot(cid)
	if err != nil {
		return err
	}
	defer r.Close()
	want := c.devs[cid]
	clear := func(dir string, keep func(e fs.DirEntry) bool) error {
		ents, err := r.ReadDir(dir)
		if err != nil {
			return nil // absent or not a directory: nothing of ours to clear
		}
		for _, e := range ents {
			if keep(e) {
				continue
			}
			if err := r.RemoveAll(dir + "/" + e.Name()); err != nil {
				return err
			}
		}
		return nil
	}
	all := func(fs.DirEntry) bool { return false }
	steps := []struct {
		dir  string
		keep func(fs.DirEntry) bool
	}{
		{"/dev", func(e fs.DirEntry) bool { _, ok := want[e.Name()]; return !e.Type().IsRegular() || ok }},
		{"/dev/disk/by-id", all},
		{"/sys/bus/scsi/devices", func(e fs.DirEntry) bool { return e.Name() == scsiAddr(0) }},
		{"/sys/class/block", func(e fs.DirEntry) bool { return e.Name() == rootDiskName }},
		{scsiHostDir, func(e fs.DirEntry) bool { return e.Name() == scsiAddr(0) }},
	}
	for _, s := range steps {
		if err := clear(s.dir, s.keep); err != nil {
			return err
		}
	}
	return nil
}
