package faults

import (
	"slices"
	"testing"
)

// Every kind is classified, and a kind missing on either side, or on an
// unknown seam, is refused (init panics with that error).
func TestEveryKindIsClassified(t *testing.T) {
	all := slices.Concat(Kinds, StorageKinds)
	if err := checkClassified(all, kinds); err != nil {
		t.Fatal(err)
	}
	if err := checkClassified(Kinds, kinds); err == nil {
		t.Error("the storage-sizing kinds were classified without being listed, and accepted")
	}
	for _, k := range StorageKinds {
		if k.Valid() || !k.Storage() || k.Seam() != SeamClock {
			t.Errorf("%s: Valid %v, Storage %v, seam %s: want a storage-sizing kind on the clock seam, not one the disk simulation injects", k, k.Valid(), k.Storage(), k.Seam())
		}
	}
	for _, k := range Kinds {
		if !k.Valid() || k.Storage() {
			t.Errorf("%s: Valid %v, Storage %v: want a kind the disk simulation injects", k, k.Valid(), k.Storage())
		}
	}
	if err := checkClassified(append([]Kind{"new-kind"}, all...), kinds); err == nil {
		t.Error("a listed kind without a classification was accepted")
	}
	extra := map[Kind]kindInfo{"orphan": {seam: SeamCPI}}
	for k, v := range kinds {
		extra[k] = v
	}
	if err := checkClassified(all, extra); err == nil {
		t.Error("a classified kind missing from Kinds was accepted")
	}
	bad := map[Kind]kindInfo{}
	for k, v := range kinds {
		bad[k] = v
	}
	bad[CPIError] = kindInfo{seam: "nowhere"}
	if err := checkClassified(all, bad); err == nil {
		t.Error("a kind on an unknown seam was accepted")
	}
}

// The dynamic-disk simulation's specs and schedules refuse the storage-sizing
// kinds: nothing counts their seam there, so such a fault would never fire.
func TestDiskSpecsRefuseStorageKinds(t *testing.T) {
	for _, k := range StorageKinds {
		if _, err := ParseSpec(string(k) + "=0.1"); err == nil {
			t.Errorf("ParseSpec accepted %s", k)
		}
		if _, err := ParseFault(string(k) + "@3 d=1m"); err == nil {
			t.Errorf("ParseFault accepted %s", k)
		}
	}
}
