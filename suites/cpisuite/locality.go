package cpisuite

import (
	"fmt"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// contractLocalitySpecs registers, in a contract context, the spec that
// gives create_vm the disk_cids the Director gives it: the instance's
// persistent disk, for placement only. When the Director recreates a VM
// create-swap-delete, that disk is still attached to the old VM while the
// new one is created.
func contractLocalitySpecs(st *state, cc ContractContext, stemcell *string) {
	It(ClauseText(ClauseVMDiskLocality), labels("vm", cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk, cpiv2.MethodCreateVM), func(ctx SpecContext) {
		t := st.tracker()
		old := st.createVM(ctx, t, *stemcell, cc.Stemcell).CID // a VM of its own: the spec must not depend on the context's
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
		st.attach(ctx, t, old, d)
		x := st.createVMAsDirector(ctx, VMRequest{AgentID: st.names.next("agent"), StemcellCID: *stemcell, StemcellAPIVersion: cc.Stemcell,
			CloudProperties: st.cfg.Env.VMCloudProperties, Networks: st.cfg.Env.Networks, DiskCIDs: []string{d}})
		if e := x.Response.Error; e != nil {
			violate(violation(ClauseVMDiskLocality, fmt.Sprintf("create_vm with disk_cids [%s] (a disk attached to %s, as when the Director recreates a VM) failed with %s: %q; disk_cids are a placement hint", d, old, e.Type, e.Message), x))
		}
		st.trackCreatedVM(t, x, cc.Stemcell)
		o := st.cfg.Oracle
		if o == nil {
			return
		}
		od, ok, err := o.Disk(ctx, d)
		switch {
		case err != nil:
			Fail(fmt.Sprintf("oracle disk %s: %v", d, err))
		case !ok:
			violate(violation(ClauseVMDiskLocality, fmt.Sprintf("after create_vm with disk_cids [%s] the IaaS has no disk %s", d, d), x))
		case od.AttachedTo != old:
			violate(violation(ClauseVMDiskLocality, fmt.Sprintf("create_vm with disk_cids [%s] moved the disk: the IaaS shows it attached to %q, it was attached to %s (disk_cids are a placement hint; the Director attaches disks itself)", d, od.AttachedTo, old), x))
		}
	})
}
