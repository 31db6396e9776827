package csi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/flexvolume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// VolumePrefix starts the name of every dynamic disk bosh-csi creates:
// ListVolumes lists only those.
const VolumePrefix = "csi-"

const mib = int64(1) << 20

var diskNameBad = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// DiskName is the dynamic disk (and volume id) of a CreateVolume name:
// VolumePrefix and the name, characters other than [A-Za-z0-9_.-] as "-"
// followed by a hash of the name when there were any (two names never
// share a disk).
func DiskName(name string) string {
	clean := diskNameBad.ReplaceAllString(name, "-")
	if clean != name {
		h := sha256.Sum256([]byte(name))
		clean += "-" + hex.EncodeToString(h[:6])
	}
	return VolumePrefix + clean
}

func invalid(format string, a ...any) error {
	return status.Errorf(codes.InvalidArgument, format, a...)
}

// checkCaps accepts the capabilities bosh-csi serves: mount volumes (any
// fs type) accessed from a single node.
func checkCaps(caps []*csi.VolumeCapability) error {
	if len(caps) == 0 {
		return invalid("volume_capabilities are required")
	}
	for _, c := range caps {
		if msg := unsupportedCap(c); msg != "" {
			return invalid("%s", msg)
		}
	}
	return nil
}

// unsupportedCap says why c is not served ("" when it is).
func unsupportedCap(c *csi.VolumeCapability) string {
	if c == nil {
		return "a volume capability is empty"
	}
	if c.GetMount() == nil {
		if c.GetBlock() != nil {
			return "block access is not supported: bosh-csi serves mount volumes"
		}
		return "a volume capability names no access type (mount)"
	}
	switch m := c.GetAccessMode().GetMode(); m {
	case csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER, csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY:
	default:
		return fmt.Sprintf("access mode %s is not supported: a dynamic disk is attached to one VM at a time (SINGLE_NODE_WRITER, SINGLE_NODE_READER_ONLY)", m)
	}
	return ""
}

// sizeMiB is the disk size for a capacity range: the required bytes
// rounded up to MiB (the unit of the Director's disk_size, and of the
// cloud's disks), the default when nothing is required.
func (d *Driver) sizeMiB(r *csi.CapacityRange) (int, error) {
	req, lim := r.GetRequiredBytes(), r.GetLimitBytes()
	if req < 0 || lim < 0 {
		return 0, invalid("capacity_range: required_bytes %d and limit_bytes %d must not be negative", req, lim)
	}
	if lim > 0 && req > lim {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range: required_bytes %d exceed limit_bytes %d", req, lim)
	}
	size := (req + mib - 1) / mib
	if req == 0 {
		size = int64(d.cfg.DefaultSizeMiB)
		if lim > 0 && size*mib > lim {
			size = lim / mib
		}
	}
	if d.bugs.CapacityUnrounded {
		size = max(size, 1)
	}
	if size < 1 || (lim > 0 && size*mib > lim) {
		return 0, status.Errorf(codes.OutOfRange, "capacity_range (required %d, limit %d bytes) holds no whole MiB: the cloud sizes disks in MiB", req, lim)
	}
	return int(size), nil
}

// fits reports whether a disk of sizeMiB satisfies r.
func fits(sizeMiB int, r *csi.CapacityRange) bool {
	b := int64(sizeMiB) * mib
	return b >= r.GetRequiredBytes() && (r.GetLimitBytes() == 0 || b <= r.GetLimitBytes())
}

// azOf picks the AZ from the accessibility requirements: the first
// preferred, else the first requisite, else the default.
func (d *Driver) azOf(tr *csi.TopologyRequirement) (string, error) {
	for _, list := range [][]*csi.Topology{tr.GetPreferred(), tr.GetRequisite()} {
		for _, t := range list {
			if az := t.GetSegments()[TopologyKeyAZ]; az != "" {
				return az, nil
			}
		}
	}
	if len(tr.GetRequisite()) > 0 {
		return "", invalid("accessibility_requirements: no requisite topology names %s", TopologyKeyAZ)
	}
	return d.cfg.DefaultAZ, nil
}

