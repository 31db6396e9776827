package fakeiaas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/google/uuid"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/datadir"
	"github.com/cpilab/cpilab/rt"
)

// Config configures a Cloud (docs/seams.md).
type Config struct {
	// DataDir holds VM roots (vms/<vm cid>/root), disk backing files
	// (disks/<disk cid>.img) and, for the sqlite store, fakeiaas.db. Required;
	// created when missing. With the sqlite store the Cloud holds the dir's
	// lock (package datadir) until Close: a second Cloud on it, in this
	// process or another, fails with datadir.ErrLocked.
	DataDir string
	// Store is "sqlite" (the default: durable in DataDir) or "memory" (the
	// simulator and fast tests: nothing survives the process).
	Store string
	// Runtime supplies time, randomness and blocking; default rt.Real(0).
	Runtime rt.Runtime
	// Hooks boots and halts VMs' agents; nil: a VM is just its root.
	Hooks VMHooks
	// RegistryUser and RegistryPassword protect the registry with basic
	// auth; when RegistryUser is empty the registry accepts anyone.
	RegistryUser, RegistryPassword string
}

// BootInfo is what a VM's agent needs to start (docs/seams.md).
type BootInfo struct {
	VMCID, AgentID, Root string // Root: the VM's root directory
	// StemcellAPIVersion is the api_version of the VM's stemcell image.
	StemcellAPIVersion int
	// DeviceResolver is the image's agent.device_path_resolution_type
	// ("identity" when absent).
	DeviceResolver string
	// MetadataURL and RegistryURL are this fakeiaas's endpoints (empty
	// until it is served over HTTP).
	MetadataURL, RegistryURL       string
	RegistryUser, RegistryPassword string
}

// VMHooks starts and stops the agent of a VM (docs/seams.md). fakeiaas
// calls them without holding any lock, so a hook may call back into the
// Cloud.
type VMHooks interface {
	Boot(BootInfo) error // after create_vm and after reboot_vm / restart
	Halt(vmCID string)   // before delete_vm and on reboot
}

// Cloud is the fake IaaS engine: all state, the VM roots and disk files,
// fault rules and history. It is safe for concurrent use.
//
// Lock order: Cloud.mu, then the store's own lock. faults.mu is never held
// together with Cloud.mu. Hooks and fault waits run with no lock held.
type Cloud struct {
	dataDir string
	r       rt.Runtime
	hooks   VMHooks
	st      store
	faults  *faults
	regUser string
	regPass string
	cidRand *rand.Rand
	lock    *datadir.Lock // the data dir's lock (durable store only; nil otherwise)

	mu        rt.Mutex
	stemcells map[string]*Stemcell         // guarded by mu
	vms       map[string]*VM               // guarded by mu; Disks/Attachments/Root not kept
	disks     map[string]*Disk             // guarded by mu
	snapshots map[string]*Snapshot         // guarded by mu
	registry  map[string]json.RawMessage   // guarded by mu
	devs      map[string]map[string]string // guarded by mu; vm cid → device → disk cid
	seq       int64                        // guarded by mu; last history seq
	baseURL   string                       // guarded by mu
	closed    bool                         // guarded by mu
}

// New opens (or creates) the cloud in cfg.DataDir, loading what a previous
// run left and reconciling the VM roots with it.
func New(cfg Config) (*Cloud, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("fakeiaas: Config.DataDir is required")
	}
	if cfg.Runtime == nil {
		cfg.Runtime = rt.Real(0)
	}
	dir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("fakeiaas: data dir %q: %w", cfg.DataDir, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("fakeiaas: data dir: %w", err)
	}
	var st store
	var lock *datadir.Lock
	switch cfg.Store {
	case "", "sqlite":
		// A durable data dir has one owner: a second process (or a second
		// Cloud in this one) would overwrite its files.
		if lock, err = datadir.Acquire(dir, "fakeiaas"); err != nil {
			return nil, fmt.Errorf("fakeiaas: %w", err)
		}
		s, err := openSQLite(dir)
		if err != nil {
			lock.Release()
			return nil, err
		}
		st = s
	case "memory":
		st = newMemStore()
	default:
		return nil, fmt.Errorf("fakeiaas: Config.Store %q: want \"sqlite\" or \"memory\"", cfg.Store)
	}
	c := &Cloud{
		dataDir: dir, r: cfg.Runtime, hooks: cfg.Hooks, st: st, faults: newFaults(cfg.Runtime),
		regUser: cfg.RegistryUser, regPass: cfg.RegistryPassword,
		cidRand:   cidStream(cfg.Runtime, st),
		mu:        cfg.Runtime.NewMutex(),
		stemcells: map[string]*Stemcell{}, vms: map[string]*VM{}, disks: map[string]*Disk{},
		snapshots: map[string]*Snapshot{}, registry: map[string]json.RawMessage{},
		devs: map[string]map[string]string{},
	}
	c.lock = lock
	if err := c.loadState(); err != nil {
		st.close()
		lock.Release()
		return nil, err
	}
	c.mu.Lock()
	err = c.reconcileLocked()
	c.mu.Unlock()
	if err != nil {
		st.close()
		lock.Release()
		return nil, fmt.Errorf("fakeiaas: reconcile %s: %w", dir, err)
	}
	return c, nil
}

