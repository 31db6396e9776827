package cpiv2

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// CallRecord is what a caller saw of one call: for the debug log, reports
// and traces. Byte slices are the caller's own copies.
type CallRecord struct {
	Method    string
	RequestID string
	// APIVersion is the api_version sent (0: none).
	APIVersion int
	// Request is the exact request bytes written to the CPI.
	Request []byte
	// Stdout is what the CPI wrote on stdout (the response), capped.
	Stdout []byte
	// Stderr is the CPI's debug log: its stderr for an exec runner, the
	// dispatcher's log for a loopback.
	Stderr []byte
	// ExitCode is the CPI's exit status (-1: killed by a signal or never
	// started; always 0 in process).
	ExitCode int
	// Outcome says how the CPI process ended ("exit status 0", "killed by
	// SIGKILL, exit status 137: …"; see ProcessResult.Outcome); empty in
	// process.
	Outcome string
	// Err is the call's error, nil on success.
	Err error
}

// NewRequestIDs returns a generator of request IDs "cpi-000001",
// "cpi-000002", … (six digits at least, as the Director writes them). It is
// safe for concurrent use; the order of IDs across concurrent calls is the
// order in which the calls start.
func NewRequestIDs() func() string {
	var n atomic.Uint64
	return func() string { return fmt.Sprintf("cpi-%06d", n.Add(1)) }
}

// exchange is what a transport brought back from one call.
type exchange struct {
	stdout, stderr []byte
	exitCode       int
	outcome        string // how the process ended ("" in process)
}

// transport delivers one encoded request and returns the CPI's output. An
// error is an *InvalidResponseError (timeout, output too large) or a failure
// to run the CPI at all.
type transport func(ctx context.Context, method string, req []byte) (exchange, error)

// callerConfig is the part of RunnerConfig and LoopbackConfig that shapes
// requests.
type callerConfig struct {
	profile             Profile
	directorUUID        string
	properties          map[string]json.RawMessage
	requestIDs          func() string
	infoBeforeEveryCall bool
	trace               func(CallRecord)
	lenientJSON         bool
}

// caller implements CPI over a transport: it negotiates, encodes requests as
// its profile does, and decodes responses strictly. The runner and the
// loopback differ only in their transport.
type caller struct {
	cfg callerConfig
	t   transport

	mu struct {
		sync.Mutex
		negotiated int // 0: not yet (or not cached)
	}
}

func newCaller(cfg callerConfig, t transport) *caller {
	cfg.profile = cfg.profile.orDefault()
	if cfg.requestIDs == nil {
		cfg.requestIDs = NewRequestIDs()
	}
	return &caller{cfg: cfg, t: t}
}

// send makes one call and hands the raw result to decode. sendVersion is the
// api_version key's value (0: absent).
func (c *caller) send(ctx context.Context, method string, sendVersion int, args []any, decode func(json.RawMessage) error) error {
	rec := CallRecord{Method: method, RequestID: c.cfg.requestIDs(), APIVersion: sendVersion, ExitCode: -1}
	result, err := c.sendRecorded(ctx, &rec, args)
	if err == nil && decode != nil {
		if derr := decode(result); derr != nil {
			err = c.fill(derr, &rec)
		}
	}
	rec.Err = err
	if c.cfg.trace != nil {
		c.cfg.trace(rec)
	}
	return err
}

func (c *caller) sendRecorded(ctx context.Context, rec *CallRecord, args []any) (json.RawMessage, error) {
	req := Request{Method: rec.Method, APIVersion: rec.APIVersion,
		Context: RequestContext{DirectorUUID: c.cfg.directorUUID, RequestID: rec.RequestID, Properties: c.cfg.properties}}
	if c.cfg.profile.SendsStemcellAPIVersion {
		req.Context.StemcellAPIVersion = StemcellAPIVersionFrom(ctx)
	}
	for i, a := range args {
		b, err := json.Marshal(a)
		if err != nil {
			return nil, fmt.Errorf("cpi %s (request_id %s): encoding argument %d: %w", rec.Method, rec.RequestID, i, err)
		}
		req.Arguments = append(req.Arguments, b)
	}
	enc, err := req.Encode()
	if err != nil {
		return nil, err
	}
	rec.Request = enc
	ex, err := c.t(ctx, rec.Method, enc)
	rec.Stdout, rec.Stderr, rec.ExitCode, rec.Outcome = ex.stdout, ex.stderr, ex.exitCode, ex.outcome
	if err != nil {
		return nil, c.fill(err, rec)
	}
	if c.cfg.profile.ExitStatusMatters && ex.exitCode != 0 {
		return nil, c.fill(invalid(ErrNonZeroExit, ex.stdout, "", "", nil), rec)
	}
	resp, err := DecodeResponseWith(ex.stdout, DecodeOptions{LenientJSON: c.cfg.lenientJSON})
	if err != nil {
		return nil, c.fill(err, rec)
	}
	if resp.Error != nil {
		return nil, fmt.Errorf("cpi %s (request_id %s): %w", rec.Method, rec.RequestID, legacyNotImplemented(resp.Error))
	}
	return resp.Result, nil
}

