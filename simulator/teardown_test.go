package simulator

import (
	"slices"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/simulator/diskmodel"
)

// A deployment's delete is recorded, for each disk name, as an eviction
// from every instance and a delete, so that a provide to an instance it had
// not reached yet may linearize between them; the run ends clean, with no
// record and no IaaS disk left.
func TestDeploymentDeleteIsEvictionsThenADelete(t *testing.T) {
	ops := controlOps(t, "c0 provide disk=d0 vm=0", "c0 provide disk=d1 vm=1", "c1 delete-deployment")
	o := Simulate(SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true})
	if o.Err != nil {
		t.Fatalf("the reference Director: %v\n%s", o.Err, strings.Join(o.Log, "\n"))
	}
	kinds := map[string][]string{}
	for _, op := range o.History {
		if op.ClientId != 1 {
			continue
		}
		in := op.Input.(diskmodel.Input)
		kinds[in.Disk] = append(kinds[in.Disk], in.String())
	}
	for _, name := range []string{"d0", "d1"} {
		want := []string{"evict(" + name + ", i0)", "evict(" + name + ", i1)", "evict(" + name + ", i2)", "delete(" + name + ")"}
		if !slices.Equal(kinds[name], want) {
			t.Errorf("%s: recorded %v, want %v", name, kinds[name], want)
		}
	}
}

// One seed in eight ends by deleting the deployment; the rest never do.
func TestOneRunInEightEndsWithTheDeploymentsDelete(t *testing.T) {
	ends := 0
	for s := Seed(1); s <= 400; s++ {
		ops, err := GenerateOps(WorkloadConfig{}, Derive(s).Workload, 50, 3)
		if err != nil {
			t.Fatal(err)
		}
		for i, o := range ops {
			if o.Kind == OpDeleteDeployment && i != len(ops)-1 {
				t.Fatalf("seed %s deletes the deployment at step %d of %d", s, i, len(ops))
			}
		}
		if ops[len(ops)-1].Kind == OpDeleteDeployment {
			ends++
		}
	}
	if ends < 25 || ends > 75 {
		t.Fatalf("%d of 400 seeds end with the deployment's delete, want about 50", ends)
	}
}
