package simulator

import (
	"reflect"
	"testing"

	"github.com/anishathalye/porcupine"
	"pgregory.net/rapid"

	"github.com/cpilab/cpilab/simulator/diskmodel"
)

// A provide or attach promises its disk's place only when nothing else on
// the name can still take effect after it: an operation that was running
// when it was called (a hard stop of the same VM queued behind it) voids
// the promise, one that returned before it or an eviction from another VM
// does not.
func TestPromiseNeedsNoOverlappingOperation(t *testing.T) {
	ok := func(cid string) diskmodel.Output { return diskmodel.Output{Outcome: diskmodel.OK, CID: cid} }
	provide := porcupine.Operation{ClientId: 1, Input: diskmodel.Input{Kind: diskmodel.Provide, Disk: "d0", VM: "i1"}, Call: 5, Output: ok("disk-1"), Return: 8}
	evict := func(vm string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: 2, Input: diskmodel.Input{Kind: diskmodel.Evict, Disk: "d0", VM: vm}, Call: call, Output: ok(""), Return: ret}
	}
	for _, c := range []struct {
		name    string
		other   porcupine.Operation
		promise bool
	}{
		{"a hard stop of the same VM that returned before", evict("i1", 1, 4), true},
		{"a hard stop of the same VM still running at the call", evict("i1", 3, 9), false},
		{"a hard stop of the same VM called during it", evict("i1", 6, 7), true}, // called later: it is the last operation, no promise either way
		{"an eviction from another VM still running", evict("i2", 3, 9), true},
		{"a detach still running at the call", porcupine.Operation{ClientId: 3, Input: diskmodel.Input{Kind: diskmodel.Detach, Disk: "d0"}, Call: 2, Output: ok(""), Return: 6}, false},
		{"an operation on another name", porcupine.Operation{ClientId: 3, Input: diskmodel.Input{Kind: diskmodel.Detach, Disk: "d1"}, Call: 2, Output: ok(""), Return: 9}, true},
	} {
		got, has := lastOK([]porcupine.Operation{c.other, provide})["d0"]
		want := c.promise && c.other.Call < provide.Call
		if has != want || (has && got != (Promise{Instance: "i1", CID: "disk-1"})) {
			t.Errorf("%s: promise %v (%+v), want %v", c.name, has, got, want)
		}
	}
}

// A recreate that re-attached the instance's disks keeps the promise of the
// provide before it when each was called after the one before returned,
// and a recreate of another instance in between leaves it as it was (it
// cannot move the disk); one that overlapped it or a plain eviction of the
// same instance does not keep it.
func TestReattachKeepsThePromise(t *testing.T) {
	ok := func(cid string) diskmodel.Output { return diskmodel.Output{Outcome: diskmodel.OK, CID: cid} }
	provide := porcupine.Operation{ClientId: 1, Input: diskmodel.Input{Kind: diskmodel.Provide, Disk: "d0", VM: "i1"}, Call: 5, Output: ok("disk-1"), Return: 8}
	vmOp := func(kind diskmodel.OpKind, vm string, call, ret int64) porcupine.Operation {
		return porcupine.Operation{ClientId: 2, Input: diskmodel.Input{Kind: kind, Disk: "d0", VM: vm}, Call: call, Output: ok(""), Return: ret}
	}
	for _, c := range []struct {
		name       string
		after      []porcupine.Operation
		reattached int // -1: no promise
	}{
		{"one re-attaching recreate after it", []porcupine.Operation{vmOp(diskmodel.Reattach, "i1", 9, 12)}, 1},
		{"two, one after the other", []porcupine.Operation{vmOp(diskmodel.Reattach, "i1", 9, 12), vmOp(diskmodel.Reattach, "i1", 13, 15)}, 2},
		{"one called while the provide ran", []porcupine.Operation{vmOp(diskmodel.Reattach, "i1", 7, 12)}, -1},
		{"two that overlap each other", []porcupine.Operation{vmOp(diskmodel.Reattach, "i1", 9, 14), vmOp(diskmodel.Reattach, "i1", 13, 15)}, -1},
		{"a recreate of another instance (it cannot move the disk)", []porcupine.Operation{vmOp(diskmodel.Reattach, "i2", 9, 12)}, 0},
		{"a plain recreate of the instance", []porcupine.Operation{vmOp(diskmodel.Evict, "i1", 9, 12)}, -1},
	} {
		got, has := lastOK(append([]porcupine.Operation{provide}, c.after...))["d0"]
		if want := c.reattached >= 0; has != want || (has && got != (Promise{Instance: "i1", CID: "disk-1", Reattached: c.reattached})) {
			t.Errorf("%s: promise %v (%+v), want %v with %d re-attaching recreates", c.name, has, got, want, c.reattached)
		}
	}
}

