package cpisuite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// state is what one Ordered container (a contract context or a matrix row)
// shares between its specs.
type state struct {
	cfg     Config
	client  *Client
	shared  *Tracker
	names   *names
	profile cpiv2.Profile
	sw      Switch
	// skip, when set, is why every spec of the container is skipped.
	skip string

	// setup is the container's setup (info, shared resources); it runs
	// once, in the setup spec or, when that spec is filtered out, before
	// the first spec that runs. setupState says how far it got.
	setup      func(ctx SpecContext)
	setupState setupState
	// before is the IaaS inventory before the setup (nil: no oracle).
	before *Inventory
	// tornDown: the teardown ran (in its spec or after the container).
	tornDown bool
	// created is what the container shared, for the leak check without an
	// oracle.
	created []Resource
	// name is the container's name in messages ("context cli.api2").
	name string
	// stemcells and vmProps replace Env.Stemcells and
	// Env.VMCloudProperties in a row with its own resolver (useResolver).
	stemcells map[int]Stemcell
	vmProps   *cpiv2.CloudProps

	recMu sync.Mutex
	rec   *recorder // the running spec's calls; guarded by recMu

	leftMu   sync.Mutex
	leftover []Resource // what specs could not clean up; guarded by leftMu
}

type setupState int

const (
	setupNotRun setupState = iota
	setupRunning
	setupDone
	setupFailed
)

// ensureSetup runs the container's setup unless it ran; a setup that failed
// before makes every later spec not checked, naming the setup spec.
func (st *state) ensureSetup(ctx SpecContext) {
	GinkgoHelper()
	switch st.setupState {
	case setupDone:
		return
	case setupFailed, setupRunning:
		notChecked("the setup of this context failed (see its " + ClauseSetup + " spec)")
	}
	st.setupState = setupRunning
	defer func() {
		if st.setupState == setupRunning {
			st.setupState = setupFailed
		}
	}()
	st.setup(ctx)
	st.setupState = setupDone
}

// beginSpec starts recording the CPI calls of the running spec; after the
// spec (and its clean-up) it stores the spec's clause, the methods it
// called and every call as report entries.
func (st *state) beginSpec() {
	r := &recorder{}
	st.recMu.Lock()
	st.rec = r
	st.recMu.Unlock()
	text := CurrentSpecReport().LeafNodeText
	DeferCleanup(func() {
		st.recMu.Lock()
		st.rec = nil
		st.recMu.Unlock()
		r.report(ClauseOf(text))
		leak := r.secretViolation()
		r.reportModel()
		if leak != nil {
			Fail(violationText(*leak))
		}
	})
}

// observe is the client's hook: every call goes to the running spec.
func (st *state) observe(x *Exchange) {
	st.recMu.Lock()
	r := st.rec
	st.recMu.Unlock()
	if r != nil {
		r.add(x)
	}
}

// connect runs info and negotiates. It fails the container when info
// itself is broken, and returns a reason to skip every spec of the
// container when the CPI cannot be put into the setup (the container's
// BeforeEach skips with it, so that each spec shows the reason). The
// caller's refusal is returned as refusal when refusedOK, else it is a
// reason to skip too.
func (st *state) connect(ctx context.Context, refusedOK bool) (refusal error, skip string) {
	GinkgoHelper()
	c, x, err := NewClient(ctx, st.cfg, st.profile, st.sw)
	switch {
	case errors.Is(err, ErrCannotSwitch):
		return nil, fmt.Sprintf("not checked: %v", err)
	case err != nil && x != nil && !errors.Is(err, ErrRefused):
		checkWire(x)
		if errors.Is(err, ErrInfoVersion) {
			violate(violation(ClauseInfoVersion, err.Error(), x))
		}
		violate(violation(ClauseInfo, err.Error(), x))
	case err != nil && x == nil:
		Fail(fmt.Sprintf("cannot run the CPI: %v", err))
	}
	st.client = c
	if c != nil {
		c.w.observe = st.observe
		st.observe(x) // info, as the setup's first call
	}
	st.shared = NewTracker(c)
	if req := st.cfg.RequireAPIVersion; req > 0 && st.sw.APIVersionCap == 0 && c != nil && max(c.CPIMax, 1) < req {
		violate(violation(ClauseRequiredVersion, fmt.Sprintf("info reports api_version %d; at least %d is required", max(c.CPIMax, 1), req), x))
	}
	if cap := st.sw.APIVersionCap; cap > 0 && c.CPIMax > cap {
		did := fmt.Sprintf("with debug.cpi.api_version %d in its config, info reports api_version %d", cap, c.CPIMax)
		if st.cfg.CPI.HonoursAPIVersionCap {
			violate(violation(ClauseVersionCap, did, x))
		}
		return nil, fmt.Sprintf("not checked: the CPI cannot be switched to api_version %d (%s)", cap, did)
	}
	if cap := st.sw.APIVersionCap; cap > 0 && max(c.CPIMax, 1) < cap {
		return nil, fmt.Sprintf("not checked: this setup needs a CPI at api_version %d, the CPI's info reports %d", cap, max(c.CPIMax, 1))
	}
	if errors.Is(err, ErrRefused) {
		if refusedOK {
			return err, ""
		}
		return nil, fmt.Sprintf("not checked: %v", err)
	}
	return nil, ""
}

