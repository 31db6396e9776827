package diskmodel_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"
	"github.com/cpilab/cpilab/simulator/diskmodel"
)

// op is shorthand for one operation: client, [call, ret], what, answer.
func op(client int, call, ret int64, kind diskmodel.OpKind, disk, vm string, outcome diskmodel.Outcome, cid string) porcupine.Operation {
	return porcupine.Operation{
		ClientId: client, Call: call, Return: ret,
		Input:  diskmodel.Input{Kind: kind, Disk: disk, VM: vm},
		Output: diskmodel.Output{Outcome: outcome, CID: cid},
	}
}

const (
	P   = diskmodel.Provide
	A   = diskmodel.Attach
	Det = diskmodel.Detach
	Del = diskmodel.Delete
	C   = diskmodel.Create
	ok  = diskmodel.OK
	bad = diskmodel.Failed
	unk = diskmodel.Unknown
	inv = diskmodel.Invalid
	ref = diskmodel.Refused
	une = diskmodel.Unexplained
)

var cases = []struct {
	name  string
	legal bool
	h     []porcupine.Operation
}{
	{"a re-attaching recreate keeps the disk on its instance", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, "c1"), op(1, 3, 4, diskmodel.Reattach, "d", "vm1", ok, ""), op(0, 5, 6, P, "d", "vm1", ok, "c1")}},
	{"after a re-attaching recreate two instances cannot both get the disk", false, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, "c1"), op(1, 3, 4, diskmodel.Reattach, "d", "vm1", ok, ""), op(2, 5, 6, P, "d", "vm2", ok, "c1"),
		op(0, 7, 8, P, "d", "vm1", ok, "c1")}},
	{"a provide elsewhere during a re-attaching recreate may take the disk", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, "c1"), op(1, 3, 6, diskmodel.Reattach, "d", "vm1", ok, ""), op(2, 4, 5, P, "d", "vm2", ok, "c1")}},
	{"a plain recreate frees the disk", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, "c1"), op(1, 3, 4, diskmodel.Evict, "d", "vm1", ok, ""), op(2, 5, 6, P, "d", "vm2", ok, "c1")}},
	{"provide twice to one VM is idempotent", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, "c1"), op(0, 3, 4, P, "d", "vm1", ok, "c1")}},
	{"provide to a second VM while attached must fail", false, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, ""), op(1, 3, 4, P, "d", "vm2", ok, "")}},
	{"provide to a second VM while attached fails", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, ""), op(1, 3, 4, P, "d", "vm2", bad, "")}},
	{"concurrent provides to two VMs cannot both succeed (race b)", false, []porcupine.Operation{
		op(0, 1, 5, P, "d", "vm1", ok, ""), op(1, 2, 6, P, "d", "vm2", ok, "")}},
	{"concurrent provides to one VM reporting two CIDs (race a)", false, []porcupine.Operation{
		op(0, 1, 5, P, "d", "vm1", ok, "c1"), op(1, 2, 6, P, "d", "vm1", ok, "c2")}},
	{"concurrent provides to one VM, one CID", true, []porcupine.Operation{
		op(0, 1, 5, P, "d", "vm1", ok, "c1"), op(1, 2, 6, P, "d", "vm1", ok, "c1")}},
	{"detach then provide elsewhere", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, "c1"), op(0, 3, 4, Det, "d", "", ok, ""),
		op(1, 5, 6, P, "d", "vm2", ok, "c1")}},
	{"a moved disk keeps its CID", false, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, "c1"), op(0, 3, 4, Det, "d", "", ok, ""),
		op(1, 5, 6, P, "d", "vm2", ok, "c9")}},
	{"delete then provide makes a new disk", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, "c1"), op(0, 3, 4, Del, "d", "", ok, ""),
		op(1, 5, 6, P, "d", "vm2", ok, "c2")}},
	{"detach of a never-created name must fail", false, []porcupine.Operation{
		op(0, 1, 2, Det, "d", "", ok, "")}},
	{"detach of a never-created name fails", true, []porcupine.Operation{
		op(0, 1, 2, Det, "d", "", bad, "")}},
	{"detach of a detached disk is ok", true, []porcupine.Operation{
		op(0, 1, 2, C, "d", "", ok, "c1"), op(0, 3, 4, Det, "d", "", ok, ""), op(0, 5, 6, Det, "d", "", ok, "")}},
	{"delete of an absent disk is ok", true, []porcupine.Operation{
		op(0, 1, 2, Del, "d", "", ok, ""), op(0, 3, 4, Del, "d", "", ok, "")}},
	{"create of an existing name is idempotent", true, []porcupine.Operation{
		op(0, 1, 2, C, "d", "", ok, "c1"), op(0, 3, 4, C, "d", "", ok, "c1")}},
	{"create of an existing name must answer its CID", false, []porcupine.Operation{
		op(0, 1, 2, C, "d", "", ok, "c1"), op(0, 3, 4, C, "d", "", ok, "c2")}},
	{"attach of an unknown name must fail", false, []porcupine.Operation{
		op(0, 1, 2, A, "d", "vm1", ok, "")}},
	{"attach after create", true, []porcupine.Operation{
		op(0, 1, 2, C, "d", "", ok, "c1"), op(0, 3, 4, A, "d", "vm1", ok, "c1"), op(1, 5, 6, A, "d", "vm2", bad, "")}},
	{"an unknown provide may not have happened", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", unk, ""), op(1, 3, 4, P, "d", "vm2", ok, "")}},
	{"an unknown provide may have happened", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", unk, ""), op(1, 3, 4, P, "d", "vm2", bad, ""), op(1, 5, 6, Det, "d", "", ok, "")}},
	{"an unknown provide may take effect after it timed out", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", unk, ""), op(1, 3, 4, P, "d", "vm2", ok, "c1"),
		op(1, 5, 6, Det, "d", "", ok, ""), op(1, 7, 8, P, "d", "vm2", bad, "")}},
	{"a failed provide did not attach", false, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", bad, ""), op(1, 3, 4, A, "d", "vm1", ok, ""), op(1, 5, 6, P, "d", "vm2", ok, "")}},
	{"a failed provide may have created the disk", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", bad, ""), op(1, 3, 4, Det, "d", "", ok, "")}},
	{"an unreturned operation is unknown", true, []porcupine.Operation{
		{ClientId: 0, Call: 1, Input: diskmodel.Input{Kind: P, Disk: "d", VM: "vm1"}},
		op(1, 3, 4, Det, "d", "", ok, "")}},
	{"disks are independent", true, []porcupine.Operation{
		op(0, 1, 2, P, "d1", "vm1", ok, "c1"), op(1, 1, 2, P, "d2", "vm2", ok, "c2"),
		op(0, 3, 4, P, "d2", "vm1", bad, "")}},
	{"a violation on one disk among many", false, []porcupine.Operation{
		op(0, 1, 2, P, "d1", "vm1", ok, "c1"), op(1, 1, 2, P, "d2", "vm2", ok, "c2"),
		op(0, 3, 4, P, "d2", "vm1", ok, "")}},
	{"delete of an attached disk detaches it", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, "c1"), op(1, 3, 4, Del, "d", "", ok, ""), op(1, 5, 6, Det, "d", "", bad, "")}},
	{"after delete the name is unknown to detach", false, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, "c1"), op(1, 3, 4, Del, "d", "", ok, ""), op(1, 5, 6, Det, "d", "", ok, "")}},
	{"an invalid provide: attached to another VM", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ok, "c1"), op(1, 3, 4, P, "d", "vm2", inv, "")}},
	{"a provide to a free disk cannot be invalid", false, []porcupine.Operation{
		op(0, 1, 2, C, "d", "", ok, "c1"), op(1, 3, 4, P, "d", "vm2", inv, "")}},
	{"an invalid detach: unknown name", true, []porcupine.Operation{op(0, 1, 2, Det, "d", "", inv, "")}},
	{"a detach of a known name cannot be invalid", false, []porcupine.Operation{
		op(0, 1, 2, C, "d", "", ok, "c1"), op(0, 3, 4, Det, "d", "", inv, "")}},
	{"an invalid create: the name exists", true, []porcupine.Operation{
		op(0, 1, 2, C, "d", "", ok, "c1"), op(0, 3, 4, C, "d", "", inv, "")}},
	{"a refused provide had no effect", false, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ref, ""), op(1, 3, 4, Det, "d", "", ok, "")}},
	{"a refusal is allowed from any state", true, []porcupine.Operation{
		op(0, 1, 2, P, "d", "vm1", ref, ""), op(1, 3, 4, P, "d", "vm1", ok, "c1"), op(0, 5, 6, Det, "d", "", ref, "")}},
	{"an unexplained failure is allowed nowhere", false, []porcupine.Operation{op(0, 1, 2, P, "d", "vm1", une, "")}},
}

