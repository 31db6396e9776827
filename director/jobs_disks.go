package director

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director/store"
)

// ProvideRequest is POST /dynamic_disks/provide's body (CONTRACTS §6).
type ProvideRequest struct {
	DiskName     string            `json:"disk_name"`
	DiskSize     int               `json:"disk_size"` // MiB; 0: the disk type's disk_size
	DiskPoolName string            `json:"disk_pool_name"`
	InstanceID   string            `json:"instance_id"`
	Metadata     map[string]string `json:"metadata,omitempty"`
}

// CreateDiskRequest is POST /dynamic_disks's body: create without attaching.
// InstanceID (locality and deployment) or Deployment is required.
type CreateDiskRequest struct {
	DiskName     string            `json:"disk_name"`
	DiskSize     int               `json:"disk_size"`
	DiskPoolName string            `json:"disk_pool_name"`
	InstanceID   string            `json:"instance_id,omitempty"`
	Deployment   string            `json:"deployment_name,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
}

// AttachRequest is POST /dynamic_disks/:disk_name/attach (DiskName from the
// path, InstanceID from the body).
type AttachRequest struct {
	DiskName   string `json:"disk_name"`
	InstanceID string `json:"instance_id"`
}

// diskNameArgs names one disk (detach, delete).
type diskNameArgs struct {
	DiskName string `json:"disk_name"`
}

// DiskResult is the task result of provide, create, attach, detach and
// delete: {"disk_cid": …} ("" when delete found no disk).
type DiskResult struct {
	DiskCID string `json:"disk_cid"`
}

// ErrDiskAttachedElsewhere is wrapped by provide and attach when the disk is
// attached to another VM.
var ErrDiskAttachedElsewhere = errors.New("disk is attached to another VM")

func (j *job) provideDynamicDisk(req ProvideRequest) (any, error) {
	return j.ensureAttached(req, true)
}

func (j *job) attachDynamicDisk(req AttachRequest) (any, error) {
	return j.ensureAttached(ProvideRequest{DiskName: req.DiskName, InstanceID: req.InstanceID}, false)
}

// ensureAttached makes disk req.DiskName attached to req.InstanceID's VM,
// creating it first when mayCreate (provide) and it does not exist.
func (j *job) ensureAttached(req ProvideRequest, mayCreate bool) (any, error) {
	d := j.d
	inst, err := d.instance(req.InstanceID)
	if err != nil {
		return nil, err
	}
	if err := j.step("Locking", req.DiskName, func() error {
		return j.lock(d.cfg.VMLockTimeout, append(j.diskLockNames(req.DiskName), j.vmLockNames(inst.ID)...)...)
	}); err != nil {
		return nil, err
	}
	if inst, err = d.instance(req.InstanceID); err != nil { // the VM may have changed while we waited
		return nil, err
	}
	if inst.VMCID == "" {
		return nil, unprocessable("instance %q has no VM", inst.ID)
	}
	vm, ok, err := d.vm(inst.VMCID)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, unprocessable("instance %q: VM %s is not known", inst.ID, inst.VMCID)
	}
	dd, exists, err := d.dynamicDisk(req.DiskName)
	if err != nil {
		return nil, err
	}
	if exists && dd.State != DiskReady {
		return nil, conflict("dynamic disk %q is %s (task %d)", dd.Name, dd.State, dd.TaskID)
	}
	switch {
	case exists && dd.Attached() && dd.VMCID != vm.CID:
		return nil, fmt.Errorf("dynamic disk %q (%s): %w %s of instance %s", dd.Name, dd.CID, ErrDiskAttachedElsewhere, dd.VMCID, dd.InstanceID)
	case exists && dd.Attached():
		j.debugf("disk %s already attached to %s: idempotent", dd.CID, vm.CID)
	case exists:
		if err := j.attach(&dd, inst, vm); err != nil {
			return nil, err
		}
	case !mayCreate:
		return nil, notFound("dynamic disk %q not found", req.DiskName)
	default:
		dd, err = j.createDisk(diskSpec{name: req.DiskName, pool: req.DiskPoolName, sizeMiB: req.DiskSize,
			deployment: inst.Deployment, az: inst.AZ, vm: vm})
		if err != nil {
			return nil, err
		}
		if err := j.attach(&dd, inst, vm); err != nil {
			return nil, err
		}
	}
	if err := j.setMetadata(&dd, req.Metadata, vm.StemcellAPIVersion); err != nil {
		return nil, err
	}
	if err := j.link(vm, dd); err != nil {
		return nil, err
	}
	return DiskResult{DiskCID: dd.CID}, nil
}

func (j *job) createDynamicDisk(req CreateDiskRequest) (any, error) {
	d := j.d
	spec := diskSpec{name: req.DiskName, pool: req.DiskPoolName, sizeMiB: req.DiskSize, deployment: req.Deployment}
	if req.InstanceID != "" {
		inst, err := d.instance(req.InstanceID)
		if err != nil {
			return nil, err
		}
		spec.deployment, spec.az = inst.Deployment, inst.AZ
		if inst.VMCID != "" {
			if vm, ok, err := d.vm(inst.VMCID); err == nil && ok {
				spec.vm = vm
			}
		}
	}
	if err := j.step("Locking", req.DiskName, func() error {
		return j.lock(d.cfg.VMLockTimeout, j.diskLockNames(req.DiskName)...)
	}); err != nil {
		return nil, err
	}
	dd, exists, err := d.dynamicDisk(req.DiskName)
	if err != nil {
		return nil, err
	}
	if exists {
		if dd.State != DiskReady {
			return nil, conflict("dynamic disk %q is %s (task %d)", dd.Name, dd.State, dd.TaskID)
		}
		j.debugf("disk %q exists as %s: idempotent", dd.Name, dd.CID)
		return DiskResult{DiskCID: dd.CID}, nil
	}
	if dd, err = j.createDisk(spec); err != nil {
		return nil, err
	}
	if err := j.setMetadata(&dd, req.Metadata, spec.vm.StemcellAPIVersion); err != nil {
		return nil, err
	}
	return DiskResult{DiskCID: dd.CID}, nil
}

type diskSpec struct {
	name, pool     string
	sizeMiB        int
	deployment, az string
	vm             VM // locality; zero for none
}

// createDisk calls create_disk and records the disk, unattached. In the
// reference behaviour an intent row (state creating) is written first, under
// the disk-name lock, so a crash leaves a trace; with NoDiskNameLock the
// row is inserted after create_disk, as upstream, and a lost insert race
// leaks the IaaS disk.
func (j *job) createDisk(s diskSpec) (DynamicDisk, error) {
	d := j.d
	cc, err := d.cloudConfig()
	if err != nil {
		return DynamicDisk{}, err
	}
	dt, ok := cc.diskType(s.pool)
	if !ok {
		return DynamicDisk{}, unprocessable("disk pool %q is not a disk_type of the cloud config", s.pool)
	}
	size := s.sizeMiB
	if size == 0 {
		size = dt.DiskSize
	}
	if size <= 0 {
		return DynamicDisk{}, badField("disk_size", "must be > 0 MiB (disk type %q has no disk_size)", s.pool)
	}
	dd := DynamicDisk{Name: s.name, Deployment: s.deployment, DiskPoolName: s.pool, SizeMiB: size, AZ: s.az,
		State: DiskCreating, TaskID: j.task.ID}
	ref := !j.knobs().NoDiskNameLock
	if ref {
		if err := j.update(func(tx store.Tx) error { return tx.Insert(store.DynamicDisks, s.name, dd) }); err != nil {
			if errors.Is(err, store.ErrExists) {
				return DynamicDisk{}, conflict("dynamic disk %q already exists", s.name)
			}
			return DynamicDisk{}, err
		}
	}
	var cid cpiv2.DiskCID
	err = j.step("Creating disk", s.name, func() error {
		var vmCID cpiv2.VMCID
		if s.vm.CID != "" {
			vmCID = cpiv2.MustCID[cpiv2.VMKind](s.vm.CID)
		}
		var err error
		cid, err = d.cfg.CPI.CreateDisk(j.cpiCtx(s.vm.StemcellAPIVersion), cpiv2.CreateDiskArgs{
			SizeMiB: size, CloudProperties: cloudProps(dt.CloudProperties), VMCID: vmCID})
		return err
	})
	if err != nil {
		if ref {
			_ = j.update(func(tx store.Tx) error { return tx.Delete(store.DynamicDisks, s.name) })
		}
		return DynamicDisk{}, fmt.Errorf("create_disk for %q: %w", s.name, err)
	}
	dd.CID, dd.State, dd.TaskID = cid.String(), DiskReady, 0
	j.debugf("created disk %s for %q", cid, s.name)
	if ref {
		err = j.update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, s.name, dd) })
	} else {
		err = j.update(func(tx store.Tx) error { return tx.Insert(store.DynamicDisks, s.name, dd) })
	}
	if err != nil {
		if ref {
			// Delete what we made rather than leak it.
			if derr := d.cfg.CPI.DeleteDisk(j.cpiCtx(0), cid); derr != nil && !errors.Is(derr, cpiv2.ErrDiskNotFound) {
				j.debugf("delete_disk %s after failed record: %v", cid, derr)
			}
		} else {
			j.debugf("disk %s created but not recorded (leaked): %v", cid, err)
		}
		return DynamicDisk{}, fmt.Errorf("record dynamic disk %q: %w", s.name, err)
	}
	return dd, nil
}

// attach calls attach_disk and records the attachment and hint.
func (j *job) attach(dd *DynamicDisk, inst Instance, vm VM) error {
	d := j.d
	ref := !j.knobs().NoDiskNameLock
	if ref {
		at := *dd
		at.State, at.VMCID, at.InstanceID, at.TaskID = DiskAttaching, vm.CID, inst.ID, j.task.ID
		if err := j.update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, at) }); err != nil {
			return err
		}
	}
	var hint cpiv2.DiskHint
	vmCID, diskCID := cpiv2.MustCID[cpiv2.VMKind](vm.CID), cpiv2.MustCID[cpiv2.DiskKind](dd.CID)
	err := j.step("Attaching disk", fmt.Sprintf("%s to %s", dd.CID, vm.CID), func() error {
		return j.vmCall(inst.ID, func() error {
			return j.settle("attach_disk", func() error {
				var err error
				hint, err = d.cfg.CPI.AttachDisk(j.cpiCtx(vm.StemcellAPIVersion), vmCID, diskCID)
				return err
			})
		})
	})
	if err != nil {
		if ref {
			// A CPI may have attached before failing (bosh 1869): undo so
			// the record (detached) holds.
			if derr := j.settle("detach_disk", func() error {
				return d.cfg.CPI.DetachDisk(j.cpiCtx(vm.StemcellAPIVersion), vmCID, diskCID)
			}); derr != nil && !errors.Is(derr, cpiv2.ErrDiskNotAttached) {
				j.debugf("detach_disk after failed attach: %v", derr)
			}
			back := *dd
			_ = j.update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, back) })
		}
		return fmt.Errorf("attach_disk %s to %s: %w", dd.CID, vm.CID, err)
	}
	dd.State, dd.VMCID, dd.InstanceID, dd.TaskID, dd.Hint = DiskReady, vm.CID, inst.ID, 0, nil
	if !hint.IsZero() {
		b, err := json.Marshal(hint)
		if err != nil {
			return fmt.Errorf("encode disk hint: %w", err)
		}
		dd.Hint = b
	}
	rec := *dd
	return j.update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, rec) })
}

// setMetadata calls set_disk_metadata when meta is new or changed.
func (j *job) setMetadata(dd *DynamicDisk, meta map[string]string, stemcellAPI int) error {
	if len(meta) == 0 || maps.Equal(meta, dd.Metadata) {
		return nil
	}
	intent := Intent{Op: IntentSetDiskMetadata, DiskCID: dd.CID, DiskName: dd.Name, Metadata: maps.Clone(meta),
		StemcellAPIVersion: stemcellAPI}
	if err := j.update(func(tx store.Tx) error { return j.beginIntent(tx, &intent) }); err != nil {
		return err
	}
	err := j.step("Setting disk metadata", dd.CID, func() error {
		return j.d.cfg.CPI.SetDiskMetadata(j.cpiCtx(stemcellAPI), cpiv2.MustCID[cpiv2.DiskKind](dd.CID), meta)
	})
	if errors.Is(err, cpiv2.ErrNotImplemented) {
		j.debugf("set_disk_metadata not implemented by the CPI: skipped")
	} else if err != nil {
		_ = j.update(func(tx store.Tx) error { return endIntent(tx, intent) })
		return fmt.Errorf("set_disk_metadata %s: %w", dd.CID, err)
	}
	dd.Metadata = maps.Clone(meta)
	rec := *dd
	return j.update(func(tx store.Tx) error {
		if err := endIntent(tx, intent); err != nil {
			return err
		}
		return tx.Put(store.DynamicDisks, dd.Name, rec)
	})
}

// link asks the VM's agent to symlink the attached disk (add_dynamic_disk),
// waiting for the agent first unless NoWaitUntilReadyAfterAttach.
func (j *job) link(vm VM, dd DynamicDisk) error {
	return j.step("Linking disk", dd.CID, func() error {
		if len(dd.Hint) == 0 {
			// attach_disk at api_version 1 returns no hint, and the agent
			// cannot resolve a dynamic disk without one (upstream: "No
			// disk_hint"). The disk stays attached and recorded.
			return fmt.Errorf("disk %s on %s: %w: attach_disk returned none (CPI api_version 1); dynamic disks need api_version 2",
				dd.CID, vm.CID, cpiv2.ErrNoDiskHint)
		}
		if !j.knobs().NoWaitUntilReadyAfterAttach {
			if err := j.d.cfg.Agents.WaitUntilReady(vm.AgentID, j.d.cfg.AgentTimeout); err != nil {
				return fmt.Errorf("agent %s on %s not ready after attach: %w", vm.AgentID, vm.CID, err)
			}
		}
		_, err := j.d.cfg.Agents.Run(vm.AgentID, agentAddDynamicDisk, dd.CID, dd.Hint)
		return j.agentErr(vm, agentAddDynamicDisk, err)
	})
}

// unlink asks the agent to remove the disk's symlink.
func (j *job) unlink(vm VM, diskCID string) error {
	return j.step("Unlinking disk", diskCID, func() error {
		_, err := j.d.cfg.Agents.Run(vm.AgentID, agentRemoveDynamicDisk, diskCID)
		return j.agentErr(vm, agentRemoveDynamicDisk, err)
	})
}

func (j *job) agentErr(vm VM, method string, err error) error {
	switch {
	case err == nil:
		return nil
	case IsUnknownMessage(err) && j.knobs().SwallowUnknownMessage:
		j.debugf("agent %s answered unknown message to %s: ignored (SwallowUnknownMessage)", vm.AgentID, method)
		return nil
	case IsUnknownMessage(err):
		return fmt.Errorf("agent %s on %s does not support %s (an agent without dynamic disks): %w", vm.AgentID, vm.CID, method, err)
	}
	return fmt.Errorf("agent %s %s: %w", vm.AgentID, method, err)
}

func (j *job) detachDynamicDisk(req diskNameArgs) (any, error) {
	dd, ok, err := j.lockDisk(req.DiskName, true)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, notFound("dynamic disk %q not found", req.DiskName)
	}
	if dd.State != DiskReady {
		return nil, conflict("dynamic disk %q is %s (task %d)", dd.Name, dd.State, dd.TaskID)
	}
	if !dd.Attached() {
		j.debugf("disk %q is not attached: idempotent", dd.Name)
		return DiskResult{DiskCID: dd.CID}, nil
	}
	if err := j.detach(&dd, true); err != nil {
		return nil, err
	}
	return DiskResult{DiskCID: dd.CID}, nil
}

// lockDisk takes the disk-name lock and, if withVM, the lock of the VM the
// disk is attached to, retrying if the attachment moved while waiting. It
// returns the record as read under the locks.
func (j *job) lockDisk(name string, withVM bool) (DynamicDisk, bool, error) {
	d := j.d
	dd, ok, err := d.dynamicDisk(name)
	if err != nil || !ok {
		return dd, ok, err
	}
	for attempt := 0; ; attempt++ {
		names := j.diskLockNames(name)
		if withVM {
			names = append(names, j.vmLockNames(dd.InstanceID)...)
		}
		var h *heldLocks
		if err := j.step("Locking", name, func() error {
			var err error
			h, err = j.acquire(d.cfg.VMLockTimeout, names...)
			return err
		}); err != nil {
			return dd, false, err
		}
		again, ok, err := d.dynamicDisk(name)
		if err != nil || !ok || !withVM || again.InstanceID == dd.InstanceID {
			return again, ok, err
		}
		if attempt >= 8 {
			// Never go on without the lock of the VM the disk is on.
			return again, false, conflict("dynamic disk %q moved to another VM each time its locks were taken (%d tries)", name, attempt+1)
		}
		j.release(h) // the attachment moved while we waited: lock its VM instead
		dd = again
	}
}

// detach detaches an attached dynamic disk: CPI detach_disk, then the
// agent's remove_dynamic_disk (reversed with UnlinkBeforeDetach). unlink
// false skips the agent (it is known to be unresponsive).
func (j *job) detach(dd *DynamicDisk, unlink bool) error {
	d := j.d
	vm, vmKnown, err := d.vm(dd.VMCID)
	if err != nil {
		return err
	}
	if !vmKnown {
		vm = VM{CID: dd.VMCID, InstanceID: dd.InstanceID}
	}
	unlink = unlink && vmKnown && vm.AgentID != ""
	if j.knobs().UnlinkBeforeDetach && unlink {
		if err := j.unlink(vm, dd.CID); err != nil {
			return err
		}
	}
	ref := !j.knobs().NoDiskNameLock
	before := *dd
	if ref {
		at := *dd
		at.State, at.TaskID = DiskDetaching, j.task.ID
		if err := j.update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, at) }); err != nil {
			return err
		}
	}
	err = j.step("Detaching disk", fmt.Sprintf("%s from %s", dd.CID, dd.VMCID), func() error {
		return j.vmCall(dd.InstanceID, func() error {
			err := j.settle("detach_disk", func() error {
				return d.cfg.CPI.DetachDisk(j.cpiCtx(vm.StemcellAPIVersion), cpiv2.MustCID[cpiv2.VMKind](dd.VMCID),
					cpiv2.MustCID[cpiv2.DiskKind](dd.CID))
			})
			if errors.Is(err, cpiv2.ErrDiskNotAttached) || errors.Is(err, cpiv2.ErrVMNotFound) {
				j.debugf("detach_disk %s: %v: treated as detached", dd.CID, err)
				return nil
			}
			return err
		})
	})
	if err != nil {
		if ref {
			_ = j.update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, before) })
		}
		return fmt.Errorf("detach_disk %s from %s: %w", dd.CID, dd.VMCID, err)
	}
	dd.State, dd.VMCID, dd.InstanceID, dd.Hint, dd.TaskID = DiskReady, "", "", nil, 0
	rec := *dd
	if err := j.update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, rec) }); err != nil {
		return err
	}
	if !j.knobs().UnlinkBeforeDetach && unlink {
		if err := j.unlink(vm, dd.CID); err != nil {
			return fmt.Errorf("disk %s detached, but the agent kept its link: %w", dd.CID, err)
		}
	}
	return nil
}

func (j *job) deleteDynamicDisk(req diskNameArgs) (any, error) {
	dd, ok, err := j.lockDisk(req.DiskName, !j.knobs().DeleteWithoutDetach)
	if err != nil {
		return nil, err
	}
	if !ok {
		j.debugf("disk %q does not exist: idempotent", req.DiskName)
		return DiskResult{}, nil
	}
	if err := j.deleteDiskLocked(&dd); err != nil {
		return nil, err
	}
	return DiskResult{DiskCID: dd.CID}, nil
}

// deleteDiskLocked deletes a dynamic disk whose locks the job holds:
// detaching it first unless DeleteWithoutDetach.
func (j *job) deleteDiskLocked(dd *DynamicDisk) error {
	d := j.d
	ref := !j.knobs().NoDiskNameLock
	if ref && dd.State != DiskReady {
		return conflict("dynamic disk %q is %s (task %d)", dd.Name, dd.State, dd.TaskID)
	}
	if dd.Attached() && !j.knobs().DeleteWithoutDetach {
		if err := j.detach(dd, true); err != nil {
			return err
		}
	}
	if dd.CID != "" {
		if ref {
			at := *dd
			at.State, at.TaskID = DiskDeleting, j.task.ID
			if err := j.update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, at) }); err != nil {
				return err
			}
		}
		err := j.step("Deleting disk", dd.CID, func() error {
			err := j.settle("delete_disk", func() error {
				return d.cfg.CPI.DeleteDisk(j.cpiCtx(0), cpiv2.MustCID[cpiv2.DiskKind](dd.CID))
			})
			if errors.Is(err, cpiv2.ErrDiskNotFound) {
				j.debugf("delete_disk %s: already gone", dd.CID)
				return nil
			}
			return err
		})
		if err != nil {
			if ref {
				back := *dd
				_ = j.update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, back) })
			}
			return fmt.Errorf("delete_disk %s: %w", dd.CID, err)
		}
	}
	return j.update(func(tx store.Tx) error { return tx.Delete(store.DynamicDisks, dd.Name) })
}

// InDoubtTries bounds the calls the reference director makes of one
// attach_disk, detach_disk or delete_disk whose errors leave the outcome in
// doubt (Config.InDoubtBackoff spaces them). See Knobs.TrustCPIErrors.
const InDoubtTries = 3

// settle runs an idempotent disk call (attach_disk, detach_disk,
// delete_disk) and, unless the TrustCPIErrors knob is set, retries it while
// its error leaves the outcome in doubt: the IaaS may have applied it with
// the response lost. A retry settles the outcome, since by contract it does
// the work or reports it done.
func (j *job) settle(method string, call func() error) error {
	err := call()
	if j.knobs().TrustCPIErrors {
		return err
	}
	wait := j.d.cfg.InDoubtBackoff
	for try := 2; try <= InDoubtTries && inDoubt(err); try++ {
		j.debugf("%s: %v: the outcome is in doubt; calling it again (%d of %d) after %s", method, err, try, InDoubtTries, wait)
		j.d.r.Sleep(wait)
		wait *= 2
		err = call()
	}
	return err
}

// inDoubt reports whether err leaves open whether the call took effect. A
// typed answer about the resources (not found, not attached) or about the
// CPI (not implemented or supported) settles it; anything else — a generic
// CloudError, a time-out, an invalid or lost response — does not.
func inDoubt(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, cpiv2.ErrVMNotFound), errors.Is(err, cpiv2.ErrDiskNotFound),
		errors.Is(err, cpiv2.ErrDiskNotAttached), errors.Is(err, cpiv2.ErrNotImplemented),
		errors.Is(err, cpiv2.ErrNotSupported):
		return false
	}
	return true
}