func (c *Cloud) loadState() error {
	objs, last, err := c.st.load()
	if err != nil {
		return err
	}
	c.seq = last
	dec := func(kind, id string, data []byte, v any) error {
		if err := json.Unmarshal(data, v); err != nil {
			return fmt.Errorf("fakeiaas: stored %s %q: %w", kind, id, err)
		}
		return nil
	}
	for id, data := range objs[kindStemcell] {
		s := new(Stemcell)
		if err := dec(kindStemcell, id, data, s); err != nil {
			return err
		}
		c.stemcells[id] = s
	}
	for id, data := range objs[kindVM] {
		v := new(VM)
		if err := dec(kindVM, id, data, v); err != nil {
			return err
		}
		c.vms[id] = v
		c.devs[id] = map[string]string{}
	}
	for id, data := range objs[kindDisk] {
		d := new(Disk)
		if err := dec(kindDisk, id, data, d); err != nil {
			return err
		}
		c.disks[id] = d
	}
	for id, d := range c.disks {
		if !d.VMCID.IsZero() {
			if devs, ok := c.devs[d.VMCID.String()]; ok {
				devs[d.Device] = id
			} else { // the VM is gone: the disk is detached
				d.VMCID, d.Device, d.LUN = cpiv2.VMCID{}, "", 0
			}
		}
	}
	for id, data := range objs[kindSnapshot] {
		s := new(Snapshot)
		if err := dec(kindSnapshot, id, data, s); err != nil {
			return err
		}
		c.snapshots[id] = s
	}
	for id, data := range objs[kindRegistry] {
		c.registry[id] = json.RawMessage(data)
	}
	return nil
}

// Close flushes the store and closes it. The Cloud must not be used after.
func (c *Cloud) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	c.faults.clear()
	err := c.st.close()
	if lerr := c.lock.Release(); err == nil {
		err = lerr
	}
	return err
}

// DataDir returns the absolute data directory.
func (c *Cloud) DataDir() string { return c.dataDir }

// VMRoot returns the root directory VM cid has (or would have).
func (c *Cloud) VMRoot(cid cpiv2.VMCID) string { return c.vmRoot(cid.String()) }

// DiskFile returns the sparse backing file of disk cid.
func (c *Cloud) DiskFile(cid cpiv2.DiskCID) string { return c.diskFile(cid.String()) }

// SetBaseURL tells the Cloud the URL it is served at, for BootInfo and the
// oracle. Serve calls it.
func (c *Cloud) SetBaseURL(u string) {
	c.mu.Lock()
	c.baseURL = u
	c.mu.Unlock()
}

// cidStream is where CIDs come from. With the memory store it is the
// runtime's "fakeiaas.cids" stream, so the same seed gives the same CIDs
// (the simulator replays runs). A durable store starts from earlier runs'
// objects: its stream also mixes in the store's start seed, new on every
// open, so a restart never draws the CIDs of an earlier run again.
func cidStream(r rt.Runtime, st store) *rand.Rand {
	s := r.Rand("fakeiaas.cids")
	seed := st.startSeed()
	if seed == 0 {
		return s
	}
	return rand.New(rand.NewPCG(s.Uint64(), seed)) // used under Cloud.mu only
}

// maxCIDDraws bounds the draws newCIDLocked makes to find an unused CID.
const maxCIDDraws = 8

// newCIDLocked draws a CID of kind that names no object the cloud holds and
// no file or directory in the data dir. A collision (an ID stream that
// repeats an earlier run's, say) is drawn again, never reused: a create
// must not replace an existing object.
func (c *Cloud) newCIDLocked(kind, prefix string) (string, *Error) {
	for range maxCIDDraws {
		u, err := uuid.NewRandomFromReader(randReader{c.cidRand})
		if err != nil {
			panic("fakeiaas: uuid from runtime stream: " + err.Error()) // randReader never fails
		}
		cid := prefix + "-" + u.String()
		if !c.cidTakenLocked(kind, cid) {
			return cid, nil
		}
	}
	return "", newErr(CodeExists, cpiv2.TypeCloudError, "fakeiaas: %d %s CIDs drawn in a row are all taken; refusing to replace an existing object", maxCIDDraws, kind)
}

func (c *Cloud) cidTakenLocked(kind, cid string) bool {
	var inUse bool
	var path string
	switch kind {
	case kindStemcell:
		_, inUse = c.stemcells[cid]
	case kindVM:
		_, inUse = c.vms[cid]
		path = c.vmDir(cid)
	case kindDisk:
		_, inUse = c.disks[cid]
		path = c.diskFile(cid)
	case kindSnapshot:
		_, inUse = c.snapshots[cid]
	}
	if inUse {
		return true
	}
	if path != "" {
		if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			return true // there, or cannot tell: do not touch it
		}
	}
	return false
}

// claimVMDirLocked creates VM cid's directory, failing with ErrExists if
// anything is already there: the root of another VM is never reused.
func (c *Cloud) claimVMDirLocked(cid string) *Error {
	if err := os.MkdirAll(filepath.Join(c.dataDir, "vms"), 0o755); err != nil {
		return internalErr("create_vm", err)
	}
	if err := os.Mkdir(c.vmDir(cid), 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return newErr(CodeExists, cpiv2.TypeCloudError, "create_vm: refusing to reuse %s: it already exists", c.vmDir(cid))
		}
		return internalErr("create_vm", err)
	}
	return nil
}

// claimDiskFileLocked creates disk cid's backing file empty, failing with
// ErrExists if it is already there: another disk's data is never
// truncated.
func (c *Cloud) claimDiskFileLocked(cid string) *Error {
	if err := os.MkdirAll(filepath.Join(c.dataDir, "disks"), 0o755); err != nil {
		return internalErr("create_disk", err)
	}
	f, err := os.OpenFile(c.diskFile(cid), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		if errors.Is(err, fs.ErrExist) {
			return newErr(CodeExists, cpiv2.TypeCloudError, "create_disk: refusing to reuse %s: it already exists", c.diskFile(cid))
		}
		return internalErr("create_disk", err)
	}
	if err := f.Close(); err != nil {
		return internalErr("create_disk", err)
	}
	return nil
}

type randReader struct{ r *rand.Rand }

func (rr randReader) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = byte(rr.r.Uint64())
	}
	return len(p), nil
}

var _ io.Reader = randReader{}

type requestIDKey struct{}

// WithRequestID returns ctx carrying the request_id fakeiaas records in the
// history for calls made with it. Without it, the request_id of the
// cpiv2.CallInfo in ctx is used.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// RequestIDFrom returns the request_id for ctx (see WithRequestID).
func RequestIDFrom(ctx context.Context) string {
	if id, ok := ctx.Value(requestIDKey{}).(string); ok {
		return id
	}
	if ci, ok := cpiv2.CallInfoFrom(ctx); ok {
		return ci.RequestID
	}
	return ""
}