func TestHandMadeHistories(t *testing.T) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := diskmodel.Check(tc.h, diskmodel.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Linearizable() != tc.legal || len(res.Undecided) != 0 {
				t.Fatalf("linearizable = %v (illegal %v, undecided %v), want %v; history:\n%s",
					res.Linearizable(), res.Illegal, res.Undecided, tc.legal, diskmodel.Describe(tc.h))
			}
		})
	}
}

func TestViolationNamesTheDiskAndWritesHTML(t *testing.T) {
	h := []porcupine.Operation{
		op(0, 1, 2, P, "d1", "vm1", ok, "c1"), op(1, 1, 2, P, "d2", "vm2", ok, "c2"),
		op(0, 3, 4, P, "d2", "vm1", ok, ""),
	}
	path := filepath.Join(t.TempDir(), "lin.html")
	res, err := diskmodel.Check(h, diskmodel.Options{Visualization: path})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Illegal, []string{"d2"}) || res.Visualization != path {
		t.Fatalf("result %+v, want d2 illegal and the visualization written", res)
	}
	html, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "provide(d2, vm1)") || !strings.Contains(string(html), "attached to vm2") {
		t.Fatal("the visualization does not describe the operations and states")
	}
	// A legal history writes nothing.
	p2 := filepath.Join(t.TempDir(), "none.html")
	if res, _ := diskmodel.Check(h[:2], diskmodel.Options{Visualization: p2}); !res.Linearizable() || res.Visualization != "" {
		t.Fatalf("legal history: %+v", res)
	}
	if _, err := os.Stat(p2); !os.IsNotExist(err) {
		t.Fatal("a visualization was written for a linearizable history")
	}
}

