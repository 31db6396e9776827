package suites

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

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
		violate(violation(ClauseInfo, err.Error(), x))
	case err != nil && x == nil:
		Fail(fmt.Sprintf("cannot run the CPI: %v", err))
	}
	st.client = c
	st.shared = NewTracker(c)
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
		Skip(st.skip)
	}
}

// tracker returns a tracker for the current spec, cleaned up after it.
func (st *state) tracker() *Tracker {
	GinkgoHelper()
	t := NewTracker(st.client)
	DeferCleanup(func(ctx SpecContext) {
		if err := t.Cleanup(ctx); err != nil {
			violate(violation(ClauseNoLeak, err.Error(), nil))
		}
	})
	return t
}

// stemcellFor returns the configured stemcell of api_version v, or the
// reason there is none.
func (st *state) stemcellFor(v int) (Stemcell, string) {
	sc, ok := st.cfg.Env.Stemcells[v]
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
		Skip(why)
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
	agentID := st.names.next("agent")
	x := st.client.CreateVM(ctx, VMRequest{AgentID: agentID, StemcellCID: stemcell, StemcellAPIVersion: sv,
		CloudProperties: st.cfg.Env.VMCloudProperties, Networks: st.cfg.Env.Networks})
	mustOK(x, ClauseCreateVM)
	cid, err := st.client.DecodeVMCID(x.Response.Result)
	if err != nil {
		// Track whatever VM the wrong shape names, so that it is deleted.
		if c := salvageCID(x.Response.Result); c != "" {
			st.client.RememberVM(c, sv)
			t.Add(Resource{Kind: KindVM, CID: c})
		}
		violate(violation(ClauseCreateVM, err.Error(), x))
	}
	st.client.RememberVM(cid, sv)
	t.Add(Resource{Kind: KindVM, CID: cid})
	return vm{CID: cid, AgentID: agentID, IP: firstIP(x.Response.Result, st.cfg.Env.Networks), X: x}
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
	mustOK(x, ClauseVMLocality)
	cid, err := decodeCID[cpiv2.DiskKind](x.Response.Result)
	if err != nil {
		violate(violation(ClauseVMLocality, "create_disk: "+err.Error(), x))
	}
	t.Add(Resource{Kind: KindDisk, CID: cid})
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
	mustNull(x, ClauseDetach)
	t.Forget(Resource{Kind: KindAttachment, CID: disk, VM: vmCID})
}

// callBool calls a has_* method and decodes the bool. It skips the spec
// (not checked) when the CPI answers NotImplemented, which the Director
// tolerates (CONTRACTS §3).
func (st *state) callBool(ctx context.Context, clause, method, cid string) (bool, *Exchange) {
	GinkgoHelper()
	x := st.client.Call(ctx, method, "", cid)
	skipIfNotImplemented(x) // the Director skips has_vm/has_disk on NotImplemented (CONTRACTS §3)
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
		Skip("not checked: " + missing[CapOracle])
	}
	return st.cfg.Oracle
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