func (d *Driver) volume(di director.DiskInfo, pool, fsType string) *csi.Volume {
	v := &csi.Volume{VolumeId: di.Name, CapacityBytes: int64(di.SizeMiB) * mib,
		VolumeContext: map[string]string{ParamDiskPool: di.DiskPoolName}}
	if pool != "" {
		v.VolumeContext[ParamDiskPool] = pool
	}
	if fsType != "" {
		v.VolumeContext[ParamFSType] = fsType
	}
	if di.AZ != nil && *di.AZ != "" {
		v.AccessibleTopology = []*csi.Topology{{Segments: map[string]string{TopologyKeyAZ: *di.AZ}}}
	}
	return v
}

// find returns the dynamic disk named name (nil: none).
func (d *Driver) find(ctx context.Context, name string) (*director.DiskInfo, error) {
	disks, err := d.deps.Backend.DynamicDisks(ctx)
	if err != nil {
		return nil, d.directorError("GET /dynamic_disks", err)
	}
	for i := range disks {
		if disks[i].Name == name {
			return &disks[i], nil
		}
	}
	return nil, nil
}

// lockedDisk takes the volume's lock and a task deadline and finds the
// dynamic disk of that name (nil: none), the preamble of every call that
// changes a volume. The caller runs done when it has finished.
func (d *Driver) lockedDisk(ctx context.Context, id string) (_ context.Context, _ *director.DiskInfo, done func(), _ error) {
	unlock, err := d.lock(ctx, id)
	if err != nil {
		return nil, nil, nil, status.FromContextError(err).Err()
	}
	ctx, cancel := d.taskCtx(ctx)
	done = func() { cancel(); unlock() }
	di, err := d.find(ctx, id)
	if err != nil {
		done()
		return nil, nil, nil, err
	}
	return ctx, di, done, nil
}

// onInstance reports whether the disk is attached to instance id (the
// list names instances "group/id").
func onInstance(di *director.DiskInfo, id string) bool {
	in := di.InstanceName()
	return in != "" && (in == id || strings.HasSuffix(in, "/"+id))
}

func attached(di *director.DiskInfo) bool { return di.InstanceName() != "" }

// CreateVolume creates the dynamic disk of the volume's name, in the AZ
// the topology asks for; a disk of that name already there is the
// volume when its size fits the range (AlreadyExists otherwise).
func (d *Driver) CreateVolume(ctx context.Context, req *csi.CreateVolumeRequest) (*csi.CreateVolumeResponse, error) {
	if req.GetName() == "" {
		return nil, invalid("CreateVolume: name is required")
	}
	if req.GetVolumeContentSource() != nil {
		return nil, invalid("CreateVolume %s: volume_content_source is not supported (no snapshots, no clones)", req.GetName())
	}
	if err := checkCaps(req.GetVolumeCapabilities()); err != nil {
		return nil, err
	}
	pool, deployment, fsType := d.cfg.DiskPool, d.cfg.Deployment, ""
	for k, v := range req.GetParameters() {
		switch k {
		case ParamDiskPool:
			pool = v
		case ParamDeployment:
			deployment = v
		case ParamFSType, "csi.storage.k8s.io/fstype":
			fsType = v
		default:
			if !strings.HasPrefix(k, "csi.storage.k8s.io/") {
				return nil, invalid("CreateVolume %s: unknown parameter %q (known: %s, %s, %s)", req.GetName(), k, ParamDiskPool, ParamDeployment, ParamFSType)
			}
		}
	}
	if pool == "" {
		return nil, invalid("CreateVolume %s: no disk pool: set parameter %q in the StorageClass or disk_pool in the driver's config", req.GetName(), ParamDiskPool)
	}
	size, err := d.sizeMiB(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	az, err := d.azOf(req.GetAccessibilityRequirements())
	if err != nil {
		return nil, err
	}
	name := DiskName(req.GetName())
	if d.bugs.CreateLeaks {
		name += "-" + strconv.Itoa(int(d.createCount.Add(1)))
	}
	unlock, err := d.lock(ctx, name)
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}
	defer unlock()
	ctx, cancel := d.taskCtx(ctx)
	defer cancel()
	di, err := d.find(ctx, name)
	if err != nil {
		return nil, err
	}
	if di != nil {
		if !fits(di.SizeMiB, req.GetCapacityRange()) && !d.bugs.CreateIgnoresSize {
			return nil, status.Errorf(codes.AlreadyExists, "CreateVolume %s: disk %s exists with %d MiB, which is outside the requested capacity range (required %d, limit %d bytes)",
				req.GetName(), name, di.SizeMiB, req.GetCapacityRange().GetRequiredBytes(), req.GetCapacityRange().GetLimitBytes())
		}
		return &csi.CreateVolumeResponse{Volume: d.volume(*di, pool, fsType)}, nil
	}
	cr := director.CreateDiskRequest{Deployment: deployment, AZ: az, DiskName: name, DiskPoolName: pool, DiskSize: size,
		Metadata: map[string]any{"csi_volume_name": req.GetName(), "csi_driver": DriverName}}
	if _, err := d.deps.Backend.CreateDynamicDisk(ctx, cr); err != nil {
		return nil, d.directorError(fmt.Sprintf("CreateVolume %s: POST /dynamic_disks (disk %s, pool %s, %d MiB, deployment %s, AZ %s)", req.GetName(), name, pool, size, deployment, az), err)
	}
	di, err = d.find(ctx, name)
	if err != nil {
		return nil, err
	}
	if di == nil {
		return nil, status.Errorf(codes.Internal, "CreateVolume %s: the Director created disk %s but does not list it", req.GetName(), name)
	}
	v := d.volume(*di, pool, fsType)
	if d.bugs.CapacityUnrounded && req.GetCapacityRange().GetRequiredBytes() > 0 {
		v.CapacityBytes = req.GetCapacityRange().GetRequiredBytes()
	}
	return &csi.CreateVolumeResponse{Volume: v}, nil
}

