package simulator

import (
	"testing"
	"time"

	"github.com/cpilab/cpilab/simulator/faults"
)

// A failure is explained by a fault on its path, not by any fault that
// fired at about the same time somewhere else in the cloud.
func TestFaultOnPath(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	call, ret := t0.Add(10*time.Minute), t0.Add(11*time.Minute)
	o := Op{Kind: OpProvide, Disk: "d0"}
	errText := `attach_disk disk-1 to vm-1: agent agent-1 add_dynamic_disk: timed out`
	vmAgents := map[string]string{"vm-1": "agent-1", "vm-2": "agent-2", "vm-3": "agent-1"}
	fault := func(kind faults.Kind, at time.Time, agent string, on faultSubject) firedFault {
		return firedFault{f: faults.Fault{Kind: kind, Duration: 10 * time.Second}, at: at, agent: agent, on: on}
	}
	during := call.Add(30 * time.Second)
	for _, c := range []struct {
		name string
		f    firedFault
		want bool
	}{
		{"a cpi-error on the VM the error names", fault(faults.CPIError, during, "", faultSubject{vm: "vm-1"}), true},
		{"a lost response on the disk the error names", fault(faults.LostResponse, during, "", faultSubject{disk: "disk-1"}), true},
		{"a create_disk fault of the operation's name", fault(faults.CPIError, during, "", faultSubject{vm: "vm-9", name: "d0"}), true},
		{"a fault on the agent the error names", fault(faults.AgentUnresponsive, during, "agent-1", faultSubject{}), true},
		{"a fault on a VM whose agent the error names", fault(faults.CPIError, during, "", faultSubject{vm: "vm-3"}), true},
		{"a Director crash", fault(faults.DirectorCrash, during, "", faultSubject{}), true},
		{"a cloud outage", fault(faults.CPIOutage, during, "", faultSubject{vm: "vm-7"}), true},
		{"a cpi-error on another VM", fault(faults.CPIError, during, "", faultSubject{vm: "vm-2"}), false},
		{"a fault on another agent", fault(faults.AgentUnresponsive, during, "agent-2", faultSubject{}), false},
		{"a create_disk fault of another name", fault(faults.CPIError, during, "", faultSubject{name: "d1"}), false},
		{"a latency fault on another disk", fault(faults.Latency, during, "", faultSubject{disk: "disk-2"}), false},
		{"a fault on the named agent long before", fault(faults.AgentUnresponsive, call.Add(-time.Hour), "agent-1", faultSubject{}), false},
		{"a fault on the named VM after it returned", fault(faults.CPIError, ret.Add(time.Second), "", faultSubject{vm: "vm-1"}), false},
	} {
		if _, got := faultOnPath([]firedFault{c.f}, vmAgents, o, errText, call, ret); got != c.want {
			t.Errorf("%s: on the path %v, want %v", c.name, got, c.want)
		}
	}
}