// fill names the call in an *InvalidResponseError, or wraps another error
// with the method and request_id.
func (c *caller) fill(err error, rec *CallRecord) error {
	var ir *InvalidResponseError
	if errors.As(err, &ir) {
		ir.Method, ir.RequestID, ir.ExitCode, ir.Outcome = rec.Method, rec.RequestID, rec.ExitCode, rec.Outcome
		return ir
	}
	return fmt.Errorf("cpi %s (request_id %s): %w", rec.Method, rec.RequestID, err)
}

// legacyNotImplemented applies the Director's (and bosh CLI's) back-compat
// mapping: an InvalidCall "Method is not known, got …" or a CloudError
// "Invalid Method: …" is a NotImplemented.
func legacyNotImplemented(e *Error) *Error {
	if e.Type != TypeNotImplemented && IsNotImplemented(e) {
		return &Error{Type: TypeNotImplemented, Message: e.Message, OkToRetry: e.OkToRetry}
	}
	return e
}

// IsNotImplemented reports whether the Director and the bosh CLI take e as
// NotImplemented: its own type, or the answers older CPI libraries give for
// a method they do not know, an InvalidCall "Method is not known, got …"
// (the Ruby library before NotImplemented) or a CloudError "Invalid Method:
// …" (bosh external_cpi.rb handle_method_not_implemented, bosh-cli
// cloud/errors.go mapsToNotImplementedError).
func IsNotImplemented(e *Error) bool {
	if e == nil {
		return false
	}
	return e.Type == TypeNotImplemented ||
		(e.Type == TypeInvalidCall && strings.HasPrefix(e.Message, "Method is not known, got")) ||
		(e.Type == TypeCloudError && strings.HasPrefix(e.Message, "Invalid Method:"))
}

// resultError is an ErrBadResult naming the call.
func resultError(method string, raw json.RawMessage, want string, cause error) error {
	return &InvalidResponseError{Kind: ErrBadResult, Method: method, Key: "result",
		Detail: "want " + want + ", got " + excerpt(raw), Excerpt: excerpt(raw), Cause: cause}
}

// version returns the negotiated api_version for a call (negotiating first
// when the profile does and nothing is cached).
func (c *caller) version(ctx context.Context) (int, error) {
	if !c.cfg.profile.Negotiates {
		return 1, nil
	}
	if !c.cfg.infoBeforeEveryCall {
		c.mu.Lock()
		v := c.mu.negotiated
		c.mu.Unlock()
		if v != 0 {
			return v, nil
		}
	}
	_, _, v, err := c.negotiate(ctx)
	return v, err
}

// negotiate calls info and applies the profile's rules. It returns the info
// call's own outcome and the negotiation's; a successful negotiation is
// cached.
func (c *caller) negotiate(ctx context.Context) (info Info, infoErr error, v int, err error) {
	p := c.cfg.profile
	infoErr = c.send(ctx, MethodInfo, p.InfoAPIVersion, nil, func(raw json.RawMessage) (err error) {
		info, err = decodeInfoResult(raw)
		return err
	})
	v, err = p.Negotiate(info, infoErr)
	if err == nil && p.Negotiates {
		c.mu.Lock()
		c.mu.negotiated = v
		c.mu.Unlock()
	}
	return info, infoErr, v, err
}

// Negotiate returns the api_version the caller speaks to this CPI, calling
// info when nothing is cached (always, with InfoBeforeEveryCall).
func (c *caller) Negotiate(ctx context.Context) (int, error) { return c.version(ctx) }

// Info calls info as the profile does and records the negotiated
// api_version. When the profile refuses the CPI (director-current and a CPI
// without api_version ≥ 2), it returns the info with the *RefusalError; when
// info itself failed, that error.
func (c *caller) Info(ctx context.Context) (Info, error) {
	info, infoErr, _, err := c.negotiate(ctx)
	if err != nil {
		return info, err
	}
	return info, infoErr
}

