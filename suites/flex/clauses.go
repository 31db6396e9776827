package flex

// Clause ids of the FlexVolume driver contract; the final section of
// docs/contracts.md, "FlexVolume drivers", holds each id's text. A spec's It text starts with
// its clause id, and every failure names the clause that broke.
const (
	ClauseInstall            = "flex.install.probe"
	ClauseInitCapabilities   = "flex.init.capabilities"
	ClauseOutputOneJSON      = "flex.output.one-json"
	ClauseOutputStatus       = "flex.output.status"
	ClauseOutputExit         = "flex.output.exit"
	ClauseOutputFields       = "flex.output.fields"
	ClauseOutputUnknown      = "flex.output.unknown-call"
	ClauseNotSupportedStable = "flex.output.not-supported-stable"
	ClauseTimeout            = "flex.call.timeout"
	ClauseAttachDevice       = "flex.attach.device"
	ClauseAttachNode         = "flex.attach.node"
	ClauseAttachIdempotent   = "flex.attach.idempotent"
	ClauseAttachExclusive    = "flex.attach.exclusive"
	ClauseDetach             = "flex.detach.idempotent"
	ClauseMountIdempotent    = "flex.mount.idempotent"
	ClauseLifecycle          = "flex.lifecycle.clean"
	ClauseFormatBlankOnly    = "flex.format.blank-only"
	ClauseDataMoves          = "flex.data.moves"
	ClauseFaultDirectorDown  = "flex.fault.director-down"
	ClauseFaultTaskFailed    = "flex.fault.task-failed"
	ClauseMountRacesDetach   = "flex.fault.mount-races-detach"
	ClauseExpand             = "flex.expand"
	ClauseSetup              = "flex.harness.setup"
)

// ClauseTitles are the clauses' one-line statements, as
// docs/contracts.md's FlexVolume section gives them.
var ClauseTitles = map[string]string{
	ClauseInstall:            "installed atomically as <plugindir>/<vendor~driver>/<driver> (dot directory, then rename), the prober finds it and init runs from there with any working directory",
	ClauseInitCapabilities:   "init → Success, exit 0, capabilities with an explicit attach and only keys kubelet knows; the same answer every time",
	ClauseOutputOneJSON:      "every call-out's combined stdout+stderr is exactly one JSON object: logs go to a file",
	ClauseOutputStatus:       "status is exactly Success, Failure or Not supported",
	ClauseOutputExit:         "Success exits 0; Failure exits non-zero and carries a message",
	ClauseOutputFields:       "attach and waitforattach answer a device; isattached answers attached",
	ClauseOutputUnknown:      "an unknown call-out → Not supported",
	ClauseNotSupportedStable: "a call-out answers Not supported always or never (kubelet caches it)",
	ClauseTimeout:            "every call-out ends within its time-out",
	ClauseAttachDevice:       "the device attach returns is the one waitforattach returns, and (BOSH) the disk the cloud attached to that node's VM",
	ClauseAttachNode:         "attach honours its node argument: the disk lands on that node's VM",
	ClauseAttachIdempotent:   "attach of an attached volume to the same node → Success with the same device",
	ClauseAttachExclusive:    "attach of a volume attached to another node → Failure with a message; the volume stays where it was",
	ClauseDetach:             "detach (volume name, node) → Success and the volume is detached; again → Success; of a never-attached volume → Success",
	ClauseMountIdempotent:    "mountdevice, mount, unmount and unmountdevice twice → Success; unmount of a missing directory → Success",
	ClauseLifecycle:          "attach → waitforattach → mountdevice → mount → unmount → unmountdevice → detach leaves nothing mounted, nothing attached, and the directories removable",
	ClauseFormatBlankOnly:    "mountdevice formats only a blank device: data written survives unmountdevice, detach, attach and mountdevice",
	ClauseDataMoves:          "data written on one node is read back on another after detach and attach",
	ClauseFaultDirectorDown:  "with the Director down, attach and detach → Failure with a message and a non-zero exit; once it is back, a retry converges",
	ClauseFaultTaskFailed:    "a Director task that fails (unknown disk pool) → Failure with a message; nothing is attached",
	ClauseMountRacesDetach:   "a detach while mountdevice is in progress leaves the node consistent: never Success from mountdevice, nor a mount, on a disk detached under it",
	ClauseExpand:             "expansion, when declared: after expandvolume the cloud disk has the new size, after expandfs the filesystem on the node does, data kept, both idempotent",
	ClauseSetup:              "(harness) the suite can install the driver and reach the Director",
}
