package refcpi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/rt"
)

// IaaS is what the reference CPI needs from the fake cloud. *fakeiaas.Cloud
// (in process) and *fakeiaas.Client (over HTTP) implement it.
type IaaS interface {
	CreateStemcell(ctx context.Context, spec fakeiaas.StemcellSpec) (fakeiaas.Stemcell, error)
	DeleteStemcell(ctx context.Context, cid cpiv2.StemcellCID) error
	CreateVM(ctx context.Context, spec fakeiaas.VMSpec) (fakeiaas.VM, error)
	DeleteVM(ctx context.Context, cid cpiv2.VMCID) error
	VM(ctx context.Context, cid cpiv2.VMCID) (fakeiaas.VM, error)
	VMDisks(ctx context.Context, cid cpiv2.VMCID) ([]cpiv2.DiskCID, error)
	RebootVM(ctx context.Context, cid cpiv2.VMCID) error
	SetVMMetadata(ctx context.Context, cid cpiv2.VMCID, meta cpiv2.Metadata) error
	CreateDisk(ctx context.Context, spec fakeiaas.DiskSpec) (fakeiaas.Disk, error)
	DeleteDisk(ctx context.Context, cid cpiv2.DiskCID) error
	Disk(ctx context.Context, cid cpiv2.DiskCID) (fakeiaas.Disk, error)
	AttachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) (fakeiaas.Attachment, error)
	DetachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) error
	SetDiskMetadata(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) error
	ResizeDisk(ctx context.Context, cid cpiv2.DiskCID, newSizeMiB int) error
	UpdateDisk(ctx context.Context, u fakeiaas.DiskUpdate) error
	SnapshotDisk(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) (fakeiaas.Snapshot, error)
	DeleteSnapshot(ctx context.Context, cid cpiv2.SnapshotCID) error
}

var (
	_ IaaS     = (*fakeiaas.Cloud)(nil)
	_ IaaS     = (*fakeiaas.Client)(nil)
	_ Registry = (*fakeiaas.Cloud)(nil)
	_ Registry = (*fakeiaas.Client)(nil)
)

// StemcellFormats are the formats info reports.
var StemcellFormats = []string{"fakeiaas-raw"}

// CPI is the reference CPI: every CPI method over an IaaS. It
// implements cpiv2.CPI (so a cpiv2.Dispatcher can serve it) and is safe for
// concurrent use.
type CPI struct {
	cfg  Config
	iaas IaaS
	r    rt.Runtime
	log  io.Writer
}

var _ cpiv2.CPI = (*CPI)(nil)

// New returns the reference CPI over iaas.
func New(cfg Config, iaas IaaS) *CPI {
	if cfg.MaxAPIVersion == 0 {
		cfg.MaxAPIVersion = 3
	}
	if cfg.Retry.MaxAttempts <= 0 {
		cfg.Retry.MaxAttempts = 5
	}
	if cfg.Retry.BaseDelay <= 0 {
		cfg.Retry.BaseDelay = 10 * time.Millisecond
	}
	if cfg.Runtime == nil {
		cfg.Runtime = rt.Real(0)
	}
	log := cfg.Log
	if log == nil {
		log = io.Discard
	}
	return &CPI{cfg: cfg, iaas: iaas, r: cfg.Runtime, log: log}
}

// MaxAPIVersion is the CPI's highest api_version (debug.cpi.api_version).
func (c *CPI) MaxAPIVersion() int { return c.cfg.MaxAPIVersion }

// versions returns the call's api_version (1 when absent) and the
// stemcell's (1 when absent), failing for an api_version above the max.
func (c *CPI) versions(ctx context.Context) (api, stemcell int, err error) {
	ci, _ := cpiv2.CallInfoFrom(ctx)
	api, stemcell = max(ci.APIVersion, 1), max(ci.StemcellAPIVersion, 1)
	if api > c.cfg.MaxAPIVersion {
		return 0, 0, cpiv2.NewError(cpiv2.TypeNotImplemented,
			"Must call implemented method: CPI API version requested is '%d', max supported is '%d'", api, c.cfg.MaxAPIVersion)
	}
	return api, stemcell, nil
}

// useRegistry reports whether agent settings go to the registry, by the
// reference table of API versions: everywhere but api_version ≥ 2 with a
// stemcell ≥ 2.
func useRegistry(api, stemcell int) bool { return !(api >= 2 && stemcell >= 2) }

func (c *CPI) needRegistry(method string, api, stemcell int) error {
	if c.cfg.Registry == nil {
		return cpiv2.NewError(cpiv2.TypeCloudError,
			"%s: api_version %d with stemcell api_version %d keeps agent settings in the registry, but no registry is configured (cpi.json has no registry block)",
			method, api, stemcell)
	}
	return nil
}

