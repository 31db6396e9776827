package director

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director/store"
)

// Resizing a dynamic disk is a cpilab extension: upstream's dynamic disks
// API has no resize (docs/upstream.md). POST /dynamic_disks/:name/resize
// {"disk_size": MiB} queues a task on the dynamic_disks queue which, under
// the disk-name lock and the lock of the VM the disk is attached to:
//
//   - does nothing (no CPI call) when the disk already has that size;
//   - to grow, detaches the disk (as detach does: CPI detach_disk, then the
//     agent's link removed), calls resize_disk (offline, as CPIs require),
//     attaches it again and has the agent link it again;
//   - to shrink, or when the CPI has no resize_disk or answers it with
//     NotSupported or NotImplemented, migrates as the Director migrates a
//     persistent disk: create_disk of the new size, attach it beside the
//     old one, copy in the guest (DiskCopier), detach the old one, swap the
//     records and link the new one. The old disk becomes an orphaned disk
//     (as upstream's migration orphans it), so nothing is lost until the
//     orphans are deleted.
//
// The task's result file is {"disk_cid": …} (the new CID after a copy).
// A resize records an intent (IntentResizeDisk) before its first CPI call;
// a failure or a restart converges from it: a confirmed resize or a swap
// done is finished, anything else is undone, and the disk ends attached
// and linked to the VM it was on.

// IntentResizeDisk: a resize of a dynamic disk in flight (Intent.Resize
// says how far it went). Restart finishes an in-place resize (resize_disk
// again: it is idempotent for one target size) or a copy whose swap is
// recorded; it undoes a copy not yet swapped (the new disk is detached and
// deleted). The disk is then attached and linked to the VM it was on.
const IntentResizeDisk IntentOp = "resize_dynamic_disk"

// ResizeIntent is how far a resize went (Intent.Resize).
type ResizeIntent struct {
	// SizeMiB is the target size, FromSizeMiB the size before.
	SizeMiB     int `json:"size"`
	FromSizeMiB int `json:"from_size"`
	// Copy is set for create + copy + swap (a shrink, or resize_disk not
	// supported), clear for resize_disk in place.
	Copy bool `json:"copy,omitempty"`
	// Resized is set once resize_disk returned (in place).
	Resized bool `json:"resized,omitempty"`
	// NewDiskCID is the copy's new disk, once create_disk returned.
	NewDiskCID string `json:"new_disk_cid,omitempty"`
	// Swapped is set once the record names the new disk.
	Swapped bool `json:"swapped,omitempty"`
}

// ResizeRequest is POST /dynamic_disks/:disk_name/resize (DiskName from
// the path, DiskSize from the body).
type ResizeRequest struct {
	DiskName string `json:"disk_name"`
	DiskSize int    `json:"disk_size"` // MiB, ≥ 1
}

// DiskResizer is the CPI's resize_disk, optional: a CPI without it is
// resized by copy. Every cpiv2.CPI has it.
type DiskResizer interface {
	ResizeDisk(ctx context.Context, cid cpiv2.DiskCID, sizeMiB int) error
}

// DiskCopier copies the bytes of disk from onto disk to, both attached to
// vm: the in-guest copy of the Director's persistent-disk migration (the
// cpilab agent has no copy action). It is taken from Config.Inventory, else
// the CPI, when either implements it; lab.Lab does, over the VM root's
// device nodes. A copy must fail rather than drop data that does not fit.
type DiskCopier interface {
	CopyDisk(ctx context.Context, vm cpiv2.VMCID, from, to cpiv2.DiskCID) error
}

// Errors of a resize, for errors.Is.
var (
	// ErrNoDiskCopier: a resize needs a copy and the director has no
	// DiskCopier.
	ErrNoDiskCopier = errors.New("resize needs a copy and no disk copier is configured")
	// ErrResizeNeedsVM: a resize needs a copy, which runs in the guest of
	// the VM the disk is attached to, and the disk is detached.
	ErrResizeNeedsVM = errors.New("resize by copy needs the disk attached to a VM")
)

// ResizeDynamicDisk queues POST /dynamic_disks/:disk_name/resize.
func (d *Director) ResizeDynamicDisk(user string, req ResizeRequest) (int64, error) {
	if err := d.checkDiskName(req.DiskName); err != nil {
		return 0, err
	}
	if err := checkSize(req.DiskSize); err != nil {
		return 0, err
	}
	return d.enqueue(user, jobResize, "", "resize dynamic disk", req)
}

