package director

import "fmt"

// Knobs are the director's behaviour choices behind the upstream races of
// CONTRACTS §7. The zero value is the reference (safe) behaviour; each true
// field reproduces one upstream behaviour. Profile returns the named sets.
type Knobs struct {
	// NoDiskNameLock (races a, b): provide, create, attach, detach and
	// delete take no lock on the disk name. Two concurrent provides of one
	// new name both call create_disk and the loser's IaaS disk leaks (the
	// insert of the second row fails and nothing deletes the disk); two
	// provides of one unattached disk to two VMs both call attach_disk.
	// Reference: the disk-name lock serialises every job on a name and a
	// create whose row insert fails deletes the disk it made.
	NoDiskNameLock bool
	// VMLockPerCPICallOnly (race c): the VM lock wraps single CPI calls
	// only, as upstream commit 9d42661a61. A provide can attach a disk in
	// a recreate's window, after its detach and before delete_vm.
	// Reference: the VM lock is held across the whole job on that VM,
	// recreate included.
	VMLockPerCPICallOnly bool
	// RecreateUnresponsiveSkipsDetach (race d): when the agent does not
	// answer, recreate (and VM delete) calls delete_vm at once, with dynamic
	// disks still attached. Reference: the CPI detaches them first (detach
	// needs no agent), only the agent calls are skipped.
	RecreateUnresponsiveSkipsDetach bool
	// DeleteWithoutDetach (race e): DELETE of an attached dynamic disk calls
	// delete_disk straight away, without the agent's remove_dynamic_disk or
	// detach_disk. Reference: remove the link, detach, then delete.
	DeleteWithoutDetach bool
	// UnlinkBeforeDetach (race f): detach asks the agent to remove the
	// symlink before the CPI detach_disk; a CPI failure leaves the disk
	// attached without a symlink. Reference: detach_disk first, then
	// remove_dynamic_disk, so a CPI failure changes nothing.
	UnlinkBeforeDetach bool
	// NoWaitUntilReadyAfterAttach (race g): add_dynamic_disk is sent right
	// after attach_disk, without waiting for the agent (a CPI that restarts
	// the VM on attach loses the message). Reference: wait_until_ready
	// first.
	NoWaitUntilReadyAfterAttach bool
	// SwallowUnknownMessage (race h): an agent answering "unknown message"
	// to add_dynamic_disk is logged and ignored; provide succeeds with no
	// symlink. Reference: the task fails naming the agent's answer.
	SwallowUnknownMessage bool
	// ZeroDynamicDiskWorkers (race i): no worker serves the dynamic_disks
	// queue (upstream director.dynamic_disks_workers defaults to 0), so disk
	// tasks stay queued forever. Reference: Config.DynamicDiskWorkers
	// workers (default 2).
	ZeroDynamicDiskWorkers bool
	// TrustCPIErrors (bosh 1869): an error from attach_disk, detach_disk
	// or delete_disk is taken at its word: the record is restored and the
	// task fails, although the IaaS may have applied the call and only the
	// response was lost, leaving the director's records and the IaaS apart.
	// Reference: those calls are idempotent by contract (CONTRACTS §3;
	// google CPI 280), so an error that leaves the outcome in doubt is
	// retried (InDoubtTries in all), and the retry settles it: the work is
	// done, or DiskNotAttached / DiskNotFound / the existing attachment
	// says it was.
	TrustCPIErrors bool
	// NoVMReconcile: restart reconciles disks only, as upstream has no
	// record of a create_vm or delete_vm in flight: a kill -9 during
	// "Creating VM" leaks the VM, during "Deleting VM" leaves a record of a
	// VM the cloud deleted. Reference: intents recorded before those calls
	// are settled at start and recorded VMs the cloud lacks are forgotten
	// (Director.Reconcile).
	NoVMReconcile bool
}

// Profile names.
const (
	ProfileReference = "reference"
	ProfileUpstream  = "upstream"
)

// Profile returns the knobs of a named profile: "reference" (all false:
// safe) or "upstream" (all true: what the upstream Director does).
func Profile(name string) (Knobs, error) {
	switch name {
	case "", ProfileReference:
		return Knobs{}, nil
	case ProfileUpstream:
		return Knobs{
			NoDiskNameLock:                  true,
			VMLockPerCPICallOnly:            true,
			RecreateUnresponsiveSkipsDetach: true,
			DeleteWithoutDetach:             true,
			UnlinkBeforeDetach:              true,
			NoWaitUntilReadyAfterAttach:     true,
			SwallowUnknownMessage:           true,
			ZeroDynamicDiskWorkers:          true,
			TrustCPIErrors:                  true,
			NoVMReconcile:                   true,
		}, nil
	}
	return Knobs{}, fmt.Errorf("director: unknown profile %q (want %q or %q)", name, ProfileReference, ProfileUpstream)
}