// call is one operation in flight.
type call struct {
	ctx    context.Context
	op     Op
	h      HistoryEntry
	out    outcome
	record bool // write a history entry
}

// mutate runs one operation: fault rules, then apply under the lock, then
// the history entry, then waits until the batch is durable. apply may set
// cl.h.Target and cl.h.Detail.
func (c *Cloud) mutate(ctx context.Context, op Op, target string, apply func(cl *call, b *batch) *Error, alsoTargets ...string) error {
	cl := &call{ctx: ctx, op: op, record: true, h: HistoryEntry{Op: op, Target: target, RequestID: RequestIDFrom(ctx)}}
	out, ferr := c.faults.before(op, target, alsoTargets...)
	cl.out = out
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return newErr(CodeUnavailable, cpiv2.TypeCloudError, "fakeiaas is closed")
	}
	var b batch
	err := ferr
	if err == nil {
		err = apply(cl, &b)
		if err != nil {
			b.records = nil // apply must not leave half a change; drop its records
		}
	}
	c.historyLocked(cl, &b, err)
	t := c.st.enqueue(b)
	c.mu.Unlock()
	if werr := t.wait(); werr != nil {
		if errors.Is(werr, ErrExists) {
			return newErr(CodeExists, cpiv2.TypeCloudError, "%s: %v", op, werr)
		}
		return internalErr(string(op), werr)
	}
	if err != nil {
		return err
	}
	if cl.out.loseResponse {
		return newErr(CodeResponseLost, cpiv2.TypeCloudError, "%s was applied but its response was lost (fault %v)", op, cl.out.fired)
	}
	return nil
}

func (c *Cloud) historyLocked(cl *call, b *batch, err *Error) {
	if !cl.record {
		return
	}
	c.seq++
	cl.h.Seq = c.seq
	cl.h.Time = c.r.Now()
	cl.h.Faults = cl.out.fired
	cl.h.Result = "ok"
	if err != nil {
		cl.h.Result = string(cpiv2.TypeCloudError)
		if err.CPI != nil {
			cl.h.Result, cl.h.Error = string(err.CPI.Type), err.CPI.Message
		}
	}
	b.history = append(b.history, cl.h)
}

// read runs a read: fault rules, then fn under the lock. Reads are not
// recorded unless record is set (registry and metadata accesses).
func (c *Cloud) read(ctx context.Context, op Op, target string, record bool, fn func(cl *call) *Error) error {
	cl := &call{ctx: ctx, op: op, record: record, h: HistoryEntry{Op: op, Target: target, RequestID: RequestIDFrom(ctx)}}
	out, ferr := c.faults.before(op, target)
	cl.out = out
	c.mu.Lock()
	err := ferr
	if err == nil {
		err = fn(cl)
	}
	if record {
		var b batch
		c.historyLocked(cl, &b, err)
		c.st.enqueue(b) // an access record need not be durable before answering
	}
	c.mu.Unlock()
	if err != nil {
		return err
	}
	if out.loseResponse {
		return newErr(CodeResponseLost, cpiv2.TypeCloudError, "%s response lost (fault %v)", op, out.fired)
	}
	return nil
}

func checkHash(what string, raw json.RawMessage) (json.RawMessage, *Error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, invalid("%s must be a JSON hash: %v", what, err)
	}
	return append(json.RawMessage(nil), raw...), nil
}

func copyMeta(m cpiv2.Metadata) cpiv2.Metadata {
	if m == nil {
		return nil
	}
	out := make(cpiv2.Metadata, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// ---- stemcells ----

type stemcellImage struct {
	Name       string          `json:"name"`
	Version    json.RawMessage `json:"version"`
	APIVersion int             `json:"api_version"`
	Agent      json.RawMessage `json:"agent"`
}

// CreateStemcell records a stemcell from its image (the small JSON of
// fixtures/stemcells: name, version, api_version, agent).
func (c *Cloud) CreateStemcell(ctx context.Context, spec StemcellSpec) (Stemcell, error) {
	var out Stemcell
	err := c.mutate(ctx, OpCreateStemcell, "", func(cl *call, b *batch) *Error {
		if e := checkCount("create_stemcell", "stemcells", len(c.stemcells), MaxStemcells, "MaxStemcells"); e != nil {
			return e
		}
		if e := checkName("create_stemcell: image path", spec.ImagePath); e != nil {
			return e
		}
		if e := checkDoc("create_stemcell: image", spec.Image); e != nil {
			return e
		}
		if e := checkDoc("create_stemcell: cloud_properties", spec.CloudProperties); e != nil {
			return e
		}
		if e := checkMetadata("create_stemcell: tags", spec.Tags); e != nil {
			return e
		}
		var img stemcellImage
		if err := json.Unmarshal(spec.Image, &img); err != nil {
			return invalid("stemcell image %q is not a fakeiaas image (JSON with name, version, api_version, agent): %v", spec.ImagePath, err)
		}
		if img.APIVersion < 0 {
			return invalid("stemcell image %q: api_version %d", spec.ImagePath, img.APIVersion)
		}
		if img.APIVersion == 0 {
			img.APIVersion = 1
		}
		cp, e := checkHash("stemcell cloud_properties", spec.CloudProperties)
		if e != nil {
			return e
		}
		var agent struct {
			Resolver string `json:"device_path_resolution_type"`
		}
		if len(img.Agent) > 0 {
			if err := json.Unmarshal(img.Agent, &agent); err != nil {
				return invalid("stemcell image %q: agent block: %v", spec.ImagePath, err)
			}
		}
		if agent.Resolver == "" {
			agent.Resolver = "identity"
		}
		version := string(img.Version)
		var vs string
		if json.Unmarshal(img.Version, &vs) == nil {
			version = vs
		}
		cid, e := c.newCIDLocked(kindStemcell, "sc")
		if e != nil {
			return e
		}
		s := &Stemcell{
			CID: cpiv2.MustCID[cpiv2.StemcellKind](cid), Name: img.Name, Version: version, ImagePath: spec.ImagePath,
			APIVersion: img.APIVersion, Agent: img.Agent, DeviceResolver: agent.Resolver,
			CloudProperties: cp, Tags: spec.Tags, Created: c.r.Now(),
		}
		c.stemcells[cid] = s
		b.create(kindStemcell, cid, s)
		cl.h.Target = cid
		cl.h.Detail = "api_version=" + strconv.Itoa(img.APIVersion)
		out = *s
		return nil
	})
	return out, err
}

// DeleteStemcell deletes a stemcell; VMs made from it keep running.
func (c *Cloud) DeleteStemcell(ctx context.Context, cid cpiv2.StemcellCID) error {
	return c.mutate(ctx, OpDeleteStemcell, cid.String(), func(cl *call, b *batch) *Error {
		if _, ok := c.stemcells[cid.String()]; !ok {
			return newErr(CodeNotFound, cpiv2.TypeCloudError, "stemcell %q not found", cid)
		}
		delete(c.stemcells, cid.String())
		b.del(kindStemcell, cid.String())
		return nil
	})
}

// Stemcell returns a stemcell (ErrNotFound when absent).
func (c *Cloud) Stemcell(ctx context.Context, cid cpiv2.StemcellCID) (Stemcell, error) {
	var out Stemcell
	err := c.read(ctx, OpGetStemcell, cid.String(), false, func(*call) *Error {
		s, ok := c.stemcells[cid.String()]
		if !ok {
			return newErr(CodeNotFound, cpiv2.TypeCloudError, "stemcell %q not found", cid)
		}
		out = *s
		return nil
	})
	return out, err
}

// ---- VMs ----

func parseVMProps(raw json.RawMessage) (VMCloudProps, *Error) {
	var p VMCloudProps
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &p); err != nil {
			return p, invalid("VM cloud_properties: %v", err)
		}
	}
	switch p.DevicePrefix {
	case "":
		p.DevicePrefix = "sd"
	case "sd", "xvd", "vd":
	default:
		return p, invalid("VM cloud_properties: device_prefix %q: want sd, xvd or vd", p.DevicePrefix)
	}
	switch p.DiskHint {
	case "":
		p.DiskHint = "path"
	case "path", "string", "id", "volume_id", "lun":
	default:
		return p, invalid("VM cloud_properties: disk_hint %q: want path, string, id, volume_id or lun", p.DiskHint)
	}
	return p, nil
}

