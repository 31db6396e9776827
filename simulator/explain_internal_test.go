package simulator

import (
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/simulator/diskmodel"
)

// A "the disk is <state> (task N)" refusal is allowed while task N may
// still run; once its client has seen it end, the state is a record left
// behind (a Director that keeps a disk "detaching" after a failed detach
// refuses the name for ever) and the refusal is unexplained.
func TestDiskStateOfAnEndedTaskIsLeftBehind(t *testing.T) {
	t0 := time.Unix(0, 0)
	r := &workloadRun{spans: []span{
		{op: Op{Client: 1, Kind: OpDetach, Disk: "d0"}, task: 7, call: t0, ret: t0.Add(10 * time.Second), done: true},
		{op: Op{Client: 2, Kind: OpDetach, Disk: "d1"}, task: 8, call: t0, ret: t0.Add(30 * time.Second), done: false},
	}}
	refusal := `dynamic disk "d0" is detaching (task 7)`
	if got := r.staleDiskState(refusal, t0.Add(5*time.Second)); got != "" {
		t.Errorf("called while task 7 ran: %q, want allowed", got)
	}
	got := r.staleDiskState(refusal, t0.Add(20*time.Second))
	if !strings.Contains(got, "detaching under task 7") || !strings.Contains(got, "left behind") {
		t.Errorf("called after task 7 ended: %q, want the state named as left behind", got)
	}
	if got := r.staleDiskState(`dynamic disk "d1" is detaching (task 8)`, t0.Add(time.Hour)); got != "" {
		t.Errorf("task 8's end was never seen: %q, want allowed", got)
	}
	if got := r.staleDiskState(`dynamic disk "d1" moved to another VM each time its locks were taken (9 tries)`, t0.Add(time.Hour)); got != "" {
		t.Errorf("a moving disk names no task: %q, want allowed", got)
	}
}

// A create by deployment and AZ (upstream's form) that finds no instance of
// the AZ with a VM is refused, whatever the name's state; the wording is
// the reference Director's (director/jobs_disks.go).
func TestNoVMInTheAZIsARefusal(t *testing.T) {
	var r workloadRun
	msg := "no active VM found in deployment `sim` in AZ `z1`"
	got := r.explain(Op{Kind: OpCreate, Disk: "d0"}, opResult{task: 3, taskErr: msg}, time.Time{}, time.Time{})
	if got.outcome != diskmodel.Refused {
		t.Fatalf("%q: %v (%s), want refused", msg, got.outcome, got.why)
	}
}
