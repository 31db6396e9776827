package fakeiaas

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/datadir"
	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/vmroot"
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
	// Files is the file system the VM roots and disk files are made in:
	// nil is the machine's (vmroot.OS); the simulator gives a memory one
	// (vmroot.Mem), so a simulated run touches no disk. Everything
	// reading VM roots must open them through the same Host.
	Files vmroot.Host
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
	files   vmroot.Host // VM roots and disk files: the machine's or memory
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
	files := vmroot.HostOrOS(cfg.Files)
	if err := files.MkdirAll(dir, 0o755); err != nil {
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
		dataDir: dir, files: files, r: cfg.Runtime, hooks: cfg.Hooks, st: st, faults: newFaults(cfg.Runtime),
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

// Files is the file system the VM roots and disk files are in (Config.Files,
// vmroot.OS by default): open VM roots through it.
func (c *Cloud) Files() vmroot.Host { return c.files }

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
		if _, err := c.files.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
			return true // there, or cannot tell: do not touch it
		}
	}
	return false
}

// claimVMDirLocked creates VM cid's directory, failing with ErrExists if
// anything is already there: the root of another VM is never reused.
func (c *Cloud) claimVMDirLocked(cid string) *Error {
	if err := c.files.MkdirAll(filepath.Join(c.dataDir, "vms"), 0o755); err != nil {
		return internalErr("create_vm", err)
	}
	if err := c.files.Mkdir(c.vmDir(cid), 0o755); err != nil {
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
	if err := c.files.MkdirAll(filepath.Join(c.dataDir, "disks"), 0o755); err != nil {
		return internalErr("create_disk", err)
	}
	if err := c.files.CreateExcl(c.diskFile(cid), 0o644); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return newErr(CodeExists, cpiv2.TypeCloudError, "create_disk: refusing to reuse %s: it already exists", c.diskFile(cid))
		}
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
