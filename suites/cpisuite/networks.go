package cpisuite

import (
	"encoding/json"
	"fmt"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// directorNetworks are networks as the Director sends them for an instance
// on a manual network with a static IP and a second, dynamic one:
// addresses, DNS and which network holds the default route
// (Environment.StaticNetworks' default on the embedded cloud).
func directorNetworks() cpiv2.Networks {
	return cpiv2.Networks{
		"private": {Type: "manual", IP: "10.0.16.10", Netmask: "255.255.255.0", Gateway: "10.0.16.1",
			DNS: []string{"10.0.0.2", "10.0.0.3"}, Default: []string{"dns", "gateway"}},
		"services": {Type: "dynamic", DNS: []string{"10.0.0.2"}},
	}
}

// contractNetworkSpecs registers, in a contract context, the table.settings
// check for a VM on the networks a Director typically gives it (a manual
// network with a static IP, the default route there, and a dynamic one):
// the default environment's single dynamic network cannot show a CPI
// that drops a static IP or the default route.
func contractNetworkSpecs(st *state, cc ContractContext, stemcell *string) {
	It(ClauseText(ClauseAgentSettings)+" (a static IP on a manual network, and a dynamic network)", labels("settings", cpiv2.MethodCreateVM), capOracle, func(ctx SpecContext) {
		nets := st.cfg.Env.StaticNetworks
		if nets == nil {
			skipWith("not applicable: the environment gives no static networks (Environment.StaticNetworks); the table.settings spec checks its own networks")
		}
		o := st.oracle()
		t := st.tracker()
		agentID := st.names.next("agent")
		x := st.createVMAsDirector(ctx, VMRequest{AgentID: agentID, StemcellCID: *stemcell, StemcellAPIVersion: cc.Stemcell,
			CloudProperties: st.cfg.Env.VMCloudProperties, Networks: nets})
		mustOK(x, ClauseCreateVM)
		cid := st.trackCreatedVM(t, x, cc.Stemcell)
		s, err := o.Settings(ctx, cid)
		if err != nil {
			Fail(fmt.Sprintf("oracle settings of %s: %v", cid, err))
		}
		got, where := fullSettings(s)
		if got == nil {
			notChecked(fmt.Sprintf("neither the registry nor the user-data of %s holds agent settings", cid))
		}
		var req struct {
			Arguments []json.RawMessage `json:"arguments"`
		}
		if json.Unmarshal(x.Request, &req) != nil || len(req.Arguments) < 6 {
			Fail(fmt.Sprintf("create_vm request %s: want 6 arguments", excerpt(x.Request)))
		}
		if why := settingsMiss(got, agentID, req.Arguments[5], req.Arguments[3]); why != "" {
			violate(violation(ClauseAgentSettings, fmt.Sprintf("the agent settings of %s in the %s %s: %s", cid, where, excerpt(mustJSON(got)), why), x))
		}
	})
}