// call negotiates, refuses what the version lacks, sends, and decodes the
// result with decode (nil: the result is ignored, as the Director ignores
// the result of methods that return null).
func (c *caller) call(ctx context.Context, method string, args func(v int) []any, decode func(raw json.RawMessage, v int) error) error {
	p := c.cfg.profile
	if p.MaxAPIVersion < MinAPIVersion(method) {
		return p.refuseMethod(method, p.MaxAPIVersion)
	}
	v, err := c.version(ctx)
	if err != nil {
		return err
	}
	if err := p.refuseMethod(method, v); err != nil {
		return err
	}
	send := 0
	if p.SendsAPIVersion {
		send = v
	}
	var dec func(json.RawMessage) error
	if decode != nil {
		dec = func(raw json.RawMessage) error { return decode(raw, v) }
	}
	return c.send(ctx, method, send, args(v), dec)
}

func fixed(args ...any) func(int) []any { return func(int) []any { return args } }

// CreateStemcell calls create_stemcell; env is sent only at api_version 3 (as
// {"tags": {}} when args.Env is nil).
func (c *caller) CreateStemcell(ctx context.Context, a CreateStemcellArgs) (cid StemcellCID, err error) {
	err = c.call(ctx, MethodCreateStemcell, func(v int) []any {
		if v >= 3 {
			env := StemcellEnv{Tags: map[string]string{}}
			if a.Env != nil && a.Env.Tags != nil {
				env = *a.Env
			}
			return []any{a.ImagePath, a.CloudProperties, env}
		}
		return []any{a.ImagePath, a.CloudProperties}
	}, func(raw json.RawMessage, _ int) (err error) {
		cid, err = decodeCIDResult[StemcellKind](MethodCreateStemcell, raw, false)
		return err
	})
	return cid, err
}

// DeleteStemcell calls delete_stemcell; its result is ignored.
func (c *caller) DeleteStemcell(ctx context.Context, cid StemcellCID) error {
	return c.call(ctx, MethodDeleteStemcell, fixed(cid), nil)
}

// CreateVM calls create_vm; the result is a vm_cid at api_version 1 and
// [vm_cid, networks] at 2 and above.
func (c *caller) CreateVM(ctx context.Context, a CreateVMArgs) (res CreateVMResult, err error) {
	nets := a.Networks
	if nets == nil {
		nets = Networks{}
	}
	disks := a.DiskCIDs
	if disks == nil {
		disks = []DiskCID{}
	}
	err = c.call(ctx, MethodCreateVM, fixed(a.AgentID, a.StemcellCID, a.CloudProperties, nets, disks, a.Env),
		func(raw json.RawMessage, v int) (err error) {
			res, err = decodeCreateVMResult(raw, v)
			return err
		})
	return res, err
}

// DeleteVM calls delete_vm; its result is ignored.
func (c *caller) DeleteVM(ctx context.Context, cid VMCID) error {
	return c.call(ctx, MethodDeleteVM, fixed(cid), nil)
}

// HasVM calls has_vm; the result must be a boolean.
func (c *caller) HasVM(ctx context.Context, cid VMCID) (ok bool, err error) {
	err = c.call(ctx, MethodHasVM, fixed(cid), func(raw json.RawMessage, _ int) (err error) {
		ok, err = decodeBoolResult(MethodHasVM, raw)
		return err
	})
	return ok, err
}

// RebootVM calls reboot_vm; its result is ignored.
func (c *caller) RebootVM(ctx context.Context, cid VMCID) error {
	return c.call(ctx, MethodRebootVM, fixed(cid), nil)
}

// SetVMMetadata calls set_vm_metadata (nil meta is sent as {}); its result is
// ignored.
func (c *caller) SetVMMetadata(ctx context.Context, cid VMCID, meta Metadata) error {
	return c.call(ctx, MethodSetVMMetadata, fixed(cid, metaOrEmpty(meta)), nil)
}

// CalculateVMCloudProperties calls calculate_vm_cloud_properties; the result
// must be a hash.
func (c *caller) CalculateVMCloudProperties(ctx context.Context, res VMResources) (props CloudProps, err error) {
	err = c.call(ctx, MethodCalculateVMCloudProperties, fixed(res), func(raw json.RawMessage, _ int) (err error) {
		props, err = decodeCloudPropsResult(raw)
		return err
	})
	return props, err
}