// The per-name indexes the recorder keeps as operations are called and
// return answer what a scan of the whole history answers: after every
// Call and Return of generated histories, the promises kept up to date
// equal lastOK of the history, and OthersRunning equals a scan for a
// running operation on the name.
func TestPerNameIndexesAnswerAsTheWholeHistory(t *testing.T) {
	promised, others := 0, 0
	// Under -short rapid draws few histories, and a promise needs an OK
	// provide or attach with its CID that nothing overlapped: draw more
	// rounds until some held one (each round is a fresh rapid run).
	for round := 0; round < 10 && (promised == 0 || others == 0); round++ {
		checkPerNameIndexes(t, &promised, &others)
	}
	if promised == 0 || others == 0 {
		t.Fatalf("the generated histories held %d promises and %d running others: they test nothing", promised, others)
	}
}

func checkPerNameIndexes(t *testing.T, promised, others *int) {
	kinds := []diskmodel.OpKind{diskmodel.Provide, diskmodel.Attach, diskmodel.Detach, diskmodel.Delete,
		diskmodel.Create, diskmodel.Evict, diskmodel.Reattach}
	outcomes := []diskmodel.Outcome{diskmodel.OK, diskmodel.Failed, diskmodel.Unknown, diskmodel.Invalid, diskmodel.Refused}
	rapid.Check(t, func(rt *rapid.T) {
		rec := &diskmodel.Recorder{}
		var kept promises
		var running []int
		for range rapid.IntRange(1, 60).Draw(rt, "events") {
			if len(running) == 0 || rapid.Bool().Draw(rt, "call") {
				in := diskmodel.Input{Kind: rapid.SampledFrom(kinds).Draw(rt, "kind"),
					Disk: rapid.SampledFrom([]string{"d0", "d1", "d2"}).Draw(rt, "disk"),
					VM:   rapid.SampledFrom([]string{"i0", "i1"}).Draw(rt, "vm")}
				running = append(running, rec.Call(rapid.IntRange(0, 3).Draw(rt, "client"), in))
			} else {
				i := rapid.IntRange(0, len(running)-1).Draw(rt, "which")
				out := diskmodel.Output{Outcome: rapid.SampledFrom(outcomes).Draw(rt, "outcome")}
				if rapid.Bool().Draw(rt, "cid") {
					out.CID = "disk-" + rapid.StringMatching(`[ab]`).Draw(rt, "cid-name")
				}
				rec.Return(running[i], out)
				running = append(running[:i], running[i+1:]...)
			}
			h := rec.History()
			want, wantDoubt := lastOK(h), namesInDoubt(h)
			got, gotDoubt := kept.lastOK(rec)
			if !reflect.DeepEqual(got, want) {
				rt.Fatalf("kept promises %v; the whole history's %v\n%s", got, want, diskmodel.Describe(h))
			}
			if !reflect.DeepEqual(gotDoubt, wantDoubt) {
				rt.Fatalf("kept names in doubt %v; the whole history's %v\n%s", gotDoubt, wantDoubt, diskmodel.Describe(h))
			}
			*promised += len(got)
			for id := range h {
				got, want := rec.OthersRunning(id), othersRunningScan(h, id)
				if got != want {
					rt.Fatalf("OthersRunning(%d) = %v; a scan of the history says %v\n%s", id, got, want, diskmodel.Describe(h))
				}
				if got {
					*others++
				}
			}
		}
	})
}

// othersRunningScan is Recorder.OthersRunning as a scan of history h.
func othersRunningScan(h []porcupine.Operation, id int) bool {
	in := h[id].Input.(diskmodel.Input)
	for i, op := range h {
		other := op.Input.(diskmodel.Input)
		if i == id || op.Return != 0 || other.Disk != in.Disk {
			continue
		}
		if (other.Kind == diskmodel.Evict || other.Kind == diskmodel.Reattach) && other.VM != in.VM {
			continue
		}
		return true
	}
	return false
}

