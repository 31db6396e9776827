package director

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director/store"
)

// ProvideRequest is POST /dynamic_disks/provide's body, as upstream's
// dynamic_disks_controller.rb takes it: every field but Metadata required,
// DiskSize ≥ 1 MiB, Metadata any JSON object.
type ProvideRequest struct {
	InstanceID   string         `json:"instance_id"`
	DiskName     string         `json:"disk_name"`
	DiskPoolName string         `json:"disk_pool_name"`
	DiskSize     int            `json:"disk_size"` // MiB, ≥ 1
	Metadata     map[string]any `json:"metadata,omitempty"`
}

// CreateDiskRequest is POST /dynamic_disks's body: create without
// attaching, in an AZ of a deployment (upstream: deployment_name, az,
// disk_name, disk_pool_name, disk_size, metadata). InstanceID is a cpilab
// extension: when set, Deployment and AZ may be left empty and are taken
// from that instance, whose VM gives create_disk its locality.
type CreateDiskRequest struct {
	Deployment   string         `json:"deployment_name"`
	AZ           string         `json:"az"`
	DiskName     string         `json:"disk_name"`
	DiskPoolName string         `json:"disk_pool_name"`
	DiskSize     int            `json:"disk_size"`
	Metadata     map[string]any `json:"metadata,omitempty"`
	InstanceID   string         `json:"instance_id,omitempty"`
}

// AttachRequest is POST /dynamic_disks/:disk_name/attach (DiskName from the
// path, InstanceID and the optional Metadata from the body).
type AttachRequest struct {
	DiskName   string         `json:"disk_name"`
	InstanceID string         `json:"instance_id"`
	Metadata   map[string]any `json:"metadata,omitempty"`
}

// diskNameArgs names one disk (detach, delete).
type diskNameArgs struct {
	DiskName string `json:"disk_name"`
}

// DiskResult is the task result of provide and create: {"disk_cid": …}
// (upstream writes no result for attach, detach and delete).
type DiskResult struct {
	DiskCID string `json:"disk_cid"`
}

// jobOutput is what a job returns when it has a message for the task's
// result field (upstream: the job's return value) and, for provide and
// create, a result file.
type jobOutput struct {
	Message string
	Result  any // nil: no result file
}

// ErrDiskAttachedElsewhere is wrapped by provide and attach when the disk is
// attached to another VM.
var ErrDiskAttachedElsewhere = errors.New("disk is attached to another VM")

// taskError is a job's refusal, worded as upstream's job raises it.
func taskError(format string, args ...any) error { return fmt.Errorf(format, args...) }

func (j *job) provideDynamicDisk(req ProvideRequest) (any, error) {
	return j.ensureAttached(req, true)
}

func (j *job) attachDynamicDisk(req AttachRequest) (any, error) {
	return j.ensureAttached(ProvideRequest{DiskName: req.DiskName, InstanceID: req.InstanceID, Metadata: req.Metadata}, false)
}

// activeVM returns an instance and its VM, failing as upstream's jobs do
// when either is missing.
func (j *job) activeVM(instanceID string) (Instance, VM, error) {
	d := j.d
	inst, err := d.instance(instanceID)
	if errors.Is(err, ErrNotFound) {
		return inst, VM{}, taskError("instance `%s` not found", instanceID)
	}
	if err != nil {
		return inst, VM{}, err
	}
	if inst.VMCID == "" {
		return inst, VM{}, taskError("no active vm found for instance `%s`", instanceID)
	}
	vm, ok, err := d.vm(inst.VMCID)
	if err != nil {
		return inst, vm, err
	}
	if !ok {
		return inst, vm, taskError("no active vm found for instance `%s` (VM %s is not known)", instanceID, inst.VMCID)
	}
	return inst, vm, nil
}

// diskType returns the disk pool's disk type from the latest cloud config.
func (j *job) diskType(pool string) (DiskType, error) {
	cc, err := j.d.cloudConfig()
	if err != nil {
		return DiskType{}, err
	}
	if len(cc.DiskTypes) == 0 && len(cc.VMTypes) == 0 && len(cc.AZs) == 0 && len(cc.Networks) == 0 {
		return DiskType{}, taskError("No cloud configs provided")
	}
	dt, ok := cc.diskType(pool)
	if !ok {
		return DiskType{}, taskError("Could not find disk pool by name `%s`", pool)
	}
	return dt, nil
}

