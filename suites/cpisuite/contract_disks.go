package cpisuite

import (
	"fmt"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// diskSpecs registers the contract specs of disks: has_disk, create_disk as asked, delete_disk of a missing disk, locality.
func (c *contractSpecs) diskSpecs() {
	st := c.st
	It(ClauseText(ClauseHasDisk), labels("truth", cpiv2.MethodHasDisk, cpiv2.MethodCreateDisk, cpiv2.MethodDeleteDisk), func(ctx SpecContext) {
		t := st.tracker()
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
		if ok, x := st.callBool(ctx, ClauseHasDisk, cpiv2.MethodHasDisk, d); !ok {
			violate(violation(ClauseHasDisk, "has_disk returned false for a disk it just created", x))
		}
		mustUnread(st.client.Call(ctx, cpiv2.MethodDeleteDisk, "", d), ClauseHasDisk)
		t.Forget(Resource{Kind: KindDisk, CID: d})
		if ok, x := st.callBool(ctx, ClauseHasDisk, cpiv2.MethodHasDisk, d); ok {
			violate(violation(ClauseHasDisk, "has_disk returned true for a disk it just deleted", x))
		}
	})

	It(ClauseText(ClauseCreateDisk), labels("iaas", cpiv2.MethodCreateDisk), capOracle, func(ctx SpecContext) {
		st.oracle()
		// A size that is no multiple of a GiB: a cloud may round it up
		// to the next GiB, never down. createDisk checks size and
		// cloud_properties against the oracle.
		st.createDisk(ctx, st.tracker(), st.cfg.Env.DiskSizeMiB+3, "")
	})

	It(ClauseText(ClauseDeleteDisk), labels("errors", cpiv2.MethodDeleteDisk), func(ctx SpecContext) {
		x := st.client.Call(ctx, cpiv2.MethodDeleteDisk, "", c.ghostDisk)
		checkWire(x)
		if e := x.Response.Error; e != nil && e.Type != cpiv2.TypeDiskNotFound {
			violate(violation(ClauseDeleteDisk, fmt.Sprintf("delete_disk of deleted disk %s returned %s: %q (a generic error breaks the Director's orphan disk clean-up)", c.ghostDisk, e.Type, e.Message), x))
		}
	})

	It(ClauseText(ClauseVMLocality), labels("shapes", cpiv2.MethodCreateDisk), func(ctx SpecContext) {
		st.createDisk(ctx, st.tracker(), st.cfg.Env.DiskSizeMiB, c.mainVM)
	})
}
