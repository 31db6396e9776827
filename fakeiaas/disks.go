package fakeiaas

// The fake cloud's disks: create, delete, attach, detach, metadata, resize, snapshots.

import (
	"context"
	"errors"
	"fmt"

	"github.com/cpilab/cpilab/cpiv2"
)

// CreateDisk creates a detached disk with a sparse backing file.
func (c *Cloud) CreateDisk(ctx context.Context, spec DiskSpec) (Disk, error) {
	var out Disk
	err := c.mutate(ctx, OpCreateDisk, "", func(cl *call, b *batch) *Error {
		if e := checkSize("create_disk", spec.SizeMiB); e != nil {
			return e
		}
		if e := checkCount("create_disk", "disks", len(c.disks), MaxDisks, "MaxDisks"); e != nil {
			return e
		}
		if e := checkDoc("create_disk: cloud_properties", spec.CloudProperties); e != nil {
			return e
		}
		cp, e := checkHash("disk cloud_properties", spec.CloudProperties)
		if e != nil {
			return e
		}
		cid, e := c.newCIDLocked(kindDisk, "disk")
		if e != nil {
			return e
		}
		if e := c.claimDiskFileLocked(cid); e != nil {
			return e
		}
		if err := c.createDiskFile(cid, spec.SizeMiB); err != nil {
			_ = c.removeDiskFile(cid)
			if errors.Is(err, errNoSpace) {
				return newErr(CodeInternal, cpiv2.TypeNoDiskSpace, "create_disk: %v", err)
			}
			return internalErr("create_disk", err)
		}
		d := &Disk{CID: cpiv2.MustCID[cpiv2.DiskKind](cid), SizeMiB: spec.SizeMiB, CloudProperties: cp, Locality: spec.Locality, Created: c.r.Now()}
		c.disks[cid] = d
		b.create(kindDisk, cid, d)
		cl.h.Target = cid
		cl.h.Detail = fmt.Sprintf("size=%dMiB", spec.SizeMiB)
		out = *d
		return nil
	})
	return out, err
}

// DeleteDisk deletes a detached disk and its backing file; an attached disk
// is refused (ErrConflict), a missing one is DiskNotFound.
func (c *Cloud) DeleteDisk(ctx context.Context, cid cpiv2.DiskCID) error {
	return c.mutate(ctx, OpDeleteDisk, cid.String(), func(cl *call, b *batch) *Error {
		d, ok := c.disks[cid.String()]
		if !ok {
			return diskNotFound(cid.String())
		}
		if !d.VMCID.IsZero() {
			return newErr(CodeConflict, cpiv2.TypeCloudError, "delete_disk: disk %q is attached to VM %q", cid, d.VMCID)
		}
		if err := c.removeDiskFile(cid.String()); err != nil {
			return internalErr("delete_disk", err)
		}
		delete(c.disks, cid.String())
		b.del(kindDisk, cid.String())
		return nil
	})
}

// Disk returns a disk (DiskNotFound when absent).
func (c *Cloud) Disk(ctx context.Context, cid cpiv2.DiskCID) (Disk, error) {
	var out Disk
	err := c.read(ctx, OpGetDisk, cid.String(), false, func(*call) *Error {
		d, ok := c.disks[cid.String()]
		if !ok {
			return diskNotFound(cid.String())
		}
		out = *d
		out.Metadata = copyMeta(d.Metadata)
		return nil
	})
	return out, err
}

