package cpiv2

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
)

// Core is what every Go CPI implements to be served by a Dispatcher. The
// optional capabilities are the small interfaces below; a CPI that lacks one
// answers its methods with NotImplemented (NotSupported for resize_disk and
// update_disk, on which the Director falls back to copying the disk). Any
// CPI implements them all.
//
// The dispatcher puts a CallInfo in the ctx it passes: its APIVersion is the
// request's (0 when absent, meaning 1), and a method's result is written in
// the shape of that version (see Dispatcher).
type Core interface {
	Info(ctx context.Context) (Info, error)
	CreateStemcell(ctx context.Context, args CreateStemcellArgs) (StemcellCID, error)
	DeleteStemcell(ctx context.Context, cid StemcellCID) error
	CreateVM(ctx context.Context, args CreateVMArgs) (CreateVMResult, error)
	DeleteVM(ctx context.Context, cid VMCID) error
	CreateDisk(ctx context.Context, args CreateDiskArgs) (DiskCID, error)
	DeleteDisk(ctx context.Context, cid DiskCID) error
	AttachDisk(ctx context.Context, vm VMCID, disk DiskCID) (DiskHint, error)
	DetachDisk(ctx context.Context, vm VMCID, disk DiskCID) error
	GetDisks(ctx context.Context, vm VMCID) ([]DiskCID, error)
}

// VMChecker is the has_vm capability.
type VMChecker interface {
	HasVM(ctx context.Context, cid VMCID) (bool, error)
}

// DiskChecker is the has_disk capability.
type DiskChecker interface {
	HasDisk(ctx context.Context, cid DiskCID) (bool, error)
}

// VMRebooter is the reboot_vm capability.
type VMRebooter interface {
	RebootVM(ctx context.Context, cid VMCID) error
}

// VMMetadataSetter is the set_vm_metadata capability.
type VMMetadataSetter interface {
	SetVMMetadata(ctx context.Context, cid VMCID, meta Metadata) error
}

// DiskMetadataSetter is the set_disk_metadata capability.
type DiskMetadataSetter interface {
	SetDiskMetadata(ctx context.Context, cid DiskCID, meta Metadata) error
}

// VMCloudPropertiesCalculator is the calculate_vm_cloud_properties capability.
type VMCloudPropertiesCalculator interface {
	CalculateVMCloudProperties(ctx context.Context, res VMResources) (CloudProps, error)
}

// DiskResizer is the resize_disk capability; without it resize_disk answers
// NotSupported.
type DiskResizer interface {
	ResizeDisk(ctx context.Context, cid DiskCID, sizeMiB int) error
}

// DiskUpdater is the update_disk capability (api_version ≥ 2); without it
// update_disk answers NotSupported.
type DiskUpdater interface {
	UpdateDisk(ctx context.Context, args UpdateDiskArgs) (DiskCID, error)
}

// Snapshotter is the snapshot_disk and delete_snapshot capability.
type Snapshotter interface {
	SnapshotDisk(ctx context.Context, cid DiskCID, meta Metadata) (SnapshotCID, error)
	DeleteSnapshot(ctx context.Context, cid SnapshotCID) error
}

// DefaultMaxRequest is the largest request, in bytes, a Dispatcher reads
// when DispatcherConfig.MaxRequest is 0 (64 MiB).
const DefaultMaxRequest = 64 << 20

// DispatcherConfig configures a Dispatcher. The zero value is usable.
type DispatcherConfig struct {
	// MaxAPIVersion is the highest api_version the CPI speaks (default 3).
	// A request above it is answered with NotImplemented. info's result
	// carries it as api_version when the implementation reports none, is
	// capped by it otherwise, and carries no api_version at all when
	// MaxAPIVersion is 1 and the implementation reports none (a v1 CPI).
	MaxAPIVersion int
	// Log receives one line per call that ends in an error (nil: discard).
	// Main uses os.Stderr, the CPI's debug log.
	Log io.Writer
	// MaxRequest is the largest request Serve reads, in bytes (default
	// DefaultMaxRequest); a larger one is answered with CpiError.
	MaxRequest int
}

