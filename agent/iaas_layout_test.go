package agent_test

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
)

// guest builds a VM root as a cloud's Linux guest shows it after attach:
// device nodes (regular files here), udev's /dev/disk/by-id links and the
// sysfs tree with its links, all with the targets Linux gives them.
type guest struct {
	t    testing.TB
	root string
}

func newGuest(t testing.TB) guest {
	t.Helper()
	return guest{t: t, root: filepath.Join(t.TempDir(), "root")}
}

func (g guest) host(p string) string { return filepath.Join(g.root, filepath.FromSlash(p)) }

// dir makes guest directory p.
func (g guest) dir(p string) guest {
	g.t.Helper()
	mustMkdir(g.t, g.host(p))
	return g
}

// file writes guest file p.
func (g guest) file(p, content string) guest {
	g.t.Helper()
	g.dir(path.Dir(p))
	if err := os.WriteFile(g.host(p), []byte(content), 0o644); err != nil {
		g.t.Fatal(err)
	}
	return g
}

// dev makes device node p (a small regular file).
func (g guest) dev(p string) guest { return g.file(p, "device "+p) }

// link makes guest symlink p → target.
func (g guest) link(target, p string) guest {
	g.t.Helper()
	g.dir(path.Dir(p))
	if err := os.Symlink(target, g.host(p)); err != nil {
		g.t.Fatal(err)
	}
	return g
}

// byID adds udev's /dev/disk/by-id/<name> → ../../<dev>.
func (g guest) byID(name, dev string) guest { return g.link("../../"+dev, "/dev/disk/by-id/"+name) }

// scsi lays out SCSI device dev at addr ("h:c:t:l") under sysfs device
// directory parent (e.g. "/sys/devices/vmbus/<id>"), as Linux does: the
// real directory, /sys/bus/scsi/devices/<addr> and /sys/class/block/<dev>
// links to it, and /sys/class/scsi_host/host<h>/scan.
func (g guest) scsi(parent, host, addr, dev string) guest {
	d := parent + "/host" + host + "/target" + addr[:len(addr)-2] + "/" + addr
	g.dir(d + "/block/" + dev)
	inSys := strings.TrimPrefix(d, "/sys/")
	g.link("../../../"+inSys, "/sys/bus/scsi/devices/"+addr)
	g.link("../../"+inSys+"/block/"+dev, "/sys/class/block/"+dev)
	g.file("/sys/class/scsi_host/host"+host+"/scan", "")
	return g
}

// The guests below are what each cloud's stemcell shows for a root disk
// plus two attached persistent disks (so that a resolver picking the wrong
// disk is caught), with the hint its CPI returns and the agent.json
// resolution settings of its stemcell.

// awsNitro: EBS volumes are NVMe namespaces; udev names them by the volume
// ID without its dash. The AWS stemcell's virtio resolver transforms
// "vol-…" to "nvme-Amazon_Elastic_Block_Store_vol…".
func awsNitro(t testing.TB) guest {
	g := newGuest(t)
	g.dev("/dev/nvme0n1").dev("/dev/nvme1n1").dev("/dev/nvme2n1")
	g.byID("nvme-Amazon_Elastic_Block_Store_vol0aaaaaaaaaaaaaaa0", "nvme0n1")
	g.byID("nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0", "nvme1n1")
	g.byID("nvme-Amazon_Elastic_Block_Store_vol0fedcba9876543210", "nvme2n1")
	g.byID("nvme-nvme.1d0f-766f6c30313233343536373839616263646566300-416d617a6f6e20456c617374696320426c6f636b2053746f7265-00000001", "nvme1n1")
	return g
}

// awsXen: the device the CPI asked for as /dev/sdf appears as /dev/xvdf;
// there is no by-id name, so virtio falls back to mapped.
func awsXen(t testing.TB) guest {
	g := newGuest(t)
	g.dev("/dev/xvda").dev("/dev/xvdf").dev("/dev/xvdg")
	return g
}