// skipIfSkipped skips the current spec when its container was found
// unable to run (see connect).
func (st *state) skipIfSkipped() {
	GinkgoHelper()
	if st.skip != "" {
		skipWith(st.skip)
	}
}

// tracker returns a tracker for the current spec, cleaned up after it.
func (st *state) tracker() *Tracker {
	GinkgoHelper()
	t := NewTracker(st.client)
	DeferCleanup(func(ctx SpecContext) {
		if err := t.Cleanup(withCleanup(ctx)); err != nil {
			// Tried again by the teardown, once the shared VMs that may
			// hold them are gone. A disk that could not be deleted is not
			// this spec's failure yet: it may still be attached to a
			// shared VM (a detach that did not detach, which its own
			// clause reports), and the Director, too, deletes disks after
			// the VMs and tries again; the teardown fails for what it
			// still cannot delete. Anything else fails here.
			failed := t.Failed()
			var now []error
			for _, r := range failed {
				if r.Kind != KindDisk {
					now = append(now, t.Why(r))
				}
			}
			st.leftMu.Lock()
			st.leftover = append(st.leftover, failed...)
			st.leftMu.Unlock()
			if len(failed) == 0 {
				now = append(now, err) // not a deletion that failed (an unknown kind)
			}
			if len(now) > 0 {
				violate(violation(ClauseTeardown, errors.Join(now...).Error(), nil))
			}
		}
	})
	return t
}

// stemcellFor returns the configured stemcell of api_version v, or the
// reason there is none.
func (st *state) stemcellFor(v int) (Stemcell, string) {
	all := st.cfg.Env.Stemcells
	if st.stemcells != nil {
		all = st.stemcells
	}
	sc, ok := all[v]
	if !ok || sc.ImagePath == "" {
		return sc, fmt.Sprintf("not checked: no stemcell of api_version %d configured", v)
	}
	return sc, ""
}

// createStemcell uploads the stemcell of api_version v.
func (st *state) createStemcell(ctx context.Context, t *Tracker, v int) string {
	GinkgoHelper()
	sc, why := st.stemcellFor(v)
	if why != "" {
		skipWith(why)
	}
	args := []any{sc.ImagePath, sc.CloudProperties}
	if st.client.APIVersion >= 3 {
		args = append(args, map[string]any{"tags": map[string]string{"cpilab_run": st.cfg.RunID}})
	}
	x := st.client.Call(ctx, cpiv2.MethodCreateStemcell, "", args...)
	mustOK(x, ClauseStemcell)
	cid, err := decodeCID[cpiv2.StemcellKind](x.Response.Result)
	if err != nil {
		violate(violation(ClauseStemcell, "create_stemcell: "+err.Error(), x))
	}
	t.Add(Resource{Kind: KindStemcell, CID: cid})
	if o := st.cfg.Oracle; o != nil {
		inv, err := o.Inventory(ctx)
		if err != nil {
			Fail(fmt.Sprintf("oracle inventory: %v", err))
		}
		if !slices.Contains(inv.Stemcells, cid) {
			violate(violation(ClauseStemcellTruth, fmt.Sprintf("create_stemcell returned %s, but the IaaS has no such stemcell (it has %v)", cid, inv.Stemcells), x))
		}
	}
	return cid
}

// vm is a VM the suites created.
type vm struct {
	CID, AgentID, IP string
	X                *Exchange
}

