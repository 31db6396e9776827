package director

import (
	"encoding/json"
	"time"

	"github.com/cpilab/cpilab/director/store"
)

// IntentOp names a CPI call whose outcome the director could lose to a
// crash: the call may take effect in the IaaS while the director dies before
// recording it. Dynamic disks carry the same information in their transient
// states (DiskCreating, DiskAttaching, …); intents cover the rest.
type IntentOp string

// Intent operations.
const (
	// IntentCreateVM: create_vm for an instance's new agent ID. A crash
	// after the call and before the VM record leaves a VM only the IaaS
	// (or the VM's agent) knows; restart finds it by agent ID and deletes
	// it, leaving the instance without a VM, as a failed create would.
	IntentCreateVM IntentOp = "create_vm"
	// IntentDeleteVM: delete_vm of a recorded VM. Restart finishes the
	// delete and removes the VM's record (the instance loses its VM, the
	// disks attached to it their attachment).
	IntentDeleteVM IntentOp = "delete_vm"
	// IntentDeleteOrphanedDisk: delete_disk of an orphaned disk. Restart
	// finishes the delete and removes the orphan's record.
	IntentDeleteOrphanedDisk IntentOp = "delete_orphaned_disk"
	// IntentCreateStemcell: create_stemcell of an upload. Written only
	// when the director has a StemcellLister: it lists the IaaS's
	// stemcells before the call, and restart records the one stemcell
	// that appeared since and is not recorded (the upload then counts as
	// done), or drops the intent when none did.
	IntentCreateStemcell IntentOp = "create_stemcell"
	// IntentSetDiskMetadata: set_disk_metadata of a dynamic disk. Restart
	// calls it again (it is idempotent) and records the metadata, so the
	// record says what the IaaS holds.
	IntentSetDiskMetadata IntentOp = "set_disk_metadata"
)

// Intent is a durable record written before a CPI call whose outcome a
// crash could lose, and removed in the same store transaction that records
// the outcome. One found at start-up marks a call interrupted by a crash;
// Reconcile settles it (see the IntentOp constants).
type Intent struct {
	ID     int64    `json:"id"`
	Op     IntentOp `json:"op"`
	TaskID int64    `json:"task_id,omitempty"`
	// The call's subjects; which are set depends on Op.
	InstanceID string `json:"instance_id,omitempty"`
	AgentID    string `json:"agent_id,omitempty"`
	VMCID      string `json:"vm_cid,omitempty"`
	DiskCID    string `json:"disk_cid,omitempty"`
	DiskName   string `json:"disk_name,omitempty"`
	// Metadata is what set_disk_metadata sets (IntentSetDiskMetadata).
	Metadata map[string]string `json:"metadata,omitempty"`
	// Request is the metadata as the request gave it, recorded on the disk
	// once set (IntentSetDiskMetadata).
	Request map[string]any `json:"request,omitempty"`
	// StemcellAPIVersion is sent in the context of the calls that settle
	// the intent.
	StemcellAPIVersion int `json:"stemcell_api_version,omitempty"`
	// Stemcell is the record an upload writes once it has the CID
	// (IntentCreateStemcell), and StemcellsBefore the IaaS's stemcell
	// CIDs before the call.
	Stemcell        *Stemcell `json:"stemcell,omitempty"`
	StemcellsBefore []string  `json:"stemcells_before,omitempty"`
	// Resize is how far a resize went (IntentResizeDisk).
	Resize *ResizeIntent `json:"resize,omitempty"`

	CreatedAt time.Time `json:"created_at"`
	// Unsettled counts the start-ups whose reconciliation could not settle
	// the intent (the IaaS or the agent did not answer); it stays until one
	// can.
	Unsettled int    `json:"unsettled,omitempty"`
	Note      string `json:"note,omitempty"` // why the last reconciliation could not settle it
}

// beginIntent records in before its call, inside tx (with whatever else the
// job records just before the call), and sets in.ID.
func (j *job) beginIntent(tx store.Tx, in *Intent) error {
	id, err := tx.NextID(string(store.Intents))
	if err != nil {
		return err
	}
	in.ID, in.TaskID, in.CreatedAt = id, j.task.ID, j.d.r.Now()
	return tx.Insert(store.Intents, store.IDKey(id), in)
}

// endIntent removes a settled intent, inside the transaction that records
// the call's outcome.
func endIntent(tx store.Tx, in Intent) error {
	if in.ID == 0 {
		return nil
	}
	return tx.Delete(store.Intents, store.IDKey(in.ID))
}

// Intents lists the intents on record: none while no job is calling the
// CPI, and after start-up only those reconciliation could not settle.
func (d *Director) Intents() ([]Intent, error) {
	return listAll[Intent](d.st, store.Intents, nil)
}

// forgetVM removes a VM the IaaS no longer has from the records, inside tx:
// its record, the instance's reference to it (the instance keeps its desired
// state and gets a new VM on its next start or deploy), and the attachment
// of every settled dynamic disk record naming it (as upstream's foreign key,
// ON DELETE SET NULL). Disks in a transient state are left to the disk
// reconciliation.
func forgetVM(tx store.Tx, vmCID, instanceID string) error {
	if err := tx.Delete(store.VMs, vmCID); err != nil {
		return err
	}
	if instanceID != "" {
		var inst Instance
		ok, err := tx.Get(store.Instances, instanceID, &inst)
		if err != nil {
			return err
		}
		if ok && inst.VMCID == vmCID {
			inst.VMCID = ""
			if err := tx.Put(store.Instances, inst.ID, inst); err != nil {
				return err
			}
		}
	}
	var detached []DynamicDisk
	if err := tx.List(store.DynamicDisks, func(_ string, raw []byte) error {
		var dd DynamicDisk
		if err := json.Unmarshal(raw, &dd); err != nil {
			return err
		}
		if dd.VMCID == vmCID && dd.State == DiskReady {
			dd.VMCID, dd.InstanceID, dd.Hint = "", "", nil
			detached = append(detached, dd)
		}
		return nil
	}); err != nil {
		return err
	}
	for _, dd := range detached {
		if err := tx.Put(store.DynamicDisks, dd.Name, dd); err != nil {
			return err
		}
	}
	return nil
}