func TestRecorder(t *testing.T) {
	var rec diskmodel.Recorder
	a := rec.Call(0, diskmodel.Input{Kind: P, Disk: "d", VM: "vm1"})
	b := rec.Call(1, diskmodel.Input{Kind: P, Disk: "d", VM: "vm2"})
	rec.Return(a, diskmodel.Output{Outcome: ok, CID: "c1"})
	c := rec.Call(1, diskmodel.Input{Kind: Det, Disk: "d"})
	rec.Return(c, diskmodel.Output{Outcome: ok})
	_ = b // never returns: unknown
	h := rec.History()
	if len(h) != 3 || h[1].Output.(diskmodel.Output).Outcome != unk || h[0].Call != 1 || h[0].Return != 3 {
		t.Fatalf("history:\n%s", diskmodel.Describe(h))
	}
	if res, _ := diskmodel.Check(h, diskmodel.Options{}); !res.Linearizable() {
		t.Fatalf("recorded history judged illegal: %+v", res)
	}
	rec.Return(b, diskmodel.Output{Outcome: ok})
	if res, _ := diskmodel.Check(rec.History(), diskmodel.Options{}); !res.Linearizable() {
		// provide(vm2) overlapped the detach, so it may take effect after it.
		t.Fatalf("judged illegal:\n%s", diskmodel.Describe(rec.History()))
	}
	var seq diskmodel.Recorder
	for _, vm := range []string{"vm1", "vm2"} {
		id := seq.Call(0, diskmodel.Input{Kind: P, Disk: "d", VM: vm})
		seq.Return(id, diskmodel.Output{Outcome: ok})
	}
	if res, _ := diskmodel.Check(seq.History(), diskmodel.Options{}); res.Linearizable() {
		t.Fatalf("two successful sequential provides to two VMs judged linearizable")
	}
	if got := diskmodel.Disks(h); !slices.Equal(got, []string{"d"}) {
		t.Fatalf("Disks = %v", got)
	}
}

