package director

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director/store"
)

// ReasonRestarted is the error of a task that was processing when the
// director stopped.
const ReasonRestarted = "director restarted while this task was processing; its work was reconciled"

// recover runs at start, before the workers: tasks in flight end as error,
// queued tasks are queued again, and the IaaS is reconciled with the store.
func (d *Director) recover() error {
	var requeue []Task
	err := d.st.Update(func(tx store.Tx) error {
		var fail []Task
		if err := tx.List(store.Tasks, func(_ string, raw []byte) error {
			var t Task
			if err := json.Unmarshal(raw, &t); err != nil {
				return err
			}
			switch t.State {
			case TaskProcessing:
				fail = append(fail, t)
			case TaskQueued:
				requeue = append(requeue, t)
			}
			return nil
		}); err != nil {
			return err
		}
		for _, t := range fail {
			t.State, t.Error, t.EndedAt = TaskError, ReasonRestarted, d.r.Now()
			if err := tx.Put(store.Tasks, store.IDKey(t.ID), t); err != nil {
				return err
			}
		}
		// Locks died with the process that held them.
		var names []string
		if err := tx.List(store.Locks, func(key string, _ []byte) error {
			names = append(names, key)
			return nil
		}); err != nil {
			return err
		}
		for _, n := range names {
			if err := tx.Delete(store.Locks, n); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("director: recover tasks: %w", err)
	}
	if err := d.Reconcile(); err != nil {
		return fmt.Errorf("director: reconcile: %w", err)
	}
	for _, t := range requeue {
		d.push(t.Queue, t.ID)
	}
	return nil
}

// Reconcile brings the store and the IaaS back in line after a crash (New
// calls it before starting workers; it must not run beside jobs):
//
//   - intents are settled: a create_vm in flight has its VM found (by
//     agent ID, in the VMInventory or from the agent) and deleted; a
//     delete_vm or an orphan's delete_disk in flight is finished; a
//     set_disk_metadata in flight is made again and recorded; a
//     create_stemcell in flight has its stemcell recorded (with a
//     StemcellInventory);
//   - a recorded VM the IaaS no longer has (has_vm false, or get_disks
//     answering VMNotFound) is forgotten: its record, the instance's
//     reference, the attachments naming it;
//   - a disk whose create_disk was in flight (no CID recorded) loses its
//     record; with an Inventory, any IaaS disk the director does not know is
//     recorded as an orphaned disk;
//   - an attach in flight is undone (detach_disk), leaving the disk
//     detached: the orchestrator provides it again;
//   - a detach in flight is finished; a delete in flight is finished;
//   - a record naming a deleted VM loses its attachment;
//   - each VM's get_disks is compared with the records: a known disk
//     attached without a record of it is detached; an unknown disk is
//     detached and recorded as an orphaned disk.
//
// Every CPI call is made again while it fails with a retryable error
// (Config.ReconcileTries, Config.ReconcileBackoff on the runtime's clock).
// A VM whose get_disks still fails is skipped and noted (ReconcileNotes):
// one VM the CPI cannot list does not keep the director from starting.
func (d *Director) Reconcile() error {
	ctx := context.Background()
	d.mu.Lock()
	d.notes = nil
	d.mu.Unlock()
	if err := d.reconcileVMs(ctx); err != nil {
		return err
	}
	disks, err := d.listDynamicDisks(nil)
	if err != nil {
		return err
	}
	vms, err := listAll[VM](d.st, store.VMs, nil) // those reconcileVMs kept
	if err != nil {
		return err
	}
	vmByCID := map[string]VM{}
	for _, v := range vms {
		vmByCID[v.CID] = v
	}
	put := func(dd DynamicDisk) error {
		return d.st.Update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, dd) })
	}
	lookup := func(cid string) (VM, bool) {
		v, ok := vmByCID[cid]
		return v, ok
	}
	detach := func(vmCID, diskCID string) error {
		v, _ := lookup(vmCID)
		return d.reconcileDetach(ctx, v, vmCID, diskCID)
	}
	for _, dd := range disks {
		if err := d.settleDisk(ctx, dd, lookup); err != nil {
			return err
		}
	}
	// Compare each VM's disks with the records.
	disks, err = d.listDynamicDisks(nil)
	if err != nil {
		return err
	}
	byCID := map[string]DynamicDisk{}
	for _, dd := range disks {
		byCID[dd.CID] = dd
	}
	orphans, err := listAll[OrphanedDisk](d.st, store.OrphanedDisks, nil)
	if err != nil {
		return err
	}
	orphaned := map[string]bool{}
	for _, o := range orphans {
		orphaned[o.CID] = true
	}
	orphan := func(cid, reason string) error {
		if orphaned[cid] {
			return nil
		}
		orphaned[cid] = true
		return d.st.Update(func(tx store.Tx) error {
			return tx.Put(store.OrphanedDisks, cid, OrphanedDisk{CID: cid, Reason: reason, OrphanedAt: d.r.Now()})
		})
	}
	for _, v := range vms {
		var got []cpiv2.DiskCID
		err := d.reconcileCall(func() error {
			var err error
			got, err = d.cfg.CPI.GetDisks(cpiCtxFor(ctx, v.StemcellAPIVersion), cpiv2.MustCID[cpiv2.VMKind](v.CID))
			return err
		})
		if errors.Is(err, cpiv2.ErrNotImplemented) || errors.Is(err, cpiv2.ErrVMNotFound) {
			continue
		}
		if err != nil {
			// One VM the CPI cannot list keeps its records as they are;
			// the director starts, and the next start looks again.
			d.note("get_disks %s failed (called again while retryable, %d calls at most): %v; its attachments were not compared",
				v.CID, d.cfg.ReconcileTries, err)
			continue
		}
		var onVM []string
		for _, c := range got {
			onVM = append(onVM, c.String())
		}
		for _, cid := range onVM {
			dd, known := byCID[cid]
			if known && dd.VMCID == v.CID {
				continue
			}
			if err := detach(v.CID, cid); err != nil {
				return fmt.Errorf("detach stray disk %s from %s: %w", cid, v.CID, err)
			}
			if !known {
				if err := orphan(cid, fmt.Sprintf("found attached to %s on restart, unknown to the director", v.CID)); err != nil {
					return err
				}
			}
		}
		for _, dd := range disks {
			if dd.VMCID == v.CID && !slices.Contains(onVM, dd.CID) {
				dd.VMCID, dd.InstanceID, dd.Hint = "", "", nil
				if err := put(dd); err != nil {
					return err
				}
			}
		}
	}
	if d.cfg.Inventory != nil {
		var all []cpiv2.DiskCID
		err := d.reconcileCall(func() error {
			var err error
			all, err = d.cfg.Inventory.ListDisks(ctx)
			return err
		})
		if err != nil {
			return fmt.Errorf("list IaaS disks: %w", err)
		}
		for _, c := range all {
			if _, known := byCID[c.String()]; !known {
				if err := orphan(c.String(), "found in the IaaS on restart, unknown to the director"); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// reconcileDetach detaches a disk for reconciliation: the agent (if it
// answers) unlinks it first, then detach_disk; a disk or VM already gone or
// a disk not attached counts as done. v is the VM's record (zero: unknown).
func (d *Director) reconcileDetach(ctx context.Context, v VM, vmCID, diskCID string) error {
	// Best effort: the agent may hold a link to the disk. An agent that
	// does not answer keeps it; detach_disk needs no agent.
	if v.AgentID != "" && d.cfg.Agents.WaitUntilReady(v.AgentID, d.cfg.AgentPingTimeout) == nil {
		_, _ = d.cfg.Agents.Run(v.AgentID, agentRemoveDynamicDisk, diskCID)
	}
	err := d.reconcileCall(func() error {
		return d.cfg.CPI.DetachDisk(cpiCtxFor(ctx, v.StemcellAPIVersion), cpiv2.MustCID[cpiv2.VMKind](vmCID),
			cpiv2.MustCID[cpiv2.DiskKind](diskCID))
	})
	if errors.Is(err, cpiv2.ErrDiskNotAttached) || errors.Is(err, cpiv2.ErrVMNotFound) || errors.Is(err, cpiv2.ErrDiskNotFound) {
		return nil
	}
	return err
}

// settleDisk brings one dynamic disk record out of the transient state a
// stopped task left it in: a create in flight loses its record, an attach
// or detach in flight ends detached, a delete in flight is finished. A
// settled record naming a VM that vm does not know loses its attachment.
// The record is written back ready (or removed).
func (d *Director) settleDisk(ctx context.Context, dd DynamicDisk, vm func(cid string) (VM, bool)) error {
	put := func(dd DynamicDisk) error {
		return d.st.Update(func(tx store.Tx) error { return tx.Put(store.DynamicDisks, dd.Name, dd) })
	}
	del := func(name string) error {
		return d.st.Update(func(tx store.Tx) error { return tx.Delete(store.DynamicDisks, name) })
	}
	detach := func(vmCID, diskCID string) error {
		v, _ := vm(vmCID)
		return d.reconcileDetach(ctx, v, vmCID, diskCID)
	}
	switch dd.State {
	case DiskCreating:
		return del(dd.Name)
	case DiskAttaching, DiskDetaching:
		if err := detach(dd.VMCID, dd.CID); err != nil {
			return fmt.Errorf("finish detach of %s from %s: %w", dd.CID, dd.VMCID, err)
		}
		dd.VMCID, dd.InstanceID, dd.Hint = "", "", nil
	case DiskDeleting:
		if dd.VMCID != "" {
			if err := detach(dd.VMCID, dd.CID); err != nil {
				return fmt.Errorf("detach %s from %s before delete: %w", dd.CID, dd.VMCID, err)
			}
		}
		err := d.reconcileCall(func() error { return d.cfg.CPI.DeleteDisk(ctx, cpiv2.MustCID[cpiv2.DiskKind](dd.CID)) })
		if err != nil && !errors.Is(err, cpiv2.ErrDiskNotFound) {
			return fmt.Errorf("finish delete of %s: %w", dd.CID, err)
		}
		return del(dd.Name)
	}
	if dd.VMCID != "" {
		if _, ok := vm(dd.VMCID); !ok {
			dd.VMCID, dd.InstanceID, dd.Hint = "", "", nil
		}
	}
	dd.State, dd.TaskID = DiskReady, 0
	return put(dd)
}

func cpiCtxFor(ctx context.Context, stemcellAPI int) context.Context {
	if stemcellAPI > 0 {
		return cpiv2.WithStemcellAPIVersion(ctx, stemcellAPI)
	}
	return ctx
}