// diskCopier returns the director's DiskCopier, if any.
func (d *Director) diskCopier() (DiskCopier, bool) {
	if c, ok := d.cfg.Inventory.(DiskCopier); ok {
		return c, true
	}
	c, ok := d.cfg.CPI.(DiskCopier)
	return c, ok
}

func (j *job) resizeDynamicDisk(req ResizeRequest) (any, error) {
	d := j.d
	dd, ok, err := j.lockDisk(req.DiskName, true)
	if err != nil {
		return nil, err
	}
	if !ok {
		return nil, taskError("disk `%s` not found", req.DiskName)
	}
	if dd.State != DiskReady {
		return nil, conflict("dynamic disk %q is %s (task %d)", dd.Name, dd.State, dd.TaskID)
	}
	if dd.SizeMiB == req.DiskSize {
		j.debugf("disk %s is already %d MiB: idempotent", dd.CID, dd.SizeMiB)
		return jobOutput{Message: fmt.Sprintf("disk `%s` is already %d MiB", dd.Name, dd.SizeMiB),
			Result: DiskResult{DiskCID: dd.CID}}, nil
	}
	var vm VM
	if dd.Attached() {
		v, known, err := d.vm(dd.VMCID)
		if err != nil {
			return nil, err
		}
		if !known {
			return nil, taskError("disk `%s` is attached to vm `%s`, which the director does not know", dd.Name, dd.VMCID)
		}
		vm = v
	}
	resizer, canResize := d.cfg.CPI.(DiskResizer)
	plan := ResizeIntent{SizeMiB: req.DiskSize, FromSizeMiB: dd.SizeMiB, Copy: req.DiskSize < dd.SizeMiB || !canResize}
	var dt DiskType
	if plan.Copy {
		if dt, err = j.copyPrerequisites(dd); err != nil {
			return nil, err
		}
	}
	in := Intent{Op: IntentResizeDisk, DiskName: dd.Name, DiskCID: dd.CID, InstanceID: dd.InstanceID, VMCID: dd.VMCID,
		AgentID: vm.AgentID, StemcellAPIVersion: vm.StemcellAPIVersion, Resize: &plan}
	if err := j.update(func(tx store.Tx) error { return j.beginIntent(tx, &in) }); err != nil {
		return nil, err
	}
	if !plan.Copy {
		err = j.resizeInPlace(&in, &dd, vm, resizer)
		if errors.Is(err, cpiv2.ErrNotSupported) || errors.Is(err, cpiv2.ErrNotImplemented) {
			j.debugf("resize_disk %s: %v: falling back to create + copy + swap", dd.CID, err)
			if dt, err = j.copyPrerequisites(dd); err == nil {
				in.Resize.Copy = true
				rec := in
				err = j.update(func(tx store.Tx) error { return tx.Put(store.Intents, store.IDKey(rec.ID), rec) })
			}
			if err == nil {
				err = j.resizeByCopy(&in, &dd, vm, dt)
			}
		}
	} else {
		err = j.resizeByCopy(&in, &dd, vm, dt)
	}
	if err != nil {
		settled, why, cerr := d.convergeResize(context.Background(), in, false)
		switch {
		case cerr != nil:
			j.debugf("undoing the resize of %q failed: %v; the next start settles it", dd.Name, cerr)
		case !settled:
			j.debugf("undoing the resize of %q left for the next start: %s", dd.Name, why)
		}
		return nil, fmt.Errorf("resize disk `%s` from %d to %d MiB: %w", dd.Name, plan.FromSizeMiB, plan.SizeMiB, err)
	}
	if err := j.update(func(tx store.Tx) error { return endIntent(tx, in) }); err != nil {
		return nil, err
	}
	how := "resize_disk"
	if in.Resize.Copy {
		how = "copy to a new disk"
	}
	return jobOutput{Message: fmt.Sprintf("resized disk `%s` from %d to %d MiB (%s)", dd.Name, plan.FromSizeMiB, plan.SizeMiB, how),
		Result: DiskResult{DiskCID: dd.CID}}, nil
}

// copyPrerequisites checks what a resize by copy needs before anything is
// changed, and returns the disk's disk type (the new disk's
// cloud_properties).
func (j *job) copyPrerequisites(dd DynamicDisk) (DiskType, error) {
	if _, ok := j.d.diskCopier(); !ok {
		return DiskType{}, fmt.Errorf("disk `%s`: %w", dd.Name, ErrNoDiskCopier)
	}
	if !dd.Attached() {
		return DiskType{}, fmt.Errorf("disk `%s` is detached: %w", dd.Name, ErrResizeNeedsVM)
	}
	return j.diskType(dd.DiskPoolName)
}

