package csisuite

// Clause ids of the CSI driver contract; the final section of
// docs/contracts.md, "CSI drivers", holds each id's text. csi-sanity's own
// specs are reported under ClauseSanity.
const (
	ClauseSanity           = "csi.sanity"
	ClauseNodeID           = "csi.node.id-instance"
	ClauseCreateIdempotent = "csi.create.idempotent"
	ClauseCreateCapacity   = "csi.create.capacity"
	ClauseCreateConflict   = "csi.create.conflict"
	ClauseErrorCodes       = "csi.errors.codes"
	ClausePublishNode      = "csi.publish.node"
	ClausePublishIdem      = "csi.publish.idempotent"
	ClauseUnpublish        = "csi.unpublish.detached"
	ClauseStageWaits       = "csi.node.stage-waits"
	ClauseNodeDevice       = "csi.node.device"
	ClauseFormatBlankOnly  = "csi.data.format-blank-only"
	ClauseDataMoves        = "csi.data.moves"
	ClauseReadOnly         = "csi.node.read-only"
	ClauseLifecycle        = "csi.lifecycle.clean"
	ClauseListPagination   = "csi.list.pagination"
	ClauseExpand           = "csi.expand"
	ClauseDirectorDown     = "csi.fault.director-down"
	ClauseTokenScopes      = "csi.token.disk-scopes"
	ClauseSetup            = "csi.harness.setup"
)

// ClauseTitles are the clauses' one-line statements, as
// docs/contracts.md's CSI section gives them.
var ClauseTitles = map[string]string{
	ClauseSanity:           "every csi-sanity spec that applies to the driver's declared capabilities passes",
	ClauseNodeID:           "NodeGetInfo's node id is the BOSH instance id of the VM the node plugin runs on, with its AZ as topology",
	ClauseCreateIdempotent: "CreateVolume retried with the same name returns the same volume and creates one disk, not two",
	ClauseCreateCapacity:   "CreateVolume's capacity_bytes is the size of the disk the cloud made (the request rounded up as the cloud rounds), within the range",
	ClauseCreateConflict:   "CreateVolume with an existing name and an incompatible capacity → ALREADY_EXISTS; nothing created or changed",
	ClauseErrorCodes:       "a missing volume → NOT_FOUND on publish, OK on delete; an unknown node → NOT_FOUND on publish",
	ClausePublishNode:      "after ControllerPublishVolume the disk is attached to exactly the VM of the node named (the cloud's word), and the publish context lets that node find it",
	ClausePublishIdem:      "ControllerPublishVolume of a volume published to that node → OK with the same publish context",
	ClauseUnpublish:        "after ControllerUnpublishVolume the disk is attached to no VM; unpublish again → OK",
	ClauseStageWaits:       "NodeStageVolume waits for the device of a disk still being attached, instead of failing or mounting something else",
	ClauseNodeDevice:       "the device NodeStageVolume mounts is the disk of the volume staged, not another disk of the node",
	ClauseFormatBlankOnly:  "NodeStageVolume formats only a blank device: data written survives unstage, unpublish, publish and stage",
	ClauseDataMoves:        "data written on one node is read on another after unpublish from the first and publish to the second",
	ClauseReadOnly:         "NodePublishVolume with readonly mounts the target read-only",
	ClauseLifecycle:        "create → publish → stage → publish → unpublish → unstage → unpublish → delete leaves nothing mounted, nothing attached and no disk",
	ClauseListPagination:   "ListVolumes honours max_entries and its next_token lists every volume exactly once",
	ClauseExpand:           "expansion, when declared: after ControllerExpandVolume the cloud disk has the new size, after NodeExpandVolume the filesystem does, data kept",
	ClauseDirectorDown:     "with the Director unreachable, controller calls fail UNAVAILABLE (so the sidecars retry); once it is back, a retry converges",
	ClauseTokenScopes:      "the driver's Director calls are made with a client holding only the bosh.dynamic-disks.* scopes",
	ClauseSetup:            "(harness) the suite can start the driver, reach it and reach the Director",
}

// clauseArea groups the clauses (labels area:…).
var clauseArea = map[string]string{
	ClauseNodeID: "identity", ClauseTokenScopes: "identity",
	ClauseCreateIdempotent: "controller", ClauseCreateCapacity: "controller", ClauseCreateConflict: "controller",
	ClauseErrorCodes: "controller", ClauseListPagination: "controller",
	ClausePublishNode: "attach", ClausePublishIdem: "attach", ClauseUnpublish: "attach",
	ClauseStageWaits: "node", ClauseNodeDevice: "node", ClauseReadOnly: "node", ClauseLifecycle: "node",
	ClauseFormatBlankOnly: "data", ClauseDataMoves: "data", ClauseExpand: "expand", ClauseDirectorDown: "faults",
}
