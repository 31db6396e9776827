package faults

import "testing"

// Every kind is classified, and a kind missing on either side, or on an
// unknown seam, is refused (init panics with that error).
func TestEveryKindIsClassified(t *testing.T) {
	if err := checkClassified(Kinds, kinds); err != nil {
		t.Fatal(err)
	}
	if err := checkClassified(append([]Kind{"new-kind"}, Kinds...), kinds); err == nil {
		t.Error("a listed kind without a classification was accepted")
	}
	extra := map[Kind]kindInfo{"orphan": {seam: SeamCPI}}
	for k, v := range kinds {
		extra[k] = v
	}
	if err := checkClassified(Kinds, extra); err == nil {
		t.Error("a classified kind missing from Kinds was accepted")
	}
	bad := map[Kind]kindInfo{}
	for k, v := range kinds {
		bad[k] = v
	}
	bad[CPIError] = kindInfo{seam: "nowhere"}
	if err := checkClassified(Kinds, bad); err == nil {
		t.Error("a kind on an unknown seam was accepted")
	}
}