// resizeInPlace detaches, calls resize_disk and attaches again. An error
// wrapping NotSupported or NotImplemented leaves the disk detached, for the
// copy to take over.
func (j *job) resizeInPlace(in *Intent, dd *DynamicDisk, vm VM, resizer DiskResizer) error {
	attached := dd.Attached()
	inst := Instance{ID: dd.InstanceID, AZ: dd.AZ}
	if attached {
		if err := j.detach(dd, true); err != nil {
			return err
		}
	}
	size := in.Resize.SizeMiB
	err := j.step("Resizing disk", fmt.Sprintf("%s to %d MiB", dd.CID, size), func() error {
		return j.settle("resize_disk", func() error {
			return resizer.ResizeDisk(j.cpiCtx(vm.StemcellAPIVersion), cpiv2.MustCID[cpiv2.DiskKind](dd.CID), size)
		})
	})
	if errors.Is(err, cpiv2.ErrNotSupported) || errors.Is(err, cpiv2.ErrNotImplemented) {
		if attached {
			// The copy reads the old disk in the guest: attach it again.
			if aerr := j.attach(dd, inst, vm); aerr != nil {
				return aerr
			}
		}
		return err
	}
	if err != nil {
		return fmt.Errorf("resize_disk %s: %w", dd.CID, err)
	}
	dd.SizeMiB = size
	in.Resize.Resized = true
	rec, intent := *dd, *in
	if err := j.update(func(tx store.Tx) error {
		if err := tx.Put(store.DynamicDisks, rec.Name, rec); err != nil {
			return err
		}
		return tx.Put(store.Intents, store.IDKey(intent.ID), intent)
	}); err != nil {
		return err
	}
	if !attached {
		return nil
	}
	if err := j.attach(dd, inst, vm); err != nil {
		return err
	}
	return j.link(vm, *dd)
}

// resizeByCopy creates a disk of the new size, attaches it beside the old
// one, copies, detaches the old one, swaps the records (the old disk
// becomes an orphan) and links the new one.
func (j *job) resizeByCopy(in *Intent, dd *DynamicDisk, vm VM, dt DiskType) error {
	d := j.d
	copier, _ := d.diskCopier()
	size := in.Resize.SizeMiB
	vmCID := cpiv2.MustCID[cpiv2.VMKind](vm.CID)
	oldCID := cpiv2.MustCID[cpiv2.DiskKind](dd.CID)
	var newCID cpiv2.DiskCID
	if err := j.step("Creating disk", fmt.Sprintf("%s of %d MiB to replace %s", dd.Name, size, dd.CID), func() error {
		var err error
		newCID, err = d.cfg.CPI.CreateDisk(j.cpiCtx(vm.StemcellAPIVersion), cpiv2.CreateDiskArgs{SizeMiB: size,
			CloudProperties: cloudProps(dt.CloudProperties, map[string]any{"name": dd.Name}), VMCID: vmCID})
		return err
	}); err != nil {
		return fmt.Errorf("create_disk for %q: %w", dd.Name, err)
	}
	in.Resize.NewDiskCID = newCID.String()
	intent := *in
	if err := j.update(func(tx store.Tx) error { return tx.Put(store.Intents, store.IDKey(intent.ID), intent) }); err != nil {
		return err
	}
	var hint cpiv2.DiskHint
	if err := j.step("Attaching disk", fmt.Sprintf("%s to %s", newCID, vm.CID), func() error {
		return j.vmCall(vm.CID, func() error {
			return j.settle("attach_disk", func() error {
				var err error
				hint, err = d.cfg.CPI.AttachDisk(j.cpiCtx(vm.StemcellAPIVersion), vmCID, newCID)
				return err
			})
		})
	}); err != nil {
		return fmt.Errorf("attach_disk %s to %s: %w", newCID, vm.CID, err)
	}
	if err := j.step("Copying disk", fmt.Sprintf("%s to %s on %s", oldCID, newCID, vm.CID), func() error {
		return copier.CopyDisk(context.Background(), vmCID, oldCID, newCID)
	}); err != nil {
		return fmt.Errorf("copy %s to %s: %w", oldCID, newCID, err)
	}
	if dd.Metadata != nil {
		tags, err := metadataTags(dd.Metadata, d.cfg.Name, dd.Deployment)
		if err != nil {
			return err
		}
		err = j.step("Setting disk metadata", newCID.String(), func() error {
			return d.cfg.CPI.SetDiskMetadata(j.cpiCtx(vm.StemcellAPIVersion), newCID, tags)
		})
		if err != nil && !errors.Is(err, cpiv2.ErrNotImplemented) {
			return fmt.Errorf("set_disk_metadata %s: %w", newCID, err)
		}
	}
	old := *dd
	if err := j.detach(dd, true); err != nil {
		return err
	}
	var rawHint json.RawMessage
	if !hint.IsZero() {
		b, err := json.Marshal(hint)
		if err != nil {
			return fmt.Errorf("encode disk hint: %w", err)
		}
		rawHint = b
	}
	dd.CID, dd.SizeMiB, dd.State, dd.TaskID = newCID.String(), size, DiskReady, 0
	dd.VMCID, dd.InstanceID, dd.Hint = vm.CID, old.InstanceID, rawHint
	in.Resize.Swapped = true
	rec, intent := *dd, *in
	orphan := OrphanedDisk{CID: old.CID, Name: old.Name, Deployment: old.Deployment, SizeMiB: old.SizeMiB,
		Reason: fmt.Sprintf("replaced by %s when resized to %d MiB", newCID, size), OrphanedAt: d.r.Now()}
	if err := j.update(func(tx store.Tx) error {
		if err := tx.Put(store.DynamicDisks, rec.Name, rec); err != nil {
			return err
		}
		if err := tx.Put(store.OrphanedDisks, orphan.CID, orphan); err != nil {
			return err
		}
		return tx.Put(store.Intents, store.IDKey(intent.ID), intent)
	}); err != nil {
		return err
	}
	return j.link(vm, *dd)
}