// firstIP returns the first IP of create_vm's returned networks (api_version
// 2+), else of the networks sent, in network name order.
func firstIP(result []byte, sent cpiv2.Networks) string {
	var pair []json.RawMessage
	if json.Unmarshal(result, &pair) == nil && len(pair) == 2 {
		var nets cpiv2.Networks
		if json.Unmarshal(pair[1], &nets) == nil {
			if ip := ipOf(nets); ip != "" {
				return ip
			}
		}
	}
	return ipOf(sent)
}

func ipOf(nets cpiv2.Networks) string {
	names := make([]string, 0, len(nets))
	for n := range nets {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if ip := nets[n].IP; ip != "" {
			return ip
		}
	}
	return ""
}

// createVM creates a VM on stemcell (of api_version sv) and checks the
// result shape.
func (st *state) createVM(ctx context.Context, t *Tracker, stemcell string, sv int) vm {
	GinkgoHelper()
	props := st.cfg.Env.VMCloudProperties
	if st.vmProps != nil {
		props = *st.vmProps
	}
	return st.createVMWith(ctx, t, stemcell, sv, props)
}

// useResolver makes the container use the stemcells and VM
// cloud_properties of the environment for the agent device resolver r
// (Environment.ResolverStemcells); without stemcells for r the defaults
// stay, and the report says so.
func (st *state) useResolver(r string) {
	if r == "" {
		return
	}
	if sc, ok := st.cfg.Env.ResolverStemcells[r]; ok {
		st.stemcells = sc
	} else {
		AddReportEntry("resolver", fmt.Sprintf("no stemcell with the %s resolver is configured; this row uses the default stemcells", r), ReportEntryVisibilityNever)
	}
	if p, ok := st.cfg.Env.ResolverVMCloudProperties[r]; ok {
		merged := mergeProps(st.cfg.Env.VMCloudProperties, p)
		st.vmProps = &merged
	}
}

// MaxVMCreateTries is how many times the harness, as the Director
// (max_vm_create_tries), tries create_vm while it fails with
// VMCreationFailed and ok_to_retry.
const MaxVMCreateTries = 5

// createVMAsDirector calls create_vm as the Director does
// (max_vm_create_tries): up to MaxVMCreateTries tries, with the same
// request, while the error is VMCreationFailed with ok_to_retry; it stops
// on anything else and returns the last call, each one checked on the
// wire. Every create_vm of the harness goes through it, except the spec
// that checks the retry itself.
func (st *state) createVMAsDirector(ctx context.Context, req VMRequest) *Exchange {
	GinkgoHelper()
	for try := 1; ; try++ {
		x := st.client.CreateVM(ctx, req)
		checkWire(x)
		e := x.Response.Error
		if e == nil || !errors.Is(e, cpiv2.ErrVMCreationFailed) || !e.OkToRetry || try == MaxVMCreateTries {
			return x
		}
		AddReportEntry("create_vm retried", fmt.Sprintf("try %d failed with %s (ok_to_retry): %s", try, e.Type, e.Message), ReportEntryVisibilityNever)
	}
}

// createVMWith is createVM with the VM's cloud_properties given. Like the
// Director it retries create_vm up to MaxVMCreateTries times while the
// error is VMCreationFailed with ok_to_retry, and stops on anything else.
func (st *state) createVMWith(ctx context.Context, t *Tracker, stemcell string, sv int, props cpiv2.CloudProps) vm {
	GinkgoHelper()
	agentID := st.names.next("agent")
	x := st.createVMAsDirector(ctx, VMRequest{AgentID: agentID, StemcellCID: stemcell, StemcellAPIVersion: sv,
		CloudProperties: props, Networks: st.cfg.Env.Networks})
	mustOK(x, ClauseCreateVM)
	cid := st.trackCreatedVM(t, x, sv)
	return vm{CID: cid, AgentID: agentID, IP: firstIP(x.Response.Result, st.cfg.Env.Networks), X: x}
}

// trackCreatedVM decodes the VM CID of create_vm's successful answer x,
// remembers the VM's stemcell api_version and tracks the VM for clean-up.
// An answer of the wrong shape breaks vm.create-shape, after tracking
// whatever VM it names, so that it is deleted.
func (st *state) trackCreatedVM(t *Tracker, x *Exchange, sv int) string {
	GinkgoHelper()
	cid, err := st.client.DecodeVMCID(x.Response.Result)
	if err != nil {
		if c := salvageCID(x.Response.Result); c != "" {
			st.client.RememberVM(c, sv)
			t.Add(Resource{Kind: KindVM, CID: c})
		}
		violate(violation(ClauseCreateVM, err.Error(), x))
	}
	st.client.RememberVM(cid, sv)
	t.Add(Resource{Kind: KindVM, CID: cid})
	return cid
}