// retry runs fn, retrying rate-limited failures with exponential back-off
// on the runtime clock and logging each retry.
func retry[T any](c *CPI, what string, fn func() (T, error)) (T, error) {
	delay := c.cfg.Retry.BaseDelay
	for attempt := 1; ; attempt++ {
		v, err := fn()
		var fe *fakeiaas.Error
		if err == nil || !errors.As(err, &fe) || fe.Code != fakeiaas.CodeRateLimited || attempt >= c.cfg.Retry.MaxAttempts {
			if err != nil && fe != nil && fe.Code == fakeiaas.CodeRateLimited {
				fmt.Fprintf(c.log, "fakeiaas-cpi: %s: still rate limited after %d attempts, giving up: %v\n", what, attempt, err)
			}
			return v, err
		}
		wait := max(delay, fe.RetryAfter)
		fmt.Fprintf(c.log, "fakeiaas-cpi: %s: rate limited (attempt %d of %d), retrying in %v: %v\n", what, attempt, c.cfg.Retry.MaxAttempts, wait, err)
		c.r.Sleep(wait)
		delay *= 2
	}
}

func retry0(c *CPI, what string, fn func() error) error {
	_, err := retry(c, what, func() (struct{}, error) { return struct{}{}, fn() })
	return err
}

// Info reports the stemcell formats and the CPI's api_version.
func (c *CPI) Info(ctx context.Context) (cpiv2.Info, error) {
	info := cpiv2.Info{StemcellFormats: StemcellFormats}
	if c.cfg.MaxAPIVersion >= 2 {
		info.APIVersion = c.cfg.MaxAPIVersion
	}
	return info, nil
}

// CreateStemcell reads the image file and uploads it.
func (c *CPI) CreateStemcell(ctx context.Context, args cpiv2.CreateStemcellArgs) (cpiv2.StemcellCID, error) {
	if _, _, err := c.versions(ctx); err != nil {
		return cpiv2.StemcellCID{}, err
	}
	img, err := os.ReadFile(args.ImagePath)
	if err != nil {
		return cpiv2.StemcellCID{}, cpiv2.NewError(cpiv2.TypeCloudError, "create_stemcell: reading image: %v", err)
	}
	spec := fakeiaas.StemcellSpec{ImagePath: args.ImagePath, Image: img, CloudProperties: rawOrNil(args.CloudProperties)}
	if args.Env != nil {
		spec.Tags = args.Env.Tags
	}
	sc, err := retry(c, "create_stemcell", func() (fakeiaas.Stemcell, error) { return c.iaas.CreateStemcell(ctx, spec) })
	if err != nil {
		return cpiv2.StemcellCID{}, err
	}
	return sc.CID, nil
}

// DeleteStemcell deletes a stemcell; a missing one is already deleted.
func (c *CPI) DeleteStemcell(ctx context.Context, cid cpiv2.StemcellCID) error {
	err := retry0(c, "delete_stemcell", func() error { return c.iaas.DeleteStemcell(ctx, cid) })
	if errors.Is(err, fakeiaas.ErrNotFound) {
		return nil
	}
	return err
}

func rawOrNil(p cpiv2.CloudProps) json.RawMessage {
	if p.IsZero() {
		return nil
	}
	return p.Raw()
}

// agentSettings is the agent's settings.json (docs/seams.md).
type agentSettings struct {
	AgentID   string            `json:"agent_id"`
	VM        map[string]string `json:"vm"`
	MBus      string            `json:"mbus"`
	NTP       []string          `json:"ntp"`
	Networks  cpiv2.Networks    `json:"networks"`
	Disks     agentDisks        `json:"disks"`
	Env       json.RawMessage   `json:"env"`
	Blobstore json.RawMessage   `json:"blobstore,omitempty"`
}

type agentDisks struct {
	System     string                     `json:"system"`
	Ephemeral  string                     `json:"ephemeral"`
	Persistent map[string]json.RawMessage `json:"persistent"`
}

func (c *CPI) settings(args cpiv2.CreateVMArgs, vmName string) agentSettings {
	s := agentSettings{
		AgentID: args.AgentID, VM: map[string]string{"name": vmName}, MBus: c.cfg.MBus, NTP: c.cfg.NTP,
		Networks: args.Networks, Env: args.Env.Raw(), Blobstore: c.cfg.Blobstore,
		Disks: agentDisks{System: "/dev/sda", Ephemeral: "/dev/sdb", Persistent: map[string]json.RawMessage{}},
	}
	if s.NTP == nil {
		s.NTP = []string{}
	}
	if s.Networks == nil {
		s.Networks = cpiv2.Networks{}
	}
	return s
}