// AttachDisk attaches a disk to a VM and lays out its device in the VM's
// root (docs/seams.md). Attaching a disk already attached to the same VM
// returns the existing attachment; attached to another VM is ErrConflict.
// A VM with restart_on_attach is halted and booted again afterwards.
func (c *Cloud) AttachDisk(ctx context.Context, vmCID cpiv2.VMCID, diskCID cpiv2.DiskCID) (Attachment, error) {
	var out Attachment
	var vm VM
	restart := false
	err := c.mutate(ctx, OpAttachDisk, vmCID.String(), func(cl *call, b *batch) *Error {
		v, ok := c.vms[vmCID.String()]
		if !ok {
			return vmNotFound(vmCID.String())
		}
		d, ok := c.disks[diskCID.String()]
		if !ok {
			return diskNotFound(diskCID.String())
		}
		if !d.VMCID.IsZero() {
			if d.VMCID != vmCID {
				return newErr(CodeConflict, cpiv2.TypeCloudError, "attach_disk: disk %q is attached to VM %q", diskCID, d.VMCID)
			}
			out = attachmentOf(v, d)
			cl.h.Detail = "already attached as " + d.Device
			return nil
		}
		devs := c.devs[vmCID.String()]
		used := map[byte]bool{}
		for dev := range devs {
			used[dev[len(dev)-1]] = true
		}
		letter := byte(0)
		for l := byte('c'); l <= 'z'; l++ {
			if !used[l] {
				letter = l
				break
			}
		}
		if letter == 0 {
			return newErr(CodeConflict, cpiv2.TypeCloudError, "attach_disk: VM %q has no free device letter", vmCID)
		}
		dev := v.Props.DevicePrefix + string(letter)
		lun := letterLUN(letter)
		if err := c.layoutAttach(vmCID.String(), diskCID.String(), dev, lun); err != nil {
			_ = c.layoutDetach(vmCID.String(), diskCID.String(), dev, lun)
			return internalErr("attach_disk", err)
		}
		d.VMCID, d.Device, d.LUN = vmCID, dev, lun
		devs[dev] = diskCID.String()
		b.put(kindDisk, diskCID.String(), d)
		cl.h.Detail = fmt.Sprintf("disk=%s device=%s lun=%d", diskCID, dev, lun)
		out = attachmentOf(v, d)
		restart = v.Props.RestartOnAttach
		if restart {
			v.Boots++
			b.put(kindVM, vmCID.String(), v)
		}
		vm = *v
		return nil
	}, diskCID.String())
	if err != nil && !errors.Is(err, ErrResponseLost) {
		return Attachment{}, err
	}
	if restart {
		c.halt(vmCID)
		if berr := c.boot(vm); berr != nil {
			return Attachment{}, newErr(CodeInternal, cpiv2.TypeCloudError, "attach_disk: restarting %s: %v", vmCID, berr)
		}
	}
	return out, err
}

func attachmentOf(vm *VM, d *Disk) Attachment {
	letter := d.Device[len(d.Device)-1:]
	return Attachment{
		VMCID: vm.CID, DiskCID: d.CID, Device: d.Device, Letter: letter, LUN: d.LUN,
		SDPath: "/dev/sd" + letter, ByID: byIDName(d.CID.String()), DiskHint: vm.Props.DiskHint,
	}
}

// DetachDisk detaches a disk from a VM: VMNotFound, DiskNotFound, or
// DiskNotAttached when it is not attached to that VM.
func (c *Cloud) DetachDisk(ctx context.Context, vmCID cpiv2.VMCID, diskCID cpiv2.DiskCID) error {
	return c.mutate(ctx, OpDetachDisk, vmCID.String(), func(cl *call, b *batch) *Error {
		if _, ok := c.vms[vmCID.String()]; !ok {
			return vmNotFound(vmCID.String())
		}
		d, ok := c.disks[diskCID.String()]
		if !ok {
			return diskNotFound(diskCID.String())
		}
		if d.VMCID != vmCID {
			return newErr(CodeConflict, cpiv2.TypeDiskNotAttached, "detach_disk: disk %q is not attached to VM %q", diskCID, vmCID)
		}
		if err := c.layoutDetach(vmCID.String(), diskCID.String(), d.Device, d.LUN); err != nil {
			return internalErr("detach_disk", err)
		}
		cl.h.Detail = fmt.Sprintf("disk=%s device=%s", diskCID, d.Device)
		delete(c.devs[vmCID.String()], d.Device)
		d.VMCID, d.Device, d.LUN = cpiv2.VMCID{}, "", 0
		b.put(kindDisk, diskCID.String(), d)
		return nil
	}, diskCID.String())
}

// SetDiskMetadata replaces a disk's metadata.
func (c *Cloud) SetDiskMetadata(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) error {
	return c.mutate(ctx, OpSetDiskMetadata, cid.String(), func(cl *call, b *batch) *Error {
		d, ok := c.disks[cid.String()]
		if !ok {
			return diskNotFound(cid.String())
		}
		if e := checkMetadata("set_disk_metadata", meta); e != nil {
			return e
		}
		d.Metadata = copyMeta(meta)
		b.put(kindDisk, cid.String(), d)
		return nil
	})
}