// ensureAttached makes disk req.DiskName attached to req.InstanceID's VM,
// creating it first when mayCreate (provide) and it does not exist. It
// follows upstream's provide_dynamic_disk.rb and attach_dynamic_disk.rb
// step by step, under the disk-name and VM locks (see Knobs).
func (j *job) ensureAttached(req ProvideRequest, mayCreate bool) (any, error) {
	d := j.d
	if !mayCreate {
		if _, ok, err := d.dynamicDisk(req.DiskName); err != nil {
			return nil, err
		} else if !ok {
			return nil, taskError("disk `%s` not found", req.DiskName)
		}
	}
	if _, _, err := j.activeVM(req.InstanceID); err != nil {
		return nil, err
	}
	if err := j.step("Locking", req.DiskName, func() error {
		return j.lock(d.cfg.VMLockTimeout, append(j.diskLockNames(req.DiskName), j.vmLockNames(req.InstanceID)...)...)
	}); err != nil {
		return nil, err
	}
	inst, vm, err := j.activeVM(req.InstanceID) // the VM may have changed while we waited
	if err != nil {
		return nil, err
	}
	var dt DiskType
	if mayCreate {
		if dt, err = j.diskType(req.DiskPoolName); err != nil {
			return nil, err
		}
	}
	dd, exists, err := d.dynamicDisk(req.DiskName)
	if err != nil {
		return nil, err
	}
	if exists && dd.State != DiskReady {
		return nil, conflict("dynamic disk %q is %s (task %d)", dd.Name, dd.State, dd.TaskID)
	}
	// As upstream's attach (attach_dynamic_disk.rb:30-50): a disk on
	// another VM is refused first, then one of another AZ, deployment or
	// CPI; provide checks only the VM.
	if exists && dd.Attached() && dd.VMCID != vm.CID {
		if mayCreate {
			return nil, fmt.Errorf("disk is attached to a different vm `%s`: %w", dd.VMCID, ErrDiskAttachedElsewhere)
		}
		return nil, fmt.Errorf("disk `%s` is already attached to a different vm `%s`: %w", dd.Name, dd.VMCID, ErrDiskAttachedElsewhere)
	}
	if exists && !mayCreate {
		if err := checkAttachable(dd, inst, vm); err != nil {
			return nil, err
		}
	}
	switch {
	case exists && dd.Attached() && !dd.AttachInDoubt:
		j.debugf("disk %s already attached to %s: idempotent", dd.CID, vm.CID)
	case exists:
		if err := j.attach(&dd, inst, vm); err != nil {
			return nil, err
		}
	case !mayCreate:
		return nil, taskError("disk `%s` not found", req.DiskName)
	default:
		dd, err = j.createDisk(diskSpec{name: req.DiskName, pool: req.DiskPoolName, dt: dt, sizeMiB: req.DiskSize,
			deployment: inst.Deployment, vm: vm})
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
	if mayCreate {
		return jobOutput{Message: fmt.Sprintf("attached disk `%s` to `%s` in deployment `%s`", dd.Name, vm.CID, inst.Deployment),
			Result: DiskResult{DiskCID: dd.CID}}, nil
	}
	return jobOutput{Message: fmt.Sprintf("attached disk `%s` to vm `%s` in deployment `%s`", dd.Name, vm.CID, inst.Deployment)}, nil
}

// checkAttachable refuses, as upstream's attach does, a disk in another AZ,
// of another deployment, or of another CPI than the instance's VM.
func checkAttachable(dd DynamicDisk, inst Instance, vm VM) error {
	if dd.AZ != "" && inst.AZ != "" && dd.AZ != inst.AZ {
		return taskError("disk `%s` is in AZ `%s` but instance `%s` is in AZ `%s`", dd.Name, dd.AZ, inst.ID, inst.AZ)
	}
	if dd.Deployment != "" && dd.Deployment != inst.Deployment {
		return taskError("disk `%s` belongs to deployment `%s` and cannot be attached to deployment `%s`", dd.Name, dd.Deployment, inst.Deployment)
	}
	if dd.CPI != "" && dd.CPI != vm.CPI {
		return taskError("disk `%s` uses CPI `%s` but target vm uses CPI `%s`", dd.Name, dd.CPI, vm.CPI)
	}
	return nil
}

func (j *job) createDynamicDisk(req CreateDiskRequest) (any, error) {
	d := j.d
	// As upstream, a name with a disk is refused at once. A record another
	// task is still creating (the reference's intent row) is not a disk
	// yet: its provide may fail and remove it, so the create waits for the
	// name's lock and decides then.
	if dd, ok, err := d.dynamicDisk(req.DiskName); err != nil {
		return nil, err
	} else if ok && dd.State != DiskCreating {
		return nil, taskError("disk `%s` already exists", req.DiskName)
	}
	spec := diskSpec{name: req.DiskName, pool: req.DiskPoolName, sizeMiB: req.DiskSize, deployment: req.Deployment, az: req.AZ,
		cleanUp: true}
	if req.InstanceID != "" {
		inst, vm, err := j.activeVM(req.InstanceID)
		if err != nil {
			return nil, err
		}
		if spec.deployment != "" && spec.deployment != inst.Deployment {
			return nil, taskError("instance `%s` is not in deployment `%s`", inst.ID, spec.deployment)
		}
		if spec.az != "" && spec.az != inst.AZ {
			return nil, taskError("instance `%s` is in AZ `%s`, not `%s`", inst.ID, inst.AZ, spec.az)
		}
		spec.deployment, spec.az, spec.vm = inst.Deployment, inst.AZ, vm
	} else {
		if err := d.checkDeployment(spec.deployment); errors.Is(err, ErrNotFound) {
			return nil, taskError("deployment `%s` not found", spec.deployment)
		} else if err != nil {
			return nil, err
		}
		vm, ok, err := j.activeVMInAZ(spec.deployment, spec.az)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, taskError("no active VM found in deployment `%s` in AZ `%s`", spec.deployment, spec.az)
		}
		spec.vm = vm
	}
	dt, err := j.diskType(req.DiskPoolName)
	if err != nil {
		return nil, err
	}
	spec.dt = dt
	if err := j.step("Locking", req.DiskName, func() error {
		return j.lock(d.cfg.VMLockTimeout, j.diskLockNames(req.DiskName)...)
	}); err != nil {
		return nil, err
	}
	if dd, exists, err := d.dynamicDisk(req.DiskName); err != nil {
		return nil, err
	} else if exists && dd.State == DiskCreating {
		// Left by a Director that stopped mid-create; recovery settles it.
		return nil, conflict("dynamic disk %q is %s (task %d)", dd.Name, dd.State, dd.TaskID)
	} else if exists {
		return nil, taskError("disk `%s` already exists", req.DiskName)
	}
	dd, err := j.createDisk(spec)
	if err != nil {
		return nil, err
	}
	if err := j.setMetadata(&dd, req.Metadata, spec.vm.StemcellAPIVersion); err != nil {
		return nil, err
	}
	return jobOutput{Message: fmt.Sprintf("created disk `%s` in deployment `%s` in AZ `%s`", dd.Name, spec.deployment, spec.az),
		Result: DiskResult{DiskCID: dd.CID}}, nil
}

