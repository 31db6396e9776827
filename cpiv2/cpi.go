package cpiv2

import (
	"context"
	"encoding/json"
	"fmt"
)

// CPI is one method per CPI method. It is implemented by the
// exec runner (a real CPI binary) and by in-process CPIs, so suites, the
// director and the simulator call both the same way.
//
// Result shapes follow the negotiated api_version, carried in ctx (see
// CallInfo): at 1, CreateVM returns no networks and AttachDisk a zero hint;
// at 2 and above both are filled in. A CPI's own errors are *Error values
// (or wrap one); callers add *InvalidResponseError for a response that
// breaks the protocol and *RefusalError for a call their profile will not
// make.
type CPI interface {
	Info(ctx context.Context) (Info, error)
	CreateStemcell(ctx context.Context, args CreateStemcellArgs) (StemcellCID, error)
	DeleteStemcell(ctx context.Context, cid StemcellCID) error
	CreateVM(ctx context.Context, args CreateVMArgs) (CreateVMResult, error)
	DeleteVM(ctx context.Context, cid VMCID) error
	HasVM(ctx context.Context, cid VMCID) (bool, error)
	RebootVM(ctx context.Context, cid VMCID) error
	SetVMMetadata(ctx context.Context, cid VMCID, meta Metadata) error
	CalculateVMCloudProperties(ctx context.Context, res VMResources) (CloudProps, error)
	CreateDisk(ctx context.Context, args CreateDiskArgs) (DiskCID, error)
	DeleteDisk(ctx context.Context, cid DiskCID) error
	HasDisk(ctx context.Context, cid DiskCID) (bool, error)
	AttachDisk(ctx context.Context, vm VMCID, disk DiskCID) (DiskHint, error)
	DetachDisk(ctx context.Context, vm VMCID, disk DiskCID) error
	SetDiskMetadata(ctx context.Context, cid DiskCID, meta Metadata) error
	GetDisks(ctx context.Context, vm VMCID) ([]DiskCID, error)
	ResizeDisk(ctx context.Context, cid DiskCID, sizeMiB int) error
	UpdateDisk(ctx context.Context, args UpdateDiskArgs) (DiskCID, error)
	SnapshotDisk(ctx context.Context, cid DiskCID, meta Metadata) (SnapshotCID, error)
	DeleteSnapshot(ctx context.Context, cid SnapshotCID) error
}

// Method names as they appear on the wire.
const (
	MethodInfo                       = "info"
	MethodCreateStemcell             = "create_stemcell"
	MethodDeleteStemcell             = "delete_stemcell"
	MethodCreateVM                   = "create_vm"
	MethodDeleteVM                   = "delete_vm"
	MethodHasVM                      = "has_vm"
	MethodRebootVM                   = "reboot_vm"
	MethodSetVMMetadata              = "set_vm_metadata"
	MethodCalculateVMCloudProperties = "calculate_vm_cloud_properties"
	MethodCreateDisk                 = "create_disk"
	MethodDeleteDisk                 = "delete_disk"
	MethodHasDisk                    = "has_disk"
	MethodAttachDisk                 = "attach_disk"
	MethodDetachDisk                 = "detach_disk"
	MethodSetDiskMetadata            = "set_disk_metadata"
	MethodGetDisks                   = "get_disks"
	MethodResizeDisk                 = "resize_disk"
	MethodUpdateDisk                 = "update_disk"
	MethodSnapshotDisk               = "snapshot_disk"
	MethodDeleteSnapshot             = "delete_snapshot"
)

// Methods lists every CPI method in the order of the CPI API docs.
var Methods = []string{
	MethodInfo, MethodCreateStemcell, MethodDeleteStemcell, MethodCreateVM, MethodDeleteVM,
	MethodHasVM, MethodRebootVM, MethodSetVMMetadata, MethodCalculateVMCloudProperties,
	MethodCreateDisk, MethodDeleteDisk, MethodHasDisk, MethodAttachDisk, MethodDetachDisk,
	MethodSetDiskMetadata, MethodGetDisks, MethodResizeDisk, MethodUpdateDisk,
	MethodSnapshotDisk, MethodDeleteSnapshot,
}

// Info is the result of info.
type Info struct {
	StemcellFormats []string `json:"stemcell_formats"`
	// APIVersion is the highest api_version the CPI supports; 0 means the
	// CPI did not report one (a v1 CPI).
	APIVersion int `json:"api_version,omitempty"`
}

