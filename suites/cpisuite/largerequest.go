package cpisuite

import (
	"encoding/base64"
	"fmt"
	"strings"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// largeEnvBytes is about how large the env of the large create_vm is: a
// Director with a CA bundle in trusted_certs and its mbus certificates
// sends hundreds of KiB, more than any fixed read buffer a CPI may have.
const largeEnvBytes = 256 << 10

// directorEnv is an env as the Director's create_vm step builds it
// (create_vm_step.rb: mbus certificates, password, group and groups,
// blobstores, tags), with trustedCerts as bosh.trusted_certs.
func directorEnv(group, trustedCerts string) map[string]any {
	return map[string]any{"bosh": map[string]any{
		"group":            group,
		"groups":           []string{"cpilab", "cpilab-certify", group},
		"password":         "$6$cpilab$" + strings.Repeat("x", 86),
		"remove_dev_tools": true,
		"mbus": map[string]any{"cert": map[string]any{
			"ca": pemBlock("CERTIFICATE", 0), "certificate": pemBlock("CERTIFICATE", 1), "private_key": pemBlock("PRIVATE KEY", 2)}},
		"blobstores": []any{map[string]any{"provider": "dav", "options": map[string]any{
			"endpoint": "https://10.0.0.6:25250", "user": "agent", "password": "cpilab-agent-password"}}},
		"tags":          map[string]string{"director": "cpilab", "team": "certify"},
		"trusted_certs": trustedCerts,
	}}
}

// pemBlock is a PEM block of a certificate's size whose body depends on n
// only, so that a request is the same from run to run.
func pemBlock(kind string, n int) string {
	body := make([]byte, 1200)
	for i := range body {
		body[i] = byte(i*31 + n*7)
	}
	enc := base64.StdEncoding.EncodeToString(body)
	var b strings.Builder
	b.WriteString("-----BEGIN " + kind + "-----\n")
	for len(enc) > 64 {
		b.WriteString(enc[:64] + "\n")
		enc = enc[64:]
	}
	b.WriteString(enc + "\n-----END " + kind + "-----\n")
	return b.String()
}

// caBundle is a bundle of PEM certificates of about size bytes.
func caBundle(size int) string {
	var b strings.Builder
	for n := 0; b.Len() < size; n++ {
		b.WriteString(pemBlock("CERTIFICATE", n+100))
	}
	return b.String()
}

// contractLargeRequestSpecs registers, in a contract context, the spec
// that sends create_vm an env of largeEnvBytes: the CPI must read the whole
// request and the agent settings must carry the env whole.
func contractLargeRequestSpecs(st *state, cc ContractContext, stemcell *string) {
	It(ClauseText(ClauseLargeRequest), labels("protocol", cpiv2.MethodCreateVM), func(ctx SpecContext) {
		t := st.tracker()
		env := directorEnv("cpilab-large", caBundle(largeEnvBytes))
		agentID := st.names.next("agent")
		x := st.createVMAsDirector(ctx, VMRequest{AgentID: agentID, StemcellCID: *stemcell, StemcellAPIVersion: cc.Stemcell,
			CloudProperties: st.cfg.Env.VMCloudProperties, Networks: st.cfg.Env.Networks, Env: env})
		if e := x.Response.Error; e != nil {
			// A request the CPI could not read comes back as the error a
			// CPI library answers for a payload it cannot parse; an IaaS
			// limit on user-data (a cloud's own, not the CPI's) as the
			// cloud's error.
			if e.Type == cpiv2.TypeCpiError || e.Type == cpiv2.TypeInvalidCall {
				violate(violation(ClauseLargeRequest, fmt.Sprintf("create_vm with a %d KiB request failed with %s: %q: the CPI did not read the whole request", len(x.Request)>>10, e.Type, e.Message), x))
			}
			notChecked(fmt.Sprintf("create_vm with a %d KiB env failed with %s: %q (an IaaS limit on what a VM can be given?)", largeEnvBytes>>10, e.Type, e.Message))
		}
		cid := st.trackCreatedVM(t, x, cc.Stemcell)
		o := st.cfg.Oracle
		if o == nil {
			return
		}
		s, err := o.Settings(ctx, cid)
		if err != nil {
			Fail(fmt.Sprintf("oracle settings of %s: %v", cid, err))
		}
		got, where := fullSettings(s)
		if got == nil {
			return // where settings go is the reference table's business
		}
		if why := settingsMiss(got, agentID, mustJSON(env), mustJSON(st.cfg.Env.Networks)); why != "" {
			if len(why) > 600 {
				why = why[:600] + "…"
			}
			violate(violation(ClauseLargeRequest, fmt.Sprintf("the agent settings of %s in the %s do not carry the %d KiB env create_vm was given: %s", cid, where, largeEnvBytes>>10, why), x))
		}
	})
}
