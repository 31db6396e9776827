package cpisuite

import (
	"fmt"
	"slices"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// vmSpecs registers the contract specs of info, stemcells and VMs: shapes, has_vm and what the IaaS holds, delete_vm of a missing VM.
func (c *contractSpecs) vmSpecs() {
	st, cc := c.st, c.cc
	It(ClauseText(ClauseInfo), labels("shapes", cpiv2.MethodInfo), func(ctx SpecContext) {
		x := st.client.CallRaw(ctx, cpiv2.MethodInfo, st.profile.InfoAPIVersion, 0)
		mustOK(x, ClauseInfo)
		var info struct {
			StemcellFormats []any `json:"stemcell_formats"`
		}
		if err := jsonUnmarshal(x.Response.Result, &info); err != nil || len(info.StemcellFormats) == 0 {
			violate(violation(ClauseInfo, fmt.Sprintf("info must list stemcell_formats, returned %s", excerpt(x.Response.Result)), x))
		}
		for _, f := range info.StemcellFormats {
			if _, ok := f.(string); !ok {
				violate(violation(ClauseInfo, fmt.Sprintf("stemcell_formats must be strings, got %v", f), x))
			}
		}
	})

	It(ClauseText(ClauseStemcell), labels("shapes", cpiv2.MethodCreateStemcell, cpiv2.MethodDeleteStemcell), func(ctx SpecContext) {
		t := st.tracker()
		cid := st.createStemcell(ctx, t, cc.Stemcell)
		x := st.client.Call(ctx, cpiv2.MethodDeleteStemcell, "", cid)
		mustUnread(x, ClauseStemcell)
		t.Forget(Resource{Kind: KindStemcell, CID: cid})
		if o := st.cfg.Oracle; o != nil {
			if inv := st.inventory(ctx); slices.Contains(inv.Stemcells, cid) {
				violate(violation(ClauseStemcellTruth, fmt.Sprintf("delete_stemcell of %s succeeded, but the IaaS still has it", cid), x))
			}
		}
	})

	It(ClauseText(ClauseCreateVM), labels("shapes", cpiv2.MethodCreateVM), func(ctx SpecContext) {
		// The setup already created two VMs and checked their shape; this
		// spec makes the check visible on its own, with networks.
		st.createVM(ctx, st.tracker(), c.stemcell, cc.Stemcell)
	})

	It(ClauseText(ClauseHasVM), labels("truth", cpiv2.MethodCreateVM, cpiv2.MethodHasVM, cpiv2.MethodDeleteVM), func(ctx SpecContext) {
		t := st.tracker()
		v := st.createVM(ctx, t, c.stemcell, cc.Stemcell)
		if ok, x := st.callBool(ctx, ClauseHasVM, cpiv2.MethodHasVM, v.CID); !ok {
			violate(violation(ClauseHasVM, "has_vm returned false for a VM it just created", x))
		}
		mustUnread(st.client.Call(ctx, cpiv2.MethodDeleteVM, v.CID, v.CID), ClauseHasVM)
		t.Forget(Resource{Kind: KindVM, CID: v.CID})
		if ok, x := st.callBool(ctx, ClauseHasVM, cpiv2.MethodHasVM, v.CID); ok {
			violate(violation(ClauseHasVM, "has_vm returned true for a VM it just deleted", x))
		}
	})

	It(ClauseText(ClauseHasVM)+" (IaaS state)", labels("iaas", cpiv2.MethodCreateVM, cpiv2.MethodDeleteVM), capOracle, func(ctx SpecContext) {
		o := st.oracle()
		t := st.tracker()
		v := st.createVM(ctx, t, c.stemcell, cc.Stemcell)
		if _, ok, err := o.VM(ctx, v.CID); err != nil || !ok {
			violate(violation(ClauseHasVM, fmt.Sprintf("create_vm returned %s but the IaaS has no such VM (oracle: %v)", v.CID, err), v.X))
		}
		x := st.client.Call(ctx, cpiv2.MethodDeleteVM, v.CID, v.CID)
		mustUnread(x, ClauseHasVM)
		t.Forget(Resource{Kind: KindVM, CID: v.CID})
		if _, ok, err := o.VM(ctx, v.CID); err != nil || ok {
			violate(violation(ClauseHasVM, fmt.Sprintf("delete_vm succeeded but the IaaS still has VM %s (oracle: %v)", v.CID, err), x))
		}
		if s, err := o.Settings(ctx, v.CID); err != nil {
			Fail(fmt.Sprintf("oracle settings: %v", err))
		} else if s.Registry != nil {
			violate(violation(ClauseTableRegistry, fmt.Sprintf("delete_vm of %s succeeded but the registry still holds its settings %s (a later VM could read them)", v.CID, excerpt(s.Registry)), x))
		}
	})

	It(ClauseText(ClauseDeleteVMGone), labels("errors", cpiv2.MethodDeleteVM), func(ctx SpecContext) {
		x := st.client.Call(ctx, cpiv2.MethodDeleteVM, "", c.ghostVM)
		checkWire(x)
		if e := x.Response.Error; e != nil && e.Type != cpiv2.TypeVMNotFound {
			violate(violation(ClauseDeleteVMGone, fmt.Sprintf("delete_vm of deleted VM %s returned %s: %q (the Director tolerates only VMNotFound)", c.ghostVM, e.Type, e.Message), x))
		}
	})
}