// metadataTags is what set_disk_metadata sends for a disk's recorded
// metadata (as setMetadata: the director and deployment tags added, values
// that are not strings as their JSON text).
func metadataTags(meta map[string]any, director, deployment string) (cpiv2.Metadata, error) {
	tags := cpiv2.Metadata{}
	for k, v := range meta {
		if s, ok := v.(string); ok {
			tags[k] = s
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("metadata %q: %w", k, err)
		}
		tags[k] = string(b)
	}
	tags["director"] = director
	tags["deployment"] = deployment
	return tags, nil
}

// convergeResize settles a resize intent: after a failure in the job
// (restart false) or at start (restart true). A copy whose swap is recorded
// is finished (the old disk detached, an orphan); a copy not swapped is
// undone (the new disk detached and deleted). An in-place resize not
// confirmed is, at restart, made again (resize_disk is idempotent for one
// target size), so the record says the size the IaaS has; after a failure
// in the job it is left undone. The disk the record names is then attached
// to the VM it was on and linked by its agent. settled false (with why)
// keeps the intent for the next start.
func (d *Director) convergeResize(ctx context.Context, in Intent, restart bool) (settled bool, why string, err error) {
	r := in.Resize
	end := func() error { return d.st.Update(func(tx store.Tx) error { return endIntent(tx, in) }) }
	if r == nil {
		return true, "", end()
	}
	dd, ok, err := d.dynamicDisk(in.DiskName)
	if err != nil {
		return false, "", err
	}
	swapped := ok && r.NewDiskCID != "" && dd.CID == r.NewDiskCID
	var vm VM
	haveVM := false
	if in.VMCID != "" {
		if vm, haveVM, err = d.vm(in.VMCID); err != nil {
			return false, "", err
		}
	}
	api := in.StemcellAPIVersion
	detachFrom := func(diskCID string) error {
		if !haveVM {
			return nil
		}
		if vm.AgentID != "" && d.cfg.Agents.WaitUntilReady(vm.AgentID, d.cfg.AgentPingTimeout) == nil {
			_, _ = d.cfg.Agents.Run(vm.AgentID, agentRemoveDynamicDisk, diskCID) // best effort, as reconcile
		}
		err := d.reconcileCall(func() error {
			return d.cfg.CPI.DetachDisk(cpiCtxFor(ctx, api), cpiv2.MustCID[cpiv2.VMKind](vm.CID), cpiv2.MustCID[cpiv2.DiskKind](diskCID))
		})
		if err == nil || errors.Is(err, cpiv2.ErrDiskNotAttached) || errors.Is(err, cpiv2.ErrVMNotFound) || errors.Is(err, cpiv2.ErrDiskNotFound) {
			return nil
		}
		return fmt.Errorf("detach_disk %s from %s: %w", diskCID, vm.CID, err)
	}
	switch {
	case swapped:
		if err := detachFrom(in.DiskCID); err != nil {
			return false, "", err
		}
		orphan := OrphanedDisk{CID: in.DiskCID, Name: in.DiskName, Deployment: dd.Deployment, SizeMiB: r.FromSizeMiB,
			Reason: fmt.Sprintf("replaced by %s when resized to %d MiB", r.NewDiskCID, r.SizeMiB), OrphanedAt: d.r.Now()}
		if err := d.st.Update(func(tx store.Tx) error {
			var o OrphanedDisk
			if has, err := tx.Get(store.OrphanedDisks, orphan.CID, &o); err != nil || has {
				return err
			}
			return tx.Put(store.OrphanedDisks, orphan.CID, orphan)
		}); err != nil {
			return false, "", err
		}
	case r.NewDiskCID != "":
		if err := detachFrom(r.NewDiskCID); err != nil {
			return false, "", err
		}
		err := d.reconcileCall(func() error { return d.cfg.CPI.DeleteDisk(ctx, cpiv2.MustCID[cpiv2.DiskKind](r.NewDiskCID)) })
		if err != nil && !errors.Is(err, cpiv2.ErrDiskNotFound) {
			return false, "", fmt.Errorf("delete_disk %s (the copy's new disk): %w", r.NewDiskCID, err)
		}
	}
	if !ok {
		return true, "", end()
	}
	dd.State, dd.TaskID = DiskReady, 0
	if restart && !r.Copy && !r.Resized && dd.SizeMiB != r.SizeMiB {
		if resizer, can := d.cfg.CPI.(DiskResizer); can {
			if err := detachFrom(dd.CID); err != nil {
				return false, "", err
			}
			err := d.reconcileCall(func() error {
				return resizer.ResizeDisk(cpiCtxFor(ctx, api), cpiv2.MustCID[cpiv2.DiskKind](dd.CID), r.SizeMiB)
			})
			switch {
			case err == nil:
				dd.SizeMiB = r.SizeMiB
			case errors.Is(err, cpiv2.ErrNotSupported), errors.Is(err, cpiv2.ErrNotImplemented):
				// never applied: the size stays
			default:
				return false, fmt.Sprintf("resize_disk %s to %d MiB: %v", dd.CID, r.SizeMiB, err), nil
			}
		}
	}
	if !haveVM {
		dd.VMCID, dd.InstanceID, dd.Hint = "", "", nil
		rec := dd
		return true, "", d.st.Update(func(tx store.Tx) error {
			if err := tx.Put(store.DynamicDisks, rec.Name, rec); err != nil {
				return err
			}
			return endIntent(tx, in)
		})
	}
	var hint cpiv2.DiskHint
	err = d.reconcileCall(func() error {
		var err error
		hint, err = d.cfg.CPI.AttachDisk(cpiCtxFor(ctx, api), cpiv2.MustCID[cpiv2.VMKind](vm.CID), cpiv2.MustCID[cpiv2.DiskKind](dd.CID))
		return err
	})
	if errors.Is(err, cpiv2.ErrVMNotFound) {
		dd.VMCID, dd.InstanceID, dd.Hint = "", "", nil
		rec := dd
		return true, "", d.st.Update(func(tx store.Tx) error {
			if err := tx.Put(store.DynamicDisks, rec.Name, rec); err != nil {
				return err
			}
			return endIntent(tx, in)
		})
	}
	if err != nil {
		// Record the disk detached, as the IaaS most likely has it.
		dd.VMCID, dd.InstanceID, dd.Hint = "", "", nil
		rec := dd
		_ = d.st.Update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, rec.Name, rec) })
		return false, fmt.Sprintf("attach_disk %s to %s: %v", dd.CID, vm.CID, err), nil
	}
	dd.VMCID, dd.InstanceID, dd.Hint = vm.CID, in.InstanceID, nil
	if !hint.IsZero() {
		b, err := json.Marshal(hint)
		if err != nil {
			return false, "", fmt.Errorf("encode disk hint: %w", err)
		}
		dd.Hint = b
	}
	rec := dd
	if err := d.st.Update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, rec.Name, rec) }); err != nil {
		return false, "", err
	}
	if len(dd.Hint) > 0 && vm.AgentID != "" {
		if err := d.cfg.Agents.WaitUntilReady(vm.AgentID, d.cfg.AgentTimeout); err != nil {
			return false, fmt.Sprintf("agent %s on %s not ready to link %s: %v", vm.AgentID, vm.CID, dd.CID, err), nil
		}
		if _, err := d.cfg.Agents.Run(vm.AgentID, agentAddDynamicDisk, dd.CID, dd.Hint); err != nil && !IsUnknownMessage(err) {
			return false, fmt.Sprintf("agent %s add_dynamic_disk %s: %v", vm.AgentID, dd.CID, err), nil
		}
	}
	return true, "", end()
}
