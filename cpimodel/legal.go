package cpimodel

import "slices"

// The clauses the model cites (docs/contracts.md).
const (
	ClauseEffect     = "model.effect"
	ClauseFrame      = "model.frame"
	ClauseFailedCall = "model.failed-call"
	ClauseAnswers    = "model.answers"
	ClauseRegistry   = "model.registry"
)

// Error types of the contract the model names.
const (
	TypeNotImplemented  = "Bosh::Clouds::NotImplemented"
	TypeNotSupported    = "Bosh::Clouds::NotSupported"
	TypeVMNotFound      = "Bosh::Clouds::VMNotFound"
	TypeDiskNotFound    = "Bosh::Clouds::DiskNotFound"
	TypeDiskNotAttached = "Bosh::Clouds::DiskNotAttached"
	TypeVMCreation      = "Bosh::Clouds::VMCreationFailed"
	TypeCloudError      = "Bosh::Clouds::CloudError"
)

// Outcomes is what the contract allows one call in one state.
type Outcomes struct {
	// Known is false for a method the model does not know, or arguments
	// it cannot read; then NotChecked says why and nothing else is set.
	Known      bool
	NotChecked string
	// Succeed is whether success is legal; Effect says what success does
	// (the next state), citing Clause.
	Succeed bool
	Effect  string
	Clause  string
	// Tolerated are the error types a caller tolerates here, with the
	// cloud unchanged outside the objects the call names. Any other error
	// is judged by the errors.* clauses, not by the model; the model only
	// asks that it create nothing and change nothing else.
	Tolerated []string
	// Latitude lists what the contract leaves to the CPI here.
	Latitude []string
	// Touches names the objects the call may change ("vm <cid>", "disk
	// <cid>", "registry <vm cid>", "new vm", …); everything else must stay
	// as it was (model.frame).
	Touches []string
}

// Methods the model knows.
var Methods = []string{"info", "create_stemcell", "delete_stemcell", "create_vm", "delete_vm", "has_vm",
	"reboot_vm", "set_vm_metadata", "calculate_vm_cloud_properties", "create_disk", "delete_disk", "has_disk",
	"attach_disk", "detach_disk", "set_disk_metadata", "get_disks", "resize_disk", "update_disk",
	"snapshot_disk", "delete_snapshot"}

// footprint is what a call may change.
type footprint struct {
	stemcells, vms, disks, snapshots, registry map[string]bool
	// newStemcell … newSnapshot: how many objects of the kind the call may
	// create.
	newStemcells, newVMs, newDisks, newSnapshots int
	// newRegistry: the call may write the settings of a VM it creates.
	newRegistry bool
}

func (f footprint) touches() []string {
	var out []string
	add := func(kind string, m map[string]bool) {
		for _, k := range sortedKeys(m) {
			out = append(out, kind+" "+k)
		}
	}
	add("stemcell", f.stemcells)
	add("vm", f.vms)
	add("disk", f.disks)
	add("snapshot", f.snapshots)
	add("registry", f.registry)
	for kind, n := range map[string]int{"stemcell": f.newStemcells, "vm": f.newVMs, "disk": f.newDisks, "snapshot": f.newSnapshots} {
		if n > 0 {
			out = append(out, "new "+kind)
		}
	}
	slices.Sort(out)
	return out
}

func set(keys ...string) map[string]bool {
	m := map[string]bool{}
	for _, k := range keys {
		if k != "" {
			m[k] = true
		}
	}
	return m
}

// plan is Legal's work: the outcomes and the footprint.
type plan struct {
	Outcomes
	fp footprint
}

// Legal returns the outcomes the contract allows call c in state s.
func Legal(s State, c Call) Outcomes { return legal(s, c).Outcomes }