// parseVMSize reads the size a VM's cloud_properties ask for (sizes.go).
func parseVMSize(raw json.RawMessage) (VMSize, *Error) {
	var s vmSizing
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &s); err != nil {
			return VMSize{}, invalid("VM cloud_properties: instance_type, cpu, ram and ephemeral_disk.size: %v", err)
		}
	}
	return s.size()
}

func substituteCID(raw json.RawMessage, cid string) (json.RawMessage, *Error) {
	if len(raw) == 0 {
		return nil, nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, invalid("user-data is not JSON: %v", err)
	}
	var walk func(any) any
	walk = func(x any) any {
		switch t := x.(type) {
		case string:
			if t == VMCIDPlaceholder {
				return cid
			}
		case map[string]any:
			for k, e := range t {
				t[k] = walk(e)
			}
		case []any:
			for i, e := range t {
				t[i] = walk(e)
			}
		}
		return x
	}
	out, err := json.Marshal(walk(v))
	if err != nil {
		return nil, invalid("user-data: %v", err)
	}
	return out, nil
}

// CreateVM creates a VM and its root, then boots it through the hooks
// (unless spec.NoBoot). A boot failure deletes the VM again and returns
// VMCreationFailed (ok_to_retry).
func (c *Cloud) CreateVM(ctx context.Context, spec VMSpec) (VM, error) {
	var out VM
	err := c.mutate(ctx, OpCreateVM, "", func(cl *call, b *batch) *Error {
		if spec.AgentID == "" {
			return invalid("create_vm: agent_id is empty")
		}
		if e := checkCount("create_vm", "VMs", len(c.vms), MaxVMs, "MaxVMs"); e != nil {
			return e
		}
		if e := checkName("create_vm: agent_id", spec.AgentID); e != nil {
			return e
		}
		for _, d := range []struct {
			what string
			raw  json.RawMessage
		}{{"cloud_properties", spec.CloudProperties}, {"networks", spec.Networks}, {"env", spec.Env}, {"user-data", spec.UserData}} {
			if e := checkDoc("create_vm: "+d.what, d.raw); e != nil {
				return e
			}
		}
		if len(spec.DiskLocality) > MaxMetadataEntries {
			return tooLarge("create_vm: %d disk CIDs for locality; the limit is %d", len(spec.DiskLocality), MaxMetadataEntries)
		}
		sc, ok := c.stemcells[spec.StemcellCID.String()]
		if !ok {
			return newErr(CodeNotFound, cpiv2.TypeVMCreationFailed, "create_vm: stemcell %q not found", spec.StemcellCID)
		}
		props, e := parseVMProps(spec.CloudProperties)
		if e != nil {
			return e
		}
		size, e := parseVMSize(spec.CloudProperties)
		if e != nil {
			return e
		}
		cp, e := checkHash("VM cloud_properties", spec.CloudProperties)
		if e != nil {
			return e
		}
		nets, e := checkHash("networks", spec.Networks)
		if e != nil {
			return e
		}
		env, e := checkHash("env", spec.Env)
		if e != nil {
			return e
		}
		cid, e := c.newCIDLocked(kindVM, "vm")
		if e != nil {
			return e
		}
		ud, e := substituteCID(spec.UserData, cid)
		if e != nil {
			return e
		}
		if e := c.claimVMDirLocked(cid); e != nil {
			return e
		}
		if err := c.makeRoot(cid); err != nil {
			_ = c.removeVMDir(cid)
			return internalErr("create_vm", err)
		}
		vm := &VM{
			CID: cpiv2.MustCID[cpiv2.VMKind](cid), AgentID: spec.AgentID, StemcellCID: spec.StemcellCID,
			CloudProperties: cp, Networks: nets, Env: env, DiskLocality: spec.DiskLocality, UserData: ud,
			Props: props, Size: size, StemcellAPIVersion: sc.APIVersion, DeviceResolver: sc.DeviceResolver,
			Created: c.r.Now(), Boots: 1,
		}
		if spec.NoBoot {
			vm.Boots = 0
		}
		c.vms[cid] = vm
		c.devs[cid] = map[string]string{}
		b.create(kindVM, cid, vm)
		cl.h.Target = cid
		cl.h.Detail = "agent_id=" + spec.AgentID
		out = c.viewVMLocked(vm)
		return nil
	})
	if err != nil && !errors.Is(err, ErrResponseLost) {
		return VM{}, err
	}
	if spec.NoBoot {
		if err != nil {
			return VM{}, err
		}
		return out, nil
	}
	if berr := c.boot(out); berr != nil {
		_ = c.deleteVM(ctx, out.CID, "boot failed: "+berr.Error())
		return VM{}, &Error{Code: CodeInternal, CPI: cpiv2.NewError(cpiv2.TypeVMCreationFailed, "create_vm: booting %s: %v", out.CID, berr).Retryable()}
	}
	if err != nil { // applied and booted, but the caller never hears of it
		return VM{}, err
	}
	return out, nil
}

