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

// unread is the latitude of a result no caller reads.
const unread = "the result is read by no caller: any value"

// rule fills in a plan for one method; it returns what is wrong with the
// arguments ("" when the model can read them).
type rule func(p *plan, s State, c Call) (badArgs string)

// rules are the legal outcomes of each method, by method.
var rules = map[string]rule{
	"info":                          legalReadOnly,
	"calculate_vm_cloud_properties": legalReadOnly,
	"create_stemcell":               legalCreateStemcell,
	"delete_stemcell":               legalDeleteStemcell,
	"create_vm":                     legalCreateVM,
	"delete_vm":                     legalDeleteVM,
	"has_vm":                        legalHas,
	"has_disk":                      legalHas,
	"reboot_vm":                     legalRebootVM,
	"set_vm_metadata":               legalSetVMMetadata,
	"create_disk":                   legalCreateDisk,
	"delete_disk":                   legalDeleteDisk,
	"attach_disk":                   legalAttachDisk,
	"detach_disk":                   legalDetachDisk,
	"set_disk_metadata":             legalSetDiskMetadata,
	"get_disks":                     legalGetDisks,
	"resize_disk":                   legalResizeDisk,
	"update_disk":                   legalUpdateDisk,
	"snapshot_disk":                 legalSnapshotDisk,
	"delete_snapshot":               legalDeleteSnapshot,
}

func legal(s State, c Call) plan {
	p := plan{fp: footprint{stemcells: set(), vms: set(), disks: set(), snapshots: set(), registry: set()}}
	p.Known = true
	p.Succeed = true
	r, ok := rules[c.Method]
	if !ok {
		p.Clause, p.Effect = ClauseFrame, "an unknown method changes nothing"
		p.Succeed = false
		p.Touches = p.fp.touches()
		return p
	}
	if bad := r(&p, s, c); bad != "" {
		return plan{Outcomes: Outcomes{NotChecked: c.Method + ": " + bad + " (the model checks well-formed calls only)"}}
	}
	if !s.Sees(SeenVMs) || !s.Sees(SeenDisks) {
		// Whether the object named exists is not known: success may be
		// legal.
		p.Succeed = true
	}
	p.Touches = p.fp.touches()
	return p
}

func legalReadOnly(p *plan, _ State, _ Call) string {
	p.Clause, p.Effect = ClauseFrame, "changes nothing"
	return ""
}

func legalCreateStemcell(p *plan, _ State, _ Call) string {
	p.Clause, p.Effect = ClauseEffect, "one new stemcell, the CID returned; at api_version 3 it carries the tags of env.tags"
	p.fp.newStemcells = 1
	p.Latitude = append(p.Latitude, "tag keys and values may be sanitised as the cloud requires (case, characters, length)")
	return ""
}

func legalDeleteStemcell(p *plan, _ State, c Call) string {
	cid, ok := c.str(0)
	if !ok {
		return "stemcell_cid is not a string"
	}
	p.Clause, p.Effect = ClauseEffect, "the stemcell is gone; VMs made from it stay"
	p.fp.stemcells = set(cid)
	p.Latitude = append(p.Latitude, "deleting a stemcell that is gone succeeds", unread)
	return ""
}

func legalCreateVM(p *plan, _ State, c Call) string {
	if _, ok := c.str(0); !ok {
		return "agent_id is not a string"
	}
	if _, ok := c.str(1); !ok {
		return "stemcell_cid is not a string"
	}
	p.Clause, p.Effect = ClauseEffect, "one new VM, the CID returned, of the agent_id and stemcell asked, holding the cloud_properties asked, no disk attached; disks named in disk_cids stay where they are"
	p.fp.newVMs, p.fp.newRegistry = 1, true
	p.Tolerated = []string{TypeVMCreation}
	p.Latitude = append(p.Latitude, "networks and env may gain members of the CPI's own (a MAC address, defaults)", "metadata of the CPI's own may be set")
	return ""
}

func legalDeleteVM(p *plan, s State, c Call) string {
	vm, ok := c.str(0)
	if !ok {
		return "vm_cid is not a string"
	}
	p.Clause, p.Effect = ClauseEffect, "the VM is gone, its disks detached and kept, its registry settings deleted"
	p.fp.vms, p.fp.registry = set(vm), set(vm)
	for _, d := range attachedTo(s, vm) {
		p.fp.disks[d] = true
	}
	p.Tolerated = []string{TypeVMNotFound}
	p.Latitude = append(p.Latitude, "deleting a VM that is gone succeeds or raises VMNotFound", unread)
	return ""
}

func legalHas(p *plan, _ State, c Call) string {
	if _, ok := c.str(0); !ok {
		return "the CID is not a string"
	}
	p.Clause, p.Effect = ClauseAnswers, "changes nothing; answers whether the object exists"
	p.Tolerated = []string{TypeNotImplemented}
	return ""
}

func legalRebootVM(p *plan, s State, c Call) string {
	vm, ok := c.str(0)
	if !ok {
		return "vm_cid is not a string"
	}
	p.Succeed = exists(s.VMs, vm)
	p.Clause, p.Effect = ClauseEffect, "the VM boots again and keeps everything else: metadata, disks, settings"
	p.fp.vms = set(vm)
	p.Tolerated = []string{TypeVMNotFound}
	p.Latitude = append(p.Latitude, "devices of attached disks may be renamed by the boot", unread)
	return ""
}

func legalSetVMMetadata(p *plan, s State, c Call) string {
	vm, ok := c.str(0)
	if _, mok := c.meta(1); !ok || !mok {
		return "vm_cid is not a string or metadata not a hash"
	}
	p.Succeed = exists(s.VMs, vm)
	p.Clause, p.Effect = ClauseEffect, "the VM's metadata holds every key asked"
	p.fp.vms = set(vm)
	p.Tolerated = []string{TypeVMNotFound, TypeNotImplemented}
	p.Latitude = append(p.Latitude, "keys and values may be sanitised as the cloud requires", "keys not asked may stay (merge) or go (replace)", unread)
	return ""
}

