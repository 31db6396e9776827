package simulator

import (
	"strings"
	"testing"
)

// Each named shape turns on its feature; the mixed shape covers every
// feature and every client count from 1 to 16 over a few dozen seeds; an
// explicit client count wins; an unknown name is refused by name.
func TestShapesDrawTheirFeatures(t *testing.T) {
	for name, has := range map[string]func(Shape) bool{
		ShapeLight: func(s Shape) bool {
			return s.Clients == 3 && s.NoWait == 0 && s.Burst == 0 && s.SlowCPI == 0 && s.DiskWorkers == 0
		},
		ShapeManyClients: func(s Shape) bool { return s.Clients == 16 },
		ShapeNoWait:      func(s Shape) bool { return s.NoWait > 0 },
		ShapeBurst:       func(s Shape) bool { return s.Burst > 0 },
		ShapeSlowCPI:     func(s Shape) bool { return s.SlowCPI > 0 && s.LockLease > 0 },
		ShapeDeepQueue:   func(s Shape) bool { return s.DiskWorkers == 1 && s.NoWait > 0 && s.Burst > 0 },
		ShapeVMOps:       func(s Shape) bool { return s.VMOps && s.Burst > 0 && s.Reattach },
	} {
		s, err := DrawShape(WorkloadConfig{Shape: name}, 1)
		if err != nil || !has(s) {
			t.Errorf("shape %s drew %v (%v)", name, s, err)
		}
	}
	seen := map[string]bool{}
	clients := map[int]bool{}
	for seed := uint64(1); seed <= 200; seed++ {
		s, err := DrawShape(WorkloadConfig{}, seed)
		if err != nil {
			t.Fatal(err)
		}
		clients[s.Clients] = true
		seen["no-wait"] = seen["no-wait"] || s.NoWait > 0
		seen["burst"] = seen["burst"] || s.Burst > 0
		seen["slow-cpi"] = seen["slow-cpi"] || s.SlowCPI > 0
		seen["deep-queue"] = seen["deep-queue"] || s.DiskWorkers == 1
		seen["vm-ops"] = seen["vm-ops"] || s.VMOps
		seen["light"] = seen["light"] || (s.NoWait == 0 && s.Burst == 0 && s.SlowCPI == 0)
		seen["reattach"] = seen["reattach"] || s.Reattach
	}
	if len(seen) != 7 || len(clients) != 16 {
		t.Errorf("200 mixed seeds covered %v and %d client counts, want every feature and 16", seen, len(clients))
	}
	if s, _ := DrawShape(WorkloadConfig{Shape: ShapeManyClients, Clients: 2}, 1); s.Clients != 2 {
		t.Errorf("--clients 2 under many-clients: %d clients", s.Clients)
	}
	if _, err := DrawShape(WorkloadConfig{Shape: "tape"}, 1); err == nil || !strings.Contains(err.Error(), `"tape"`) {
		t.Errorf("unknown shape: %v", err)
	}
}

// A burst's operations share one instance and one disk name, and ops that
// do not wait parse back from their text form.
func TestBurstsAndNoWaitOps(t *testing.T) {
	ops, err := GenerateOps(WorkloadConfig{Shape: ShapeDeepQueue}, 7, 200, 3)
	if err != nil {
		t.Fatal(err)
	}
	noWait, sameName := 0, 0
	for i, o := range ops {
		if o.NoWait {
			noWait++
		}
		if i > 0 && o.Kind.hasDisk() && ops[i-1].Kind.hasDisk() && o.Disk == ops[i-1].Disk && o.VM == ops[i-1].VM && o.Client != ops[i-1].Client {
			sameName++
		}
		back, err := ParseOp(o.String())
		if err != nil || back.String() != o.String() || back.NoWait != o.NoWait {
			t.Fatalf("op %q parses back as %+v (%v), want %+v", o, back, err, o)
		}
	}
	if noWait == 0 || sameName < 10 {
		t.Errorf("deep-queue: %d ops without wait and %d burst neighbours in 200 ops", noWait, sameName)
	}
}

// The mixed workload reaches a re-attaching recreate of an instance that
// holds two disks nothing else moves, in about a quarter of its seeds: one
// client starts an instance, provides two names no other operation names
// to it, then recreates it re-attaching them, waiting for each. Without it a Director
// that re-attaches only the first disk survived the default sweep, as
// other operations on the names nearly always overlapped the recreate.
func TestMixedWorkloadRecreatesAnInstanceWithTwoDisksOfItsOwn(t *testing.T) {
	const seeds, steps, instances = 200, 200, 3
	with := 0
	for seed := uint64(1); seed <= seeds; seed++ {
		ops, err := GenerateOps(WorkloadConfig{}, seed, steps, instances)
		if err != nil {
			t.Fatal(err)
		}
		if len(ops) != steps {
			t.Fatalf("seed %d: %d ops, want %d", seed, len(ops), steps)
		}
		users := map[string][]int{}
		for i, o := range ops {
			if o.Kind.hasDisk() {
				users[o.Disk] = append(users[o.Disk], i)
			}
		}
		a, b := users["d3"], users["d4"]
		if len(a) == 0 && len(b) == 0 {
			continue
		}
		with++
		if len(a) != 1 || len(b) != 1 || b[0] != a[0]+1 || a[0] < 1 || a[0]+2 >= len(ops) {
			t.Fatalf("seed %d: d3 named by ops %v, d4 by %v; want one provide each, one after the other", seed, a, b)
		}
		st, pa, pb, re := ops[a[0]-1], ops[a[0]], ops[b[0]], ops[a[0]+2]
		if st.Kind != OpStart || pa.Kind != OpProvide || pb.Kind != OpProvide || re.Kind != OpRecreate || !re.Reattach ||
			st.Client != pa.Client || pa.Client != pb.Client || pb.Client != re.Client || st.VM != pa.VM || pa.VM != pb.VM || pb.VM != re.VM ||
			st.NoWait || pa.NoWait || pb.NoWait || re.NoWait {
			t.Fatalf("seed %d: %v; %v; %v; %v: want one client's start of an instance, provides of d3 and d4 to it, then its re-attaching recreate, each waited for",
				seed, st, pa, pb, re)
		}
	}
	if with < seeds/8 || with > seeds/2 {
		t.Fatalf("%d of %d seeds recreate an instance with two disks of its own, want about a quarter", with, seeds)
	}
}