// Dispatcher serves CPI requests with a Go implementation: it decodes one
// request, routes it by method and api_version, and encodes exactly one
// response object. Wire error types follow bosh-cpi-go (rpc/json_dispatcher.go,
// json_caller.go): a request that cannot be read (bad JSON, method or
// arguments missing) is a CpiError; arguments the method cannot take (too
// few, the wrong type, a null CID) are a CloudError, as bosh-cpi-go's caller
// reports them; both name what was wrong; an unknown
// method, a missing capability, or an api_version above MaxAPIVersion is a
// NotImplemented; an error that is not a *Error becomes a CloudError (see
// AsError). Result shapes follow the request's api_version: create_vm
// answers a vm_cid at 1 and [vm_cid, networks] at 2 and above; attach_disk
// answers null at 1 and the hint at 2 and above (null for a zero hint, which
// the caller reports as ErrNoDiskHint); update_disk below 2 is
// NotImplemented; create_stemcell reads env only at 3. A Dispatcher is safe
// for concurrent use if the implementation is.
type Dispatcher struct {
	impl Core
	cfg  DispatcherConfig
}

// NewDispatcher returns a Dispatcher serving impl.
func NewDispatcher(impl Core, cfg DispatcherConfig) *Dispatcher {
	if cfg.MaxAPIVersion == 0 {
		cfg.MaxAPIVersion = 3
	}
	if cfg.MaxRequest == 0 {
		cfg.MaxRequest = DefaultMaxRequest
	}
	return &Dispatcher{impl: impl, cfg: cfg}
}

// Main serves one request from os.Stdin to os.Stdout, logging to os.Stderr,
// and exits 0 whatever happened: the bosh CLI treats a non-zero exit as a
// failure, so errors travel in the response object only.
func Main(impl Core, cfg DispatcherConfig) {
	if cfg.Log == nil {
		cfg.Log = os.Stderr
	}
	if err := NewDispatcher(impl, cfg).Serve(context.Background(), os.Stdin, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "cpiv2: writing the response: %v\n", err)
	}
	os.Exit(0)
}

// Serve reads one request from r (until EOF), handles it and writes the
// response to w. A failure to read the request is answered with a CpiError
// response; the only error returned is one from writing w.
func (d *Dispatcher) Serve(ctx context.Context, r io.Reader, w io.Writer) error {
	data, err := io.ReadAll(io.LimitReader(r, int64(d.cfg.MaxRequest)+1))
	var out []byte
	switch {
	case err != nil:
		out = d.respond(nil, NewError(TypeCpiError, "Reading the request: %v", err), d.cfg.Log, "")
	case len(data) > d.cfg.MaxRequest:
		out = d.respond(nil, NewError(TypeCpiError, "Request exceeds %d bytes", d.cfg.MaxRequest), d.cfg.Log, "")
	default:
		out = d.Handle(ctx, data, d.cfg.Log)
	}
	_, err = w.Write(out)
	return err
}

// Handle answers one encoded request with one encoded response. log
// receives a line for a call that ends in an error (nil: discard).
func (d *Dispatcher) Handle(ctx context.Context, req []byte, log io.Writer) []byte {
	r, err := DecodeRequest(req)
	if err != nil {
		return d.respond(nil, err, log, "")
	}
	result, err := d.route(ctx, r)
	return d.respond(result, err, log, r.Method+" ("+r.Context.RequestID+")")
}

func (d *Dispatcher) respond(result any, err error, log io.Writer, call string) []byte {
	var resp Response
	if err == nil {
		raw, merr := json.Marshal(result)
		if merr != nil {
			err = NewError(TypeCloudError, "Encoding the result: %v", merr)
		} else {
			resp.Result = raw
		}
	}
	if err != nil {
		resp = Response{Error: AsError(err)}
		if log != nil {
			fmt.Fprintf(log, "cpiv2: %s: %v\n", call, resp.Error)
		}
	}
	out, _ := resp.Encode() // Result came from json.Marshal: valid JSON
	return out
}

// argList decodes positional arguments, naming each in its errors.
type argList struct {
	method string
	raw    []json.RawMessage
}