func (c *Cloud) growLocked(op string, d *Disk, newSize int) *Error {
	if !d.VMCID.IsZero() {
		return newErr(CodeConflict, cpiv2.TypeCloudError, "%s: disk %q is attached to VM %q; detach it first", op, d.CID, d.VMCID)
	}
	if newSize < d.SizeMiB {
		return newErr(CodeConflict, cpiv2.TypeNotSupported, "%s: disk %q cannot shrink from %d to %d MiB", op, d.CID, d.SizeMiB, newSize)
	}
	if e := checkSize(op, newSize); e != nil {
		return e
	}
	if newSize > d.SizeMiB {
		if err := c.growDiskFile(d.CID.String(), newSize); err != nil {
			return internalErr(op, err)
		}
	}
	d.SizeMiB = newSize
	return nil
}

// ResizeDisk grows a detached disk. Attached is ErrConflict (CloudError),
// smaller is NotSupported, equal is a no-op.
func (c *Cloud) ResizeDisk(ctx context.Context, cid cpiv2.DiskCID, newSizeMiB int) error {
	return c.mutate(ctx, OpResizeDisk, cid.String(), func(cl *call, b *batch) *Error {
		d, ok := c.disks[cid.String()]
		if !ok {
			return diskNotFound(cid.String())
		}
		old := d.SizeMiB
		if e := c.growLocked("resize_disk", d, newSizeMiB); e != nil {
			return e
		}
		cl.h.Detail = fmt.Sprintf("size=%d->%dMiB", old, newSizeMiB)
		b.put(kindDisk, cid.String(), d)
		return nil
	})
}

// UpdateDisk grows a detached disk and replaces its cloud properties; the
// disk keeps its CID.
func (c *Cloud) UpdateDisk(ctx context.Context, u DiskUpdate) error {
	return c.mutate(ctx, OpUpdateDisk, u.DiskCID.String(), func(cl *call, b *batch) *Error {
		d, ok := c.disks[u.DiskCID.String()]
		if !ok {
			return diskNotFound(u.DiskCID.String())
		}
		if e := checkDoc("update_disk: cloud_properties", u.CloudProperties); e != nil {
			return e
		}
		cp, e := checkHash("disk cloud_properties", u.CloudProperties)
		if e != nil {
			return e
		}
		old := d.SizeMiB
		if e := c.growLocked("update_disk", d, u.NewSizeMiB); e != nil {
			return e
		}
		if cp != nil {
			d.CloudProperties = cp
		}
		cl.h.Detail = fmt.Sprintf("size=%d->%dMiB", old, u.NewSizeMiB)
		b.put(kindDisk, u.DiskCID.String(), d)
		return nil
	})
}

// SnapshotDisk records a snapshot of a disk.
func (c *Cloud) SnapshotDisk(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) (Snapshot, error) {
	var out Snapshot
	err := c.mutate(ctx, OpSnapshotDisk, cid.String(), func(cl *call, b *batch) *Error {
		d, ok := c.disks[cid.String()]
		if !ok {
			return diskNotFound(cid.String())
		}
		if e := checkCount("snapshot_disk", "snapshots", len(c.snapshots), MaxSnapshots, "MaxSnapshots"); e != nil {
			return e
		}
		if e := checkMetadata("snapshot_disk", meta); e != nil {
			return e
		}
		sid, e := c.newCIDLocked(kindSnapshot, "snap")
		if e != nil {
			return e
		}
		s := &Snapshot{CID: cpiv2.MustCID[cpiv2.SnapshotKind](sid), DiskCID: cid, SizeMiB: d.SizeMiB, Metadata: copyMeta(meta), Created: c.r.Now()}
		c.snapshots[sid] = s
		b.create(kindSnapshot, sid, s)
		cl.h.Detail = "snapshot=" + sid
		out = *s
		return nil
	})
	return out, err
}

// DeleteSnapshot deletes a snapshot (ErrNotFound when absent).
func (c *Cloud) DeleteSnapshot(ctx context.Context, cid cpiv2.SnapshotCID) error {
	return c.mutate(ctx, OpDeleteSnapshot, cid.String(), func(cl *call, b *batch) *Error {
		if _, ok := c.snapshots[cid.String()]; !ok {
			return newErr(CodeNotFound, cpiv2.TypeCloudError, "snapshot %q not found", cid)
		}
		delete(c.snapshots, cid.String())
		b.del(kindSnapshot, cid.String())
		return nil
	})
}