// createDisk creates a disk of sizeMiB, with vmCID as locality hint ("" for
// none).
func (st *state) createDisk(ctx context.Context, t *Tracker, sizeMiB int, vmCID string) string {
	GinkgoHelper()
	var loc any
	if vmCID != "" {
		loc = vmCID
	}
	x := st.client.Call(ctx, cpiv2.MethodCreateDisk, vmCID, sizeMiB, st.cfg.Env.DiskCloudProperties, loc)
	clause := ClauseCreateDisk
	if vmCID != "" {
		clause = ClauseVMLocality
	}
	mustOK(x, clause)
	cid, err := decodeCID[cpiv2.DiskKind](x.Response.Result)
	if err != nil {
		violate(violation(clause, "create_disk: "+err.Error(), x))
	}
	t.Add(Resource{Kind: KindDisk, CID: cid})
	st.checkDiskAsAsked(ctx, cid, sizeMiB, x)
	return cid
}

// attach attaches and checks the result shape; it returns the hint (zero at
// api_version 1).
func (st *state) attach(ctx context.Context, t *Tracker, vmCID, disk string) (cpiv2.DiskHint, *Exchange) {
	GinkgoHelper()
	x := st.client.Call(ctx, cpiv2.MethodAttachDisk, vmCID, vmCID, disk)
	mustOK(x, ClauseAttachHint)
	t.Add(Resource{Kind: KindAttachment, CID: disk, VM: vmCID})
	return st.checkHint(x), x
}

// checkHint checks attach_disk's result against the negotiated version.
func (st *state) checkHint(x *Exchange) cpiv2.DiskHint {
	GinkgoHelper()
	var h cpiv2.DiskHint
	if st.client.APIVersion < 2 {
		// At api_version 1 the Director ignores the result; anything goes.
		return h
	}
	if string(x.Response.Result) == "null" {
		violate(violation(ClauseAttachHint, fmt.Sprintf("at api_version %d attach_disk returned null: the Director raises \"No disk_hint\"", st.client.APIVersion), x))
	}
	if err := h.UnmarshalJSON(x.Response.Result); err != nil {
		violate(violation(ClauseAttachHint, fmt.Sprintf("attach_disk returned an invalid hint: %v", err), x))
	}
	if h.IsZero() {
		violate(violation(ClauseAttachHint, "attach_disk returned an empty hint: the Director raises \"No disk_hint\"", x))
	}
	return h
}

// detach detaches and forgets the attachment.
func (st *state) detach(ctx context.Context, t *Tracker, vmCID, disk string) {
	GinkgoHelper()
	x := st.client.Call(ctx, cpiv2.MethodDetachDisk, vmCID, vmCID, disk)
	mustUnread(x, ClauseDetach)
	t.Forget(Resource{Kind: KindAttachment, CID: disk, VM: vmCID})
	if o := st.cfg.Oracle; o != nil {
		od, ok, err := o.Disk(ctx, disk)
		if err != nil {
			Fail(fmt.Sprintf("oracle disk %s: %v", disk, err))
		}
		if !ok || od.AttachedTo != "" {
			violate(violation(ClauseDetach, fmt.Sprintf("detach_disk of %s from %s succeeded, but the IaaS shows it attached to %q (exists: %v)", disk, vmCID, od.AttachedTo, ok), x))
		}
	}
}

// checkDiskAsAsked checks, with an oracle, that the disk create_disk named
// exists with the size (rounded up to at most the next GiB, as clouds with
// GiB volumes do) and the cloud_properties asked for.
func (st *state) checkDiskAsAsked(ctx context.Context, cid string, sizeMiB int, x *Exchange) {
	GinkgoHelper()
	o := st.cfg.Oracle
	if o == nil {
		return
	}
	od, ok, err := o.Disk(ctx, cid)
	if err != nil {
		Fail(fmt.Sprintf("oracle disk %s: %v", cid, err))
	}
	if !ok {
		violate(violation(ClauseCreateDisk, fmt.Sprintf("create_disk returned %s, but the IaaS has no such disk", cid), x))
	}
	if od.SizeMiB < sizeMiB || od.SizeMiB > roundUpGiB(sizeMiB) {
		violate(violation(ClauseCreateDisk, fmt.Sprintf("create_disk of %d MiB made disk %s of %d MiB", sizeMiB, cid, od.SizeMiB), x))
	}
	if want := st.cfg.Env.DiskCloudProperties; hasKeys(want) && !holdsProps(od.CloudProperties, want) {
		violate(violation(ClauseCreateDisk, fmt.Sprintf("create_disk with cloud_properties %s made disk %s with %s", excerpt(mustJSON(want)), cid, excerpt(od.CloudProperties)), x))
	}
}

