package adversarial

import (
	"context"
	"testing"
)

// The peers area runs every attack kind (hostile answers, duplicate keys,
// DSN spellings, escape sequences, forged merge reports) with nothing
// found and every refusal clear.
func TestPeersAreaIsClean(t *testing.T) {
	rep, err := Run(context.Background(), Config{Seed: 3, Scale: ScaleShort, Areas: []string{AreaPeers}})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Rows[0]
	if r.Tried < inputsPerArea[ScaleShort][AreaPeers] || r.ErrorsExpected < r.Tried*3/5 {
		t.Fatalf("tried %d, expected errors %d: the area checked too little", r.Tried, r.ErrorsExpected)
	}
	if !r.Clean() || r.ClearErrors != r.ErrorsExpected {
		t.Fatalf("peers: %+v", r)
	}
}
