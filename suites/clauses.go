package suites

// The clauses the specs cite. Each It text starts with its clause, and each
// failure names the clause that broke (which may be a wire clause of §1
// when the call that showed it was about something else).
const (
	ClauseProtocol   = "CONTRACTS §1: one JSON object on stdout with result, error ({type, message, ok_to_retry: bool} or null) and log (a string); result null beside an error"
	ClauseExitStatus = "CONTRACTS §1: exit status 0, even with an error object (the bosh CLI fails the call otherwise)"
	ClauseTimeout    = "CONTRACTS §1: the CPI answers and exits (within the call timeout)"
	ClauseRun        = "CONTRACTS §1: the CPI executable runs (one process per call)"
	ClauseParallel   = "CONTRACTS §1: calls for different resources run in parallel (each its own process) without crossed results"

	ClauseInfo          = "CONTRACTS §2: info returns {stemcell_formats: [...], api_version: N (v2+)}"
	ClauseStemcell      = "CONTRACTS §2: create_stemcell returns a stemcell_cid, delete_stemcell null"
	ClauseCreateVM      = "CONTRACTS §2/§4: create_vm returns a vm_cid at api_version 1 and [vm_cid, networks] at 2+"
	ClauseHasVM         = "CONTRACTS §2: has_vm is true after create_vm and false after delete_vm"
	ClauseHasDisk       = "CONTRACTS §2: has_disk is true after create_disk and false after delete_disk"
	ClauseGetDisks      = "CONTRACTS §2: get_disks returns an array (never null) holding exactly the attached disks"
	ClauseAttachHint    = "CONTRACTS §2/§4: attach_disk returns null at api_version 1 and a non-empty disk hint with string values at 2+"
	ClauseDetach        = "CONTRACTS §2: detach_disk returns null and the disk is really detached"
	ClauseRebootVM      = "CONTRACTS §2: reboot_vm returns null and the VM still exists"
	ClauseVMMetadata    = "CONTRACTS §2: set_vm_metadata returns null and the metadata is really set"
	ClauseDiskMetadata  = "CONTRACTS §2: set_disk_metadata returns null and the metadata is really set"
	ClauseCalculate     = "CONTRACTS §2: calculate_vm_cloud_properties returns a cloud_properties hash"
	ClauseResize        = "CONTRACTS §2/§3: resize_disk of a detached disk returns null and really changes the size (or NotSupported)"
	ClauseUpdateDisk    = "CONTRACTS §2/§3: update_disk returns a disk_cid or null and really changes the size (or NotSupported)"
	ClauseSnapshot      = "CONTRACTS §2: snapshot_disk returns a snapshot_cid, delete_snapshot null"
	ClauseVMLocality    = "CONTRACTS §2: create_disk accepts a VM CID as locality hint and returns a disk_cid"
	ClauseAttachTwice   = "CONTRACTS §7: attach_disk of a disk already attached to that VM succeeds (idempotent; google CPI 280)"
	ClauseUnknownMethod = "CONTRACTS §3: an unknown method → NotImplemented"
	ClauseMalformed     = "CONTRACTS §3: a malformed request → an error object (CpiError or InvalidCall), never a crash"
	ClauseDeleteVMGone  = "CONTRACTS §3: delete_vm of a missing VM → VMNotFound or success"
	ClauseDeleteDisk    = "CONTRACTS §3: delete_disk of a missing disk → DiskNotFound or success, never a generic CloudError"
	ClauseDetachTwice   = "CONTRACTS §3: detach_disk of a detached disk → DiskNotAttached or success"
	ClauseKnownTypes    = "CONTRACTS §3: every error type is one the Director knows"
	ClauseRetry         = "CONTRACTS §3: a transient create_vm failure → VMCreationFailed with ok_to_retry, and the Director's retry succeeds without leaking a VM"

	ClauseVersionCap    = "docs/seams.md cpi.json: debug.cpi.api_version caps the api_version info reports"
	ClauseRefused       = "CONTRACTS §4: the current Director refuses a CPI without api_version ≥ 2, with a clear error"
	ClauseNoRegistry    = "CONTRACTS §4: without a registry, create_vm on a stemcell 1 fails clearly (a known error type and a message) and leaves no VM"
	ClauseTableRegistry = "CONTRACTS §4: the registry is updated exactly as the reference table says"
	ClauseTableUserData = "CONTRACTS §4: agent settings are in the IaaS user-data exactly as the reference table says"
	ClauseAgentPing     = "CONTRACTS §4/§5: the agent boots from the settings the CPI wrote and answers ping over the mbus"
	ClauseAgentDisk     = "CONTRACTS §5: the agent resolves the disk hint (add_persistent_disk, mount_disk, add_dynamic_disk)"
	ClauseSymlink       = "CONTRACTS §5: /var/vcap/data/dynamic_disks/<disk_cid> on the VM leads to the attached disk"
	ClauseDataMoves     = "CONTRACTS §2: data written on a disk is read back on another VM after detach_disk and attach_disk"
	ClauseNoLeak        = "CONTRACTS §2: after clean-up no VM, disk, stemcell or snapshot is left behind"
)