func (a argList) need(names ...string) error {
	if len(a.raw) < len(names) {
		return NewError(TypeCloudError, "%s takes %d arguments %v, got %d", a.method, len(names), names, len(a.raw))
	}
	return nil
}

func argAt[T any](a argList, i int, name string, dst *T) error {
	if err := json.Unmarshal(a.raw[i], dst); err != nil {
		return NewError(TypeCloudError, "%s: argument %d (%s): %v", a.method, i, name, err)
	}
	return nil
}

// cidAt decodes a required CID argument: a non-empty string.
func cidAt[K CIDKind](a argList, i int) (CID[K], error) {
	var k K
	var c CID[K]
	if err := argAt(a, i, k.cidName(), &c); err != nil {
		return c, err
	}
	if c.IsZero() {
		return c, NewError(TypeCloudError, "%s: argument %d (%s): must be a non-empty string, got null", a.method, i, k.cidName())
	}
	return c, nil
}

func notImplemented(method string) error {
	return NewError(TypeNotImplemented, "Must call implemented method: %s is not implemented by this CPI", method)
}

func (d *Dispatcher) route(ctx context.Context, r Request) (any, error) {
	v := r.APIVersion
	if v < 0 {
		return nil, NewError(TypeCpiError, "Invalid request: api_version %d is negative", v)
	}
	if v == 0 {
		v = 1
	}
	if v > d.cfg.MaxAPIVersion {
		return nil, NewError(TypeNotImplemented, "Must call implemented method: CPI API version requested is '%d', max supported is '%d'", v, d.cfg.MaxAPIVersion)
	}
	ctx = WithCallInfo(ctx, CallInfo{APIVersion: r.APIVersion, StemcellAPIVersion: r.Context.StemcellAPIVersion,
		DirectorUUID: r.Context.DirectorUUID, RequestID: r.Context.RequestID, Properties: r.Context.Properties})
	a := argList{method: r.Method, raw: r.Arguments}
	switch r.Method {
	case MethodInfo:
		info, err := d.impl.Info(ctx)
		if err != nil {
			return nil, err
		}
		return d.infoResult(info), nil
	case MethodCreateStemcell:
		return d.createStemcell(ctx, a, v)
	case MethodCreateVM:
		return d.createVM(ctx, a, v)
	case MethodCreateDisk:
		return d.createDisk(ctx, a)
	case MethodAttachDisk, MethodDetachDisk:
		return d.vmDisk(ctx, a, v)
	case MethodUpdateDisk:
		return d.updateDisk(ctx, a, v)
	case MethodCalculateVMCloudProperties:
		c, ok := d.impl.(VMCloudPropertiesCalculator)
		if !ok {
			return nil, notImplemented(r.Method)
		}
		if err := a.need("vm_resources"); err != nil {
			return nil, err
		}
		var res VMResources
		if err := argAt(a, 0, "vm_resources", &res); err != nil {
			return nil, err
		}
		return c.CalculateVMCloudProperties(ctx, res)
	case MethodDeleteStemcell:
		if err := a.need("stemcell_cid"); err != nil {
			return nil, err
		}
		cid, err := cidAt[StemcellKind](a, 0)
		if err != nil {
			return nil, err
		}
		return nil, d.impl.DeleteStemcell(ctx, cid)
	case MethodDeleteVM, MethodHasVM, MethodRebootVM, MethodSetVMMetadata, MethodGetDisks:
		return d.vmMethod(ctx, a)
	case MethodDeleteDisk, MethodHasDisk, MethodSetDiskMetadata, MethodResizeDisk, MethodSnapshotDisk:
		return d.diskMethod(ctx, a)
	case MethodDeleteSnapshot:
		s, ok := d.impl.(Snapshotter)
		if !ok {
			return nil, notImplemented(r.Method)
		}
		if err := a.need("snapshot_cid"); err != nil {
			return nil, err
		}
		cid, err := cidAt[SnapshotKind](a, 0)
		if err != nil {
			return nil, err
		}
		return nil, s.DeleteSnapshot(ctx, cid)
	}
	return nil, NewError(TypeNotImplemented, "Must call implemented method: unknown method %q", r.Method)
}