// CreateDisk calls create_disk; a zero args.VMCID is sent as null (no
// locality).
func (c *caller) CreateDisk(ctx context.Context, a CreateDiskArgs) (cid DiskCID, err error) {
	err = c.call(ctx, MethodCreateDisk, fixed(a.SizeMiB, a.CloudProperties, a.VMCID), func(raw json.RawMessage, _ int) (err error) {
		cid, err = decodeCIDResult[DiskKind](MethodCreateDisk, raw, false)
		return err
	})
	return cid, err
}

// DeleteDisk calls delete_disk; its result is ignored.
func (c *caller) DeleteDisk(ctx context.Context, cid DiskCID) error {
	return c.call(ctx, MethodDeleteDisk, fixed(cid), nil)
}

// HasDisk calls has_disk; the result must be a boolean.
func (c *caller) HasDisk(ctx context.Context, cid DiskCID) (ok bool, err error) {
	err = c.call(ctx, MethodHasDisk, fixed(cid), func(raw json.RawMessage, _ int) (err error) {
		ok, err = decodeBoolResult(MethodHasDisk, raw)
		return err
	})
	return ok, err
}

// AttachDisk calls attach_disk. At api_version 1 the result is ignored and the
// hint is zero; at 2 and above it must be a non-empty disk hint, else
// ErrNoDiskHint.
func (c *caller) AttachDisk(ctx context.Context, vm VMCID, disk DiskCID) (hint DiskHint, err error) {
	err = c.call(ctx, MethodAttachDisk, fixed(vm, disk), func(raw json.RawMessage, v int) (err error) {
		hint, err = decodeAttachDiskResult(raw, v)
		return err
	})
	return hint, err
}

// DetachDisk calls detach_disk; its result is ignored.
func (c *caller) DetachDisk(ctx context.Context, vm VMCID, disk DiskCID) error {
	return c.call(ctx, MethodDetachDisk, fixed(vm, disk), nil)
}

// SetDiskMetadata calls set_disk_metadata (nil meta is sent as {}); its result
// is ignored.
func (c *caller) SetDiskMetadata(ctx context.Context, cid DiskCID, meta Metadata) error {
	return c.call(ctx, MethodSetDiskMetadata, fixed(cid, metaOrEmpty(meta)), nil)
}

// GetDisks calls get_disks; the result must be an array (never null) of disk
// CIDs.
func (c *caller) GetDisks(ctx context.Context, vm VMCID) (cids []DiskCID, err error) {
	err = c.call(ctx, MethodGetDisks, fixed(vm), func(raw json.RawMessage, _ int) (err error) {
		cids, err = decodeGetDisksResult(raw)
		return err
	})
	return cids, err
}

// ResizeDisk calls resize_disk (sizeMiB in MiB); its result is ignored.
func (c *caller) ResizeDisk(ctx context.Context, cid DiskCID, sizeMiB int) error {
	return c.call(ctx, MethodResizeDisk, fixed(cid, sizeMiB), nil)
}

// UpdateDisk calls update_disk. Below api_version 2 it is refused
// (*RefusalError) without any process or request; the result is the new disk
// CID, or the zero CID (null) when the disk kept its CID.
func (c *caller) UpdateDisk(ctx context.Context, a UpdateDiskArgs) (cid DiskCID, err error) {
	err = c.call(ctx, MethodUpdateDisk, fixed(a.DiskCID, a.NewSizeMiB, a.CloudProperties), func(raw json.RawMessage, _ int) (err error) {
		cid, err = decodeCIDResult[DiskKind](MethodUpdateDisk, raw, true)
		return err
	})
	return cid, err
}

// SnapshotDisk calls snapshot_disk (nil meta is sent as {}); the result must
// be a snapshot CID.
func (c *caller) SnapshotDisk(ctx context.Context, cid DiskCID, meta Metadata) (snap SnapshotCID, err error) {
	err = c.call(ctx, MethodSnapshotDisk, fixed(cid, metaOrEmpty(meta)), func(raw json.RawMessage, _ int) (err error) {
		snap, err = decodeCIDResult[SnapshotKind](MethodSnapshotDisk, raw, false)
		return err
	})
	return snap, err
}

// DeleteSnapshot calls delete_snapshot; its result is ignored.
func (c *caller) DeleteSnapshot(ctx context.Context, cid SnapshotCID) error {
	return c.call(ctx, MethodDeleteSnapshot, fixed(cid), nil)
}

func metaOrEmpty(m Metadata) Metadata {
	if m == nil {
		return Metadata{}
	}
	return m
}