// CreateVM creates a VM. Agent settings go into user-data when api_version
// ≥ 2 and the stemcell's ≥ 2; otherwise user-data holds the registry
// endpoint and the settings are PUT to the registry.
func (c *CPI) CreateVM(ctx context.Context, args cpiv2.CreateVMArgs) (cpiv2.CreateVMResult, error) {
	api, stemcell, err := c.versions(ctx)
	if err != nil {
		return cpiv2.CreateVMResult{}, err
	}
	reg := useRegistry(api, stemcell)
	if reg {
		if err := c.needRegistry("create_vm", api, stemcell); err != nil {
			return cpiv2.CreateVMResult{}, err
		}
	}
	var userData any
	if reg {
		userData = map[string]any{
			"registry": map[string]string{"endpoint": c.cfg.RegistryEndpoint},
			"server":   map[string]string{"name": fakeiaas.VMCIDPlaceholder},
		}
	} else {
		userData = c.settings(args, fakeiaas.VMCIDPlaceholder)
	}
	ud, err := json.Marshal(userData)
	if err != nil {
		return cpiv2.CreateVMResult{}, cpiv2.NewError(cpiv2.TypeVMCreationFailed, "create_vm: encoding user-data: %v", err)
	}
	nets, err := json.Marshal(args.Networks)
	if err != nil {
		return cpiv2.CreateVMResult{}, cpiv2.NewError(cpiv2.TypeVMCreationFailed, "create_vm: encoding networks: %v", err)
	}
	spec := fakeiaas.VMSpec{
		AgentID: args.AgentID, StemcellCID: args.StemcellCID, CloudProperties: rawOrNil(args.CloudProperties),
		Networks: nets, Env: rawOrNil(args.Env), DiskLocality: args.DiskCIDs, UserData: ud,
	}
	vm, err := retry(c, "create_vm", func() (fakeiaas.VM, error) { return c.iaas.CreateVM(ctx, spec) })
	if err != nil {
		return cpiv2.CreateVMResult{}, err
	}
	if reg {
		s, _ := json.Marshal(c.settings(args, vm.CID.String()))
		if err := retry0(c, "create_vm: registry put", func() error { return c.cfg.Registry.PutSettings(ctx, vm.CID.String(), s) }); err != nil {
			_ = retry0(c, "create_vm: clean-up", func() error { return c.iaas.DeleteVM(ctx, vm.CID) })
			return cpiv2.CreateVMResult{}, cpiv2.NewError(cpiv2.TypeVMCreationFailed, "create_vm: writing settings of %s to the registry: %v", vm.CID, err)
		}
	}
	nw := args.Networks
	if nw == nil {
		nw = cpiv2.Networks{}
	}
	return cpiv2.CreateVMResult{VMCID: vm.CID, Networks: nw}, nil
}

// DeleteVM deletes a VM (VMNotFound when missing) and, in the registry
// flow, its registry settings.
func (c *CPI) DeleteVM(ctx context.Context, cid cpiv2.VMCID) error {
	api, stemcell, err := c.versions(ctx)
	if err != nil {
		return err
	}
	err = retry0(c, "delete_vm", func() error { return c.iaas.DeleteVM(ctx, cid) })
	if useRegistry(api, stemcell) && c.cfg.Registry != nil {
		rerr := retry0(c, "delete_vm: registry delete", func() error { return c.cfg.Registry.DeleteSettings(ctx, cid.String()) })
		if rerr != nil && !errors.Is(rerr, fakeiaas.ErrNotFound) && err == nil {
			return rerr
		}
	}
	return err
}

// HasVM reports whether the VM exists.
func (c *CPI) HasVM(ctx context.Context, cid cpiv2.VMCID) (bool, error) {
	_, err := retry(c, "has_vm", func() (fakeiaas.VM, error) { return c.iaas.VM(ctx, cid) })
	if errors.Is(err, cpiv2.ErrVMNotFound) {
		return false, nil
	}
	return err == nil, err
}

// RebootVM reboots a VM (VMNotFound when missing).
func (c *CPI) RebootVM(ctx context.Context, cid cpiv2.VMCID) error {
	return retry0(c, "reboot_vm", func() error { return c.iaas.RebootVM(ctx, cid) })
}

// SetVMMetadata replaces a VM's metadata (VMNotFound when missing).
func (c *CPI) SetVMMetadata(ctx context.Context, cid cpiv2.VMCID, meta cpiv2.Metadata) error {
	return retry0(c, "set_vm_metadata", func() error { return c.iaas.SetVMMetadata(ctx, cid, meta) })
}

