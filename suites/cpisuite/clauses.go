package cpisuite

import "github.com/cpilab/cpilab/suites"

// The clauses the specs cite, by stable id (lowercase, dotted: area, then
// name). Each id is documented in docs/contracts.md with what cpilab checks,
// how each caller profile reacts and the upstream source; a test keeps the
// two in step. Every It text starts with "<id>: <title>", and every failure
// names the id of the clause that broke (which may be a wire clause when
// the call that showed it was about something else).
const (
	ClauseProtocol     = "wire.one-object"
	ClauseExitStatus   = "wire.exit-status"
	ClauseTimeout      = "wire.answers"
	ClauseRun          = "wire.runs"
	ClauseParallel     = "wire.parallel"
	ClauseLargeRequest = "wire.large-request"
	ClauseSecrets      = "secrets.not-printed"

	ClauseInfo           = "info.shape"
	ClauseInfoVersion    = "info.api-version"
	ClauseStemcell       = "stemcell.create-delete"
	ClauseStemcellTruth  = "stemcell.exists"
	ClauseCreateVM       = "vm.create-shape"
	ClauseVMAsAsked      = "vm.create-as-asked"
	ClauseHasVM          = "vm.has-vm"
	ClauseDeleteVMDisks  = "vm.delete-keeps-disks"
	ClauseVMDiskLocality = "vm.create-disk-locality"
	ClauseRebootVM       = "vm.reboot"
	ClauseVMMetadata     = "vm.metadata"
	ClauseCalculate      = "vm.cloud-properties"
	ClauseVMResources    = "vm.resources"
	ClauseRetry          = "vm.create-retry"
	ClauseHasDisk        = "disk.has-disk"
	ClauseCreateDisk     = "disk.create-as-asked"
	ClauseVMLocality     = "disk.create-locality"
	ClauseGetDisks       = "disk.get-disks"
	ClauseAttachHint     = "disk.attach-hint"
	ClauseHintDevice     = "disk.attach-hint-device"
	ClauseAttachTwice    = "disk.attach-idempotent"
	ClauseDetach         = "disk.detach"
	ClauseDiskMetadata   = "disk.metadata"
	ClauseResize         = "disk.resize"
	ClauseUpdateDisk     = "disk.update"
	ClauseSnapshot       = "snapshot.create-delete"
	ClauseUnreadResult   = "results.unread"

	ClauseUnknownMethod  = "errors.unknown-method"
	ClauseMalformed      = "errors.malformed"
	ClauseDeleteVMGone   = "errors.delete-vm-missing"
	ClauseDeleteDisk     = "errors.delete-disk-missing"
	ClauseDeleteSnapshot = "errors.delete-snapshot-missing"
	ClauseDetachTwice    = "errors.detach-not-attached"
	ClauseAttachGone     = "errors.attach-disk-missing"
	ClauseAttachVMGone   = "errors.attach-vm-missing"
	ClauseMetadataGone   = "errors.vm-metadata-missing"
	ClauseKnownTypes     = "errors.known-types"

	ClauseVersionCap      = "version.cap"
	ClauseRefused         = "version.refused"
	ClauseRequiredVersion = "version.required"

	ClauseNoRegistry    = "table.no-registry"
	ClauseTableRegistry = "table.registry"
	ClauseTableUserData = "table.user-data"
	ClauseAgentSettings = "table.settings"
	ClauseAgentPing     = "agent.ping"
	ClauseAgentDisk     = "agent.disk"
	ClauseSymlink       = "agent.link"
	ClauseDataMoves     = "data.moves"

	ClauseSetup    = "setup.context"
	ClauseTeardown = "cleanup.teardown"
	ClauseNoLeak   = "cleanup.no-leak"
)

// ClauseDoc describes one clause.
type ClauseDoc struct {
	// ID is the stable id, e.g. "errors.delete-disk-missing".
	ID string
	// Title says in one line what the clause asks of a CPI.
	Title string
}

