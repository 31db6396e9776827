package director

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director/store"
)

// ListedVM is one VM as an IaaS inventory lists it.
type ListedVM struct {
	CID     cpiv2.VMCID
	AgentID string // the agent_id create_vm was given
}

// VMLister is optional: an IaaS adapter that lists every VM with the agent
// ID it was created for lets restart reconciliation find a VM whose
// create_vm returned just before a crash, before its CID reached the store.
// Without it, reconciliation asks the VM's agent (get_state) instead.
type VMLister interface {
	ListVMs(ctx context.Context) ([]ListedVM, error)
}

// agentGetState asks an agent for its state, which names its VM.
const agentGetState = "get_state"

// vmChecker is the optional has_vm of a CPI.
type vmChecker interface {
	HasVM(ctx context.Context, cid cpiv2.VMCID) (bool, error)
}

// retryable reports whether a CPI error may go away by calling again: the
// CPI said so (ok_to_retry), or no answer came (a time-out, a lost or
// invalid response). Reconciliation makes only idempotent calls, so calling
// again is safe.
func retryable(err error) bool {
	var e *cpiv2.Error
	if errors.As(err, &e) {
		return e.OkToRetry
	}
	var ir *cpiv2.InvalidResponseError
	return errors.As(err, &ir)
}

// reconcileCall runs one CPI call of the restart reconciliation, calling it
// again while its error is retryable, up to Config.ReconcileTries calls,
// sleeping Config.ReconcileBackoff (doubling) on the runtime's clock in
// between.
func (d *Director) reconcileCall(fn func() error) error {
	err := fn()
	wait := d.cfg.ReconcileBackoff
	for try := 2; try <= d.cfg.ReconcileTries && err != nil && retryable(err); try++ {
		d.r.Sleep(wait)
		wait *= 2
		err = fn()
	}
	return err
}

// note records a reconciliation finding that did not stop the start.
func (d *Director) note(format string, args ...any) {
	d.mu.Lock()
	d.notes = append(d.notes, fmt.Sprintf(format, args...))
	d.mu.Unlock()
}

// ReconcileNotes lists what the last start-up reconciliation could not
// settle and left for later (a VM whose get_disks kept failing, an intent
// nobody could answer for), one line each.
func (d *Director) ReconcileNotes() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.notes...)
}

// reconcileVMs settles the intents a crash left, then forgets every
// recorded VM the IaaS no longer has. It runs first in Reconcile, so that
// the disk reconciliation sees only VMs that exist.
func (d *Director) reconcileVMs(ctx context.Context) error {
	intents, err := d.Intents()
	if err != nil {
		return err
	}
	if d.cfg.Knobs.NoVMReconcile {
		// As upstream: what was in flight is forgotten.
		return d.st.Update(func(tx store.Tx) error {
			for _, in := range intents {
				if err := endIntent(tx, in); err != nil {
					return err
				}
			}
			return nil
		})
	}
	for _, in := range intents {
		settled, why, err := d.settleIntent(ctx, in)
		if err != nil {
			return fmt.Errorf("settle %s intent %d of task %d: %w", in.Op, in.ID, in.TaskID, err)
		}
		if !settled {
			in.Unsettled++
			in.Note = why
			d.note("%s intent %d of task %d left for the next start: %s", in.Op, in.ID, in.TaskID, why)
			if err := d.st.Update(func(tx store.Tx) error { return tx.Put(store.Intents, store.IDKey(in.ID), in) }); err != nil {
				return err
			}
		}
	}
	vms, err := listAll[VM](d.st, store.VMs, nil)
	if err != nil {
		return err
	}
	for _, v := range vms {
		gone, err := d.vmGone(ctx, v)
		if err != nil {
			d.note("VM %s: could not tell whether it exists: %v", v.CID, err)
			continue
		}
		if gone {
			if err := d.st.Update(func(tx store.Tx) error { return forgetVM(tx, v.CID, v.InstanceID) }); err != nil {
				return err
			}
		}
	}
	return nil
}