// DeleteVolume deletes the disk; a volume that is not there is deleted
// already; one still attached is in use (FailedPrecondition).
func (d *Driver) DeleteVolume(ctx context.Context, req *csi.DeleteVolumeRequest) (*csi.DeleteVolumeResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, invalid("DeleteVolume: volume_id is required")
	}
	ctx, di, done, err := d.lockedDisk(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	if di == nil {
		if d.bugs.DeleteMissingNotFound {
			return nil, status.Errorf(codes.NotFound, "DeleteVolume %s: no such disk", id)
		}
		return &csi.DeleteVolumeResponse{}, nil
	}
	if attached(di) {
		return nil, status.Errorf(codes.FailedPrecondition, "DeleteVolume %s: the disk is attached to instance %s (ControllerUnpublishVolume first)", id, di.InstanceName())
	}
	if err := d.deps.Backend.DeleteDynamicDisk(ctx, id); err != nil {
		return nil, d.directorError(fmt.Sprintf("DeleteVolume %s: DELETE /dynamic_disks/%s", id, id), err)
	}
	return &csi.DeleteVolumeResponse{}, nil
}

// publishContext is what the node needs: the agent's link of the disk
// (Variant.PublishCIDOnly: its CID alone).
func (d *Driver) publishContext(cid string) map[string]string {
	if d.deps.Variant.PublishCIDOnly {
		return map[string]string{PublishDiskCID: cid}
	}
	return map[string]string{PublishDevice: flexvolume.DeviceOf(cid), PublishDiskCID: cid}
}