// OthersRunning sees an operation on the same name still running, and
// leaves out names of other disks and evictions of other VMs.
func TestRecorderOthersRunning(t *testing.T) {
	var rec diskmodel.Recorder
	other := rec.Call(1, diskmodel.Input{Kind: diskmodel.Evict, Disk: "d", VM: "vm2"})
	elsewhere := rec.Call(2, diskmodel.Input{Kind: Det, Disk: "e"})
	p := rec.Call(0, diskmodel.Input{Kind: P, Disk: "d", VM: "vm1"})
	if rec.OthersRunning(p) {
		t.Errorf("an eviction of another VM and a detach of another name count as running on d")
	}
	re := rec.Call(3, diskmodel.Input{Kind: diskmodel.Reattach, Disk: "d", VM: "vm1"})
	if !rec.OthersRunning(p) {
		t.Errorf("a recreate of vm1 still running does not count")
	}
	rec.Return(re, diskmodel.Output{Outcome: ok})
	if rec.OthersRunning(p) {
		t.Errorf("a recreate that returned still counts")
	}
	// A detach names no VM: the eviction of vm2, still running, may be
	// detaching the very disk, and counts.
	det := rec.Call(4, diskmodel.Input{Kind: Det, Disk: "d"})
	if !rec.OthersRunning(det) {
		t.Errorf("for a detach, a running eviction of any VM does not count")
	}
	_, _ = other, elsewhere
}

// An OK re-attaching recreate that no operation on the name overlapped
// re-attached the disk; one that others overlapped may have left it
// detached (the disk moved meanwhile).
func TestReattachAloneReattaches(t *testing.T) {
	attached := diskmodel.State{Exists: true, VM: "vm1", CID: "disk-1"}
	in := diskmodel.Input{Kind: diskmodel.Reattach, Disk: "d", VM: "vm1"}
	if got := diskmodel.Step(attached, in, diskmodel.Output{Outcome: ok, Alone: true}); !slices.Equal(got, []diskmodel.State{attached}) {
		t.Errorf("alone: states %v, want only re-attached %v", got, attached)
	}
	if got := diskmodel.Step(attached, in, diskmodel.Output{Outcome: ok}); len(got) != 2 {
		t.Errorf("overlapped: states %v, want re-attached or detached", got)
	}

	var rec diskmodel.Recorder
	a := rec.Call(0, diskmodel.Input{Kind: P, Disk: "d", VM: "vm1"})
	rec.Return(a, diskmodel.Output{Outcome: ok, CID: "disk-1"})
	re := rec.Call(1, in)
	if !rec.Alone(re) {
		t.Errorf("a provide that returned before the recreate was called overlaps it")
	}
	b := rec.Call(2, diskmodel.Input{Kind: Det, Disk: "d"})
	if rec.Alone(re) {
		t.Errorf("a detach called during the recreate does not overlap it")
	}
	rec.Return(b, diskmodel.Output{Outcome: ok})
	if rec.Alone(re) {
		t.Errorf("a detach that returned during the recreate does not overlap it")
	}
}

// A provide is alone only if nothing on its name overlapped it, including
// a recreate of its VM called before it that answered first: the recreate
// may have moved the disk after the provide's effect. A detach names no
// VM, so an eviction of any VM overlapping it counts.
func TestAloneCountsEveryOverlap(t *testing.T) {
	var rec diskmodel.Recorder
	re := rec.Call(0, diskmodel.Input{Kind: diskmodel.Reattach, Disk: "d", VM: "vm1"})
	p := rec.Call(1, diskmodel.Input{Kind: P, Disk: "d", VM: "vm1"})
	rec.Return(re, diskmodel.Output{Outcome: diskmodel.Unknown})
	rec.Return(p, diskmodel.Output{Outcome: ok, CID: "disk-1"})
	if rec.Alone(p) {
		t.Errorf("a recreate of the provide's VM that answered first overlapped it")
	}
	ev := rec.Call(2, diskmodel.Input{Kind: diskmodel.Evict, Disk: "d", VM: "vm2"})
	p2 := rec.Call(3, diskmodel.Input{Kind: P, Disk: "d", VM: "vm1"})
	rec.Return(ev, diskmodel.Output{Outcome: ok})
	rec.Return(p2, diskmodel.Output{Outcome: ok, CID: "disk-1"})
	if !rec.Alone(p2) {
		t.Errorf("an eviction of another VM counts against a provide")
	}
	ev2 := rec.Call(2, diskmodel.Input{Kind: diskmodel.Evict, Disk: "d", VM: "vm2"})
	det := rec.Call(1, diskmodel.Input{Kind: Det, Disk: "d"})
	rec.Return(ev2, diskmodel.Output{Outcome: ok})
	rec.Return(det, diskmodel.Output{Outcome: ok})
	if rec.Alone(det) {
		t.Errorf("for a detach, an overlapping eviction of any VM does not count")
	}
}