func (c *Cloud) bootInfoLocked(vm *VM) BootInfo {
	bi := BootInfo{
		VMCID: vm.CID.String(), AgentID: vm.AgentID, Root: c.vmRoot(vm.CID.String()),
		StemcellAPIVersion: vm.StemcellAPIVersion, DeviceResolver: vm.DeviceResolver,
		RegistryUser: c.regUser, RegistryPassword: c.regPass,
	}
	if c.baseURL != "" {
		bi.MetadataURL = c.baseURL + "/metadata"
		bi.RegistryURL = c.baseURL + "/registry"
	}
	return bi
}

// BootAll calls the Boot hook for every VM the cloud holds, in CID order:
// the VMs of a cloud reopened from its data dir are running machines, so
// their agents must run too. Call it once the hooks can serve (and, for
// agents that fetch settings over HTTP, after Serve has set the URLs).
func (c *Cloud) BootAll() error {
	if c.hooks == nil {
		return nil
	}
	c.mu.Lock()
	infos := make([]BootInfo, 0, len(c.vms))
	for _, id := range slices.Sorted(maps.Keys(c.vms)) {
		if c.vms[id].Boots == 0 { // created with NoBoot and never booted: it stays down
			continue
		}
		infos = append(infos, c.bootInfoLocked(c.vms[id]))
	}
	c.mu.Unlock()
	var errs []error
	for _, bi := range infos {
		if err := c.hooks.Boot(bi); err != nil {
			errs = append(errs, fmt.Errorf("fakeiaas: booting %s: %w", bi.VMCID, err))
		}
	}
	return errors.Join(errs...)
}

func (c *Cloud) boot(vm VM) error {
	if c.hooks == nil {
		return nil
	}
	c.mu.Lock()
	bi := c.bootInfoLocked(&vm)
	c.mu.Unlock()
	return c.hooks.Boot(bi)
}

func (c *Cloud) halt(cid cpiv2.VMCID) {
	if c.hooks != nil {
		c.hooks.Halt(cid.String())
	}
}

// viewVMLocked returns a copy of vm with Root, Disks and Attachments filled in.
func (c *Cloud) viewVMLocked(vm *VM) VM {
	v := *vm
	v.Metadata = copyMeta(vm.Metadata)
	v.Root = c.vmRoot(vm.CID.String())
	devs := c.devs[vm.CID.String()]
	names := make([]string, 0, len(devs))
	for d := range devs {
		names = append(names, d)
	}
	sort.Slice(names, func(i, j int) bool { return names[i][len(names[i])-1] < names[j][len(names[j])-1] })
	v.Disks = make([]cpiv2.DiskCID, 0, len(names))
	v.Attachments = nil
	for _, d := range names {
		dcid := devs[d]
		v.Disks = append(v.Disks, cpiv2.MustCID[cpiv2.DiskKind](dcid))
		v.Attachments = append(v.Attachments, AttachmentInfo{DiskCID: cpiv2.MustCID[cpiv2.DiskKind](dcid), Device: d, LUN: c.disks[dcid].LUN})
	}
	return v
}

// DeleteVM halts the VM, detaches its disks (they are kept) and removes it
// and its root. A missing VM is VMNotFound.
func (c *Cloud) DeleteVM(ctx context.Context, cid cpiv2.VMCID) error {
	c.mu.Lock()
	_, ok := c.vms[cid.String()]
	c.mu.Unlock()
	if ok {
		c.halt(cid)
	}
	return c.deleteVM(ctx, cid, "")
}

func (c *Cloud) deleteVM(ctx context.Context, cid cpiv2.VMCID, detail string) error {
	return c.mutate(ctx, OpDeleteVM, cid.String(), func(cl *call, b *batch) *Error {
		vm, ok := c.vms[cid.String()]
		if !ok {
			return vmNotFound(cid.String())
		}
		cl.h.Detail = detail
		// Removing the VM's directory removes its device links too; the
		// disks' backing files stay.
		if err := c.removeVMDir(cid.String()); err != nil {
			return internalErr("delete_vm", err)
		}
		var detached []string
		for _, dcid := range c.devs[cid.String()] {
			d := c.disks[dcid]
			d.VMCID, d.Device, d.LUN = cpiv2.VMCID{}, "", 0
			b.put(kindDisk, dcid, d)
			detached = append(detached, dcid)
		}
		sort.Strings(detached)
		if len(detached) > 0 {
			if cl.h.Detail != "" {
				cl.h.Detail += "; "
			}
			cl.h.Detail += fmt.Sprintf("detached %v", detached)
		}
		delete(c.vms, vm.CID.String())
		delete(c.devs, vm.CID.String())
		b.del(kindVM, cid.String())
		return nil
	})
}

