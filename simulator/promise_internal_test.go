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
