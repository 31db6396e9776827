package cpisuite

import (
	"fmt"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// errorSpecs registers the contract specs of errors and protocol: missing VMs, unknown methods, malformed requests, error responses, known types.
func (c *contractSpecs) errorSpecs() {
	st := c.st
	It(ClauseText(ClauseMetadataGone), labels("errors", cpiv2.MethodSetVMMetadata), func(ctx SpecContext) {
		x := st.client.Call(ctx, cpiv2.MethodSetVMMetadata, c.ghostVM, c.ghostVM, map[string]string{"deployment": st.names.next("dep")})
		checkWire(x)
		e := x.Response.Error
		if e == nil {
			violate(violation(ClauseMetadataGone, fmt.Sprintf("set_vm_metadata of deleted VM %s succeeded", c.ghostVM), x))
		}
		if cpiv2.IsNotImplemented(e) {
			skipWith("not checked: the CPI answers NotImplemented for set_vm_metadata (the Director skips it)")
		}
		if !e.Type.Known() {
			violate(violation(ClauseMetadataGone, fmt.Sprintf("set_vm_metadata of deleted VM %s returned error type %q, which the Director treats as unknown", c.ghostVM, e.Type), x))
		}
	})

	It(ClauseText(ClauseUnknownMethod), labels("errors", methodUnknown), func(ctx SpecContext) {
		x := st.client.Call(ctx, unknownMethod, "", "x")
		checkWire(x)
		if e := x.Response.Error; !cpiv2.IsNotImplemented(e) {
			did := "returned no error"
			if e != nil {
				did = fmt.Sprintf("returned %s: %q", e.Type, e.Message)
			}
			violate(violation(ClauseUnknownMethod, "an unknown method "+did, x))
		}
	})

	It(ClauseText(ClauseMalformed), labels("protocol", cpiv2.MethodCreateDisk), func(ctx SpecContext) {
		x := st.client.Call(ctx, cpiv2.MethodCreateDisk, "", "not-a-size", "not-a-hash", 42)
		checkWire(x)
		if x.Response.Error == nil {
			if cid, err := decodeCID[cpiv2.DiskKind](x.Response.Result); err == nil {
				st.tracker().Add(Resource{Kind: KindDisk, CID: cid})
			}
			violate(violation(ClauseMalformed, fmt.Sprintf("create_disk with a string size and a string cloud_properties succeeded with %s", excerpt(x.Response.Result)), x))
		}
	})

	It(ClauseText(ClauseProtocol)+" (error responses)", labels("protocol", methodUnknown, cpiv2.MethodHasDisk, cpiv2.MethodDetachDisk), func(ctx SpecContext) {
		// An error path and a success path, both judged byte by byte;
		// every other call of every spec is judged the same way.
		checkWire(st.client.Call(ctx, unknownMethod, ""))
		checkWire(st.client.Call(ctx, cpiv2.MethodHasDisk, "", c.ghostDisk))
		checkWire(st.client.Call(ctx, cpiv2.MethodDetachDisk, c.mainVM, c.mainVM, c.ghostDisk))
	})

	It(ClauseText(ClauseKnownTypes), labels("errors", cpiv2.MethodDeleteVM, cpiv2.MethodDetachDisk, cpiv2.MethodAttachDisk, cpiv2.MethodSetVMMetadata), func(ctx SpecContext) {
		for _, x := range []*Exchange{
			st.client.Call(ctx, cpiv2.MethodDeleteVM, "", c.ghostVM),
			st.client.Call(ctx, cpiv2.MethodDetachDisk, c.mainVM, c.mainVM, c.ghostDisk),
			st.client.Call(ctx, cpiv2.MethodAttachDisk, c.mainVM, c.mainVM, c.ghostDisk),
			st.client.Call(ctx, cpiv2.MethodSetVMMetadata, c.ghostVM, c.ghostVM, map[string]string{"k": "v"}),
		} {
			checkWire(x)
			if e := x.Response.Error; e != nil && !e.Type.Known() {
				violate(violation(ClauseKnownTypes, fmt.Sprintf("%s returned error type %q, which the Director treats as unknown", x.Method, e.Type), x))
			}
		}
	})
}