// VM returns a VM with its attachments (VMNotFound when absent).
func (c *Cloud) VM(ctx context.Context, cid cpiv2.VMCID) (VM, error) {
	var out VM
	err := c.read(ctx, OpGetVM, cid.String(), false, func(*call) *Error {
		vm, ok := c.vms[cid.String()]
		if !ok {
			return vmNotFound(cid.String())
		}
		out = c.viewVMLocked(vm)
		return nil
	})
	return out, err
}

// VMDisks returns the disks attached to a VM, in device order; never nil.
func (c *Cloud) VMDisks(ctx context.Context, cid cpiv2.VMCID) ([]cpiv2.DiskCID, error) {
	var out []cpiv2.DiskCID
	err := c.read(ctx, OpGetDisks, cid.String(), false, func(*call) *Error {
		vm, ok := c.vms[cid.String()]
		if !ok {
			return vmNotFound(cid.String())
		}
		out = c.viewVMLocked(vm).Disks
		return nil
	})
	return out, err
}

// RebootVM halts and boots a VM through the hooks.
func (c *Cloud) RebootVM(ctx context.Context, cid cpiv2.VMCID) error {
	var vm VM
	err := c.mutate(ctx, OpRebootVM, cid.String(), func(cl *call, b *batch) *Error {
		v, ok := c.vms[cid.String()]
		if !ok {
			return vmNotFound(cid.String())
		}
		v.Boots++
		b.put(kindVM, cid.String(), v)
		vm = *v
		return nil
	})
	if err != nil && !errors.Is(err, ErrResponseLost) {
		return err
	}
	c.halt(cid)
	if berr := c.boot(vm); berr != nil {
		return newErr(CodeInternal, cpiv2.TypeCloudError, "reboot_vm %s: boot: %v", cid, berr)
	}
	return err
}

// SetVMMetadata replaces a VM's metadata.
func (c *Cloud) SetVMMetadata(ctx context.Context, cid cpiv2.VMCID, meta cpiv2.Metadata) error {
	return c.mutate(ctx, OpSetVMMetadata, cid.String(), func(cl *call, b *batch) *Error {
		vm, ok := c.vms[cid.String()]
		if !ok {
			return vmNotFound(cid.String())
		}
		if e := checkMetadata("set_vm_metadata", meta); e != nil {
			return e
		}
		vm.Metadata = copyMeta(meta)
		b.put(kindVM, cid.String(), vm)
		return nil
	})
}

// ---- disks ----

// CreateDisk creates a detached disk with a sparse backing file.
func (c *Cloud) CreateDisk(ctx context.Context, spec DiskSpec) (Disk, error) {
	var out Disk
	err := c.mutate(ctx, OpCreateDisk, "", func(cl *call, b *batch) *Error {
		if e := checkSize("create_disk", spec.SizeMiB); e != nil {
			return e
		}
		if e := checkCount("create_disk", "disks", len(c.disks), MaxDisks, "MaxDisks"); e != nil {
			return e
		}
		if e := checkDoc("create_disk: cloud_properties", spec.CloudProperties); e != nil {
			return e
		}
		cp, e := checkHash("disk cloud_properties", spec.CloudProperties)
		if e != nil {
			return e
		}
		cid, e := c.newCIDLocked(kindDisk, "disk")
		if e != nil {
			return e
		}
		if e := c.claimDiskFileLocked(cid); e != nil {
			return e
		}
		if err := c.createDiskFile(cid, spec.SizeMiB); err != nil {
			_ = c.removeDiskFile(cid)
			if errors.Is(err, errNoSpace) {
				return newErr(CodeInternal, cpiv2.TypeNoDiskSpace, "create_disk: %v", err)
			}
			return internalErr("create_disk", err)
		}
		d := &Disk{CID: cpiv2.MustCID[cpiv2.DiskKind](cid), SizeMiB: spec.SizeMiB, CloudProperties: cp, Locality: spec.Locality, Created: c.r.Now()}
		c.disks[cid] = d
		b.create(kindDisk, cid, d)
		cl.h.Target = cid
		cl.h.Detail = fmt.Sprintf("size=%dMiB", spec.SizeMiB)
		out = *d
		return nil
	})
	return out, err
}

// DeleteDisk deletes a detached disk and its backing file; an attached disk
// is refused (ErrConflict), a missing one is DiskNotFound.
func (c *Cloud) DeleteDisk(ctx context.Context, cid cpiv2.DiskCID) error {
	return c.mutate(ctx, OpDeleteDisk, cid.String(), func(cl *call, b *batch) *Error {
		d, ok := c.disks[cid.String()]
		if !ok {
			return diskNotFound(cid.String())
		}
		if !d.VMCID.IsZero() {
			return newErr(CodeConflict, cpiv2.TypeCloudError, "delete_disk: disk %q is attached to VM %q", cid, d.VMCID)
		}
		if err := c.removeDiskFile(cid.String()); err != nil {
			return internalErr("delete_disk", err)
		}
		delete(c.disks, cid.String())
		b.del(kindDisk, cid.String())
		return nil
	})
}

// Disk returns a disk (DiskNotFound when absent).
func (c *Cloud) Disk(ctx context.Context, cid cpiv2.DiskCID) (Disk, error) {
	var out Disk
	err := c.read(ctx, OpGetDisk, cid.String(), false, func(*call) *Error {
		d, ok := c.disks[cid.String()]
		if !ok {
			return diskNotFound(cid.String())
		}
		out = *d
		out.Metadata = copyMeta(d.Metadata)
		return nil
	})
	return out, err
}