// CalculateVMCloudProperties answers {"cpu", "ram", "ephemeral_disk": {"size"}}:
// the keys fakeiaas sizes a VM by (fakeiaas.VMSize), so that create_vm with
// the answer makes a VM of exactly the resources asked.
func (c *CPI) CalculateVMCloudProperties(ctx context.Context, res cpiv2.VMResources) (cpiv2.CloudProps, error) {
	return cpiv2.NewCloudProps(map[string]any{
		"cpu": res.CPU, "ram": res.RAM, "ephemeral_disk": map[string]int{"size": res.EphemeralDiskSize},
	})
}

// CreateDisk creates a disk.
func (c *CPI) CreateDisk(ctx context.Context, args cpiv2.CreateDiskArgs) (cpiv2.DiskCID, error) {
	spec := fakeiaas.DiskSpec{SizeMiB: args.SizeMiB, CloudProperties: rawOrNil(args.CloudProperties), Locality: args.VMCID}
	d, err := retry(c, "create_disk", func() (fakeiaas.Disk, error) { return c.iaas.CreateDisk(ctx, spec) })
	return d.CID, err
}

// DeleteDisk deletes a detached disk (DiskNotFound when missing).
func (c *CPI) DeleteDisk(ctx context.Context, cid cpiv2.DiskCID) error {
	return retry0(c, "delete_disk", func() error { return c.iaas.DeleteDisk(ctx, cid) })
}

// HasDisk reports whether the disk exists.
func (c *CPI) HasDisk(ctx context.Context, cid cpiv2.DiskCID) (bool, error) {
	_, err := retry(c, "has_disk", func() (fakeiaas.Disk, error) { return c.iaas.Disk(ctx, cid) })
	if errors.Is(err, cpiv2.ErrDiskNotFound) {
		return false, nil
	}
	return err == nil, err
}

// Hint returns the disk hint for an attachment, in the style of the VM's
// disk_hint cloud property (docs/seams.md).
func Hint(a fakeiaas.Attachment) cpiv2.DiskHint {
	lun := strconv.Itoa(a.LUN)
	switch a.DiskHint {
	case "string":
		return cpiv2.StringHint(a.SDPath)
	case "id":
		return cpiv2.DiskHint{ID: a.DiskCID.String(), Path: a.SDPath}
	case "volume_id":
		return cpiv2.DiskHint{VolumeID: lun}
	case "lun":
		return cpiv2.DiskHint{LUN: lun, HostDeviceID: "2"}
	default:
		return cpiv2.DiskHint{Path: a.SDPath}
	}
}

// AttachDisk attaches a disk and returns its hint (the dispatcher drops it
// at api_version 1). In the registry flow the hint is also written to the
// settings' disks.persistent.
func (c *CPI) AttachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) (cpiv2.DiskHint, error) {
	api, stemcell, err := c.versions(ctx)
	if err != nil {
		return cpiv2.DiskHint{}, err
	}
	reg := useRegistry(api, stemcell)
	if reg {
		if err := c.needRegistry("attach_disk", api, stemcell); err != nil {
			return cpiv2.DiskHint{}, err
		}
	}
	a, err := retry(c, "attach_disk", func() (fakeiaas.Attachment, error) { return c.iaas.AttachDisk(ctx, vm, disk) })
	if err != nil {
		return cpiv2.DiskHint{}, err
	}
	hint := Hint(a)
	if reg {
		raw, _ := json.Marshal(hint)
		if err := c.updatePersistent(ctx, vm, func(p map[string]json.RawMessage) { p[disk.String()] = raw }); err != nil {
			return cpiv2.DiskHint{}, err
		}
	}
	return hint, nil
}