// vmGone asks the CPI whether a recorded VM is gone: has_vm when the CPI
// has it, else get_disks answering VMNotFound.
func (d *Director) vmGone(ctx context.Context, v VM) (bool, error) {
	ctx = cpiCtxFor(ctx, v.StemcellAPIVersion)
	cid := cpiv2.MustCID[cpiv2.VMKind](v.CID)
	if c, ok := d.cfg.CPI.(vmChecker); ok {
		var exists bool
		err := d.reconcileCall(func() error {
			var err error
			exists, err = c.HasVM(ctx, cid)
			return err
		})
		if err == nil {
			return !exists, nil
		}
		if !errors.Is(err, cpiv2.ErrNotImplemented) {
			return false, err
		}
	}
	err := d.reconcileCall(func() error {
		_, err := d.cfg.CPI.GetDisks(ctx, cid)
		return err
	})
	switch {
	case errors.Is(err, cpiv2.ErrVMNotFound):
		return true, nil
	case err == nil, errors.Is(err, cpiv2.ErrNotImplemented):
		return false, nil
	}
	return false, err
}

// settleIntent finishes or undoes the call an intent records. settled false
// (with the reason) keeps the intent for the next start; an error stops the
// start.
func (d *Director) settleIntent(ctx context.Context, in Intent) (settled bool, why string, err error) {
	switch in.Op {
	case IntentCreateVM:
		return d.settleCreateVM(ctx, in)
	case IntentDeleteVM:
		err := d.reconcileCall(func() error {
			return d.cfg.CPI.DeleteVM(cpiCtxFor(ctx, in.StemcellAPIVersion), cpiv2.MustCID[cpiv2.VMKind](in.VMCID))
		})
		if err != nil && !errors.Is(err, cpiv2.ErrVMNotFound) {
			return false, "", fmt.Errorf("finish delete_vm %s: %w", in.VMCID, err)
		}
		return true, "", d.st.Update(func(tx store.Tx) error {
			if err := forgetVM(tx, in.VMCID, in.InstanceID); err != nil {
				return err
			}
			return endIntent(tx, in)
		})
	case IntentDeleteOrphanedDisk:
		err := d.reconcileCall(func() error {
			return d.cfg.CPI.DeleteDisk(ctx, cpiv2.MustCID[cpiv2.DiskKind](in.DiskCID))
		})
		if err != nil && !errors.Is(err, cpiv2.ErrDiskNotFound) {
			return false, "", fmt.Errorf("finish delete_disk of orphan %s: %w", in.DiskCID, err)
		}
		return true, "", d.st.Update(func(tx store.Tx) error {
			if err := tx.Delete(store.OrphanedDisks, in.DiskCID); err != nil {
				return err
			}
			return endIntent(tx, in)
		})
	case IntentCreateStemcell:
		return d.settleCreateStemcell(ctx, in)
	case IntentSetDiskMetadata:
		return d.settleSetDiskMetadata(ctx, in)
	case IntentResizeDisk:
		return d.convergeResize(ctx, in, true)
	}
	return false, "", fmt.Errorf("unknown intent op %q", in.Op)
}

// settleCreateVM finds the VM an interrupted create_vm may have made (by
// agent ID) and deletes it, unless the director recorded it after all.
func (d *Director) settleCreateVM(ctx context.Context, in Intent) (bool, string, error) {
	cid, known, why, err := d.findVM(ctx, in.AgentID)
	if err != nil || !known {
		return false, why, err
	}
	if cid != "" {
		if _, recorded, err := d.vm(cid); err != nil {
			return false, "", err
		} else if !recorded {
			err := d.reconcileCall(func() error {
				return d.cfg.CPI.DeleteVM(cpiCtxFor(ctx, in.StemcellAPIVersion), cpiv2.MustCID[cpiv2.VMKind](cid))
			})
			if err != nil && !errors.Is(err, cpiv2.ErrVMNotFound) {
				return false, "", fmt.Errorf("delete VM %s of an interrupted create_vm: %w", cid, err)
			}
		}
	}
	return true, "", d.st.Update(func(tx store.Tx) error { return endIntent(tx, in) })
}

