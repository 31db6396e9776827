package cpisuite

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// VMResourcesAsked is the vm_resources block vm.resources hands
// calculate_vm_cloud_properties: more of each than a VM gets without
// asking, so that an answer that leaves one out shows.
var VMResourcesAsked = cpiv2.VMResources{CPU: 2, RAM: 3072, EphemeralDiskSize: 15360}

// checkVMResources is vm.resources: as the Director does for an instance
// group with vm_resources, ask calculate_vm_cloud_properties, merge its
// answer over the VM's other cloud_properties (the Director merges it into
// the availability zone's and the VM extensions'), create a VM with that,
// and check with the oracle that the VM has at least the CPUs, RAM and
// ephemeral disk asked for.
func (st *state) checkVMResources(ctx SpecContext, stemcell string, sv int) {
	GinkgoHelper()
	o := st.oracle()
	if why := unseenCloudProperties(o); why != "" {
		skipWith("not applicable: " + why)
	}
	asked := VMResourcesAsked
	x := st.client.Call(ctx, cpiv2.MethodCalculateVMCloudProperties, "", map[string]int{
		"cpu": asked.CPU, "ram": asked.RAM, "ephemeral_disk_size": asked.EphemeralDiskSize})
	skipIfNotImplemented(x)
	mustOK(x, ClauseCalculate)
	var calc map[string]json.RawMessage
	if err := jsonUnmarshal(x.Response.Result, &calc); err != nil || calc == nil {
		violate(violation(ClauseCalculate, fmt.Sprintf("returned %s, not a hash", excerpt(x.Response.Result)), x))
	}
	base := st.cfg.Env.VMCloudProperties
	if st.vmProps != nil {
		base = *st.vmProps
	}
	props := mergeProps(base, cpiv2.MustCloudProps(calc))
	v := st.createVMWith(ctx, st.tracker(), stemcell, sv, props)
	ov, ok, err := o.VM(ctx, v.CID)
	if err != nil {
		Fail(fmt.Sprintf("oracle VM %s: %v", v.CID, err))
	}
	if !ok {
		violate(violation(ClauseVMResources, fmt.Sprintf("create_vm returned %s, but the IaaS has no such VM", v.CID), v.X))
	}
	if ov.Size == nil {
		skipWith("not applicable: the IaaS does not show how big a VM is")
	}
	var short []string
	for _, c := range []struct {
		what      string
		got, want int
		unit      string
	}{
		{"cpu", ov.Size.CPU, asked.CPU, ""},
		{"ram", ov.Size.RAMMiB, asked.RAM, " MiB"},
		{"ephemeral disk", ov.Size.EphemeralDiskMiB, asked.EphemeralDiskSize, " MiB"},
	} {
		if c.got < c.want {
			short = append(short, fmt.Sprintf("%s %d%s (asked %d%s)", c.what, c.got, c.unit, c.want, c.unit))
		}
	}
	if len(short) > 0 {
		violate(violation(ClauseVMResources, fmt.Sprintf("calculate_vm_cloud_properties answered %s for cpu %d, ram %d MiB, ephemeral_disk_size %d MiB; create_vm with it made VM %s with %s",
			excerpt(x.Response.Result), asked.CPU, asked.RAM, asked.EphemeralDiskSize, v.CID, strings.Join(short, ", ")), v.X))
	}
}
