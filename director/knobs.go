package director

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/cpilab/cpilab/cpiv2"
)

// Knobs are the director's behaviour choices where cpilab deliberately
// differs from the upstream Director: the races of docs/upstream.md and the
// API details where cpilab is stricter or kinder. The zero value is the
// reference (safe) behaviour; each true field restores one upstream
// behaviour. Profile returns the named sets; docs/upstream.md lists every
// field with upstream's file.
type Knobs struct {
	// NoDiskNameLock (races a, b): provide, create, attach, detach and
	// delete take no lock on the disk name. Two concurrent provides of one
	// new name both call create_disk and the loser's IaaS disk leaks (the
	// insert of the second row fails and nothing deletes the disk; two
	// creates both call create_disk too, but the loser deletes its disk, as
	// upstream's create job does); two provides of one unattached disk to
	// two VMs both call attach_disk.
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
	// Reference: those calls are idempotent by contract (the CPI contract;
	// google CPI 280), so an error that leaves the outcome in doubt is
	// retried (InDoubtTries in all), and the retry settles it: the work is
	// done, or DiskNotAttached / DiskNotFound / the existing attachment
	// says it was.
	TrustCPIErrors bool
	// DeleteVMKeepsDisksAttached: DELETE /vms/:cid and the instances of a
	// deployment delete call delete_vm with the instance's disks still
	// attached, even when the agent answers (upstream vm_deleter.rb
	// delete_for_instance with async false: DeleteVmStep alone). The VM's
	// dynamic disk records lose their attachment (the FK's ON DELETE SET
	// NULL). Reference: the CPI detaches every dynamic disk first, and the
	// agent removes its links when it answers.
	DeleteVMKeepsDisksAttached bool
	// DeleteChecksHasDisk: DELETE /dynamic_disks/:name calls has_disk and
	// then delete_disk only when it answered true (upstream
	// delete_dynamic_disk.rb:23); any error of either call fails the task,
	// has_disk's NotImplemented and delete_disk's DiskNotFound included.
	// Reference: delete_disk alone, DiskNotFound taken as done, so no window
	// opens between the two calls.
	DeleteChecksHasDisk bool
	// DetachVMNotFoundFails: a VMNotFound from detach_disk fails the
	// detach, as upstream's detach job rescues only DiskNotAttached
	// (detach_dynamic_disk.rb:35); the record keeps the attachment.
	// Reference: a VM that is gone holds no disk, so the disk is detached.
	DetachVMNotFoundFails bool
	// AttachWithoutHintUnrecorded: an attach_disk answering no hint (a CPI
	// of api_version 1) fails before the attachment is recorded, as
	// upstream's ExternalCpiResponseWrapper raises "No disk_hint" inside the
	// VM lock (clouds/external_cpi_response_wrapper.rb:41): the IaaS holds
	// an attachment the director does not know. Reference: the attachment
	// is recorded, then the task fails at the link, which needs a hint.
	AttachWithoutHintUnrecorded bool
	// TruncateTaskResult: a task's result field is cut to 128 characters
	// at a word boundary, "..." appended (upstream job_runner.rb:134).
	// Reference: the whole message, so a client sees the full error.
	TruncateTaskResult bool
	// TaskDebugNeedsAdmin: GET /tasks/:id/output?type=debug (the default
	// type) and type=cpi need admin (upstream tasks_controller.rb:18).
	// Reference: whoever may read the task may read its debug log.
	TaskDebugNeedsAdmin bool
	// TaskListAsUpstream: GET /tasks shows by default only upstream's
	// verbose-1 task types (no disk task), has no default limit, and takes
	// a limit below 1 or not a number as 1 (tasks_controller.rb:36-62).
	// Reference: every task by default (verbose=1 filters), at most 100,
	// and a limit outside 1..MaxTaskListLimit is refused with 400.
	TaskListAsUpstream bool
	// DiskTasksWithoutDeployment: provide, create and attach tasks record
	// no deployment, so their deployment is null and GET
	// /tasks?deployment= does not find them (upstream's
	// dynamic_disks_controller.rb enqueues without one, job_queue.rb:7).
	// Reference: the deployment of the instance (or of the request).
	DiskTasksWithoutDeployment bool
	// DiskScopesCannotReadTasks: a token holding only dynamic-disk scopes
	// gets 401 on GET /tasks/:id (upstream tasks_controller.rb needs
	// bosh.read or admin). Reference: it may read the tasks it queued, so a
	// disk-only client can follow its own work.
	DiskScopesCannotReadTasks bool
	// AnyDiskName: a disk name is any non-empty string (upstream
	// safe_property min_length 1). Reference: 1 to 255 bytes of printable
	// UTF-8 without path characters, NUL, spaces, "." or ".." (400), since
	// a name is also a path segment of the API.
	AnyDiskName bool
	// MalformedJSONServerError: a request body that is not JSON answers 500
	// with an empty body (upstream's JSON.parse raises outside its
	// DirectorError handling). Reference: 400 naming the body.
	MalformedJSONServerError bool
	// LenientDuplicateKeys: a dynamic disks request body holding a key
	// twice takes the last value, and keys differing only in case are
	// different properties (upstream's JSON.parse). Reference: 400 naming
	// the key, as cpilab refuses ambiguous input.
	LenientDuplicateKeys bool
	// V2InfoErrorMeansV1: speaking CPI as a v2-era Director
	// (cpiv2.ProfileDirectorV2), any error from info means a CPI of
	// api_version 1 (upstream cloud_factory.rb at e98be8082d rescued every
	// error). Reference: only NotImplemented means version 1; any other
	// info error fails the call, since a CPI that cannot answer info is not
	// known to speak version 1. See CPIProfile.
	V2InfoErrorMeansV1 bool
	// LenientCPIWire: read a CPI's output as upstream's Director does: a
	// response with duplicate keys (the last wins) or invalid UTF-8 is
	// accepted, and the call waits until every process holding the CPI's
	// stdout or stderr has closed it (external_cpi.rb, Open3). Reference:
	// such responses are invalid, and the CPI's leftover children are killed
	// WaitDelay after it exits (cpiv2.LenientJSON, cpiv2.WaitForPipes).
	LenientCPIWire bool
	// NoVMReconcile: restart reconciles disks only, as upstream has no
	// record of a create_vm or delete_vm in flight: a kill -9 during
	// "Creating VM" leaks the VM, during "Deleting VM" leaves a record of a
	// VM the cloud deleted. Reference: intents recorded before those calls
	// are settled at start and recorded VMs the cloud lacks are forgotten
	// (Director.Reconcile).
	NoVMReconcile bool
	// NoTaskTakeover: with several processes on one store (Config.Shared),
	// a task whose worker died is never taken over, as upstream (a
	// Delayed::Job worker's task keeps its state; GET /tasks shows it
	// "timeout" once its checkpoint is 6 × 30 s old, tasks_controller.rb):
	// the task ends "timeout" once its lease lapsed, nothing it left in
	// flight is settled, and its locks stay until their own lease
	// (LockLease, upstream's 240 s) expires. Reference: a worker takes the
	// task over, settles its intents and disks under its locks, and fails
	// it with ReasonLeaseLapsed.
	NoTaskTakeover bool
}

