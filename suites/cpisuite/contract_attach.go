package cpisuite

import (
	"fmt"
	"slices"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// attachSpecs registers the contract specs of attach and detach: hints and their devices, get_disks, detach, repeats and missing objects; then the agent settings, large requests, locality and networks.
func (c *contractSpecs) attachSpecs() {
	st, cc := c.st, c.cc
	It(ClauseText(ClauseAttachHint), labels("hints", cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk), func(ctx SpecContext) {
		t := st.tracker()
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, c.mainVM)
		st.attach(ctx, t, c.mainVM, d)
	})

	hintText := " (two disks on one VM)"
	if cc.Thorough {
		hintText = " (two disks on one VM, every hint style)"
	}
	It(ClauseText(ClauseHintDevice)+hintText, labels("hints", cpiv2.MethodCreateVM, cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk), capOracle, func(ctx SpecContext) {
		st.oracle()
		st.checkHintDevices(ctx, c.stemcell, cc.Stemcell, cc.Thorough)
	})

	It(ClauseText(ClauseGetDisks), labels("truth", cpiv2.MethodCreateVM, cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk, cpiv2.MethodGetDisks, cpiv2.MethodDetachDisk), func(ctx SpecContext) {
		t := st.tracker()
		v := st.createVM(ctx, t, c.stemcell, cc.Stemcell)
		if got, x := st.getDisks(ctx, v.CID); len(got) != 0 {
			violate(violation(ClauseGetDisks, fmt.Sprintf("get_disks of a VM without disks returned %v", got), x))
		}
		d1 := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, v.CID)
		d2 := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, v.CID)
		st.attach(ctx, t, v.CID, d1)
		st.attach(ctx, t, v.CID, d2)
		want := []string{d1, d2}
		slices.Sort(want)
		if got, x := st.getDisks(ctx, v.CID); !slices.Equal(got, want) {
			violate(violation(ClauseGetDisks, fmt.Sprintf("get_disks returned %v, the attached disks are %v", got, want), x))
		}
		st.detach(ctx, t, v.CID, d1)
		if got, x := st.getDisks(ctx, v.CID); !slices.Equal(got, []string{d2}) {
			violate(violation(ClauseGetDisks, fmt.Sprintf("after detaching %s get_disks returned %v, want [%s]", d1, got, d2), x))
		}
	})

	It(ClauseText(ClauseDetach)+" (IaaS state)", labels("iaas", cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk, cpiv2.MethodDetachDisk), capOracle, func(ctx SpecContext) {
		o := st.oracle()
		t := st.tracker()
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, c.mainVM)
		_, ax := st.attach(ctx, t, c.mainVM, d)
		if od, ok, err := o.Disk(ctx, d); err != nil || !ok || od.AttachedTo != c.mainVM {
			violate(violation(ClauseDetach, fmt.Sprintf("attach_disk returned success but the IaaS shows disk %s attached to %q (oracle: %v)", d, od.AttachedTo, err), ax))
		}
		x := st.client.Call(ctx, cpiv2.MethodDetachDisk, c.mainVM, c.mainVM, d)
		mustUnread(x, ClauseDetach)
		t.Forget(Resource{Kind: KindAttachment, CID: d, VM: c.mainVM})
		if od, ok, err := o.Disk(ctx, d); err != nil || !ok || od.AttachedTo != "" {
			violate(violation(ClauseDetach, fmt.Sprintf("detach_disk succeeded but the IaaS shows disk %s still attached to %q (oracle: %v)", d, od.AttachedTo, err), x))
		}
	})

	It(ClauseText(ClauseDetachTwice), labels("errors", cpiv2.MethodCreateDisk, cpiv2.MethodDetachDisk), func(ctx SpecContext) {
		t := st.tracker()
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, c.mainVM)
		x := st.client.Call(ctx, cpiv2.MethodDetachDisk, c.mainVM, c.mainVM, d)
		checkWire(x)
		if e := x.Response.Error; e != nil && e.Type != cpiv2.TypeDiskNotAttached {
			violate(violation(ClauseDetachTwice, fmt.Sprintf("detach_disk of a detached disk returned %s: %q (the Director tolerates only DiskNotAttached)", e.Type, e.Message), x))
		}
	})

	It(ClauseText(ClauseAttachTwice), labels("errors", cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk), func(ctx SpecContext) {
		t := st.tracker()
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, c.mainVM)
		st.attach(ctx, t, c.mainVM, d)
		x := st.client.Call(ctx, cpiv2.MethodAttachDisk, c.mainVM, c.mainVM, d)
		checkWire(x)
		if e := x.Response.Error; e != nil {
			violate(violation(ClauseAttachTwice, fmt.Sprintf("a second attach_disk of %s to the same VM returned %s: %q", d, e.Type, e.Message), x))
		}
		st.checkHint(x)
	})

	It(ClauseText(ClauseAttachGone), labels("errors", cpiv2.MethodAttachDisk), func(ctx SpecContext) {
		x := st.client.Call(ctx, cpiv2.MethodAttachDisk, c.mainVM, c.mainVM, c.ghostDisk)
		checkWire(x)
		e := x.Response.Error
		if e == nil {
			st.tracker().Add(Resource{Kind: KindAttachment, CID: c.ghostDisk, VM: c.mainVM})
			violate(violation(ClauseAttachGone, fmt.Sprintf("attach_disk of deleted disk %s to %s succeeded: the Director would record an attachment that does not exist", c.ghostDisk, c.mainVM), x))
		}
		if !e.Type.Known() {
			violate(violation(ClauseAttachGone, fmt.Sprintf("attach_disk of deleted disk %s returned error type %q, which the Director treats as unknown", c.ghostDisk, e.Type), x))
		}
	})

	contractSettingsSpecs(st, cc, &c.stemcell, &c.ghostVM)
	contractLargeRequestSpecs(st, cc, &c.stemcell)
	contractLocalitySpecs(st, cc, &c.stemcell)
	contractNetworkSpecs(st, cc, &c.stemcell)
}