func legalCreateDisk(p *plan, _ State, c Call) string {
	if _, ok := c.num(0); !ok {
		return "size is not an integer"
	}
	p.Clause, p.Effect = ClauseEffect, "one new disk, the CID returned, of at least the size asked, holding the cloud_properties asked, detached"
	p.fp.newDisks = 1
	p.Latitude = append(p.Latitude, "the size may be rounded up to the next whole GiB")
	return ""
}

func legalDeleteDisk(p *plan, _ State, c Call) string {
	d, ok := c.str(0)
	if !ok {
		return "disk_cid is not a string"
	}
	p.Clause, p.Effect = ClauseEffect, "the disk is gone; its snapshots stay"
	p.fp.disks = set(d)
	p.Tolerated = []string{TypeDiskNotFound}
	p.Latitude = append(p.Latitude, "deleting a disk that is gone succeeds or raises DiskNotFound", unread)
	return ""
}

func legalAttachDisk(p *plan, s State, c Call) string {
	vm, ok1 := c.str(0)
	d, ok2 := c.str(1)
	if !ok1 || !ok2 {
		return "vm_cid or disk_cid is not a string"
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
	return ""
}

func legalDetachDisk(p *plan, _ State, c Call) string {
	vm, ok1 := c.str(0)
	d, ok2 := c.str(1)
	if !ok1 || !ok2 {
		return "vm_cid or disk_cid is not a string"
	}
	p.Clause, p.Effect = ClauseEffect, "the disk is detached from the VM and kept; the VM's other disks stay attached"
	p.fp.vms, p.fp.disks, p.fp.registry = set(vm), set(d), set(vm)
	p.Tolerated = []string{TypeVMNotFound, TypeDiskNotFound, TypeDiskNotAttached}
	p.Latitude = append(p.Latitude, "detaching a detached disk succeeds or raises DiskNotAttached", unread)
	return ""
}

func legalSetDiskMetadata(p *plan, s State, c Call) string {
	d, ok := c.str(0)
	if _, mok := c.meta(1); !ok || !mok {
		return "disk_cid is not a string or metadata not a hash"
	}
	p.Succeed = exists(s.Disks, d)
	p.Clause, p.Effect = ClauseEffect, "the disk's metadata holds every key asked"
	p.fp.disks = set(d)
	p.Tolerated = []string{TypeDiskNotFound, TypeNotImplemented}
	p.Latitude = append(p.Latitude, "keys and values may be sanitised as the cloud requires", "keys not asked may stay (merge) or go (replace)", unread)
	return ""
}

func legalGetDisks(p *plan, _ State, c Call) string {
	if _, ok := c.str(0); !ok {
		return "vm_cid is not a string"
	}
	p.Clause, p.Effect = ClauseAnswers, "changes nothing; answers exactly the disks attached to the VM"
	p.Tolerated = []string{TypeVMNotFound}
	return ""
}

func legalResizeDisk(p *plan, s State, c Call) string {
	d, ok := c.str(0)
	if _, nok := c.num(1); !ok || !nok {
		return "disk_cid is not a string or the size not an integer"
	}
	p.Succeed = exists(s.Disks, d)
	p.Clause, p.Effect = ClauseEffect, "the disk has at least the new size, and keeps its CID, cloud_properties and metadata"
	p.fp.disks = set(d)
	p.Tolerated = []string{TypeNotSupported, TypeNotImplemented, TypeDiskNotFound}
	p.Latitude = append(p.Latitude, "NotSupported (the Director copies to a new disk)", "the size may be rounded up to the next whole GiB", unread)
	return ""
}

func legalUpdateDisk(p *plan, s State, c Call) string {
	d, ok := c.str(0)
	if _, nok := c.num(1); !ok || !nok {
		return "disk_cid is not a string or the size not an integer"
	}
	p.Succeed = exists(s.Disks, d)
	p.Clause, p.Effect = ClauseEffect, "the disk (or a new one whose CID is returned, the old one then gone) has at least the new size and the cloud_properties asked"
	p.fp.disks, p.fp.newDisks = set(d), 1
	p.Tolerated = []string{TypeNotSupported, TypeNotImplemented, TypeDiskNotFound}
	p.Latitude = append(p.Latitude, "NotSupported (the Director copies to a new disk)", "a new disk in place of the old one, its CID returned")
	return ""
}

func legalSnapshotDisk(p *plan, s State, c Call) string {
	d, ok := c.str(0)
	if !ok {
		return "disk_cid is not a string"
	}
	p.Succeed = exists(s.Disks, d)
	p.Clause, p.Effect = ClauseEffect, "one new snapshot, the CID returned, of the disk asked; the disk is unchanged"
	p.fp.newSnapshots = 1
	p.Tolerated = []string{TypeDiskNotFound, TypeNotImplemented}
	p.Latitude = append(p.Latitude, "the snapshot's metadata is not read back by anyone")
	return ""
}

func legalDeleteSnapshot(p *plan, _ State, c Call) string {
	sn, ok := c.str(0)
	if !ok {
		return "snapshot_cid is not a string"
	}
	p.Clause, p.Effect = ClauseEffect, "the snapshot is gone; its disk stays"
	p.fp.snapshots = set(sn)
	p.Tolerated = []string{TypeDiskNotFound}
	p.Latitude = append(p.Latitude, "deleting a snapshot that is gone succeeds or raises the not-found type", unread)
	return ""
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
