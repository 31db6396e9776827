package csi

// Bugs deliberately break bosh-csi, one realistic mistake each: the
// catalog of buggy CSI drivers (fixtures/csidrivers) is bosh-csi with one
// of them set, and cpilab certify-csi must reject each naming its clause.
// The zero value is the driver as shipped.
type Bugs struct {
	// CreateLeaks: a retried CreateVolume creates another disk (the name
	// gets a counter): volumes leak.
	CreateLeaks bool
	// CreateIgnoresSize: an existing name with an incompatible size is
	// returned instead of AlreadyExists.
	CreateIgnoresSize bool
	// CapacityUnrounded: capacity_bytes is what was asked, not the disk's
	// size as the cloud made it.
	CapacityUnrounded bool
	// DeleteMissingNotFound: deleting a volume that is gone is NotFound
	// (the spec: OK).
	DeleteMissingNotFound bool
	// NotFoundAsInternal: publishing a missing volume is Internal, not
	// NotFound.
	NotFoundAsInternal bool
	// PublishNotIdempotent: publishing a volume to the node it is attached
	// to fails.
	PublishNotIdempotent bool
	// PublishAnyNode, when set, is the instance every publish attaches to,
	// whatever the node id.
	PublishAnyNode string
	// UnpublishKeepsAttached: ControllerUnpublishVolume answers OK and
	// leaves the disk attached.
	UnpublishKeepsAttached bool
	// ListIgnoresMax: ListVolumes ignores max_entries.
	ListIgnoresMax bool
	// ExpandNoResize: ControllerExpandVolume answers the new size without
	// growing the disk.
	ExpandNoResize bool
	// NodeIDNotInstance, when set, is NodeGetInfo's node id (say the
	// hostname) instead of the BOSH instance id.
	NodeIDNotInstance string
	// StageNoWait: NodeStageVolume does not wait for the agent's link.
	StageNoWait bool
	// StageFirstDevice: NodeStageVolume mounts the first disk linked on
	// the node, not the one the publish context names.
	StageFirstDevice bool
	// FormatAlways: NodeStageVolume makes a filesystem even on a disk that
	// has one (data lost).
	FormatAlways bool
	// IgnoreReadOnly: NodePublishVolume mounts read-write when read-only
	// was asked.
	IgnoreReadOnly bool
	// UnstageKeepsMount: NodeUnstageVolume answers OK and leaves the
	// staging mount.
	UnstageKeepsMount bool
	// DirectorDownInternal: a Director that cannot be reached is Internal,
	// not Unavailable (the sidecars then do not retry as they should).
	DirectorDownInternal bool
}

// Variant changes bosh-csi in ways the CSI spec allows (the catalog's
// legal variants, which cpilab certify-csi must accept). The zero value
// is the driver as shipped.
type Variant struct {
	// NoListVolumes: LIST_VOLUMES is not declared and ListVolumes is
	// Unimplemented (the capability is optional).
	NoListVolumes bool
	// SerialController: one controller call at a time, whatever the
	// volume (slower, still correct).
	SerialController bool
	// PublishCIDOnly: the publish context carries the disk's CID alone and
	// the node derives the agent's link from it.
	PublishCIDOnly bool
}
