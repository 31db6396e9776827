package flexvolume

import (
	"context"
	"fmt"
	"strconv"

	mount "k8s.io/mount-utils"
)

// Expansion, as kubelet's flexvolume expander calls it (Kubernetes
// pkg/volume/flexvolume/expander.go):
//
//   - the expand controller (controller-manager) runs
//     `expandvolume <json options> <device mount path> <new size> <old size>`
//     (sizes in bytes) once the PVC asks for more; "Not supported" makes
//     kubelet take the new size as done (expander-defaults.go);
//   - when init declared requiresFSResize, kubelet then runs, on the node
//     the volume is mounted on,
//     `expandfs <json options> <device> <device mount path> <new size> <old size>`;
//     "Not supported" makes kubelet run its generic resize (resize2fs,
//     xfs_growfs) itself.
//
// expandvolume grows the dynamic disk through POST
// /dynamic_disks/:name/resize (which detaches, resize_disk, attaches and
// links again when the disk is attached); expandfs grows the filesystem
// with mount-utils' ResizeFs. Both are idempotent: a disk or filesystem
// already that large is left alone.

// bytesToMiB rounds a size in bytes up to MiB.
func bytesToMiB(b int64) int { return int((b + (1<<20 - 1)) >> 20) }

// parseSize reads a size argument (bytes, > 0).
func parseSize(what, s string) (int64, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s must be a positive number of bytes, not %q", what, s)
	}
	return n, nil
}

func (d *Driver) expandVolume(ctx context.Context, rawOpts, newSize string) Result {
	o, err := parseOptions(rawOpts)
	if err != nil {
		return failure("expandvolume: %v", err)
	}
	vol, err := volumeName(o)
	if err != nil {
		return failure("expandvolume: %v", err)
	}
	size, err := parseSize("expandvolume's new size", newSize)
	if err != nil {
		return failure("expandvolume %s: %v", vol, err)
	}
	ctx, cancel := d.taskCtx(ctx)
	defer cancel()
	name := DiskName(vol)
	di, err := d.find(ctx, name)
	if err != nil {
		return failure("expandvolume %s: %v", vol, err)
	}
	if di == nil {
		return failure("expandvolume %s: the Director has no disk %s (it is provided at the volume's first attach)", vol, name)
	}
	mib := bytesToMiB(size)
	if di.SizeMiB >= mib {
		d.log.Printf("expandvolume %s: disk %s is %d MiB, %d MiB asked: nothing to do", vol, name, di.SizeMiB, mib)
		return success()
	}
	cid, err := d.deps.Backend.ResizeDynamicDisk(ctx, name, mib)
	if err != nil {
		return failure("expandvolume %s to %d MiB: POST /dynamic_disks/%s/resize: %v", vol, mib, name, err)
	}
	d.log.Printf("expandvolume %s: disk %s is %d MiB (cid %s)", vol, name, mib, cid)
	return success()
}

func (d *Driver) expandFS(ctx context.Context, rawOpts, device, deviceMountPath, newSize string) Result {
	o, err := parseOptions(rawOpts)
	if err != nil {
		return failure("expandfs: %v", err)
	}
	if _, err := parseSize("expandfs's new size", newSize); err != nil {
		return failure("expandfs %s: %v", deviceMountPath, err)
	}
	if _, err := d.resolve(device); err != nil {
		// A resize by copy gives the disk a new CID, and so a new link.
		vol, verr := volumeName(o)
		if verr != nil {
			return failure("expandfs: device %s not found on node %s (%v) and %v", device, d.cfg.Node, err, verr)
		}
		tctx, cancel := d.taskCtx(ctx)
		di, ferr := d.find(tctx, DiskName(vol))
		cancel()
		if ferr != nil || di == nil || di.CID == "" {
			return failure("expandfs %s: device %s not found on node %s (%v), and the Director names no other (%v)", vol, device, d.cfg.Node, err, ferr)
		}
		device = DeviceOf(di.CID)
	}
	if mounted, err := d.isMountPoint(deviceMountPath); err != nil || !mounted {
		return failure("expandfs %s: %s is not mounted on node %s (mountdevice first): %v", device, deviceMountPath, d.cfg.Node, err)
	}
	if _, err := mount.NewResizeFs(d.deps.Exec).Resize(device, deviceMountPath); err != nil {
		return failure("expandfs %s on %s: %v", device, deviceMountPath, err)
	}
	return success()
}