// AllClauses is every clause the suites cite, in the order of
// docs/contracts.md.
var AllClauses = []ClauseDoc{
	{ClauseProtocol, "one JSON object on stdout with result, error ({type, message, ok_to_retry: bool} or null) and log (a string)"},
	{ClauseExitStatus, "exit status 0, even with an error object (the bosh CLI fails the call otherwise)"},
	{ClauseTimeout, "the CPI answers and exits within the call timeout"},
	{ClauseRun, "the CPI executable runs, one process per call"},
	{ClauseParallel, "calls for different resources run in parallel, each its own process, without crossed results"},
	{ClauseLargeRequest, "a request of hundreds of KiB (create_vm with a Director's env) is read whole and its env reaches the agent whole"},

	{ClauseInfo, "info returns {stemcell_formats: [...], api_version: N}"},
	{ClauseInfoVersion, "info's api_version is an integer the caller can use (and at least the version required)"},
	{ClauseStemcell, "create_stemcell returns a stemcell_cid, delete_stemcell null"},
	{ClauseStemcellTruth, "the stemcell create_stemcell named exists in the IaaS"},
	{ClauseCreateVM, "create_vm returns a vm_cid at api_version 1 and [vm_cid, networks] at 2+"},
	{ClauseVMAsAsked, "the VM create_vm made holds the cloud_properties asked for"},
	{ClauseHasVM, "has_vm is true after create_vm and false after delete_vm; the IaaS agrees"},
	{ClauseDeleteVMDisks, "delete_vm of a VM with persistent disks attached removes the VM and keeps every disk and its data"},
	{ClauseVMDiskLocality, "create_vm given disk_cids (a disk still attached to another VM) succeeds and leaves the disk where it is"},
	{ClauseRebootVM, "reboot_vm succeeds and the VM still exists"},
	{ClauseVMMetadata, "set_vm_metadata succeeds and the metadata is really set"},
	{ClauseCalculate, "calculate_vm_cloud_properties returns a cloud_properties hash"},
	{ClauseVMResources, "create_vm with what calculate_vm_cloud_properties returned for {cpu, ram, ephemeral_disk_size} makes a VM with at least that much of each"},
	{ClauseRetry, "a transient create_vm failure is VMCreationFailed with ok_to_retry, and the Director's retry succeeds without leaking a VM"},
	{ClauseHasDisk, "has_disk is true after create_disk and false after delete_disk"},
	{ClauseCreateDisk, "create_disk makes a disk of the size and cloud_properties asked for"},
	{ClauseVMLocality, "create_disk accepts a VM CID as locality hint and returns a disk_cid"},
	{ClauseGetDisks, "get_disks returns an array (never null) holding exactly the attached disks"},
	{ClauseAttachHint, "attach_disk returns null at api_version 1 and a non-empty disk hint with string values at 2+"},
	{ClauseHintDevice, "attach_disk's hint names the device the IaaS attached for that disk"},
	{ClauseAttachTwice, "attach_disk of a disk already attached to that VM succeeds (idempotent)"},
	{ClauseDetach, "detach_disk succeeds and the disk is really detached"},
	{ClauseDiskMetadata, "set_disk_metadata succeeds and the metadata is really set"},
	{ClauseResize, "resize_disk of a detached disk really changes the size (or NotSupported)"},
	{ClauseUpdateDisk, "update_disk returns a disk_cid or null and really changes the size (or NotSupported)"},
	{ClauseSnapshot, "snapshot_disk returns a snapshot_cid that exists, of the disk it was given; delete_snapshot removes it and keeps the disk"},
	{ClauseSecrets, "no credential of the CPI's config appears in its log, stderr, error messages or results, plain or encoded"},
	{ClauseUnreadResult, "results no caller reads (reboot_vm, delete_*, set_*_metadata, detach_disk) should be null (a warning, never a failure)"},

	{ClauseUnknownMethod, "an unknown method → NotImplemented (or an older library's answer callers take as NotImplemented)"},
	{ClauseMalformed, "a malformed request → an error object (CloudError, CpiError or InvalidCall), never a crash"},
	{ClauseDeleteVMGone, "delete_vm of a missing VM → success or VMNotFound"},
	{ClauseDeleteDisk, "delete_disk of a missing disk → success or DiskNotFound, never a generic CloudError"},
	{ClauseDeleteSnapshot, "delete_snapshot of a missing snapshot → success or the not-found type, never a generic CloudError"},
	{ClauseDetachTwice, "detach_disk of a detached disk → success or DiskNotAttached"},
	{ClauseAttachGone, "attach_disk of a deleted disk fails with a typed error"},
	{ClauseAttachVMGone, "attach_disk to a deleted VM fails with a typed error and attaches nothing"},
	{ClauseMetadataGone, "set_vm_metadata of a deleted VM fails with a typed error"},
	{ClauseKnownTypes, "every error type is one the Director knows"},

	{ClauseVersionCap, "debug.cpi.api_version in the CPI config caps the api_version info reports"},
	{ClauseRefused, "the current Director refuses a CPI without api_version ≥ 2, with a clear error"},
	{ClauseRequiredVersion, "the CPI reports at least the api_version certify was asked to require"},

	{ClauseNoRegistry, "without a registry, create_vm on a stemcell 1 fails clearly (a known error type and a message) and leaves no VM"},
	{ClauseTableRegistry, "the registry is updated exactly as the reference table says"},
	{ClauseTableUserData, "agent settings are in the IaaS user-data exactly as the reference table says"},
	{ClauseAgentSettings, "the agent settings carry the agent_id, the env and the networks create_vm was given"},
	{ClauseAgentPing, "the agent boots from the settings the CPI wrote and answers ping over the mbus"},
	{ClauseAgentDisk, "the agent finds the disk through the hint (add_persistent_disk, mount_disk, add_dynamic_disk)"},
	{ClauseSymlink, "/var/vcap/data/dynamic_disks/<disk_cid> on the VM leads to the device the IaaS attached"},
	{ClauseDataMoves, "data written on a disk is read back on another VM after detach_disk and attach_disk"},

	{ClauseModelEffect, "a successful call has its effect on the object it names (size, cloud_properties, metadata, attachment, snapshot source, tags) and not on another"},
	{ClauseModelFrame, "a call changes nothing it was not asked to change: other VMs, disks, attachments, devices, metadata, snapshots, stemcells"},
	{ClauseModelFailedCall, "a call that fails creates nothing (a caller that got an error never learns the CID)"},
	{ClauseModelAnswers, "answers agree with the cloud and with the request: has_vm, has_disk, get_disks, the CIDs create_* return, create_vm's networks"},
	{ClauseModelRegistry, "the agent settings in the registry follow the VM's attachments, are not touched for other VMs, and go with the VM"},

	{ClauseSetup, "the setup succeeds: info and, in contract contexts, the shared stemcell, VMs and disks"},
	{ClauseTeardown, "the context's teardown deletes what it shared"},
	{ClauseNoLeak, "after clean-up no VM, disk, stemcell or snapshot is left behind"},
}

// ClauseTitle returns the title of clause id ("" when unknown).
func ClauseTitle(id string) string { return ClauseTitles[id] }

// ClauseText is "<id>: <title>", as spec names and failures show a clause.
func ClauseText(id string) string { return suites.TitledClause(id, ClauseTitles) }

// ClauseOf returns the clause id a spec text or a clause text starts with
// ("" when none).
func ClauseOf(text string) string { return suites.ClauseIn(text, ClauseTitles) }

// ClauseTitles are AllClauses by id, as the shared reports take a suite's
// clauses (suites.ReportRun.ClauseTitles).
var ClauseTitles = func() map[string]string {
	m := make(map[string]string, len(AllClauses))
	for _, c := range AllClauses {
		m[c.ID] = c.Title
	}
	return m
}()
