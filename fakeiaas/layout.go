package fakeiaas

import (
	"errors"
	"fmt"
	"io/fs"
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

// The fake guest's SCSI view (docs/seams.md): every disk is on SCSI host
// 2, a PCI controller, at target = LUN (2:0:<lun>:0, what the scsi
// resolver's volume_id look-up reads, the root disk at 2:0:0:0), and again
// on host 3, a Hyper-V vmbus controller, at 3:0:0:<lun> (what the look-up by
// lun and host_device_id reads, through /sys/class/block/<dev>).
const (
	scsiHost  = 2
	vmbusHost = 3
	// VMBusDevice is the vmbus device of host 3
	// (sys/bus/vmbus/devices/<VMBusDevice>), named as Azure's data-disk
	// controller is.
	VMBusDevice = "f8b3781b-1e82-4818-a1c3-63d806ec15bb"
	// VMBusDeviceID is the content of that device's device_id: the
	// host_device_id the reference CPI's "lun" hints carry.
	VMBusDeviceID = "2"

	pciHostDir   = "/sys/devices/pci0000:00/0000:00:10.0/host2"
	vmbusDir     = "/sys/devices/vmbus/" + VMBusDevice
	vmbusHostDir = vmbusDir + "/host3"
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
	return c.files.Open(c.vmRoot(cid))
}

func (c *Cloud) makeRoot(cid string) error {
	if err := mustSafe(cid); err != nil {
		return err
	}
	if err := c.files.MkdirAll(c.vmRoot(cid), 0o755); err != nil {
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

// scsiAddr is a device's address on the PCI host: "2:0:<lun>:0".
func scsiAddr(lun int) string { return strconv.Itoa(scsiHost) + ":0:" + strconv.Itoa(lun) + ":0" }

// vmbusAddr is a device's address on the vmbus host: "3:0:0:<lun>".
func vmbusAddr(lun int) string { return strconv.Itoa(vmbusHost) + ":0:0:" + strconv.Itoa(lun) }

// layoutSCSI lays out the sysfs view of SCSI device dev at lun, as Linux
// shows it: its directories under both hosts, the links
// sys/bus/scsi/devices/<addr> to them, sys/class/block/<dev> to the vmbus
// one (the PCI one for the root disk), and, once, the vmbus device with its
// device_id and each host's scan file. Link targets are relative, so they
// lead to the same place inside the root for a process on the host; links
// are replaced in place (the cloud holds its lock), leaving no temporary
// directory in the guest's view.
func layoutSCSI(r *vmroot.Root, dev string, lun int) error {
	pci := pciHostDir + "/" + scsiAddr(lun)
	vmbus := vmbusHostDir + "/" + vmbusAddr(lun)
	class := vmbus
	dirs := []string{pci + "/block/" + dev, vmbus + "/block/" + dev}
	if dev == rootDiskName {
		class, dirs = pci, dirs[:1]
	}
	dirs = append(dirs, vmbusDir, "/sys/bus/scsi/devices", "/sys/class/block", "/sys/bus/vmbus/devices", "/sys/class/scsi_host/host2", "/sys/class/scsi_host/host3")
	for _, d := range dirs {
		if err := r.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	files := []struct{ p, content string }{
		{vmbusDir + "/device_id", VMBusDeviceID + "\n"},
		{"/sys/class/scsi_host/host2/scan", ""},
		{"/sys/class/scsi_host/host3/scan", ""},
	}
	for _, f := range files {
		if _, err := r.Lstat(f.p); err == nil {
			continue
		}
		if err := r.WriteFileAtomic(f.p, []byte(f.content), 0o644); err != nil {
			return err
		}
	}
	inSys := func(p string) string { return strings.TrimPrefix(p, "/sys/") }
	links := []struct{ target, link string }{
		{"../../../" + inSys(vmbusDir), "/sys/bus/vmbus/devices/" + VMBusDevice},
		{"../../../" + inSys(pci), "/sys/bus/scsi/devices/" + scsiAddr(lun)},
		{"../../" + inSys(class) + "/block/" + dev, "/sys/class/block/" + dev},
	}
	if dev != rootDiskName {
		links = append(links, struct{ target, link string }{"../../../" + inSys(vmbus), "/sys/bus/scsi/devices/" + vmbusAddr(lun)})
	}
	for _, l := range links {
		if err := r.Symlink(l.target, l.link, vmroot.SymlinkReplace); err != nil {
			return err
		}
	}
	return nil
}

// removeSCSI removes what layoutSCSI made for dev at lun.
func removeSCSI(r *vmroot.Root, dev string, lun int) error {
	var errs []error
	for _, p := range []string{
		"/sys/bus/scsi/devices/" + scsiAddr(lun), "/sys/bus/scsi/devices/" + vmbusAddr(lun), "/sys/class/block/" + dev,
		pciHostDir + "/" + scsiAddr(lun), vmbusHostDir + "/" + vmbusAddr(lun),
	} {
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
	return c.files.RemoveAll(c.vmDir(cid))
}

func (c *Cloud) createDiskFile(cid string, sizeMiB int) error {
	if err := mustSafe(cid); err != nil {
		return err
	}
	// As open(O_CREAT) and ftruncate: an existing file is resized.
	if err := c.files.CreateExcl(c.diskFile(cid), 0o644); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return c.files.Truncate(c.diskFile(cid), int64(sizeMiB)<<20)
}

func (c *Cloud) growDiskFile(cid string, sizeMiB int) error {
	if err := mustSafe(cid); err != nil {
		return err
	}
	return c.files.Truncate(c.diskFile(cid), int64(sizeMiB)<<20)
}

func (c *Cloud) removeDiskFile(cid string) error {
	if err := mustSafe(cid); err != nil {
		return err
	}
	err := c.files.Remove(c.diskFile(cid))
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
		if err := r.Symlink("../../"+dev, "/dev/disk/by-id/"+name, vmroot.SymlinkReplace); err != nil {
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
		if err := c.files.MkdirAll(filepath.Join(c.dataDir, d), 0o755); err != nil {
			return err
		}
	}
	entries, err := c.files.ReadDir(filepath.Join(c.dataDir, "disks"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		name := e.Name()
		cid := name[:len(name)-len(filepath.Ext(name))]
		if _, ok := c.disks[cid]; !ok || filepath.Ext(name) != ".img" {
			if err := c.files.RemoveAll(filepath.Join(c.dataDir, "disks", name)); err != nil {
				return err
			}
		}
	}
	for cid, d := range c.disks {
		if _, err := c.files.Lstat(c.diskFile(cid)); err != nil {
			if err := c.createDiskFile(cid, d.SizeMiB); err != nil {
				return err
			}
		}
	}
	entries, err = c.files.ReadDir(filepath.Join(c.dataDir, "vms"))
	if err != nil {
		return err
	}
	for _, e := range entries {
		if _, ok := c.vms[e.Name()]; !ok {
			if err := c.files.RemoveAll(filepath.Join(c.dataDir, "vms", e.Name())); err != nil {
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
		{pciHostDir, func(e fs.DirEntry) bool { return e.Name() == scsiAddr(0) }},
		{vmbusHostDir, all},
	}
	for _, s := range steps {
		if err := clear(s.dir, s.keep); err != nil {
			return err
		}
	}
	return nil
}