// A delete that failed leaves its name in doubt (the cloud may have
// deleted or detached the disk, the record kept), a detach that failed
// its attachment, and so does a provide or attach, or a VM operation of an
// instance the name was put on, that failed on an injected CPI fault, until an OK operation on the name called after it
// returned settles them; one that overlapped the failed call may have come
// before it, and a failed or refused one settles nothing.
func TestInDoubtUntilAnOKOperationAfterIt(t *testing.T) {
	op := func(kind diskmodel.OpKind, out diskmodel.Outcome, call, ret int64) porcupine.Operation {
		return porcupine.Operation{Input: diskmodel.Input{Kind: kind, Disk: "d0", VM: "i0"}, Call: call, Output: diskmodel.Output{Outcome: out}, Return: ret}
	}
	injected := func(kind diskmodel.OpKind, vm string) porcupine.Operation {
		return porcupine.Operation{Input: diskmodel.Input{Kind: kind, Disk: "d0", VM: vm}, Call: 10,
			Output: diskmodel.Output{Outcome: diskmodel.Failed, Injected: true}, Return: 20}
	}
	both := DoubtGone | DoubtDetached
	failed := op(diskmodel.Delete, diskmodel.Failed, 10, 20)
	failedDetach := op(diskmodel.Detach, diskmodel.Failed, 10, 20)
	for _, c := range []struct {
		name  string
		ops   []porcupine.Operation
		doubt Doubt
	}{
		{"no delete", []porcupine.Operation{op(diskmodel.Provide, diskmodel.OK, 1, 2)}, 0},
		{"an OK delete", []porcupine.Operation{op(diskmodel.Delete, diskmodel.OK, 1, 2)}, 0},
		{"a failed delete", []porcupine.Operation{failed}, both},
		{"a delete cut short", []porcupine.Operation{op(diskmodel.Delete, diskmodel.Unknown, 10, 20)}, both},
		{"a delete still running", []porcupine.Operation{{Input: diskmodel.Input{Kind: diskmodel.Delete, Disk: "d0"}, Call: 10}}, both},
		{"a refused delete", []porcupine.Operation{op(diskmodel.Delete, diskmodel.Refused, 10, 20)}, 0},
		{"then an OK delete", []porcupine.Operation{failed, op(diskmodel.Delete, diskmodel.OK, 21, 22)}, 0},
		{"then an OK provide", []porcupine.Operation{failed, op(diskmodel.Provide, diskmodel.OK, 21, 22)}, 0},
		{"then an OK detach", []porcupine.Operation{failed, op(diskmodel.Detach, diskmodel.OK, 21, 22)}, DoubtGone},
		{"then an OK recreate", []porcupine.Operation{failed, op(diskmodel.Reattach, diskmodel.OK, 21, 22)}, both},
		{"then a failed delete", []porcupine.Operation{failed, op(diskmodel.Delete, diskmodel.Failed, 21, 22)}, both},
		{"an OK delete overlapping it", []porcupine.Operation{failed, op(diskmodel.Delete, diskmodel.OK, 15, 25)}, both},
		{"an OK provide before it", []porcupine.Operation{op(diskmodel.Provide, diskmodel.OK, 1, 2), failed}, both},
		{"a failed detach", []porcupine.Operation{failedDetach}, DoubtDetached},
		{"a failed detach, then an OK detach", []porcupine.Operation{failedDetach, op(diskmodel.Detach, diskmodel.OK, 21, 22)}, 0},
		{"a failed detach, then an OK attach", []porcupine.Operation{failedDetach, op(diskmodel.Attach, diskmodel.OK, 21, 22)}, 0},
		{"a failed detach, then an OK detach overlapping it", []porcupine.Operation{failedDetach, op(diskmodel.Detach, diskmodel.OK, 15, 22)}, DoubtDetached},
		{"a provide failed on a CPI fault", []porcupine.Operation{injected(diskmodel.Provide, "i0")}, DoubtDetached},
		{"an attach failed on a CPI fault, then an OK detach", []porcupine.Operation{injected(diskmodel.Attach, "i0"), op(diskmodel.Detach, diskmodel.OK, 21, 22)}, 0},
		{"a provide failed on no fault", []porcupine.Operation{op(diskmodel.Provide, diskmodel.Failed, 10, 20)}, 0},
		{"a provide cut short", []porcupine.Operation{op(diskmodel.Provide, diskmodel.Unknown, 10, 20)}, DoubtDetached},
		{"a VM operation of its instance failed on a CPI fault", []porcupine.Operation{op(diskmodel.Provide, diskmodel.OK, 1, 2), injected(diskmodel.Evict, "i0")}, DoubtDetached},
		{"a VM operation of another instance failed on a CPI fault", []porcupine.Operation{op(diskmodel.Provide, diskmodel.OK, 1, 2), injected(diskmodel.Evict, "i1")}, 0},
		{"a VM operation failed on no fault", []porcupine.Operation{op(diskmodel.Provide, diskmodel.OK, 1, 2), op(diskmodel.Evict, diskmodel.Failed, 10, 20)}, 0},
	} {
		if got := nameInDoubt(c.ops); got != c.doubt {
			t.Errorf("%s: in doubt %b, want %b", c.name, got, c.doubt)
		}
	}
}