func (c *CPI) updatePersistent(ctx context.Context, vm cpiv2.VMCID, edit func(map[string]json.RawMessage)) error {
	reg := c.cfg.Registry
	raw, err := retry(c, "registry get", func() (json.RawMessage, error) { return reg.GetSettings(ctx, vm.String()) })
	if err != nil {
		return cpiv2.NewError(cpiv2.TypeCloudError, "reading registry settings of %s: %v", vm, err)
	}
	var s map[string]json.RawMessage
	if err := json.Unmarshal(raw, &s); err != nil {
		return cpiv2.NewError(cpiv2.TypeCloudError, "registry settings of %s are not a hash: %v", vm, err)
	}
	var disks map[string]json.RawMessage
	if d, ok := s["disks"]; ok {
		if err := json.Unmarshal(d, &disks); err != nil {
			return cpiv2.NewError(cpiv2.TypeCloudError, "registry settings of %s: disks: %v", vm, err)
		}
	}
	if disks == nil {
		disks = map[string]json.RawMessage{}
	}
	persistent := map[string]json.RawMessage{}
	if p, ok := disks["persistent"]; ok && string(p) != "null" {
		if err := json.Unmarshal(p, &persistent); err != nil {
			return cpiv2.NewError(cpiv2.TypeCloudError, "registry settings of %s: disks.persistent: %v", vm, err)
		}
	}
	edit(persistent)
	disks["persistent"], _ = json.Marshal(persistent)
	s["disks"], _ = json.Marshal(disks)
	out, _ := json.Marshal(s)
	if err := retry0(c, "registry put", func() error { return reg.PutSettings(ctx, vm.String(), out) }); err != nil {
		return cpiv2.NewError(cpiv2.TypeCloudError, "writing registry settings of %s: %v", vm, err)
	}
	return nil
}

// DetachDisk detaches a disk (VMNotFound, DiskNotFound, DiskNotAttached)
// and, in the registry flow, removes it from the settings.
func (c *CPI) DetachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) error {
	api, stemcell, err := c.versions(ctx)
	if err != nil {
		return err
	}
	// Check for the registry before detaching, as AttachDisk does: failing
	// after the detach would report an error for a disk that is detached.
	reg := useRegistry(api, stemcell)
	if reg {
		if err := c.needRegistry("detach_disk", api, stemcell); err != nil {
			return err
		}
	}
	if err := retry0(c, "detach_disk", func() error { return c.iaas.DetachDisk(ctx, vm, disk) }); err != nil {
		return err
	}
	if reg {
		return c.updatePersistent(ctx, vm, func(p map[string]json.RawMessage) { delete(p, disk.String()) })
	}
	return nil
}

// SetDiskMetadata replaces a disk's metadata (DiskNotFound when missing).
func (c *CPI) SetDiskMetadata(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) error {
	return retry0(c, "set_disk_metadata", func() error { return c.iaas.SetDiskMetadata(ctx, cid, meta) })
}

// GetDisks lists the disks attached to a VM (VMNotFound when missing).
func (c *CPI) GetDisks(ctx context.Context, vm cpiv2.VMCID) ([]cpiv2.DiskCID, error) {
	return retry(c, "get_disks", func() ([]cpiv2.DiskCID, error) { return c.iaas.VMDisks(ctx, vm) })
}

// ResizeDisk grows a detached disk: attached is a CloudError, smaller is
// NotSupported (the Director then copies).
func (c *CPI) ResizeDisk(ctx context.Context, cid cpiv2.DiskCID, sizeMiB int) error {
	return retry0(c, "resize_disk", func() error { return c.iaas.ResizeDisk(ctx, cid, sizeMiB) })
}

// UpdateDisk grows a detached disk and replaces its cloud properties in
// place (api_version ≥ 2); the result is the zero CID (null): same disk.
func (c *CPI) UpdateDisk(ctx context.Context, args cpiv2.UpdateDiskArgs) (cpiv2.DiskCID, error) {
	api, _, err := c.versions(ctx)
	if err != nil {
		return cpiv2.DiskCID{}, err
	}
	if api < 2 {
		return cpiv2.DiskCID{}, cpiv2.NewError(cpiv2.TypeNotImplemented, "Must call implemented method: update_disk needs api_version 2 or later, got %d", api)
	}
	u := fakeiaas.DiskUpdate{DiskCID: args.DiskCID, NewSizeMiB: args.NewSizeMiB, CloudProperties: rawOrNil(args.CloudProperties)}
	return cpiv2.DiskCID{}, retry0(c, "update_disk", func() error { return c.iaas.UpdateDisk(ctx, u) })
}

// SnapshotDisk snapshots a disk (DiskNotFound when missing).
func (c *CPI) SnapshotDisk(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) (cpiv2.SnapshotCID, error) {
	s, err := retry(c, "snapshot_disk", func() (fakeiaas.Snapshot, error) { return c.iaas.SnapshotDisk(ctx, cid, meta) })
	return s.CID, err
}

// DeleteSnapshot deletes a snapshot; a missing one is already deleted.
func (c *CPI) DeleteSnapshot(ctx context.Context, cid cpiv2.SnapshotCID) error {
	err := retry0(c, "delete_snapshot", func() error { return c.iaas.DeleteSnapshot(ctx, cid) })
	if errors.Is(err, fakeiaas.ErrNotFound) {
		return nil
	}
	return err
}