// AttachDisk attaches a disk to a VM and lays out its device in the VM's
// root (docs/seams.md). Attaching a disk already attached to the same VM
// returns the existing attachment; attached to another VM is ErrConflict.
// A VM with restart_on_attach is halted and booted again afterwards.
func (c *Cloud) AttachDisk(ctx context.Context, vmCID cpiv2.VMCID, diskCID cpiv2.DiskCID) (Attachment, error) {
	var out Attachment
	var vm VM
	restart := false
	err := c.mutate(ctx, OpAttachDisk, vmCID.String(), func(cl *call, b *batch) *Error {
		v, ok := c.vms[vmCID.String()]
		if !ok {
			return vmNotFound(vmCID.String())
		}
		d, ok := c.disks[diskCID.String()]
		if !ok {
			return diskNotFound(diskCID.String())
		}
		if !d.VMCID.IsZero() {
			if d.VMCID != vmCID {
				return newErr(CodeConflict, cpiv2.TypeCloudError, "attach_disk: disk %q is attached to VM %q", diskCID, d.VMCID)
			}
			out = attachmentOf(v, d)
			cl.h.Detail = "already attached as " + d.Device
			return nil
		}
		devs := c.devs[vmCID.String()]
		used := map[byte]bool{}
		for dev := range devs {
			used[dev[len(dev)-1]] = true
		}
		letter := byte(0)
		for l := byte('c'); l <= 'z'; l++ {
			if !used[l] {
				letter = l
				break
			}
		}
		if letter == 0 {
			return newErr(CodeConflict, cpiv2.TypeCloudError, "attach_disk: VM %q has no free device letter", vmCID)
		}
		dev := v.Props.DevicePrefix + string(letter)
		lun := letterLUN(letter)
		if err := c.layoutAttach(vmCID.String(), diskCID.String(), dev, lun); err != nil {
			_ = c.layoutDetach(vmCID.String(), diskCID.String(), dev, lun)
			return internalErr("attach_disk", err)
		}
		d.VMCID, d.Device, d.LUN = vmCID, dev, lun
		devs[dev] = diskCID.String()
		b.put(kindDisk, diskCID.String(), d)
		cl.h.Detail = fmt.Sprintf("disk=%s device=%s lun=%d", diskCID, dev, lun)
		out = attachmentOf(v, d)
		restart = v.Props.RestartOnAttach
		if restart {
			v.Boots++
			b.put(kindVM, vmCID.String(), v)
		}
		vm = *v
		return nil
	}, diskCID.String())
	if err != nil && !errors.Is(err, ErrResponseLost) {
		return Attachment{}, err
	}
	if restart {
		c.halt(vmCID)
		if berr := c.boot(vm); berr != nil {
			return Attachment{}, newErr(CodeInternal, cpiv2.TypeCloudError, "attach_disk: restarting %s: %v", vmCID, berr)
		}
	}
	return out, err
}

func attachmentOf(vm *VM, d *Disk) Attachment {
	letter := d.Device[len(d.Device)-1:]
	return Attachment{
		VMCID: vm.CID, DiskCID: d.CID, Device: d.Device, Letter: letter, LUN: d.LUN,
		SDPath: "/dev/sd" + letter, ByID: byIDName(d.CID.String()), DiskHint: vm.Props.DiskHint,
	}
}

// DetachDisk detaches a disk from a VM: VMNotFound, DiskNotFound, or
// DiskNotAttached when it is not attached to that VM.
func (c *Cloud) DetachDisk(ctx context.Context, vmCID cpiv2.VMCID, diskCID cpiv2.DiskCID) error {
	return c.mutate(ctx, OpDetachDisk, vmCID.String(), func(cl *call, b *batch) *Error {
		if _, ok := c.vms[vmCID.String()]; !ok {
			return vmNotFound(vmCID.String())
		}
		d, ok := c.disks[diskCID.String()]
		if !ok {
			return diskNotFound(diskCID.String())
		}
		if d.VMCID != vmCID {
			return newErr(CodeConflict, cpiv2.TypeDiskNotAttached, "detach_disk: disk %q is not attached to VM %q", diskCID, vmCID)
		}
		if err := c.layoutDetach(vmCID.String(), diskCID.String(), d.Device, d.LUN); err != nil {
			return internalErr("detach_disk", err)
		}
		cl.h.Detail = fmt.Sprintf("disk=%s device=%s", diskCID, d.Device)
		delete(c.devs[vmCID.String()], d.Device)
		d.VMCID, d.Device, d.LUN = cpiv2.VMCID{}, "", 0
		b.put(kindDisk, diskCID.String(), d)
		return nil
	}, diskCID.String())
}

// SetDiskMetadata replaces a disk's metadata.
func (c *Cloud) SetDiskMetadata(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) error {
	return c.mutate(ctx, OpSetDiskMetadata, cid.String(), func(cl *call, b *batch) *Error {
		d, ok := c.disks[cid.String()]
		if !ok {
			return diskNotFound(cid.String())
		}
		if e := checkMetadata("set_disk_metadata", meta); e != nil {
			return e
		}
		d.Metadata = copyMeta(meta)
		b.put(kindDisk, cid.String(), d)
		return nil
	})
}

func (c *Cloud) growLocked(op string, d *Disk, newSize int) *Error {
	if !d.VMCID.IsZero() {
		return newErr(CodeConflict, cpiv2.TypeCloudError, "%s: disk %q is attached to VM %q; detach it first", op, d.CID, d.VMCID)
	}
	if newSize < d.SizeMiB {
		return newErr(CodeConflict, cpiv2.TypeNotSupported, "%s: disk %q cannot shrink from %d to %d MiB", op, d.CID, d.SizeMiB, newSize)
	}
	if e := checkSize(op, newSize); e != nil {
		return e
	}
	if newSize > d.SizeMiB {
		if err := c.growDiskFile(d.CID.String(), newSize); err != nil {
			return internalErr(op, err)
		}
	}
	d.SizeMiB = newSize
	return nil
}

