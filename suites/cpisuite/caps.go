package cpisuite

import (
	"fmt"
	"strings"

	. "github.com/onsi/ginkgo/v2"
)

// Capability is something a spec needs beyond a CPI executable. A spec
// declares what it needs with "cap:<name>" labels; the set of present
// capabilities is data computed from the Config (and, for the CPI's own
// abilities, from info and the CPI's answers), and a spec whose capability
// is absent is skipped with the reason (STYLE 2).
type Capability string

// The capabilities specs may need.
const (
	CapOracle Capability = "oracle" // IaaS state can be inspected
	CapAgent  Capability = "agent"  // agents are reachable over the mbus
	CapSSH    Capability = "ssh"    // VM file systems are reachable over SFTP
	CapFaults Capability = "faults" // the IaaS can be made to fail
)

// Capabilities returns every capability the config provides, and for each
// absent one the reason, as a skip message shows it.
func (c Config) Capabilities() (have map[Capability]bool, missing map[Capability]string) {
	have, missing = map[Capability]bool{}, map[Capability]string{}
	set := func(cp Capability, ok bool, why string) {
		if ok {
			have[cp] = true
		} else {
			missing[cp] = why
		}
	}
	set(CapOracle, c.Oracle != nil, "IaaS state: no oracle (a real cloud, or an IaaS cpilab cannot inspect)")
	set(CapAgent, c.Agents != nil, "agent steps: no mbus access to the agents is configured")
	set(CapSSH, c.Files != nil, "VM file system steps: no SSH/SFTP access to VMs is configured")
	set(CapFaults, c.Faults != nil, "fault handling: the IaaS cannot be made to fail (no fault injector: a real cloud)")
	return have, missing
}

// requireLabelledCaps skips the current spec when a capability it is
// labelled with is absent.
func requireLabelledCaps(cfg Config) {
	GinkgoHelper()
	have, missing := cfg.Capabilities()
	for _, l := range CurrentSpecReport().Labels() {
		name, ok := strings.CutPrefix(l, "cap:")
		if !ok || have[Capability(name)] {
			continue
		}
		why, known := missing[Capability(name)]
		if !known {
			why = fmt.Sprintf("unknown capability %q", name)
		}
		skipWith("not checked: " + why)
	}
}
