package cpisuite

import (
	"fmt"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// vmLifecycleSpecs registers the contract specs of reboot, VM and disk metadata, cloud properties and the VM resources they give.
func (c *contractSpecs) vmLifecycleSpecs() {
	st, cc := c.st, c.cc
	It(ClauseText(ClauseRebootVM), labels("shapes", cpiv2.MethodCreateVM, cpiv2.MethodRebootVM, cpiv2.MethodHasVM), func(ctx SpecContext) {
		t := st.tracker()
		v := st.createVM(ctx, t, c.stemcell, cc.Stemcell)
		boots := st.boots(ctx, v.CID)
		x := st.client.Call(ctx, cpiv2.MethodRebootVM, v.CID, v.CID)
		skipIfNotImplemented(x)
		mustUnread(x, ClauseRebootVM)
		if ok, hx := st.callBool(ctx, ClauseRebootVM, cpiv2.MethodHasVM, v.CID); !ok {
			violate(violation(ClauseRebootVM, "has_vm returned false after reboot_vm", hx))
		}
		// The Director's cloud check reboots a VM whose agent does not
		// answer and then waits for the agent: a reboot_vm that does
		// not reboot leaves it unresponsive.
		if after := st.boots(ctx, v.CID); boots > 0 && after <= boots {
			violate(violation(ClauseRebootVM, fmt.Sprintf("reboot_vm of %s succeeded, but the IaaS did not boot the VM again (booted %d time(s) before, %d after)", v.CID, boots, after), x))
		}
	})

	It(ClauseText(ClauseVMMetadata), labels("shapes", cpiv2.MethodSetVMMetadata), func(ctx SpecContext) {
		x := st.client.Call(ctx, cpiv2.MethodSetVMMetadata, c.mainVM, c.mainVM, map[string]string{"deployment": st.names.next("dep")})
		skipIfNotImplemented(x)
		mustUnread(x, ClauseVMMetadata)
	})

	It(ClauseText(ClauseVMMetadata)+" (IaaS state)", labels("iaas", cpiv2.MethodSetVMMetadata), capOracle, func(ctx SpecContext) {
		o := st.oracle()
		if why := fixedMetadata(o); why != "" {
			skipWith("not applicable: " + why)
		}
		want := map[string]string{"deployment": st.names.next("dep"), "job": "cpilab", "index": "0"}
		x := st.client.Call(ctx, cpiv2.MethodSetVMMetadata, c.mainVM, c.mainVM, want)
		skipIfNotImplemented(x)
		mustUnread(x, ClauseVMMetadata)
		ov, ok, err := o.VM(ctx, c.mainVM)
		if err != nil || !ok {
			violate(violation(ClauseVMMetadata, fmt.Sprintf("the IaaS has no VM %s (oracle: %v)", c.mainVM, err), x))
		}
		for k, v := range want {
			if ov.Metadata[k] != v {
				violate(violation(ClauseVMMetadata, fmt.Sprintf("set_vm_metadata succeeded but the IaaS has %s=%q, want %q (IaaS metadata: %v)", k, ov.Metadata[k], v, ov.Metadata), x))
			}
		}
	})

	It(ClauseText(ClauseDiskMetadata)+" (IaaS state)", labels("iaas", cpiv2.MethodCreateDisk, cpiv2.MethodSetDiskMetadata), capOracle, func(ctx SpecContext) {
		o := st.oracle()
		if why := fixedMetadata(o); why != "" {
			skipWith("not applicable: " + why)
		}
		t := st.tracker()
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
		want := map[string]string{"disk_name": st.names.next("disk")}
		x := st.client.Call(ctx, cpiv2.MethodSetDiskMetadata, "", d, want)
		skipIfNotImplemented(x)
		mustUnread(x, ClauseDiskMetadata)
		od, ok, err := o.Disk(ctx, d)
		if err != nil || !ok || od.Metadata["disk_name"] != want["disk_name"] {
			violate(violation(ClauseDiskMetadata, fmt.Sprintf("set_disk_metadata succeeded but the IaaS has metadata %v (oracle: %v)", od.Metadata, err), x))
		}
	})

	It(ClauseText(ClauseCalculate), labels("shapes", cpiv2.MethodCalculateVMCloudProperties), func(ctx SpecContext) {
		x := st.client.Call(ctx, cpiv2.MethodCalculateVMCloudProperties, "", map[string]int{"cpu": 2, "ram": 2048, "ephemeral_disk_size": 4096})
		skipIfNotImplemented(x)
		mustOK(x, ClauseCalculate)
		var m map[string]any
		if err := jsonUnmarshal(x.Response.Result, &m); err != nil || m == nil {
			violate(violation(ClauseCalculate, fmt.Sprintf("returned %s, not a hash", excerpt(x.Response.Result)), x))
		}
	})

	if cc.Thorough {
		// What the VM gets does not depend on the caller profile: one
		// context per api_version family checks it.
		It(ClauseText(ClauseVMResources), labels("iaas", cpiv2.MethodCalculateVMCloudProperties, cpiv2.MethodCreateVM), capOracle, func(ctx SpecContext) {
			st.checkVMResources(ctx, c.stemcell, cc.Stemcell)
		})
	}
}