// ControllerPublishVolume attaches the disk to the node's instance (the
// node id); attached there already is success, attached to another
// instance is FailedPrecondition.
func (d *Driver) ControllerPublishVolume(ctx context.Context, req *csi.ControllerPublishVolumeRequest) (*csi.ControllerPublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	switch {
	case id == "":
		return nil, invalid("ControllerPublishVolume: volume_id is required")
	case node == "":
		return nil, invalid("ControllerPublishVolume %s: node_id is required", id)
	case req.GetVolumeCapability() == nil:
		return nil, invalid("ControllerPublishVolume %s: volume_capability is required", id)
	}
	if msg := unsupportedCap(req.GetVolumeCapability()); msg != "" {
		return nil, invalid("ControllerPublishVolume %s: %s", id, msg)
	}
	ctx, di, done, err := d.lockedDisk(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	if di == nil {
		if d.bugs.NotFoundAsInternal {
			return nil, status.Errorf(codes.Internal, "ControllerPublishVolume %s: failed", id)
		}
		return nil, status.Errorf(codes.NotFound, "ControllerPublishVolume: volume %s does not exist (no dynamic disk of that name)", id)
	}
	if d.bugs.PublishAnyNode != "" {
		node = d.bugs.PublishAnyNode
	}
	if onInstance(di, node) {
		if d.bugs.PublishNotIdempotent {
			return nil, status.Errorf(codes.FailedPrecondition, "ControllerPublishVolume %s: already attached", id)
		}
		return &csi.ControllerPublishVolumeResponse{PublishContext: d.publishContext(di.CID)}, nil
	}
	if attached(di) {
		return nil, status.Errorf(codes.FailedPrecondition, "ControllerPublishVolume %s to node %s: the disk is attached to instance %s (a dynamic disk is attached to one VM at a time)", id, node, di.InstanceName())
	}
	if _, err := d.deps.Backend.AttachDynamicDisk(ctx, id, node, map[string]any{"csi_node_id": node}); err != nil {
		return nil, d.directorError(fmt.Sprintf("ControllerPublishVolume %s to node %s: POST /dynamic_disks/%s/attach", id, node, id), err)
	}
	return &csi.ControllerPublishVolumeResponse{PublishContext: d.publishContext(di.CID)}, nil
}

// ControllerUnpublishVolume detaches the disk from the node's instance;
// a disk not there (or gone) is unpublished already.
func (d *Driver) ControllerUnpublishVolume(ctx context.Context, req *csi.ControllerUnpublishVolumeRequest) (*csi.ControllerUnpublishVolumeResponse, error) {
	id, node := req.GetVolumeId(), req.GetNodeId()
	if id == "" {
		return nil, invalid("ControllerUnpublishVolume: volume_id is required")
	}
	ctx, di, done, err := d.lockedDisk(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	if di == nil || !attached(di) || (node != "" && !onInstance(di, node)) || d.bugs.UnpublishKeepsAttached {
		return &csi.ControllerUnpublishVolumeResponse{}, nil
	}
	if err := d.deps.Backend.DetachDynamicDisk(ctx, id); err != nil {
		return nil, d.directorError(fmt.Sprintf("ControllerUnpublishVolume %s from node %s: POST /dynamic_disks/%s/detach", id, node, id), err)
	}
	return &csi.ControllerUnpublishVolumeResponse{}, nil
}

// ValidateVolumeCapabilities confirms the capabilities bosh-csi serves.
func (d *Driver) ValidateVolumeCapabilities(ctx context.Context, req *csi.ValidateVolumeCapabilitiesRequest) (*csi.ValidateVolumeCapabilitiesResponse, error) {
	id := req.GetVolumeId()
	if id == "" {
		return nil, invalid("ValidateVolumeCapabilities: volume_id is required")
	}
	if len(req.GetVolumeCapabilities()) == 0 {
		return nil, invalid("ValidateVolumeCapabilities %s: volume_capabilities are required", id)
	}
	ctx, cancel := d.taskCtx(ctx)
	defer cancel()
	di, err := d.find(ctx, id)
	if err != nil {
		return nil, err
	}
	if di == nil {
		return nil, status.Errorf(codes.NotFound, "ValidateVolumeCapabilities: volume %s does not exist", id)
	}
	if err := checkCaps(req.GetVolumeCapabilities()); err != nil {
		return &csi.ValidateVolumeCapabilitiesResponse{Message: status.Convert(err).Message()}, nil
	}
	return &csi.ValidateVolumeCapabilitiesResponse{Confirmed: &csi.ValidateVolumeCapabilitiesResponse_Confirmed{
		VolumeContext: req.GetVolumeContext(), VolumeCapabilities: req.GetVolumeCapabilities(), Parameters: req.GetParameters()}}, nil
}

// listToken is the ListVolumes token: the last volume id returned.
const listTokenPrefix = "after:"

// ListVolumes lists the volumes (disks named VolumePrefix…) by id, with
// the node each is published on; the token is the last id returned, so a
// volume deleted between pages loses no other.
func (d *Driver) ListVolumes(ctx context.Context, req *csi.ListVolumesRequest) (*csi.ListVolumesResponse, error) {
	if d.deps.Variant.NoListVolumes {
		return nil, status.Error(codes.Unimplemented, "ListVolumes is not served (LIST_VOLUMES is not declared)")
	}
	if req.GetMaxEntries() < 0 {
		return nil, invalid("ListVolumes: max_entries %d is negative", req.GetMaxEntries())
	}
	after := ""
	if t := req.GetStartingToken(); t != "" {
		if !strings.HasPrefix(t, listTokenPrefix) || !strings.HasPrefix(t[len(listTokenPrefix):], VolumePrefix) {
			return nil, status.Errorf(codes.Aborted, "ListVolumes: starting_token %q is not one ListVolumes gave", t)
		}
		after = t[len(listTokenPrefix):]
	}
	ctx, cancel := d.taskCtx(ctx)
	defer cancel()
	disks, err := d.deps.Backend.DynamicDisks(ctx)
	if err != nil {
		return nil, d.directorError("ListVolumes: GET /dynamic_disks", err)
	}
	sort.Slice(disks, func(i, j int) bool { return disks[i].Name < disks[j].Name })
	resp := &csi.ListVolumesResponse{}
	for _, di := range disks {
		if !strings.HasPrefix(di.Name, VolumePrefix) || di.Name <= after {
			continue
		}
		if n := req.GetMaxEntries(); n > 0 && int32(len(resp.Entries)) == n && !d.bugs.ListIgnoresMax {
			resp.NextToken = listTokenPrefix + resp.Entries[len(resp.Entries)-1].Volume.VolumeId
			break
		}
		e := &csi.ListVolumesResponse_Entry{Volume: d.volume(di, "", ""), Status: &csi.ListVolumesResponse_VolumeStatus{}}
		if in := di.InstanceName(); in != "" {
			e.Status.PublishedNodeIds = []string{in[strings.LastIndex(in, "/")+1:]}
		}
		resp.Entries = append(resp.Entries, e)
	}
	return resp, nil
}

// ControllerGetCapabilities declares what the controller does.
func (d *Driver) ControllerGetCapabilities(context.Context, *csi.ControllerGetCapabilitiesRequest) (*csi.ControllerGetCapabilitiesResponse, error) {
	rpcs := []csi.ControllerServiceCapability_RPC_Type{
		csi.ControllerServiceCapability_RPC_CREATE_DELETE_VOLUME,
		csi.ControllerServiceCapability_RPC_PUBLISH_UNPUBLISH_VOLUME,
	}
	if !d.deps.Variant.NoListVolumes {
		rpcs = append(rpcs, csi.ControllerServiceCapability_RPC_LIST_VOLUMES, csi.ControllerServiceCapability_RPC_LIST_VOLUMES_PUBLISHED_NODES)
	}
	if d.cfg.Resize {
		rpcs = append(rpcs, csi.ControllerServiceCapability_RPC_EXPAND_VOLUME)
	}
	out := &csi.ControllerGetCapabilitiesResponse{}
	for _, r := range rpcs {
		out.Capabilities = append(out.Capabilities, &csi.ControllerServiceCapability{Type: &csi.ControllerServiceCapability_Rpc{
			Rpc: &csi.ControllerServiceCapability_RPC{Type: r}}})
	}
	return out, nil
}

// ControllerExpandVolume grows the disk through the Director's resize
// (declared only when it has one). Expansion is offline: a published
// volume is FailedPrecondition.
func (d *Driver) ControllerExpandVolume(ctx context.Context, req *csi.ControllerExpandVolumeRequest) (*csi.ControllerExpandVolumeResponse, error) {
	id := req.GetVolumeId()
	if !d.cfg.Resize {
		return nil, status.Error(codes.Unimplemented, "ControllerExpandVolume: the Director cannot resize dynamic disks (set resize in the config against a Director that can)")
	}
	if id == "" {
		return nil, invalid("ControllerExpandVolume: volume_id is required")
	}
	if req.GetCapacityRange() == nil {
		return nil, invalid("ControllerExpandVolume %s: capacity_range is required", id)
	}
	size, err := d.sizeMiB(req.GetCapacityRange())
	if err != nil {
		return nil, err
	}
	ctx, di, done, err := d.lockedDisk(ctx, id)
	if err != nil {
		return nil, err
	}
	defer done()
	if di == nil {
		return nil, status.Errorf(codes.NotFound, "ControllerExpandVolume: volume %s does not exist", id)
	}
	if di.SizeMiB >= size || d.bugs.ExpandNoResize {
		return &csi.ControllerExpandVolumeResponse{CapacityBytes: max(int64(di.SizeMiB), int64(size)) * mib, NodeExpansionRequired: true}, nil
	}
	if attached(di) {
		return nil, status.Errorf(codes.FailedPrecondition, "ControllerExpandVolume %s: the disk is attached to instance %s; expansion is offline (unpublish first)", id, di.InstanceName())
	}
	if _, err := d.deps.Backend.ResizeDynamicDisk(ctx, id, size); err != nil {
		return nil, d.directorError(fmt.Sprintf("ControllerExpandVolume %s to %d MiB: POST /dynamic_disks/%s/resize", id, size, id), err)
	}
	return &csi.ControllerExpandVolumeResponse{CapacityBytes: int64(size) * mib, NodeExpansionRequired: true}, nil
}