// CPIProfile returns the caller profile the director speaks CPI with under
// k: p itself, or for director-v2 with V2InfoErrorMeansV1, p taking any
// info error as api_version 1.
func CPIProfile(k Knobs, p cpiv2.Profile) cpiv2.Profile {
	if k.V2InfoErrorMeansV1 && p.Name == cpiv2.ProfileDirectorV2.Name {
		p.AnyInfoErrorMeansV1 = true
	}
	return p
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
			DeleteVMKeepsDisksAttached:      true,
			DeleteChecksHasDisk:             true,
			DetachVMNotFoundFails:           true,
			AttachWithoutHintUnrecorded:     true,
			TruncateTaskResult:              true,
			TaskDebugNeedsAdmin:             true,
			TaskListAsUpstream:              true,
			DiskTasksWithoutDeployment:      true,
			DiskScopesCannotReadTasks:       true,
			AnyDiskName:                     true,
			MalformedJSONServerError:        true,
			LenientDuplicateKeys:            true,
			V2InfoErrorMeansV1:              true,
			LenientCPIWire:                  true,
			NoVMReconcile:                   true,
			NoTaskTakeover:                  true,
		}, nil
	}
	return Knobs{}, fmt.Errorf("director: unknown profile %q (want %q or %q)", name, ProfileReference, ProfileUpstream)
}

// Set turns one knob on by its field name ("NoTaskTakeover"), on top of a
// profile: what `cpilab director --knob` does. An unknown name is an error
// that lists the knobs.
func (k *Knobs) Set(name string) error {
	v := reflect.ValueOf(k).Elem()
	if f, ok := v.Type().FieldByName(name); ok && f.IsExported() && f.Type.Kind() == reflect.Bool {
		v.FieldByIndex(f.Index).SetBool(true)
		return nil
	}
	return fmt.Errorf("director: unknown knob %q (want one of %v)", name, KnobNames())
}

// KnobNames lists the knobs' field names, sorted.
func KnobNames() []string {
	t := reflect.TypeFor[Knobs]()
	var names []string
	for i := range t.NumField() {
		if f := t.Field(i); f.IsExported() && f.Type.Kind() == reflect.Bool {
			names = append(names, f.Name)
		}
	}
	slices.Sort(names)
	return names
}