// findVM looks for the VM created for agentID: in the VM inventory when
// there is one (a definitive answer), else by asking the agent for its VM's
// name (get_state). known is false when nothing could tell.
func (d *Director) findVM(ctx context.Context, agentID string) (cid string, known bool, why string, err error) {
	if d.cfg.VMInventory != nil {
		var vms []ListedVM
		if err := d.reconcileCall(func() error {
			var err error
			vms, err = d.cfg.VMInventory.ListVMs(ctx)
			return err
		}); err != nil {
			return "", false, fmt.Sprintf("listing the IaaS's VMs failed: %v", err), nil
		}
		for _, v := range vms {
			if v.AgentID == agentID {
				return v.CID.String(), true, "", nil
			}
		}
		return "", true, "", nil
	}
	if err := d.cfg.Agents.WaitUntilReady(agentID, d.cfg.AgentPingTimeout); err != nil {
		return "", false, fmt.Sprintf("no VM inventory, and agent %s does not answer: %v", agentID, err), nil
	}
	raw, err := d.cfg.Agents.Run(agentID, agentGetState)
	if err != nil {
		return "", false, fmt.Sprintf("agent %s get_state: %v", agentID, err), nil
	}
	var st struct {
		VM struct {
			Name string `json:"name"`
		} `json:"vm"`
	}
	if err := json.Unmarshal(raw, &st); err != nil || st.VM.Name == "" {
		return "", false, fmt.Sprintf("agent %s get_state names no VM: %s", agentID, raw), nil
	}
	if _, err := cpiv2.ParseCID[cpiv2.VMKind](st.VM.Name); err != nil {
		return "", false, fmt.Sprintf("agent %s get_state names VM %q: %v", agentID, st.VM.Name, err), nil
	}
	return st.VM.Name, true, "", nil
}

// abandonCreateVM settles the intent of a create_vm that failed. A CPI
// error object means the CPI made no VM (a CPI must not leave a half-made
// VM behind); with no answer at all (a time-out, an invalid or lost
// response) the VM may exist, so it is looked for and deleted as at
// restart. An intent this cannot settle stays for the next start.
func (j *job) abandonCreateVM(in Intent, callErr error) {
	var e *cpiv2.Error
	if errors.As(callErr, &e) || j.knobs().NoVMReconcile {
		_ = j.update(func(tx store.Tx) error { return endIntent(tx, in) })
		return
	}
	settled, why, err := j.d.settleCreateVM(context.Background(), in)
	if err != nil || !settled {
		j.debugf("create_vm for agent %s ended in doubt and its VM could not be settled (%s %v): left for restart", in.AgentID, why, err)
	}
}

// settleSetDiskMetadata calls an interrupted set_disk_metadata again and
// records the metadata, unless the disk's record is gone or names another
// disk by now.
func (d *Director) settleSetDiskMetadata(ctx context.Context, in Intent) (bool, string, error) {
	dd, ok, err := d.dynamicDisk(in.DiskName)
	if err != nil {
		return false, "", err
	}
	if ok && dd.CID == in.DiskCID {
		err := d.reconcileCall(func() error {
			return d.cfg.CPI.SetDiskMetadata(cpiCtxFor(ctx, in.StemcellAPIVersion), cpiv2.MustCID[cpiv2.DiskKind](in.DiskCID), in.Metadata)
		})
		switch {
		case errors.Is(err, cpiv2.ErrDiskNotFound):
			ok = false // the disk reconciliation deals with its record
		case err != nil && !errors.Is(err, cpiv2.ErrNotImplemented):
			return false, "", fmt.Errorf("set_disk_metadata %s again: %w", in.DiskCID, err)
		}
	}
	return true, "", d.st.Update(func(tx store.Tx) error {
		if ok && dd.CID == in.DiskCID {
			var now DynamicDisk
			if found, err := tx.Get(store.DynamicDisks, in.DiskName, &now); err != nil {
				return err
			} else if found && now.CID == in.DiskCID {
				now.Metadata = in.Request
				if err := tx.Put(store.DynamicDisks, in.DiskName, now); err != nil {
					return err
				}
			}
		}
		return endIntent(tx, in)
	})
}