func (d *Dispatcher) infoResult(info Info) Info {
	switch {
	case info.APIVersion == 0 && d.cfg.MaxAPIVersion > 1:
		info.APIVersion = d.cfg.MaxAPIVersion
	case info.APIVersion > d.cfg.MaxAPIVersion:
		info.APIVersion = d.cfg.MaxAPIVersion
	}
	if info.StemcellFormats == nil {
		info.StemcellFormats = []string{}
	}
	return info
}

func (d *Dispatcher) createStemcell(ctx context.Context, a argList, v int) (any, error) {
	if err := a.need("image_path", "cloud_properties"); err != nil {
		return nil, err
	}
	var args CreateStemcellArgs
	if err := argAt(a, 0, "image_path", &args.ImagePath); err != nil {
		return nil, err
	}
	if err := argAt(a, 1, "cloud_properties", &args.CloudProperties); err != nil {
		return nil, err
	}
	if v >= 3 && len(a.raw) >= 3 {
		if err := argAt(a, 2, "env", &args.Env); err != nil {
			return nil, err
		}
	}
	return d.impl.CreateStemcell(ctx, args)
}

func (d *Dispatcher) createVM(ctx context.Context, a argList, v int) (any, error) {
	if err := a.need("agent_id", "stemcell_cid", "cloud_properties", "networks", "disk_cids", "env"); err != nil {
		return nil, err
	}
	var args CreateVMArgs
	var err error
	if err = argAt(a, 0, "agent_id", &args.AgentID); err != nil {
		return nil, err
	}
	if args.StemcellCID, err = cidAt[StemcellKind](a, 1); err != nil {
		return nil, err
	}
	if err = argAt(a, 2, "cloud_properties", &args.CloudProperties); err != nil {
		return nil, err
	}
	if err = argAt(a, 3, "networks", &args.Networks); err != nil {
		return nil, err
	}
	if err = argAt(a, 4, "disk_cids", &args.DiskCIDs); err != nil {
		return nil, err
	}
	if err = argAt(a, 5, "env", &args.Env); err != nil {
		return nil, err
	}
	res, err := d.impl.CreateVM(ctx, args)
	if err != nil {
		return nil, err
	}
	if v < 2 {
		return res.VMCID, nil
	}
	nets := res.Networks
	if nets == nil {
		nets = Networks{}
	}
	return []any{res.VMCID, nets}, nil
}

func (d *Dispatcher) createDisk(ctx context.Context, a argList) (any, error) {
	if err := a.need("size", "cloud_properties", "vm_cid"); err != nil {
		return nil, err
	}
	var args CreateDiskArgs
	if err := argAt(a, 0, "size", &args.SizeMiB); err != nil {
		return nil, err
	}
	if err := argAt(a, 1, "cloud_properties", &args.CloudProperties); err != nil {
		return nil, err
	}
	if err := argAt(a, 2, "vm_cid", &args.VMCID); err != nil { // null: no locality
		return nil, err
	}
	return d.impl.CreateDisk(ctx, args)
}

func (d *Dispatcher) vmDisk(ctx context.Context, a argList, v int) (any, error) {
	if err := a.need("vm_cid", "disk_cid"); err != nil {
		return nil, err
	}
	vm, err := cidAt[VMKind](a, 0)
	if err != nil {
		return nil, err
	}
	disk, err := cidAt[DiskKind](a, 1)
	if err != nil {
		return nil, err
	}
	if a.method == MethodDetachDisk {
		return nil, d.impl.DetachDisk(ctx, vm, disk)
	}
	hint, err := d.impl.AttachDisk(ctx, vm, disk)
	if err != nil || v < 2 || hint.IsZero() {
		return nil, err
	}
	return hint, nil
}

