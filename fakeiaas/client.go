package fakeiaas

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/internal/httpread"
)

// Client calls a served Cloud over HTTP. Its engine methods have the same
// signatures and errors as *Cloud's (errors arrive as *Error wrapping the
// same *cpiv2.Error), so refcpi works over either. It is safe for
// concurrent use.
type Client struct {
	base             string
	hc               *http.Client
	regUser, regPass string
}

// NewClient returns a client for the Cloud served at url (Server.URL()).
func NewClient(url string) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 256
	tr.MaxIdleConnsPerHost = 256
	tr.Proxy = nil // always loopback
	return &Client{base: strings.TrimRight(url, "/"), hc: &http.Client{Transport: tr}}
}

// WithRegistryAuth returns a copy of the client that sends basic auth on
// registry calls.
func (c *Client) WithRegistryAuth(user, password string) *Client {
	cp := *c
	cp.regUser, cp.regPass = user, password
	return &cp
}

// URL returns the base URL the client talks to.
func (c *Client) URL() string { return c.base }

func (c *Client) transportErr(what string, err error) *Error {
	return newErr(CodeUnavailable, cpiv2.TypeCloudError, "fakeiaas %s at %s: %v", what, c.base, err)
}

// do sends one request and decodes {"result": …} into out.
func (c *Client) do(ctx context.Context, method, path, ctype string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return c.transportErr(path, err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if id := RequestIDFrom(ctx); id != "" {
		req.Header.Set(requestIDHeader, id)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportErr(path, err)
	}
	data, err := httpread.Body(resp, httpread.Endpoint(req), httpread.Limits{MaxBytes: MaxAnswerBytes})
	if err != nil {
		return c.transportErr(path, err)
	}
	var env struct {
		Result json.RawMessage `json:"result"`
		Error  *wireError      `json:"error"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return newErr(CodeInternal, cpiv2.TypeCloudError, "fakeiaas %s: HTTP %d with undecodable body %.200q", path, resp.StatusCode, data)
	}
	if env.Error != nil {
		return fromWire(*env.Error)
	}
	if resp.StatusCode/100 != 2 {
		return newErr(CodeInternal, cpiv2.TypeCloudError, "fakeiaas %s: HTTP %d: %.200q", path, resp.StatusCode, data)
	}
	if out != nil && len(env.Result) > 0 && string(env.Result) != "null" {
		if err := json.Unmarshal(env.Result, out); err != nil {
			return newErr(CodeInternal, cpiv2.TypeCloudError, "fakeiaas %s: decoding result: %v", path, err)
		}
	}
	return nil
}

func (c *Client) op(ctx context.Context, op Op, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return invalid("%s: encoding request: %v", op, err)
	}
	return c.do(ctx, http.MethodPost, apiPrefix+string(op), "application/json", body, out)
}

// CreateStemcell: see Cloud.CreateStemcell.
func (c *Client) CreateStemcell(ctx context.Context, spec StemcellSpec) (Stemcell, error) {
	var out Stemcell
	return out, c.op(ctx, OpCreateStemcell, spec, &out)
}

// DeleteStemcell: see Cloud.DeleteStemcell.
func (c *Client) DeleteStemcell(ctx context.Context, cid cpiv2.StemcellCID) error {
	return c.op(ctx, OpDeleteStemcell, cidReq{CID: cid.String()}, nil)
}

// Stemcell: see Cloud.Stemcell.
func (c *Client) Stemcell(ctx context.Context, cid cpiv2.StemcellCID) (Stemcell, error) {
	var out Stemcell
	return out, c.op(ctx, OpGetStemcell, cidReq{CID: cid.String()}, &out)
}

// CreateVM: see Cloud.CreateVM.
func (c *Client) CreateVM(ctx context.Context, spec VMSpec) (VM, error) {
	var out VM
	return out, c.op(ctx, OpCreateVM, spec, &out)
}

// DeleteVM: see Cloud.DeleteVM.
func (c *Client) DeleteVM(ctx context.Context, cid cpiv2.VMCID) error {
	return c.op(ctx, OpDeleteVM, cidReq{CID: cid.String()}, nil)
}

// VM: see Cloud.VM.
func (c *Client) VM(ctx context.Context, cid cpiv2.VMCID) (VM, error) {
	var out VM
	return out, c.op(ctx, OpGetVM, cidReq{CID: cid.String()}, &out)
}

// VMDisks: see Cloud.VMDisks.
func (c *Client) VMDisks(ctx context.Context, cid cpiv2.VMCID) ([]cpiv2.DiskCID, error) {
	out := []cpiv2.DiskCID{}
	return out, c.op(ctx, OpGetDisks, cidReq{CID: cid.String()}, &out)
}

// RebootVM: see Cloud.RebootVM.
func (c *Client) RebootVM(ctx context.Context, cid cpiv2.VMCID) error {
	return c.op(ctx, OpRebootVM, cidReq{CID: cid.String()}, nil)
}

// SetVMMetadata: see Cloud.SetVMMetadata.
func (c *Client) SetVMMetadata(ctx context.Context, cid cpiv2.VMCID, meta cpiv2.Metadata) error {
	return c.op(ctx, OpSetVMMetadata, cidReq{CID: cid.String(), Metadata: meta}, nil)
}

// CreateDisk: see Cloud.CreateDisk.
func (c *Client) CreateDisk(ctx context.Context, spec DiskSpec) (Disk, error) {
	var out Disk
	return out, c.op(ctx, OpCreateDisk, spec, &out)
}

// DeleteDisk: see Cloud.DeleteDisk.
func (c *Client) DeleteDisk(ctx context.Context, cid cpiv2.DiskCID) error {
	return c.op(ctx, OpDeleteDisk, cidReq{CID: cid.String()}, nil)
}

// Disk: see Cloud.Disk.
func (c *Client) Disk(ctx context.Context, cid cpiv2.DiskCID) (Disk, error) {
	var out Disk
	return out, c.op(ctx, OpGetDisk, cidReq{CID: cid.String()}, &out)
}

// AttachDisk: see Cloud.AttachDisk.
func (c *Client) AttachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) (Attachment, error) {
	var out Attachment
	return out, c.op(ctx, OpAttachDisk, pairReq{VMCID: vm.String(), DiskCID: disk.String()}, &out)
}

// DetachDisk: see Cloud.DetachDisk.
func (c *Client) DetachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) error {
	return c.op(ctx, OpDetachDisk, pairReq{VMCID: vm.String(), DiskCID: disk.String()}, nil)
}

// SetDiskMetadata: see Cloud.SetDiskMetadata.
func (c *Client) SetDiskMetadata(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) error {
	return c.op(ctx, OpSetDiskMetadata, cidReq{CID: cid.String(), Metadata: meta}, nil)
}

// ResizeDisk: see Cloud.ResizeDisk.
func (c *Client) ResizeDisk(ctx context.Context, cid cpiv2.DiskCID, newSizeMiB int) error {
	return c.op(ctx, OpResizeDisk, cidReq{CID: cid.String(), SizeMiB: newSizeMiB}, nil)
}

// UpdateDisk: see Cloud.UpdateDisk.
func (c *Client) UpdateDisk(ctx context.Context, u DiskUpdate) error {
	return c.op(ctx, OpUpdateDisk, u, nil)
}

// SnapshotDisk: see Cloud.SnapshotDisk.
func (c *Client) SnapshotDisk(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) (Snapshot, error) {
	var out Snapshot
	return out, c.op(ctx, OpSnapshotDisk, cidReq{CID: cid.String(), Metadata: meta}, &out)
}

// DeleteSnapshot: see Cloud.DeleteSnapshot.
func (c *Client) DeleteSnapshot(ctx context.Context, cid cpiv2.SnapshotCID) error {
	return c.op(ctx, OpDeleteSnapshot, cidReq{CID: cid.String()}, nil)
}

// ---- registry and metadata (the agent-facing endpoints) ----

func (c *Client) registry(ctx context.Context, method, vm string, body []byte) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base+"/registry/instances/"+url.PathEscape(vm)+"/settings", bytes.NewReader(body))
	if err != nil {
		return nil, nil, c.transportErr("registry", err)
	}
	if c.regUser != "" {
		req.SetBasicAuth(c.regUser, c.regPass)
	}
	if id := RequestIDFrom(ctx); id != "" {
		req.Header.Set(requestIDHeader, id)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, nil, c.transportErr("registry", err)
	}
	data, err := httpread.Body(resp, httpread.Endpoint(req), httpread.Limits{MaxBytes: MaxAnswerBytes})
	if err != nil {
		return nil, nil, c.transportErr("registry", err)
	}
	return resp, data, nil
}

func registryErr(resp *http.Response, data []byte, vm string) error {
	var env struct {
		Status string     `json:"status"`
		Error  *wireError `json:"error"`
	}
	_ = json.Unmarshal(data, &env)
	switch {
	case env.Error != nil:
		return fromWire(*env.Error)
	case resp.StatusCode == http.StatusNotFound:
		return newErr(CodeNotFound, cpiv2.TypeCloudError, "registry: no settings for %q", vm)
	case resp.StatusCode == http.StatusUnauthorized:
		return newErr(CodeInvalid, cpiv2.TypeCloudError, "registry: access denied (basic auth)")
	}
	return newErr(CodeInternal, cpiv2.TypeCloudError, "registry: HTTP %d: %.200q", resp.StatusCode, data)
}

// GetSettings reads a VM's registry settings through the registry endpoint.
func (c *Client) GetSettings(ctx context.Context, vm string) (json.RawMessage, error) {
	resp, data, err := c.registry(ctx, http.MethodGet, vm, nil)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, registryErr(resp, data, vm)
	}
	var env struct {
		Settings string `json:"settings"`
	}
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, newErr(CodeInternal, cpiv2.TypeCloudError, "registry: bad GET response %.200q", data)
	}
	return json.RawMessage(env.Settings), nil
}

// PutSettings writes a VM's registry settings through the registry endpoint.
func (c *Client) PutSettings(ctx context.Context, vm string, settings json.RawMessage) error {
	resp, data, err := c.registry(ctx, http.MethodPut, vm, settings)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return registryErr(resp, data, vm)
	}
	return nil
}

// DeleteSettings deletes a VM's registry settings through the registry endpoint.
func (c *Client) DeleteSettings(ctx context.Context, vm string) error {
	resp, data, err := c.registry(ctx, http.MethodDelete, vm, nil)
	if err != nil {
		return err
	}
	if resp.StatusCode/100 != 2 {
		return registryErr(resp, data, vm)
	}
	return nil
}

// UserData reads a VM's user-data from the metadata service.
func (c *Client) UserData(ctx context.Context, vm string) (json.RawMessage, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/metadata/"+url.PathEscape(vm)+"/user-data", nil)
	if err != nil {
		return nil, c.transportErr("metadata", err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, c.transportErr("metadata", err)
	}
	data, err := httpread.Body(resp, httpread.Endpoint(req), httpread.Limits{MaxBytes: MaxAnswerBytes})
	if err != nil {
		return nil, c.transportErr("metadata", err)
	}
	if resp.StatusCode != http.StatusOK {
		var env struct {
			Error *wireError `json:"error"`
		}
		if json.Unmarshal(data, &env) == nil && env.Error != nil {
			return nil, fromWire(*env.Error)
		}
		return nil, newErr(CodeInternal, cpiv2.TypeCloudError, "metadata: HTTP %d", resp.StatusCode)
	}
	return json.RawMessage(data), nil
}

// ---- oracle and faults ----

// State returns the whole state (the oracle).
func (c *Client) State(ctx context.Context) (State, error) {
	var out State
	return out, c.do(ctx, http.MethodGet, "/oracle/state", "", nil, &out)
}

// History returns the recorded operations matching f; limit 0 means all.
func (c *Client) History(ctx context.Context, f HistoryFilter, limit int) ([]HistoryEntry, error) {
	q := url.Values{}
	if f.Since > 0 {
		q.Set("since", strconv.FormatInt(f.Since, 10))
	}
	if f.Op != "" {
		q.Set("op", string(f.Op))
	}
	if f.Target != "" {
		q.Set("target", f.Target)
	}
	if f.RequestID != "" {
		q.Set("request_id", f.RequestID)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	out := []HistoryEntry{}
	return out, c.do(ctx, http.MethodGet, "/oracle/history?"+q.Encode(), "", nil, &out)
}

// AddFault adds a rule and returns it with its ID.
func (c *Client) AddFault(ctx context.Context, r Rule) (Rule, error) {
	body, err := json.Marshal(r)
	if err != nil {
		return Rule{}, invalid("fault rule: %v", err)
	}
	var out []Rule
	if err := c.do(ctx, http.MethodPost, "/faults", "application/json", body, &out); err != nil {
		return Rule{}, err
	}
	if len(out) != 1 {
		return Rule{}, newErr(CodeInternal, cpiv2.TypeCloudError, "faults: expected one rule back, got %d", len(out))
	}
	return out[0], nil
}

// AddFaultText adds rules in the text form (one per line; see ParseRules).
func (c *Client) AddFaultText(ctx context.Context, text string) ([]Rule, error) {
	var out []Rule
	return out, c.do(ctx, http.MethodPost, "/faults", "text/plain", []byte(text), &out)
}

// Faults lists the active rules with their counters.
func (c *Client) Faults(ctx context.Context) ([]RuleStatus, error) {
	var out []RuleStatus
	return out, c.do(ctx, http.MethodGet, "/faults", "", nil, &out)
}

// RemoveFault removes one rule.
func (c *Client) RemoveFault(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/faults/"+url.PathEscape(id), "", nil, nil)
}

// ReleaseFault releases the calls a pause rule holds.
func (c *Client) ReleaseFault(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodPost, "/faults/"+url.PathEscape(id)+"/release", "", nil, nil)
}

// ClearFaults removes every rule.
func (c *Client) ClearFaults(ctx context.Context) error {
	return c.do(ctx, http.MethodDelete, "/faults", "", nil, nil)
}

// WaitReady polls the server until it answers or timeout passes (wall
// clock; a client-side helper for processes that start a server).
func (c *Client) WaitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := c.Faults(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fakeiaas at %s not ready after %v: %w", c.base, timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fakeiaas at %s: waiting for it to be ready: %w (last error: %v)", c.base, ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