// activeVMInAZ returns the VM of the first instance of deployment in az
// that has one (upstream's find_active_vm_in_az).
func (j *job) activeVMInAZ(deployment, az string) (VM, bool, error) {
	insts, err := listAll[Instance](j.d.st, store.Instances, func(i *Instance) bool {
		return i.Deployment == deployment && i.AZ == az && i.VMCID != ""
	})
	if err != nil {
		return VM{}, false, err
	}
	for _, in := range insts {
		if vm, ok, err := j.d.vm(in.VMCID); err != nil || ok {
			return vm, ok, err
		}
	}
	return VM{}, false, nil
}

type diskSpec struct {
	name, pool     string
	dt             DiskType
	sizeMiB        int
	deployment, az string
	vm             VM // locality; zero for none
	// cleanUp: the create job's spec. Upstream's create deletes the disk
	// it made when the row insert fails (create_dynamic_disk.rb:49); its
	// provide does not (provide_dynamic_disk.rb:34), so under
	// NoDiskNameLock only provide leaks.
	cleanUp bool
}

// createDisk calls create_disk (cloud_properties: the disk type's, with
// name = the disk name, as upstream) and records the disk, unattached. In
// the reference behaviour an intent row (state creating) is written first,
// under the disk-name lock, so a crash leaves a trace; with NoDiskNameLock
// the row is inserted after create_disk, as upstream, and a lost insert
// race leaks the IaaS disk of a provide (a create deletes it, as upstream's
// create job does).
func (j *job) createDisk(s diskSpec) (DynamicDisk, error) {
	d := j.d
	size := s.sizeMiB
	if size < 1 {
		return DynamicDisk{}, validation(CodeValidationViolatedMin, "disk_size", "'disk_size' value (%d) should be greater than 1", size)
	}
	dd := DynamicDisk{Name: s.name, Deployment: s.deployment, DiskPoolName: s.pool, SizeMiB: size, AZ: s.az,
		CPI: s.vm.CPI, State: DiskCreating, TaskID: j.task.ID}
	ref := !j.knobs().NoDiskNameLock
	if ref {
		if err := j.update(func(tx store.Tx) error { return tx.Insert(store.DynamicDisks, s.name, dd) }); err != nil {
			if errors.Is(err, store.ErrExists) {
				return DynamicDisk{}, taskError("disk `%s` already exists", s.name)
			}
			return DynamicDisk{}, err
		}
	}
	var cid cpiv2.DiskCID
	err := j.step("Creating disk", s.name, func() error {
		var vmCID cpiv2.VMCID
		if s.vm.CID != "" {
			vmCID = cpiv2.MustCID[cpiv2.VMKind](s.vm.CID)
		}
		var err error
		cid, err = d.cfg.CPI.CreateDisk(j.cpiCtx(s.vm.StemcellAPIVersion), cpiv2.CreateDiskArgs{
			SizeMiB: size, CloudProperties: cloudProps(s.dt.CloudProperties, map[string]any{"name": s.name}), VMCID: vmCID})
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
		if ref || s.cleanUp {
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
		err := j.vmCall(vm.CID, func() error {
			return j.settle("attach_disk", func() error {
				var err error
				hint, err = d.cfg.CPI.AttachDisk(j.cpiCtx(vm.StemcellAPIVersion), vmCID, diskCID)
				return err
			})
		})
		if err == nil && hint.IsZero() && j.knobs().AttachWithoutHintUnrecorded {
			err = fmt.Errorf("%w: attach_disk returned none (CPI api_version 1)", cpiv2.ErrNoDiskHint)
		}
		return err
	})
	if err != nil {
		if ref {
			// A CPI may have attached before failing (bosh 1869): undo so
			// the record (detached) holds. An undo that fails in doubt
			// too (a cloud outage outlasting the calls made again) leaves
			// the disk maybe on vm: the record keeps it there, marked in
			// doubt, rather than claim a detach it does not know, so the
			// Director never attaches it elsewhere while the cloud may
			// hold it; the next detach settles it.
			//
			// The attach made again to learn an attachment in doubt is not
			// undone: the record stays as it was, in doubt, for a detach
			// to settle (a failed provide or attach has no effect).
			back := *dd
			if back.AttachInDoubt {
				_ = j.update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, back) })
				return fmt.Errorf("attach_disk %s to %s: %w; the attachment stays in doubt until a detach settles it", dd.CID, vm.CID, err)
			}
			derr := j.settle("detach_disk", func() error {
				return d.cfg.CPI.DetachDisk(j.cpiCtx(vm.StemcellAPIVersion), vmCID, diskCID)
			})
			if derr != nil && !errors.Is(derr, cpiv2.ErrDiskNotAttached) {
				j.debugf("detach_disk after failed attach: %v", derr)
				if inDoubt(err) && inDoubt(derr) {
					back.State, back.VMCID, back.InstanceID, back.TaskID, back.Hint, back.AttachInDoubt = DiskReady, vm.CID, inst.ID, 0, nil, true
					back.AZ = inst.AZ // as an attached disk's (below)
					err = fmt.Errorf("%w; detach_disk to undo it failed too (%v): the disk stays recorded on %s until a detach settles it", err, derr, vm.CID)
				}
			}
			_ = j.update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, back) })
			*dd = back
		}
		return fmt.Errorf("attach_disk %s to %s: %w", dd.CID, vm.CID, err)
	}
	// As upstream, the disk takes the AZ of the instance it is attached to.
	dd.State, dd.VMCID, dd.InstanceID, dd.TaskID, dd.Hint, dd.AZ, dd.AttachInDoubt = DiskReady, vm.CID, inst.ID, 0, nil, inst.AZ, false
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