func (d *Dispatcher) updateDisk(ctx context.Context, a argList, v int) (any, error) {
	if v < 2 {
		return nil, NewError(TypeNotImplemented, "Must call implemented method: update_disk needs api_version 2 or later, got %d", v)
	}
	u, ok := d.impl.(DiskUpdater)
	if !ok {
		return nil, NewError(TypeNotSupported, "update_disk is not supported by this CPI")
	}
	if err := a.need("disk_cid", "new_size", "cloud_properties"); err != nil {
		return nil, err
	}
	var args UpdateDiskArgs
	var err error
	if args.DiskCID, err = cidAt[DiskKind](a, 0); err != nil {
		return nil, err
	}
	if err = argAt(a, 1, "new_size", &args.NewSizeMiB); err != nil {
		return nil, err
	}
	if err = argAt(a, 2, "cloud_properties", &args.CloudProperties); err != nil {
		return nil, err
	}
	return u.UpdateDisk(ctx, args)
}

func (d *Dispatcher) vmMethod(ctx context.Context, a argList) (any, error) {
	names := []string{"vm_cid"}
	if a.method == MethodSetVMMetadata {
		names = append(names, "metadata")
	}
	var impl any = d.impl
	switch a.method {
	case MethodHasVM:
		impl, _ = d.impl.(VMChecker)
	case MethodRebootVM:
		impl, _ = d.impl.(VMRebooter)
	case MethodSetVMMetadata:
		impl, _ = d.impl.(VMMetadataSetter)
	}
	if impl == nil {
		return nil, notImplemented(a.method)
	}
	if err := a.need(names...); err != nil {
		return nil, err
	}
	cid, err := cidAt[VMKind](a, 0)
	if err != nil {
		return nil, err
	}
	switch a.method {
	case MethodDeleteVM:
		return nil, d.impl.DeleteVM(ctx, cid)
	case MethodHasVM:
		return impl.(VMChecker).HasVM(ctx, cid)
	case MethodRebootVM:
		return nil, impl.(VMRebooter).RebootVM(ctx, cid)
	case MethodSetVMMetadata:
		var meta Metadata
		if err := argAt(a, 1, "metadata", &meta); err != nil {
			return nil, err
		}
		return nil, impl.(VMMetadataSetter).SetVMMetadata(ctx, cid, meta)
	default: // get_disks
		disks, err := d.impl.GetDisks(ctx, cid)
		if disks == nil {
			disks = []DiskCID{}
		}
		return disks, err
	}
}

func (d *Dispatcher) diskMethod(ctx context.Context, a argList) (any, error) {
	names := []string{"disk_cid"}
	var impl any
	switch a.method {
	case MethodDeleteDisk:
		impl = d.impl
	case MethodHasDisk:
		impl, _ = d.impl.(DiskChecker)
	case MethodSetDiskMetadata:
		impl, _ = d.impl.(DiskMetadataSetter)
		names = append(names, "metadata")
	case MethodResizeDisk:
		impl, _ = d.impl.(DiskResizer)
		names = append(names, "new_size")
		if impl == nil {
			return nil, NewError(TypeNotSupported, "resize_disk is not supported by this CPI")
		}
	case MethodSnapshotDisk:
		impl, _ = d.impl.(Snapshotter)
		names = append(names, "metadata")
	}
	if impl == nil {
		return nil, notImplemented(a.method)
	}
	if err := a.need(names...); err != nil {
		return nil, err
	}
	cid, err := cidAt[DiskKind](a, 0)
	if err != nil {
		return nil, err
	}
	switch a.method {
	case MethodDeleteDisk:
		return nil, d.impl.DeleteDisk(ctx, cid)
	case MethodHasDisk:
		return impl.(DiskChecker).HasDisk(ctx, cid)
	case MethodResizeDisk:
		var size int
		if err := argAt(a, 1, "new_size", &size); err != nil {
			return nil, err
		}
		return nil, impl.(DiskResizer).ResizeDisk(ctx, cid, size)
	}
	var meta Metadata
	if err := argAt(a, 1, "metadata", &meta); err != nil {
		return nil, err
	}
	if a.method == MethodSetDiskMetadata {
		return nil, impl.(DiskMetadataSetter).SetDiskMetadata(ctx, cid, meta)
	}
	return impl.(Snapshotter).SnapshotDisk(ctx, cid, meta)
}