func legal(s State, c Call) plan {
	p := plan{fp: footprint{stemcells: set(), vms: set(), disks: set(), snapshots: set(), registry: set()}}
	p.Known = true
	p.Succeed = true
	unread := "the result is read by no caller: any value"
	argErr := func(what string) plan {
		return plan{Outcomes: Outcomes{NotChecked: c.Method + ": " + what + " (the model checks well-formed calls only)"}}
	}
	switch c.Method {
	case "info", "calculate_vm_cloud_properties":
		p.Clause, p.Effect = ClauseFrame, "changes nothing"
	case "create_stemcell":
		p.Clause, p.Effect = ClauseEffect, "one new stemcell, the CID returned; at api_version 3 it carries the tags of env.tags"
		p.fp.newStemcells = 1
		p.Latitude = append(p.Latitude, "tag keys and values may be sanitised as the cloud requires (case, characters, length)")
	case "delete_stemcell":
		cid, ok := c.str(0)
		if !ok {
			return argErr("stemcell_cid is not a string")
		}
		p.Clause, p.Effect = ClauseEffect, "the stemcell is gone; VMs made from it stay"
		p.fp.stemcells = set(cid)
		p.Latitude = append(p.Latitude, "deleting a stemcell that is gone succeeds", unread)
	case "create_vm":
		if _, ok := c.str(0); !ok {
			return argErr("agent_id is not a string")
		}
		if _, ok := c.str(1); !ok {
			return argErr("stemcell_cid is not a string")
		}
		p.Clause, p.Effect = ClauseEffect, "one new VM, the CID returned, of the agent_id and stemcell asked, holding the cloud_properties asked, no disk attached; disks named in disk_cids stay where they are"
		p.fp.newVMs, p.fp.newRegistry = 1, true
		p.Tolerated = []string{TypeVMCreation}
		p.Latitude = append(p.Latitude, "networks and env may gain members of the CPI's own (a MAC address, defaults)", "metadata of the CPI's own may be set")
	case "delete_vm":
		vm, ok := c.str(0)
		if !ok {
			return argErr("vm_cid is not a string")
		}
		p.Clause, p.Effect = ClauseEffect, "the VM is gone, its disks detached and kept, its registry settings deleted"
		p.fp.vms, p.fp.registry = set(vm), set(vm)
		for _, d := range attachedTo(s, vm) {
			p.fp.disks[d] = true
		}
		p.Tolerated = []string{TypeVMNotFound}
		p.Latitude = append(p.Latitude, "deleting a VM that is gone succeeds or raises VMNotFound", unread)
	case "has_vm", "has_disk":
		if _, ok := c.str(0); !ok {
			return argErr("the CID is not a string")
		}
		p.Clause, p.Effect = ClauseAnswers, "changes nothing; answers whether the object exists"
		p.Tolerated = []string{TypeNotImplemented}
	case "reboot_vm":
		vm, ok := c.str(0)
		if !ok {
			return argErr("vm_cid is not a string")
		}
		p.Succeed = exists(s.VMs, vm)
		p.Clause, p.Effect = ClauseEffect, "the VM boots again and keeps everything else: metadata, disks, settings"
		p.fp.vms = set(vm)
		p.Tolerated = []string{TypeVMNotFound}
		p.Latitude = append(p.Latitude, "devices of attached disks may be renamed by the boot", unread)
	case "set_vm_metadata":
		vm, ok := c.str(0)
		if _, mok := c.meta(1); !ok || !mok {
			return argErr("vm_cid is not a string or metadata not a hash")
		}
		p.Succeed = exists(s.VMs, vm)
		p.Clause, p.Effect = ClauseEffect, "the VM's metadata holds every key asked"
		p.fp.vms = set(vm)
		p.Tolerated = []string{TypeVMNotFound, TypeNotImplemented}
		p.Latitude = append(p.Latitude, "keys and values may be sanitised as the cloud requires", "keys not asked may stay (merge) or go (replace)", unread)
	case "create_disk":
		if _, ok := c.num(0); !ok {
			return argErr("size is not an integer")
		}
		p.Clause, p.Effect = ClauseEffect, "one new disk, the CID returned, of at least the size asked, holding the cloud_properties asked, detached"
		p.fp.newDisks = 1
		p.Latitude = append(p.Latitude, "the size may be rounded up to the next whole GiB")
	case "delete_disk":
		d, ok := c.str(0)
		if !ok {
			return argErr("disk_cid is not a string")
		}
		p.Clause, p.Effect = ClauseEffect, "the disk is gone; its snapshots stay"
		p.fp.disks = set(d)
		p.Tolerated = []string{TypeDiskNotFound}
		p.Latitude = append(p.Latitude, "deleting a disk that is gone succeeds or raises DiskNotFound", unread)
	case "attach_disk":
		vm, ok1 := c.str(0)
		d, ok2 := c.str(1)
		if !ok1 || !ok2 {
			return argErr("vm_cid or disk_cid is not a string")
		}
		p.Succeed = exists(s.VMs, vm) && exists(s.Disks, d)
		p.Clause, p.Effect = ClauseEffect, "the disk is attached to the VM; the VM's other disks keep their devices"
		p.fp.vms, p.fp.disks, p.fp.registry = set(vm), set(d), set(vm)
		if dk, ok := s.Disks[d]; ok && dk.AttachedTo != "" && dk.AttachedTo != vm {
			// The Director detaches first; a CPI may refuse, or move it.
			p.fp.vms[dk.AttachedTo], p.fp.registry[dk.AttachedTo] = true, true
			p.Latitude = append(p.Latitude, "a disk attached to another VM may be refused or moved")
		}
		p.Tolerated = []string{TypeVMNotFound, TypeDiskNotFound}
		p.Latitude = append(p.Latitude, "attaching a disk already attached to the VM succeeds (idempotent)")
	case "detach_disk":
		vm, ok1 := c.str(0)
		d, ok2 := c.str(1)
		if !ok1 || !ok2 {
			return argErr("vm_cid or disk_cid is not a string")
		}
		p.Clause, p.Effect = ClauseEffect, "the disk is detached from the VM and kept; the VM's other disks stay attached"
		p.fp.vms, p.fp.disks, p.fp.registry = set(vm), set(d), set(vm)
		p.Tolerated = []string{TypeVMNotFound, TypeDiskNotFound, TypeDiskNotAttached}
		p.Latitude = append(p.Latitude, "detaching a detached disk succeeds or raises DiskNotAttached", unread)
	case "set_disk_metadata":
		d, ok := c.str(0)
		if _, mok := c.meta(1); !ok || !mok {
			return argErr("disk_cid is not a string or metadata not a hash")
		}
		p.Succeed = exists(s.Disks, d)
		p.Clause, p.Effect = ClauseEffect, "the disk's metadata holds every key asked"
		p.fp.disks = set(d)
		p.Tolerated = []string{TypeDiskNotFound, TypeNotImplemented}
		p.Latitude = append(p.Latitude, "keys and values may be sanitised as the cloud requires", "keys not asked may stay (merge) or go (replace)", unread)
	case "get_disks":
		if _, ok := c.str(0); !ok {
			return argErr("vm_cid is not a string")
		}
		p.Clause, p.Effect = ClauseAnswers, "changes nothing; answers exactly the disks attached to the VM"
		p.Tolerated = []string{TypeVMNotFound}
	case "resize_disk":
		d, ok := c.str(0)
		if _, nok := c.num(1); !ok || !nok {
			return argErr("disk_cid is not a string or the size not an integer")
		}
		p.Succeed = exists(s.Disks, d)
		p.Clause, p.Effect = ClauseEffect, "the disk has at least the new size, and keeps its CID, cloud_properties and metadata"
		p.fp.disks = set(d)
		p.Tolerated = []string{TypeNotSupported, TypeNotImplemented, TypeDiskNotFound}
		p.Latitude = append(p.Latitude, "NotSupported (the Director copies to a new disk)", "the size may be rounded up to the next whole GiB", unread)
	case "update_disk":
		d, ok := c.str(0)
		if _, nok := c.num(1); !ok || !nok {
			return argErr("disk_cid is not a string or the size not an integer")
		}
		p.Succeed = exists(s.Disks, d)
		p.Clause, p.Effect = ClauseEffect, "the disk (or a new one whose CID is returned, the old one then gone) has at least the new size and the cloud_properties asked"
		p.fp.disks, p.fp.newDisks = set(d), 1
		p.Tolerated = []string{TypeNotSupported, TypeNotImplemented, TypeDiskNotFound}
		p.Latitude = append(p.Latitude, "NotSupported (the Director copies to a new disk)", "a new disk in place of the old one, its CID returned")
	case "snapshot_disk":
		d, ok := c.str(0)
		if !ok {
			return argErr("disk_cid is not a string")
		}
		p.Succeed = exists(s.Disks, d)
		p.Clause, p.Effect = ClauseEffect, "one new snapshot, the CID returned, of the disk asked; the disk is unchanged"
		p.fp.newSnapshots = 1
		p.Tolerated = []string{TypeDiskNotFound, TypeNotImplemented}
		p.Latitude = append(p.Latitude, "the snapshot's metadata is not read back by anyone")
	case "delete_snapshot":
		sn, ok := c.str(0)
		if !ok {
			return argErr("snapshot_cid is not a string")
		}
		p.Clause, p.Effect = ClauseEffect, "the snapshot is gone; its disk stays"
		p.fp.snapshots = set(sn)
		p.Tolerated = []string{TypeDiskNotFound}
		p.Latitude = append(p.Latitude, "deleting a snapshot that is gone succeeds or raises the not-found type", unread)
	default:
		p.Clause, p.Effect = ClauseFrame, "an unknown method changes nothing"
		p.Succeed = false
	}
	p.Touches = p.fp.touches()
	return p
}

func exists[T any](m map[string]T, k string) bool { _, ok := m[k]; return ok }

func attachedTo(s State, vm string) []string {
	var out []string
	for cid, d := range s.Disks {
		if d.AttachedTo == vm {
			out = append(out, cid)
		}
	}
	if v, ok := s.VMs[vm]; ok {
		for cid := range v.Disks {
			if !slices.Contains(out, cid) {
				out = append(out, cid)
			}
		}
	}
	slices.Sort(out)
	return out
}

func sortedKeys[T any](m map[string]T) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