// gcp: udev names a persistent disk both google-<device name> and
// scsi-0Google_PersistentDisk_<device name>; the CPI names the device after
// the disk CID.
func gcp(t testing.TB) guest {
	g := newGuest(t)
	g.dev("/dev/sda").dev("/dev/sdb").dev("/dev/sdc")
	g.byID("google-persistent-disk-0", "sda")
	for _, d := range []struct{ name, dev string }{
		{"disk-6c3f9a2e-0d4b-4c8e-9f61-2b7a5d1e8c40", "sdb"},
		{"disk-0e1d2c3b-4a59-4687-b9ca-dbecfd0e1f20", "sdc"},
	} {
		g.byID("google-"+d.name, d.dev)
		g.byID("scsi-0Google_PersistentDisk_"+d.name, d.dev)
	}
	return g
}

// azureVMBus is the Hyper-V vmbus device of Azure's data-disk controller;
// azureRootVMBus the root and resource disks' controller.
const (
	azureVMBus     = "f8b3781b-1e82-4818-a1c3-63d806ec15bb"
	azureRootVMBus = "00000000-0000-8899-0000-000000000000"
)

// azure: data disks hang off one vmbus SCSI controller (host 3) at the LUN
// the CPI chose; the root controller (host 0) has a device at LUN 2 too, so
// only the vmbus filter picks the right one.
func azure(t testing.TB) guest {
	g := newGuest(t)
	g.dev("/dev/sda").dev("/dev/sdb").dev("/dev/sdc").dev("/dev/sdd").dev("/dev/sde")
	for _, b := range []struct{ id, devID string }{{azureVMBus, "{" + azureVMBus + "}"}, {azureRootVMBus, "{" + azureRootVMBus + "}"}} {
		g.dir("/sys/devices/LNXSYSTM:00/VMBUS:01/" + b.id)
		g.file("/sys/devices/LNXSYSTM:00/VMBUS:01/"+b.id+"/device_id", b.devID+"\n")
		g.link("../../../devices/LNXSYSTM:00/VMBUS:01/"+b.id, "/sys/bus/vmbus/devices/"+b.id)
	}
	root := "/sys/devices/LNXSYSTM:00/VMBUS:01/" + azureRootVMBus
	data := "/sys/devices/LNXSYSTM:00/VMBUS:01/" + azureVMBus
	g.scsi(root, "0", "0:0:0:0", "sda")
	g.scsi(root, "0", "0:0:1:0", "sdb")
	g.scsi(root, "0", "0:0:0:2", "sde")
	g.scsi(data, "3", "3:0:0:2", "sdc")
	g.scsi(data, "3", "3:0:0:3", "sdd")
	return g
}

// openstack: virtio serials are the first 20 characters of the volume UUID,
// so udev's name is virtio-<20 chars>; the stemcell transforms the disk CID
// to that name. Devices are vdX.
func openstack(t testing.TB) guest {
	g := newGuest(t)
	g.dev("/dev/vda").dev("/dev/vdb").dev("/dev/vdc")
	g.byID("virtio-5f0e7c1a-3b2d-4e9f-8", "vdb")
	g.byID("virtio-9a8b7c6d-5e4f-4a3b-2", "vdc")
	return g
}

// vsphere: disks on SCSI host 2 at their unit number; udev names them by
// the disk's UUID (scsi-3 + WWN, lower case, no dashes).
func vsphere(t testing.TB) guest {
	g := newGuest(t)
	g.dev("/dev/sda").dev("/dev/sdb").dev("/dev/sdc")
	pci := "/sys/devices/pci0000:00/0000:00:15.0/0000:03:00.0"
	g.scsi(pci, "2", "2:0:0:0", "sda")
	g.scsi(pci, "2", "2:0:1:0", "sdb")
	g.scsi(pci, "2", "2:0:2:0", "sdc")
	g.byID("scsi-36000c29d4e1f2a3b4c5d6e7f8091a2b3", "sdb")
	g.byID("wwn-0x6000c29d4e1f2a3b4c5d6e7f8091a2b3", "sdb")
	g.byID("scsi-36000c2911223344556677889900aabbc", "sdc")
	return g
}