// CreateStemcellArgs are create_stemcell's arguments. Env is sent only at
// api_version 3 and above.
type CreateStemcellArgs struct {
	ImagePath       string
	CloudProperties CloudProps
	Env             *StemcellEnv
}

// StemcellEnv is create_stemcell's third argument (api_version ≥ 3).
type StemcellEnv struct {
	Tags map[string]string `json:"tags"`
}

// CreateVMArgs are create_vm's arguments, in wire order.
type CreateVMArgs struct {
	AgentID         string
	StemcellCID     StemcellCID
	CloudProperties CloudProps
	Networks        Networks
	DiskCIDs        []DiskCID // locality hints; sent as [] when empty
	Env             VMEnv
}

// CreateVMResult is create_vm's result: a VM CID at api_version 1, and
// [vm_cid, networks] at 2 and above (Networks is then non-nil).
type CreateVMResult struct {
	VMCID    VMCID
	Networks Networks
}

// CreateDiskArgs are create_disk's arguments. VMCID is the locality hint and
// may be zero (sent as null).
type CreateDiskArgs struct {
	SizeMiB         int
	CloudProperties CloudProps
	VMCID           VMCID
}

// UpdateDiskArgs are update_disk's arguments (api_version ≥ 2). The result is
// the new disk CID, or the zero CID (null) when the disk kept its CID.
type UpdateDiskArgs struct {
	DiskCID         DiskCID
	NewSizeMiB      int
	CloudProperties CloudProps
}

// VMResources is calculate_vm_cloud_properties's argument.
type VMResources struct {
	CPU               int `json:"cpu"`
	RAM               int `json:"ram"`                 // MiB
	EphemeralDiskSize int `json:"ephemeral_disk_size"` // MiB
}

// Metadata is set_vm_metadata's and set_disk_metadata's argument, and
// snapshot_disk's second argument: string keys and string values.
type Metadata map[string]string

// Networks is create_vm's networks argument, keyed by network name.
type Networks map[string]Network

// Network is one network of create_vm.
type Network struct {
	Type            string     `json:"type,omitempty"`
	IP              string     `json:"ip,omitempty"`
	Netmask         string     `json:"netmask,omitempty"`
	Gateway         string     `json:"gateway,omitempty"`
	DNS             []string   `json:"dns,omitempty"`
	Default         []string   `json:"default,omitempty"`
	MAC             string     `json:"mac,omitempty"`
	CloudProperties CloudProps `json:"cloud_properties,omitzero"`
}

// CloudProps holds IaaS-specific properties as raw JSON (a hash). Decode it
// into the CPI's own type with As.
type CloudProps struct{ raw json.RawMessage }

// NewCloudProps encodes v (usually a struct or map) as cloud properties.
func NewCloudProps(v any) (CloudProps, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return CloudProps{}, fmt.Errorf("cloud_properties: %w", err)
	}
	var p CloudProps
	return p, p.UnmarshalJSON(b)
}

// MustCloudProps is NewCloudProps for values known to encode.
func MustCloudProps(v any) CloudProps {
	p, err := NewCloudProps(v)
	if err != nil {
		panic(err)
	}
	return p
}

// IsZero reports whether no properties were given.
func (p CloudProps) IsZero() bool { return len(p.raw) == 0 }

// As decodes the properties into v.
func (p CloudProps) As(v any) error {
	if p.IsZero() {
		return nil
	}
	if err := json.Unmarshal(p.raw, v); err != nil {
		return fmt.Errorf("cloud_properties: %w", err)
	}
	return nil
}

// Raw returns the JSON bytes ({} when empty).
func (p CloudProps) Raw() json.RawMessage {
	if p.IsZero() {
		return json.RawMessage("{}")
	}
	return p.raw
}

// MarshalJSON writes the hash, {} when empty.
func (p CloudProps) MarshalJSON() ([]byte, error) { return p.Raw(), nil }

// UnmarshalJSON accepts a JSON object or null.
func (p *CloudProps) UnmarshalJSON(data []byte) error {
	if string(data) == "null" {
		*p = CloudProps{}
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("cloud_properties must be a hash, got %s", excerpt(data))
	}
	p.raw = append(json.RawMessage(nil), data...)
	return nil
}

// VMEnv is create_vm's env argument (the bosh hash and friends), kept raw.
type VMEnv = CloudProps
