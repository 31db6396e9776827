package simulator

import (
	"testing"

	"github.com/anishathalye/porcupine"

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
// provide before it when each was called after the one before returned;
// one that overlapped it, a recreate of another instance in between, or a
// plain eviction of the same instance does not.
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
		{"a recreate of another instance", []porcupine.Operation{vmOp(diskmodel.Reattach, "i2", 9, 12)}, -1},
		{"a plain recreate of the instance", []porcupine.Operation{vmOp(diskmodel.Evict, "i1", 9, 12)}, -1},
	} {
		got, has := lastOK(append([]porcupine.Operation{provide}, c.after...))["d0"]
		if want := c.reattached >= 0; has != want || (has && got != (Promise{Instance: "i1", CID: "disk-1", Reattached: c.reattached})) {
			t.Errorf("%s: promise %v (%+v), want %v with %d re-attaching recreates", c.name, has, got, want, c.reattached)
		}
	}
}