func roundUpGiB(mib int) int { return (mib + 1023) / 1024 * 1024 }

// callBool calls a has_* method and decodes the bool. It skips the spec
// (not checked) when the CPI answers NotImplemented, which the Director
// tolerates.
func (st *state) callBool(ctx context.Context, clause, method, cid string) (bool, *Exchange) {
	GinkgoHelper()
	x := st.client.Call(ctx, method, "", cid)
	skipIfNotImplemented(x) // the Director skips has_vm/has_disk on NotImplemented
	mustOK(x, clause)
	switch string(x.Response.Result) {
	case "true":
		return true, x
	case "false":
		return false, x
	}
	violate(violation(clause, fmt.Sprintf("%s must return a bool, returned %s", method, excerpt(x.Response.Result)), x))
	return false, x
}

// getDisks calls get_disks and decodes the array.
func (st *state) getDisks(ctx context.Context, vmCID string) ([]string, *Exchange) {
	GinkgoHelper()
	x := st.client.Call(ctx, cpiv2.MethodGetDisks, vmCID, vmCID)
	mustOK(x, ClauseGetDisks)
	if string(x.Response.Result) == "null" {
		violate(violation(ClauseGetDisks, "get_disks returned null instead of an array", x))
	}
	var raw []jsonCID
	if err := jsonUnmarshal(x.Response.Result, &raw); err != nil {
		violate(violation(ClauseGetDisks, fmt.Sprintf("get_disks must return an array of disk CIDs: %v", err), x))
	}
	out := make([]string, len(raw))
	for i, c := range raw {
		out[i] = string(c)
	}
	slices.Sort(out)
	return out, x
}

// oracle returns the oracle or skips the spec, saying the IaaS state was not
// checked.
func (st *state) oracle() Oracle {
	GinkgoHelper()
	if st.cfg.Oracle == nil {
		_, missing := st.cfg.Capabilities()
		notChecked(missing[CapOracle])
	}
	return st.cfg.Oracle
}

// boots is how many times the IaaS has booted VM cid, 0 when there is no
// oracle or it cannot tell.
func (st *state) boots(ctx context.Context, cid string) int {
	if st.cfg.Oracle == nil {
		return 0
	}
	vm, ok, err := st.cfg.Oracle.VM(ctx, cid)
	if err != nil || !ok {
		return 0
	}
	return vm.Boots
}

// inventoryCIDs flattens an inventory into a set.
func inventoryCIDs(inv Inventory) map[string]Kind {
	m := map[string]Kind{}
	for _, c := range inv.Stemcells {
		m[c] = KindStemcell
	}
	for _, c := range inv.VMs {
		m[c] = KindVM
	}
	for _, c := range inv.Disks {
		m[c] = KindDisk
	}
	for _, c := range inv.Snapshots {
		m[c] = KindSnapshot
	}
	return m
}

// leaked returns what exists in after but not in before.
func leaked(before, after Inventory) []string {
	b := inventoryCIDs(before)
	var out []string
	for cid, k := range inventoryCIDs(after) {
		if _, ok := b[cid]; !ok {
			out = append(out, fmt.Sprintf("%s %s", k, cid))
		}
	}
	slices.Sort(out)
	return out
}

// salvageCID finds a CID in a result of the wrong shape (a string, or the
// first element of an array), so that what a CPI created is cleaned up even
// when it reported it wrongly; "" when there is none.
func salvageCID(result json.RawMessage) string {
	var s string
	if json.Unmarshal(result, &s) == nil {
		return s
	}
	var arr []json.RawMessage
	if json.Unmarshal(result, &arr) == nil && len(arr) > 0 && json.Unmarshal(arr[0], &s) == nil {
		return s
	}
	return ""
}
