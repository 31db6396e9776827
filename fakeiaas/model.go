package fakeiaas

import (
	"encoding/json"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

// Stemcell is an uploaded stemcell image.
type Stemcell struct {
	CID       cpiv2.StemcellCID `json:"cid"`
	Name      string            `json:"name"`
	Version   string            `json:"version"`
	ImagePath string            `json:"image_path"`
	// APIVersion is the image's api_version (1 when the image has none).
	APIVersion int `json:"api_version"`
	// Agent is the image's agent block, kept raw.
	Agent json.RawMessage `json:"agent,omitempty"`
	// DeviceResolver is agent.device_path_resolution_type ("identity" when absent).
	DeviceResolver  string            `json:"device_resolver"`
	CloudProperties json.RawMessage   `json:"cloud_properties,omitempty"`
	Tags            map[string]string `json:"tags,omitempty"`
	Created         time.Time         `json:"created"`
}

// VM is a virtual machine: its create_vm arguments, its metadata, its
// user-data and its root directory.
type VM struct {
	CID             cpiv2.VMCID       `json:"cid"`
	AgentID         string            `json:"agent_id"`
	StemcellCID     cpiv2.StemcellCID `json:"stemcell_cid"`
	CloudProperties json.RawMessage   `json:"cloud_properties,omitempty"`
	Networks        json.RawMessage   `json:"networks,omitempty"`
	Env             json.RawMessage   `json:"env,omitempty"`
	// DiskLocality are the disk CIDs create_vm was given.
	DiskLocality []cpiv2.DiskCID `json:"disk_locality,omitempty"`
	Metadata     cpiv2.Metadata  `json:"metadata,omitempty"`
	UserData     json.RawMessage `json:"user_data,omitempty"`
	Props        VMCloudProps    `json:"props"`
	// Size is how big the VM is (sizes.go: instance_type, cpu, ram,
	// ephemeral_disk.size of its cloud_properties).
	Size VMSize `json:"size"`
	// StemcellAPIVersion and DeviceResolver are copied from the stemcell
	// at create_vm, for the boot hook.
	StemcellAPIVersion int              `json:"stemcell_api_version"`
	DeviceResolver     string           `json:"device_resolver"`
	Created            time.Time        `json:"created"`
	Boots              int              `json:"boots"` // how many times the VM was booted
	Disks              []cpiv2.DiskCID  `json:"disks"` // attached disks, by device letter
	Root               string           `json:"root"`  // the VM's root directory (not stored; derived)
	Attachments        []AttachmentInfo `json:"attachments,omitempty"`
}

// AttachmentInfo is one attached disk as seen from its VM.
type AttachmentInfo struct {
	DiskCID cpiv2.DiskCID `json:"disk_cid"`
	Device  string        `json:"device"` // e.g. "sdc", "xvdc"
	LUN     int           `json:"lun"`
}

// VMCloudProps are the VM cloud_properties fakeiaas itself understands.
type VMCloudProps struct {
	// DevicePrefix is "sd" (default), "xvd" or "vd": the name attached disks
	// get under dev/.
	DevicePrefix string `json:"device_prefix,omitempty"`
	// DiskHint is the hint style the reference CPI returns from attach_disk:
	// "path" (default), "string", "id", "volume_id" or "lun" (docs/seams.md).
	DiskHint string `json:"disk_hint,omitempty"`
	// RestartOnAttach makes fakeiaas halt and boot the VM inside attach_disk.
	RestartOnAttach bool `json:"restart_on_attach,omitempty"`
}

// Disk is a persistent disk backed by a sparse file.
type Disk struct {
	CID             cpiv2.DiskCID   `json:"cid"`
	SizeMiB         int             `json:"size_mib"`
	CloudProperties json.RawMessage `json:"cloud_properties,omitempty"`
	Metadata        cpiv2.Metadata  `json:"metadata,omitempty"`
	// Locality is the VM CID create_disk was given, if any.
	Locality cpiv2.VMCID `json:"locality"`
	// VMCID is the VM the disk is attached to (zero when detached).
	VMCID   cpiv2.VMCID `json:"vm_cid"`
	Device  string      `json:"device,omitempty"` // e.g. "sdc" while attached
	LUN     int         `json:"lun,omitempty"`    // SCSI LUN while attached
	Created time.Time   `json:"created"`
}

// Snapshot is a snapshot of a disk.
type Snapshot struct {
	CID      cpiv2.SnapshotCID `json:"cid"`
	DiskCID  cpiv2.DiskCID     `json:"disk_cid"`
	SizeMiB  int               `json:"size_mib"`
	Metadata cpiv2.Metadata    `json:"metadata,omitempty"`
	Created  time.Time         `json:"created"`
}

// Attachment is the result of AttachDisk: where the disk appears on the VM.
type Attachment struct {
	VMCID   cpiv2.VMCID   `json:"vm_cid"`
	DiskCID cpiv2.DiskCID `json:"disk_cid"`
	// Device is the device name under dev/ ("sdc", "xvdc", "vdc").
	Device string `json:"device"`
	// Letter is the device letter ("c" for the first persistent disk).
	Letter string `json:"letter"`
	// LUN is the SCSI LUN (letter index: c → 2); the SCSI host is always 2.
	LUN int `json:"lun"`
	// SDPath is "/dev/sd<letter>" whatever the prefix, as hints use it.
	SDPath string `json:"sd_path"`
	// ByID is the by-id name ("virtio-<first 20 chars of the disk CID>").
	ByID string `json:"by_id"`
	// DiskHint is the VM's disk_hint cloud property ("path" by default).
	DiskHint string `json:"disk_hint"`
}

// StemcellSpec is create_stemcell's input: the image bytes (the small JSON
// of fixtures/stemcells) and the CPI's arguments.
type StemcellSpec struct {
	ImagePath       string            `json:"image_path"`
	Image           json.RawMessage   `json:"image"`
	CloudProperties json.RawMessage   `json:"cloud_properties,omitempty"`
	Tags            map[string]string `json:"tags,omitempty"`
}

// VMCIDPlaceholder, anywhere in VMSpec.UserData as a whole JSON string, is
// replaced by the new VM's CID (as a cloud substitutes its instance id), so
// that user-data can name the VM it belongs to.
const VMCIDPlaceholder = "((vm_cid))"

// VMSpec is create_vm's input.
type VMSpec struct {
	AgentID         string            `json:"agent_id"`
	StemcellCID     cpiv2.StemcellCID `json:"stemcell_cid"`
	CloudProperties json.RawMessage   `json:"cloud_properties,omitempty"`
	Networks        json.RawMessage   `json:"networks,omitempty"`
	Env             json.RawMessage   `json:"env,omitempty"`
	DiskLocality    []cpiv2.DiskCID   `json:"disk_locality,omitempty"`
	// UserData is served by the metadata service; see VMCIDPlaceholder.
	UserData json.RawMessage `json:"user_data,omitempty"`
	// NoBoot leaves the new VM un-booted (Boots 0): the caller boots it
	// later with RebootVM, as the Docker face does when the container
	// starts, after its volumes are bound. Default false: create_vm boots.
	NoBoot bool `json:"no_boot,omitempty"`
}

// DiskSpec is create_disk's input.
type DiskSpec struct {
	SizeMiB         int             `json:"size_mib"`
	CloudProperties json.RawMessage `json:"cloud_properties,omitempty"`
	Locality        cpiv2.VMCID     `json:"locality"`
}

// DiskUpdate is update_disk's input: the disk must be detached; the size
// may only grow (equal is allowed); CloudProperties replace the old ones
// when given.
type DiskUpdate struct {
	DiskCID         cpiv2.DiskCID   `json:"disk_cid"`
	NewSizeMiB      int             `json:"new_size_mib"`
	CloudProperties json.RawMessage `json:"cloud_properties,omitempty"`
}

// HistoryEntry is one recorded operation: every mutation, and every
// registry and metadata access.
type HistoryEntry struct {
	Seq       int64     `json:"seq"`
	Time      time.Time `json:"time"`
	Op        Op        `json:"op"`
	Target    string    `json:"target,omitempty"`     // the CID acted on (or created)
	RequestID string    `json:"request_id,omitempty"` // the caller's request_id
	// Result is "ok" or the CPI error type.
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
	// Faults lists the IDs of the fault rules that fired on this call.
	Faults []string `json:"faults,omitempty"`
	// Detail is op-specific: the device on attach, the size on resize, ….
	Detail string `json:"detail,omitempty"`
}

// State is the oracle's view of the whole cloud at one instant.
type State struct {
	Stemcells []Stemcell `json:"stemcells"`
	VMs       []VM       `json:"vms"`
	Disks     []Disk     `json:"disks"`
	Snapshots []Snapshot `json:"snapshots"`
	// Registry holds the registry settings by VM CID.
	Registry map[string]json.RawMessage `json:"registry"`
}

// HistoryFilter selects history entries; zero fields match everything.
type HistoryFilter struct {
	Since     int64  `json:"since"` // entries with Seq > Since
	Op        Op     `json:"op,omitempty"`
	Target    string `json:"target,omitempty"`
	RequestID string `json:"request_id,omitempty"`
}

func (f HistoryFilter) match(h HistoryEntry) bool {
	return h.Seq > f.Since && (f.Op == "" || f.Op == h.Op) && (f.Target == "" || f.Target == h.Target) &&
		(f.RequestID == "" || f.RequestID == h.RequestID)
}
