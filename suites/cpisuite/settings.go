package cpisuite

import (
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// contractSettingsSpecs registers, in a contract context, the specs that
// follow what create_vm and attach_disk were given to where it must end
// up: the agent settings the CPI wrote (table.settings), the VM's
// cloud_properties in the IaaS (vm.create-as-asked) and an attach to a VM
// that no longer exists (errors.attach-vm-missing). The pointers are
// the context's shared stemcell and deleted VM, set by its setup.
func contractSettingsSpecs(st *state, cc ContractContext, stemcell, ghostVM *string) {
	It(ClauseText(ClauseAgentSettings), labels("settings", cpiv2.MethodCreateVM), capOracle, func(ctx SpecContext) {
		o := st.oracle()
		t := st.tracker()
		v := st.createVM(ctx, t, *stemcell, cc.Stemcell)
		s, err := o.Settings(ctx, v.CID)
		if err != nil {
			Fail(fmt.Sprintf("oracle settings of %s: %v", v.CID, err))
		}
		got, where := fullSettings(s)
		if got == nil {
			// Where the settings must be is table.registry's and
			// table.user-data's business; without them there is nothing
			// to compare.
			notChecked(fmt.Sprintf("neither the registry nor the user-data of %s holds agent settings", v.CID))
		}
		// What create_vm was sent: (agent_id, stemcell_cid, cloud_properties,
		// networks, disk_cids, env).
		var req struct {
			Arguments []json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal(v.X.Request, &req) != nil || len(req.Arguments) < 6 {
			Fail(fmt.Sprintf("create_vm request %s: want 6 arguments", excerpt(v.X.Request)))
		}
		if why := settingsMiss(got, v.AgentID, req.Arguments[5], req.Arguments[3]); why != "" {
			violate(violation(ClauseAgentSettings, fmt.Sprintf("the agent settings of %s in the %s %s: %s", v.CID, where, excerpt(mustJSON(got)), why), v.X))
		}
	})

	It(ClauseText(ClauseVMAsAsked), labels("iaas", cpiv2.MethodCreateVM), capOracle, func(ctx SpecContext) {
		o := st.oracle()
		if why := unseenCloudProperties(o); why != "" {
			skipWith("not applicable: " + why)
		}
		base := st.cfg.Env.VMCloudProperties
		if st.vmProps != nil {
			base = *st.vmProps
		}
		want := mergeProps(base, cpiv2.MustCloudProps(map[string]string{"instance_type": st.names.next("type")}))
		v := st.createVMWith(ctx, st.tracker(), *stemcell, cc.Stemcell, want)
		ov, ok, err := o.VM(ctx, v.CID)
		if err != nil || !ok {
			violate(violation(ClauseVMAsAsked, fmt.Sprintf("create_vm returned %s, but the IaaS has no such VM (oracle: %v)", v.CID, err), v.X))
		}
		if !holdsProps(ov.CloudProperties, want) {
			violate(violation(ClauseVMAsAsked, fmt.Sprintf("create_vm with cloud_properties %s made VM %s with %s", excerpt(want.Raw()), v.CID, excerpt(ov.CloudProperties)), v.X))
		}
	})

	It(ClauseText(ClauseAttachVMGone), labels("errors", cpiv2.MethodCreateDisk, cpiv2.MethodAttachDisk), func(ctx SpecContext) {
		t := st.tracker()
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
		x := st.client.Call(ctx, cpiv2.MethodAttachDisk, *ghostVM, *ghostVM, d)
		checkWire(x)
		e := x.Response.Error
		if e == nil {
			violate(violation(ClauseAttachVMGone, fmt.Sprintf("attach_disk of %s to deleted VM %s succeeded: the Director would record an attachment that does not exist", d, *ghostVM), x))
		}
		if !e.Type.Known() {
			violate(violation(ClauseAttachVMGone, fmt.Sprintf("attach_disk to deleted VM %s returned error type %q, which the Director treats as unknown", *ghostVM, e.Type), x))
		}
		if o := st.cfg.Oracle; o != nil {
			if od, ok, err := o.Disk(ctx, d); err == nil && ok && od.AttachedTo != "" {
				violate(violation(ClauseAttachVMGone, fmt.Sprintf("attach_disk to deleted VM %s failed, but the IaaS shows disk %s attached to %q", *ghostVM, d, od.AttachedTo), x))
			}
		}
	})
}

// fullSettings returns the agent settings a VM's agent reads (a hash with
// agent_id), from the registry or else the user-data, and where they were
// found; nil when neither holds them.
func fullSettings(s OracleSettings) (map[string]any, string) {
	for _, c := range []struct {
		raw   json.RawMessage
		where string
	}{{s.Registry, "registry"}, {s.UserData, "user-data"}} {
		var m map[string]any
		if len(c.raw) > 0 && json.Unmarshal(c.raw, &m) == nil && m["agent_id"] != nil {
			return m, c.where
		}
	}
	return nil, ""
}

// settingsMiss compares agent settings with what create_vm was given: the
// agent_id, every member of env (a CPI may add its own), and every network
// by its name with the type, ip, netmask, gateway, dns and default sent
// (the agent configures its interfaces, resolver and default route from
// them). It says what is
// missing or different ("" when nothing is).
func settingsMiss(got map[string]any, agentID string, env, networks json.RawMessage) string {
	if got["agent_id"] != agentID {
		return fmt.Sprintf("agent_id is %v, create_vm was given %q", got["agent_id"], agentID)
	}
	var wantEnv any
	if json.Unmarshal(env, &wantEnv) == nil && !holdsJSON(got["env"], wantEnv) {
		return fmt.Sprintf("env is %s, create_vm was given %s (the agent takes its password, mbus certificates and blobstores from env)", excerpt(mustJSON(got["env"])), excerpt(env))
	}
	var wantNets map[string]map[string]any
	if json.Unmarshal(networks, &wantNets) != nil {
		return ""
	}
	gotNets, _ := got["networks"].(map[string]any)
	for _, name := range slices.Sorted(maps.Keys(wantNets)) {
		gn, found := gotNets[name].(map[string]any)
		if !found {
			return fmt.Sprintf("network %q is missing (networks: %s), create_vm was given %s", name, excerpt(mustJSON(got["networks"])), excerpt(networks))
		}
		for _, k := range []string{"type", "ip", "netmask", "gateway", "dns", "default"} {
			if w, sentKey := wantNets[name][k]; sentKey && !holdsAll(gn[k], w) {
				return fmt.Sprintf("network %q has %s %v, create_vm was given %v", name, k, gn[k], w)
			}
		}
	}
	return ""
}

// holdsAll is reflect.DeepEqual, except that a list holds a wanted list when
// it has every wanted element in any order (a CPI may add a DNS server its
// IaaS provides).
func holdsAll(got, want any) bool {
	wl, isList := want.([]any)
	gl, gotList := got.([]any)
	if !isList || !gotList {
		return reflect.DeepEqual(got, want)
	}
	for _, w := range wl {
		if !slices.ContainsFunc(gl, func(g any) bool { return reflect.DeepEqual(g, w) }) {
			return false
		}
	}
	return true
}

// holdsJSON reports whether got holds want: every member of a want hash
// is in got with a value that holds want's; any other value is equal.
func holdsJSON(got, want any) bool {
	wm, isMap := want.(map[string]any)
	if !isMap {
		return reflect.DeepEqual(got, want)
	}
	gm, isMap := got.(map[string]any)
	if !isMap {
		return false
	}
	for k, w := range wm {
		if !holdsJSON(gm[k], w) {
			return false
		}
	}
	return true
}