// setMetadata calls set_disk_metadata when meta is given and differs from
// the disk's, as upstream's jobs (`disk_model.metadata != @metadata`, where
// a disk without metadata reads as {}, so {} on such a disk is no change)
// and its MetadataUpdater: the request's hash merged with
// the director and deployment tags; NotImplemented is logged and ignored.
// Values that are not strings are sent as their JSON text (the CPI wire
// takes strings).
func (j *job) setMetadata(dd *DynamicDisk, meta map[string]any, stemcellAPI int) error {
	if meta == nil || len(meta) == 0 && len(dd.Metadata) == 0 || reflect.DeepEqual(meta, dd.Metadata) {
		return nil
	}
	tags := cpiv2.Metadata{}
	for k, v := range meta {
		if s, ok := v.(string); ok {
			tags[k] = s
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("metadata %q: %w", k, err)
		}
		tags[k] = string(b)
	}
	tags["director"] = j.d.cfg.Name
	tags["deployment"] = dd.Deployment
	intent := Intent{Op: IntentSetDiskMetadata, DiskCID: dd.CID, DiskName: dd.Name, Metadata: tags, Request: meta,
		StemcellAPIVersion: stemcellAPI}
	if err := j.update(func(tx store.Tx) error { return j.beginIntent(tx, &intent) }); err != nil {
		return err
	}
	err := j.step("Setting disk metadata", dd.CID, func() error {
		return j.d.cfg.CPI.SetDiskMetadata(j.cpiCtx(stemcellAPI), cpiv2.MustCID[cpiv2.DiskKind](dd.CID), tags)
	})
	if errors.Is(err, cpiv2.ErrNotImplemented) {
		j.debugf("set_disk_metadata not implemented by the CPI: skipped")
	} else if err != nil {
		_ = j.update(func(tx store.Tx) error { return endIntent(tx, intent) })
		return fmt.Errorf("set_disk_metadata %s: %w", dd.CID, err)
	}
	dd.Metadata = meta
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
		return nil, taskError("disk `%s` can not be found in the database", req.DiskName)
	}
	if dd.State != DiskReady {
		return nil, conflict("dynamic disk %q is %s (task %d)", dd.Name, dd.State, dd.TaskID)
	}
	if !dd.Attached() {
		j.debugf("disk %q is not attached: idempotent", dd.Name)
		return jobOutput{Message: fmt.Sprintf("disk `%s` was already detached", dd.CID)}, nil
	}
	vmCID := dd.VMCID
	if err := j.detach(&dd, true); err != nil {
		return nil, err
	}
	return jobOutput{Message: fmt.Sprintf("detached disk `%s` from vm `%s`", dd.CID, vmCID)}, nil
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
		return j.vmCall(dd.VMCID, func() error {
			err := j.settle("detach_disk", func() error {
				return d.cfg.CPI.DetachDisk(j.cpiCtx(vm.StemcellAPIVersion), cpiv2.MustCID[cpiv2.VMKind](dd.VMCID),
					cpiv2.MustCID[cpiv2.DiskKind](dd.CID))
			})
			if errors.Is(err, cpiv2.ErrDiskNotAttached) || errors.Is(err, cpiv2.ErrVMNotFound) && !j.knobs().DetachVMNotFoundFails {
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
	dd.State, dd.VMCID, dd.InstanceID, dd.Hint, dd.TaskID, dd.AttachInDoubt = DiskReady, "", "", nil, 0, false
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
		return jobOutput{Message: fmt.Sprintf("disk with name `%s` was already deleted", req.DiskName)}, nil
	}
	if err := j.deleteDiskLocked(&dd); err != nil {
		return nil, err
	}
	return jobOutput{Message: fmt.Sprintf("deleted disk `%s`", dd.CID)}, nil
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
			if j.knobs().DeleteChecksHasDisk {
				// As upstream, any has_disk error (NotImplemented included)
				// and any delete_disk error (DiskNotFound included) fails
				// the task.
				has, err := d.cfg.CPI.HasDisk(j.cpiCtx(0), cpiv2.MustCID[cpiv2.DiskKind](dd.CID))
				if err != nil {
					return fmt.Errorf("has_disk %s: %w", dd.CID, err)
				}
				if !has {
					j.debugf("has_disk %s: false; delete_disk not called", dd.CID)
					return nil
				}
			}
			err := j.settle("delete_disk", func() error {
				return d.cfg.CPI.DeleteDisk(j.cpiCtx(0), cpiv2.MustCID[cpiv2.DiskKind](dd.CID))
			})
			if errors.Is(err, cpiv2.ErrDiskNotFound) && !j.knobs().DeleteChecksHasDisk {
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
//
// Each call made again is a checkpoint: the job's leases are renewed first
// (and a lease a timer renewal found lost fails the job), so that under
// Config.PerStepLockRenewal too calls made again within one step never
// outlast the lease and let another job take the locks while the in-doubt
// call may still be applied.
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
		for _, h := range j.held {
			if rerr := h.renew(); rerr != nil {
				return fmt.Errorf("%w (while settling %s: %v)", rerr, method, err)
			}
		}
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
