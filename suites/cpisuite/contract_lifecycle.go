package cpisuite

import (
	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// lifecycleSpecs registers the contract specs of across calls: delete_vm keeps disks (and their data), parallel calls, create_vm retries.
func (c *contractSpecs) lifecycleSpecs() {
	st, cc := c.st, c.cc
	It(ClauseText(ClauseDeleteVMDisks), labels("iaas", cpiv2.MethodCreateVM, cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk, cpiv2.MethodDeleteVM, cpiv2.MethodHasDisk), func(ctx SpecContext) {
		st.checkDeleteVMKeepsDisks(ctx, c.stemcell, cc.Stemcell, false)
	})

	if cc.Thorough {
		It(ClauseText(ClauseDeleteVMDisks)+" (data read back on another VM)", labels("data", cpiv2.MethodCreateVM, cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk, cpiv2.MethodDeleteVM, cpiv2.MethodHasDisk), capOracle, Label("cap:ssh"), func(ctx SpecContext) {
			st.checkDeleteVMKeepsDisks(ctx, c.stemcell, cc.Stemcell, true)
		})

		It(ClauseText(ClauseParallel), labels("parallel", cpiv2.MethodCreateDisk, cpiv2.MethodDeleteDisk, cpiv2.MethodHasDisk), func(ctx SpecContext) {
			st.checkParallel(ctx)
		})
	}

	It(ClauseText(ClauseRetry), labels("retry", cpiv2.MethodCreateVM), Label("cap:faults"), func(ctx SpecContext) {
		st.checkRetry(ctx, c.stemcell, cc.Stemcell)
	})
}