// ResizeDisk grows a detached disk. Attached is ErrConflict (CloudError),
// smaller is NotSupported, equal is a no-op.
func (c *Cloud) ResizeDisk(ctx context.Context, cid cpiv2.DiskCID, newSizeMiB int) error {
	return c.mutate(ctx, OpResizeDisk, cid.String(), func(cl *call, b *batch) *Error {
		d, ok := c.disks[cid.String()]
		if !ok {
			return diskNotFound(cid.String())
		}
		old := d.SizeMiB
		if e := c.growLocked("resize_disk", d, newSizeMiB); e != nil {
			return e
		}
		cl.h.Detail = fmt.Sprintf("size=%d->%dMiB", old, newSizeMiB)
		b.put(kindDisk, cid.String(), d)
		return nil
	})
}

// UpdateDisk grows a detached disk and replaces its cloud properties; the
// disk keeps its CID.
func (c *Cloud) UpdateDisk(ctx context.Context, u DiskUpdate) error {
	return c.mutate(ctx, OpUpdateDisk, u.DiskCID.String(), func(cl *call, b *batch) *Error {
		d, ok := c.disks[u.DiskCID.String()]
		if !ok {
			return diskNotFound(u.DiskCID.String())
		}
		if e := checkDoc("update_disk: cloud_properties", u.CloudProperties); e != nil {
			return e
		}
		cp, e := checkHash("disk cloud_properties", u.CloudProperties)
		if e != nil {
			return e
		}
		old := d.SizeMiB
		if e := c.growLocked("update_disk", d, u.NewSizeMiB); e != nil {
			return e
		}
		if cp != nil {
			d.CloudProperties = cp
		}
		cl.h.Detail = fmt.Sprintf("size=%d->%dMiB", old, u.NewSizeMiB)
		b.put(kindDisk, u.DiskCID.String(), d)
		return nil
	})
}

// SnapshotDisk records a snapshot of a disk.
func (c *Cloud) SnapshotDisk(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) (Snapshot, error) {
	var out Snapshot
	err := c.mutate(ctx, OpSnapshotDisk, cid.String(), func(cl *call, b *batch) *Error {
		d, ok := c.disks[cid.String()]
		if !ok {
			return diskNotFound(cid.String())
		}
		if e := checkCount("snapshot_disk", "snapshots", len(c.snapshots), MaxSnapshots, "MaxSnapshots"); e != nil {
			return e
		}
		if e := checkMetadata("snapshot_disk", meta); e != nil {
			return e
		}
		sid, e := c.newCIDLocked(kindSnapshot, "snap")
		if e != nil {
			return e
		}
		s := &Snapshot{CID: cpiv2.MustCID[cpiv2.SnapshotKind](sid), DiskCID: cid, SizeMiB: d.SizeMiB, Metadata: copyMeta(meta), Created: c.r.Now()}
		c.snapshots[sid] = s
		b.create(kindSnapshot, sid, s)
		cl.h.Detail = "snapshot=" + sid
		out = *s
		return nil
	})
	return out, err
}

// DeleteSnapshot deletes a snapshot (ErrNotFound when absent).
func (c *Cloud) DeleteSnapshot(ctx context.Context, cid cpiv2.SnapshotCID) error {
	return c.mutate(ctx, OpDeleteSnapshot, cid.String(), func(cl *call, b *batch) *Error {
		if _, ok := c.snapshots[cid.String()]; !ok {
			return newErr(CodeNotFound, cpiv2.TypeCloudError, "snapshot %q not found", cid)
		}
		delete(c.snapshots, cid.String())
		b.del(kindSnapshot, cid.String())
		return nil
	})
}

// ---- registry and metadata service ----

// GetSettings returns a VM's registry settings (ErrNotFound when absent).
func (c *Cloud) GetSettings(ctx context.Context, vmCID string) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.read(ctx, OpRegistryGet, vmCID, true, func(*call) *Error {
		s, ok := c.registry[vmCID]
		if !ok {
			return newErr(CodeNotFound, cpiv2.TypeCloudError, "registry: no settings for %q", vmCID)
		}
		out = append(json.RawMessage(nil), s...)
		return nil
	})
	return out, err
}

// PutSettings stores a VM's registry settings (a JSON hash).
func (c *Cloud) PutSettings(ctx context.Context, vmCID string, settings json.RawMessage) error {
	return c.mutate(ctx, OpRegistryPut, vmCID, func(cl *call, b *batch) *Error {
		if vmCID == "" {
			return invalid("registry: empty instance id")
		}
		if e := checkName("registry: instance id", vmCID); e != nil {
			return e
		}
		if e := checkDoc("registry settings", settings); e != nil {
			return e
		}
		if _, ok := c.registry[vmCID]; !ok && len(c.registry) >= MaxVMs {
			return tooLarge("registry: it holds settings for %d instances, its limit (MaxVMs)", len(c.registry))
		}
		s, e := checkHash("registry settings", settings)
		if e != nil {
			return e
		}
		if s == nil {
			return invalid("registry: empty settings for %q", vmCID)
		}
		c.registry[vmCID] = s
		b.put(kindRegistry, vmCID, s)
		return nil
	})
}

// DeleteSettings deletes a VM's registry settings (ErrNotFound when absent).
func (c *Cloud) DeleteSettings(ctx context.Context, vmCID string) error {
	return c.mutate(ctx, OpRegistryDelete, vmCID, func(cl *call, b *batch) *Error {
		if _, ok := c.registry[vmCID]; !ok {
			return newErr(CodeNotFound, cpiv2.TypeCloudError, "registry: no settings for %q", vmCID)
		}
		delete(c.registry, vmCID)
		b.del(kindRegistry, vmCID)
		return nil
	})
}

// UserData returns the user-data a VM was created with, as the metadata
// service serves it (VMNotFound when the VM is absent).
func (c *Cloud) UserData(ctx context.Context, vmCID string) (json.RawMessage, error) {
	var out json.RawMessage
	err := c.read(ctx, OpMetadataGet, vmCID, true, func(*call) *Error {
		vm, ok := c.vms[vmCID]
		if !ok {
			return vmNotFound(vmCID)
		}
		out = append(json.RawMessage(nil), vm.UserData...)
		if len(out) == 0 {
			out = json.RawMessage("{}")
		}
		return nil
	})
	return out, err
}
