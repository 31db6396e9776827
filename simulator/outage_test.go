package simulator

import (
	"strings"
	"testing"

	"github.com/cpilab/cpilab/simulator/faults"
)

// A cloud outage outlasts the reference Director's in-doubt retries: the
// delete's three delete_disk calls all fail, the task fails with the
// injected error (which explains it), and the disk is kept, recorded
// and in the IaaS, so the run passes; the next delete, after the outage,
// deletes it.
func TestCPIOutageOutlastsTheDirectorsRetries(t *testing.T) {
	sched, err := faults.ParseSchedule("cpi-outage@0 on=delete_disk n=1 d=1m")
	if err != nil {
		t.Fatal(err)
	}
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Scripted: true, Schedule: sched,
		Ops: controlOps(t, "c0 provide disk=d vm=0", "c0 delete disk=d", "c0 delete disk=d delay=2m")}
	o := Simulate(cfg)
	if o.Err != nil {
		t.Fatalf("reference director under a cloud outage: %v", o.Err)
	}
	if len(o.Fired) != 1 || o.Fired[0].Kind != faults.CPIOutage {
		t.Fatalf("fired %v, want the one outage", o.Fired)
	}
	want := []string{"provide disk=d vm=0: ok", "delete disk=d: failed", "delete disk=d delay=2m0s: ok"}
	if len(o.Log) != len(want) {
		t.Fatalf("log %q, want %d lines", o.Log, len(want))
	}
	for i, w := range want {
		if !strings.HasSuffix(o.Log[i], w) {
			t.Errorf("log line %d: %q, want …%q", i, o.Log[i], w)
		}
	}
}
