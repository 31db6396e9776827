package csi

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/cpilab/cpilab/flexvolume"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mount "k8s.io/mount-utils"
)

// NodeGetInfo names the node by its BOSH instance id, with its AZ.
func (d *Driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	id := d.cfg.Node.InstanceID
	if d.bugs.NodeIDNotInstance != "" {
		id = d.bugs.NodeIDNotInstance
	}
	r := &csi.NodeGetInfoResponse{NodeId: id, MaxVolumesPerNode: d.cfg.MaxVolumesPerNode}
	if d.cfg.Node.AZ != "" {
		r.AccessibleTopology = &csi.Topology{Segments: map[string]string{TopologyKeyAZ: d.cfg.Node.AZ}}
	}
	return r, nil
}

// NodeGetCapabilities declares staging, volume stats and expansion.
func (d *Driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	out := &csi.NodeGetCapabilitiesResponse{}
	for _, t := range []csi.NodeServiceCapability_RPC_Type{csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME,
		csi.NodeServiceCapability_RPC_GET_VOLUME_STATS, csi.NodeServiceCapability_RPC_EXPAND_VOLUME} {
		out.Capabilities = append(out.Capabilities, &csi.NodeServiceCapability{Type: &csi.NodeServiceCapability_Rpc{
			Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return out, nil
}

// hostPath is a node path as the driver's process sees it.
func (d *Driver) hostPath(p string) string {
	if d.root != nil {
		return d.root.Host(p)
	}
	return p
}

func (d *Driver) resolve(p string) (string, error) {
	if d.root != nil {
		return d.root.Resolve(p)
	}
	return filepath.EvalSymlinks(p)
}

// sameDevice reports whether two device paths name one device (the
// agent's link and what it points at are the same device).
func (d *Driver) sameDevice(a, b string) bool {
	ra, errA := d.resolve(a)
	rb, errB := d.resolve(b)
	if errA == nil && errB == nil {
		return ra == rb
	}
	return path.Clean(a) == path.Clean(b)
}

// mountOf returns the mount at node path p (nil: not a mount point).
func (d *Driver) mountOf(p string) (*mount.MountPoint, error) {
	ms, err := d.deps.Mounter.List()
	if err != nil {
		return nil, err
	}
	p = path.Clean(p)
	for i := range ms {
		if path.Clean(ms[i].Path) == p {
			return &ms[i], nil
		}
	}
	return nil, nil
}

// deviceMountOf follows bind mounts from p to the device mount under it.
func (d *Driver) deviceMountOf(p string) (*mount.MountPoint, error) {
	for range 8 {
		m, err := d.mountOf(p)
		if err != nil || m == nil {
			return nil, err
		}
		if !slices.Contains(m.Opts, "bind") {
			return m, nil
		}
		p = m.Device
	}
	return nil, errors.New("too many bind mounts")
}

func (d *Driver) internal(format string, a ...any) error {
	err := status.Errorf(codes.Internal, format, a...)
	d.log.Print(err)
	return err
}

func fsTypeOf(c *csi.VolumeCapability, vctx map[string]string) string {
	if t := c.GetMount().GetFsType(); t != "" {
		return t
	}
	if t := vctx[ParamFSType]; t != "" {
		return t
	}
	return "ext4"
}

// waitDevice waits for the agent's link of the attached disk.
func (d *Driver) waitDevice(ctx context.Context, device string) error {
	// I/O edge: the node plugin is a process on a node, polling the node's
	// filesystem for the agent's link.
	deadline := time.Now().Add(time.Duration(d.cfg.AttachWaitSeconds) * time.Second)
	for {
		_, err := d.resolve(device)
		if err == nil {
			return nil
		}
		if d.bugs.StageNoWait || time.Now().After(deadline) {
			return status.Errorf(codes.DeadlineExceeded, "device %s did not appear on node %s within %ds: %v", device, d.cfg.Node.InstanceID, d.cfg.AttachWaitSeconds, err)
		}
		t := time.NewTimer(25 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return status.FromContextError(ctx.Err()).Err()
		case <-t.C:
		}
	}
}

// NodeStageVolume waits for the disk's link, formats it only when blank
// and mounts it at the staging path.
func (d *Driver) NodeStageVolume(ctx context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	switch {
	case id == "":
		return nil, invalid("NodeStageVolume: volume_id is required")
	case staging == "":
		return nil, invalid("NodeStageVolume %s: staging_target_path is required", id)
	case req.GetVolumeCapability() == nil:
		return nil, invalid("NodeStageVolume %s: volume_capability is required", id)
	}
	if msg := unsupportedCap(req.GetVolumeCapability()); msg != "" {
		return nil, invalid("NodeStageVolume %s: %s", id, msg)
	}
	device := req.GetPublishContext()[PublishDevice]
	if cid := req.GetPublishContext()[PublishDiskCID]; device == "" && cid != "" {
		device = flexvolume.DeviceOf(cid)
	}
	if d.bugs.StageFirstDevice {
		if ents, err := os.ReadDir(d.hostPath(flexvolume.DynamicDisksDir)); err == nil && len(ents) > 0 {
			names := make([]string, len(ents))
			for i, e := range ents {
				names[i] = e.Name()
			}
			sort.Strings(names)
			device = path.Join(flexvolume.DynamicDisksDir, names[0])
		}
	}
	if device == "" {
		return nil, invalid("NodeStageVolume %s: publish_context has neither %s nor %s (ControllerPublishVolume gives them)", id, PublishDevice, PublishDiskCID)
	}
	unlock, err := d.lock(ctx, "node:"+id)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	defer unlock()
	if m, err := d.mountOf(staging); err != nil {
		return nil, d.internal("NodeStageVolume %s: reading mounts: %v", id, err)
	} else if m != nil {
		if !d.sameDevice(m.Device, device) {
			return nil, status.Errorf(codes.AlreadyExists, "NodeStageVolume %s: %s is already a mount of %s, not of %s", id, staging, m.Device, device)
		}
		return &csi.NodeStageVolumeResponse{}, nil
	}
	if err := d.waitDevice(ctx, device); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(d.hostPath(staging), 0o750); err != nil {
		return nil, d.internal("NodeStageVolume %s: %v", id, err)
	}
	fsType := fsTypeOf(req.GetVolumeCapability(), req.GetVolumeContext())
	opts := slices.Clone(req.GetVolumeCapability().GetMount().GetMountFlags())
	if req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY {
		opts = append(opts, "ro")
	}
	if d.bugs.FormatAlways {
		if out, err := d.deps.Exec.Command("mkfs."+fsType, device).CombinedOutput(); err != nil {
			return nil, d.internal("NodeStageVolume %s: mkfs.%s %s: %v: %s", id, fsType, device, err, out)
		}
	}
	if err := d.sfm.FormatAndMount(device, staging, fsType, opts); err != nil {
		return nil, d.internal("NodeStageVolume %s: format and mount %s on %s: %v", id, device, staging, err)
	}
	return &csi.NodeStageVolumeResponse{}, nil
}

// NodeUnstageVolume unmounts the staging path; not mounted is success.
func (d *Driver) NodeUnstageVolume(ctx context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	id, staging := req.GetVolumeId(), req.GetStagingTargetPath()
	switch {
	case id == "":
		return nil, invalid("NodeUnstageVolume: volume_id is required")
	case staging == "":
		return nil, invalid("NodeUnstageVolume %s: staging_target_path is required", id)
	}
	unlock, err := d.lock(ctx, "node:"+id)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	defer unlock()
	if d.bugs.UnstageKeepsMount {
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	if err := d.unmount(staging); err != nil {
		return nil, d.internal("NodeUnstageVolume %s: %v", id, err)
	}
	return &csi.NodeUnstageVolumeResponse{}, nil
}

func (d *Driver) unmount(p string) error {
	m, err := d.mountOf(p)
	if err != nil {
		return err
	}
	if m == nil {
		return nil
	}
	return d.deps.Mounter.Unmount(p)
}

// NodePublishVolume bind-mounts the staging path on the target path,
// read-only when asked.
func (d *Driver) NodePublishVolume(ctx context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	id, target, staging := req.GetVolumeId(), req.GetTargetPath(), req.GetStagingTargetPath()
	switch {
	case id == "":
		return nil, invalid("NodePublishVolume: volume_id is required")
	case target == "":
		return nil, invalid("NodePublishVolume %s: target_path is required", id)
	case req.GetVolumeCapability() == nil:
		return nil, invalid("NodePublishVolume %s: volume_capability is required", id)
	case staging == "":
		return nil, invalid("NodePublishVolume %s: staging_target_path is required (the node stages volumes)", id)
	}
	if msg := unsupportedCap(req.GetVolumeCapability()); msg != "" {
		return nil, invalid("NodePublishVolume %s: %s", id, msg)
	}
	ro := req.GetReadonly() || req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	if d.bugs.IgnoreReadOnly {
		ro = false
	}
	unlock, err := d.lock(ctx, "node:"+id)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	defer unlock()
	if m, err := d.mountOf(staging); err != nil {
		return nil, d.internal("NodePublishVolume %s: reading mounts: %v", id, err)
	} else if m == nil {
		return nil, status.Errorf(codes.FailedPrecondition, "NodePublishVolume %s: staging path %s is not mounted (NodeStageVolume first)", id, staging)
	}
	if m, err := d.mountOf(target); err != nil {
		return nil, d.internal("NodePublishVolume %s: reading mounts: %v", id, err)
	} else if m != nil {
		// The mount table names a bind mount's source by the staging path
		// (vmroot) or by the device under it (/proc/mounts): the options
		// say whether it is the mount asked for.
		if slices.Contains(m.Opts, "ro") != ro {
			return nil, status.Errorf(codes.AlreadyExists, "NodePublishVolume %s: %s is already mounted from %s (options %v), not as asked", id, target, m.Device, m.Opts)
		}
		return &csi.NodePublishVolumeResponse{}, nil
	}
	if err := os.MkdirAll(d.hostPath(target), 0o750); err != nil {
		return nil, d.internal("NodePublishVolume %s: %v", id, err)
	}
	opts := []string{"bind"}
	if ro {
		opts = append(opts, "ro")
	}
	if err := d.deps.Mounter.Mount(staging, target, "", opts); err != nil {
		return nil, d.internal("NodePublishVolume %s: bind %s on %s: %v", id, staging, target, err)
	}
	return &csi.NodePublishVolumeResponse{}, nil
}

// NodeUnpublishVolume unmounts the target path and removes it; not
// mounted or missing is success.
func (d *Driver) NodeUnpublishVolume(ctx context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	id, target := req.GetVolumeId(), req.GetTargetPath()
	switch {
	case id == "":
		return nil, invalid("NodeUnpublishVolume: volume_id is required")
	case target == "":
		return nil, invalid("NodeUnpublishVolume %s: target_path is required", id)
	}
	unlock, err := d.lock(ctx, "node:"+id)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	defer unlock()
	if err := d.unmount(target); err != nil {
		return nil, d.internal("NodeUnpublishVolume %s: %v", id, err)
	}
	if err := os.Remove(d.hostPath(target)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, d.internal("NodeUnpublishVolume %s: removing %s: %v", id, target, err)
	}
	return &csi.NodeUnpublishVolumeResponse{}, nil
}

// NodeGetVolumeStats reports the filesystem's bytes at a mounted volume
// path; a path that is not a mount is NotFound.
func (d *Driver) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	id, p := req.GetVolumeId(), req.GetVolumePath()
	switch {
	case id == "":
		return nil, invalid("NodeGetVolumeStats: volume_id is required")
	case p == "":
		return nil, invalid("NodeGetVolumeStats %s: volume_path is required", id)
	}
	m, err := d.mountOf(p)
	if err != nil {
		return nil, d.internal("NodeGetVolumeStats %s: reading mounts: %v", id, err)
	}
	if m == nil {
		return nil, status.Errorf(codes.NotFound, "NodeGetVolumeStats %s: %s is not a mounted volume on node %s", id, p, d.cfg.Node.InstanceID)
	}
	var total, used int64
	if d.root != nil {
		if total, err = d.root.FSSize(p); err != nil {
			return nil, d.internal("NodeGetVolumeStats %s: %v", id, err)
		}
		_ = filepath.WalkDir(d.hostPath(p)+"/", func(_ string, e fs.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				if fi, err := e.Info(); err == nil {
					used += fi.Size()
				}
			}
			return nil
		})
	} else {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil {
			return nil, d.internal("NodeGetVolumeStats %s: statfs %s: %v", id, p, err)
		}
		total, used = int64(st.Blocks)*st.Bsize, int64(st.Blocks-st.Bfree)*st.Bsize
	}
	return &csi.NodeGetVolumeStatsResponse{Usage: []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: total, Used: used, Available: max(total-used, 0)}}}, nil
}

// NodeExpandVolume grows the filesystem of a mounted volume to its
// disk's size (mount-utils' ResizeFs).
func (d *Driver) NodeExpandVolume(ctx context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	id, p := req.GetVolumeId(), req.GetVolumePath()
	switch {
	case id == "":
		return nil, invalid("NodeExpandVolume: volume_id is required")
	case p == "":
		return nil, invalid("NodeExpandVolume %s: volume_path is required", id)
	}
	unlock, err := d.lock(ctx, "node:"+id)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	defer unlock()
	m, err := d.deviceMountOf(p)
	if err != nil {
		return nil, d.internal("NodeExpandVolume %s: %v", id, err)
	}
	if m == nil {
		return nil, status.Errorf(codes.NotFound, "NodeExpandVolume %s: %s is not a mounted volume on node %s", id, p, d.cfg.Node.InstanceID)
	}
	if _, err := mount.NewResizeFs(d.deps.Exec).Resize(m.Device, m.Path); err != nil {
		return nil, d.internal("NodeExpandVolume %s: resize the filesystem on %s mounted at %s: %v", id, m.Device, m.Path, err)
	}
	var size int64
	if d.root != nil {
		size, _ = d.root.FSSize(m.Path)
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}
