package simulator_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/cpilab/cpilab/simulator"
	"github.com/cpilab/cpilab/simulator/faults"
)

// pinnedRun is one seed's recorded outcome: its step count, trace hash and
// verdict (PASS or the violation's first line).
type pinnedRun struct {
	profile string
	seed    simulator.Seed
	steps   int64
	hash    uint64
	verdict string
}

// pinnedRuns were recorded from the tree before the simulator was made faster
// (and again when the workload and the checks changed what a run does); a
// change that only makes it faster leaves every one as it is.
var pinnedRuns = []pinnedRun{
	{"reference", 1, 8919, 0xb5d05524ca0bfa36, "PASS"},
	{"reference", 2, 8991, 0xa5d1343ee8e41c9b, "PASS"},
	{"reference", 3, 10375, 0x855cc1e70c3606b8, "PASS"},
	{"reference", 7, 12138, 0x948b7afa18c11ecd, "PASS"},
	{"reference", 42, 7904, 0x8b48941a7e0fcc17, "PASS"},
	{"upstream:a", 1, 10194, 0xe389414172f55e9e, "PASS"},
	{"upstream:a", 2, 7948, 0x3678f34fdea1456e, "invariant \"no-attach-of-disk-attached-elsewhere\" violated after step 46 (seed 2): attach_disk(vm-487a3611-f2d8-4e89-84d5-f6806cfc62c7, disk-e8906119-6fdc-422e-ba4a-7c0bbe3fd0a0) called while the IaaS has disk-e8906119-6fdc-422e-ba4a-7c0bbe3fd0a0 attached to vm-992696dc-a2bd-4da3-8688-b0377e256ae5"},
	{"upstream:a", 3, 9902, 0xe3d8065984b2d8e6, "invariant \"no-attach-of-disk-attached-elsewhere\" violated after step 149 (seed 3): attach_disk(vm-07434a68-1250-4c02-bfd0-027fb445b05c, disk-af4d1018-dec9-490e-b282-652b28fe49ed) called while the IaaS has disk-af4d1018-dec9-490e-b282-652b28fe49ed attached to vm-51ccde14-991b-45b1-b22c-8a629ca44f8b"},
	{"upstream:a", 7, 10644, 0xd3bf128bd85d4057, "invariant \"no-delete-disk-of-attached-disk\" violated after step 13 (seed 7): delete_disk(disk-ddcf34c9-757a-413c-b609-1c695f1fc0b1) called while the IaaS has it attached to vm-4e18bf41-7a30-4508-b2fd-7833f913b9bd"},
	{"upstream:a", 42, 8065, 0x49b69f87a73f7691, "PASS"},
	{"upstream:c", 1, 10889, 0x30beea55a8df2a67, "invariant \"no-delete-vm-with-attached-dynamic-disk\" violated after step 111 (seed 1): delete_vm(vm-60d61974-9163-4b16-a4cb-a6a8e236adfc) called while the IaaS has disk-4e4db6cf-5ec4-4063-930a-484bf39d17cc attached to it"},
	{"upstream:c", 2, 10979, 0xd46a2a8b6fcd6688, "invariant \"no-delete-vm-with-attached-dynamic-disk\" violated after step 87 (seed 2): delete_vm(vm-180d3d9f-aa5c-41e7-a362-0766d627b4c6) called while the IaaS has disk-e72a37ba-0106-4cdb-808b-edb6c3631833 attached to it"},
	{"upstream:c", 3, 12818, 0xcf626f71eb3f481c, "invariant \"no-delete-vm-with-attached-dynamic-disk\" violated after step 130 (seed 3): delete_vm(vm-d2073ec1-9524-4ee6-8421-e74975e33bb3) called while the IaaS has disk-af4d1018-dec9-490e-b282-652b28fe49ed attached to it"},
	{"upstream:c", 7, 10532, 0x3632af22a0b05e4d, "invariant \"no-delete-vm-with-attached-dynamic-disk\" violated after step 95 (seed 7): delete_vm(vm-9a757763-e23f-436a-8053-f0d819b52181) called while the IaaS has disk-8be68f41-2236-452d-9dc2-1922c79834c9 attached to it"},
	{"upstream:c", 42, 6372, 0x49e0cd5f0b6aa9a8, "PASS"},
	{"upstream:e", 1, 10566, 0xcc1aebb66de89db8, "invariant \"no-delete-disk-of-attached-disk\" violated after step 199 (seed 1): delete_disk(disk-4cf120ba-e8d6-499a-b386-10b09ee3974e) called while the IaaS has it attached to vm-8d653a32-ee7c-49cf-8e42-e38deecb467e"},
	{"upstream:e", 2, 10974, 0x153619d5f7a34bdd, "invariant \"no-delete-disk-of-attached-disk\" violated after step 29 (seed 2): delete_disk(disk-96da979c-42c5-42ea-ad40-d54f2bec4579) called while the IaaS has it attached to vm-992696dc-a2bd-4da3-8688-b0377e256ae5"},
	{"upstream:e", 3, 10549, 0x689e90a95a12c5c4, "invariant \"no-delete-disk-of-attached-disk\" violated after step 12 (seed 3): delete_disk(disk-dd27ca5c-7258-4936-8b8e-c2daf3a67d2d) called while the IaaS has it attached to vm-5fac9f8c-d9d5-45f8-a168-febcba1a5bb3"},
	{"upstream:e", 7, 9905, 0xa224d428b00933fc, "invariant \"no-delete-disk-of-attached-disk\" violated after step 24 (seed 7): delete_disk(disk-7a0f3923-6122-455f-8c8f-d1500f280d7f) called while the IaaS has it attached to vm-4e18bf41-7a30-4508-b2fd-7833f913b9bd"},
	{"upstream:e", 42, 9792, 0x520a88dc48f77542, "invariant \"no-delete-disk-of-attached-disk\" violated after step 9 (seed 42): delete_disk(disk-05049a53-6fee-4d8a-a2a7-0634945374ce) called while the IaaS has it attached to vm-112126bb-7f18-4871-851a-10ccaf47f7be"},
	{"upstream:f", 1, 11544, 0x6f416a31bce553e9, "PASS"},
	{"upstream:f", 2, 11206, 0x75139b5bc5f6cb0e, "PASS"},
	{"upstream:f", 3, 11206, 0xf34f677939bf8e44, "PASS"},
	{"upstream:f", 7, 11861, 0xeb2810523a9cef1e, "PASS"},
	{"upstream:f", 42, 10050, 0x4a28e3e53d626c1c, "PASS"},
	{"upstream:h", 1, 10639, 0xd0b1f0e17c530a49, "invariant \"agent-links-match-iaas\" violated after step 195 (seed 1): provide of d2 (disk-7b12e731-ec6e-43ba-aa58-f53e90c6ebb7) succeeded and the IaaS has the disk attached to vm-8d653a32-ee7c-49cf-8e42-e38deecb467e, but its agent has no symlink"},
	{"upstream:h", 2, 10821, 0xdcda5309f66392f9, "PASS"},
	{"upstream:h", 3, 9970, 0x6f2e7c0051b457f7, "PASS"},
	{"upstream:h", 7, 12099, 0x7e7ced58abcf040d, "PASS"},
	{"upstream:h", 42, 7868, 0xa85976351e5c085c, "invariant \"agent-links-match-iaas\" violated after step 113 (seed 42): provide of d2 (disk-d1947787-526a-4bf3-8f56-b3270bd1a142) succeeded and the IaaS has the disk attached to vm-7b4f4d03-c5a9-46cb-8684-207a304f5e14, but its agent has no symlink"},
	{"upstream:i", 1, 11429, 0xc15305408ce986fd, "invariant \"task-liveness\" violated at quiescence 200 (seed 1): task 4 (c4 detach disk=d1 delay=13ms wait=no) still queued; task 5 (c3 attach disk=d1 vm=0 delay=56ms wait=no) still queued; task 7 (c4 provide disk=d2 vm=1 delay=78ms) still queued; and 162 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
	{"upstream:i", 2, 10712, 0x93ed4f1aa29b982f, "invariant \"task-liveness\" violated at quiescence 200 (seed 2): task 4 (c11 provide disk=d2 vm=2 delay=67ms) still queued; task 5 (c5 provide disk=d1 vm=0 delay=209ms) still queued; task 6 (c7 detach disk=d2 delay=548ms) still queued; and 152 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
	{"upstream:i", 3, 10674, 0xd41295309adde682, "invariant \"task-liveness\" violated at quiescence 200 (seed 3): task 4 (c7 provide disk=d2 vm=0 delay=60ms) still queued; task 5 (c9 delete disk=d1 delay=74ms) still queued; task 6 (c8 detach disk=d2 delay=75ms) still queued; and 174 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
	{"upstream:i", 7, 10965, 0x208991e02428366, "invariant \"task-liveness\" violated at quiescence 200 (seed 7): task 4 (c9 provide disk=d0 vm=2 delay=48ms wait=no) still queued; task 5 (c7 provide disk=d1 vm=1 delay=127ms) still queued; task 6 (c1 detach disk=d0 delay=130ms wait=no) still queued; and 162 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
	{"upstream:i", 42, 10968, 0x65856bcac274f4d1, "invariant \"task-liveness\" violated at quiescence 200 (seed 42): task 4 (c3 provide disk=d2 vm=0 delay=16ms wait=no) still queued; task 5 (c3 provide disk=d1 vm=2 delay=17ms) still queued; task 6 (c0 detach disk=d2 delay=66ms) still queued; and 153 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
}

func pinVerdict(err error) string {
	if err == nil {
		return "PASS"
	}
	s := err.Error()
	for i := range len(s) {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}

func runPinned(t *testing.T, profile string, seed simulator.Seed) pinnedRun {
	t.Helper()
	spec, err := faults.ParseSpec("default")
	if err != nil {
		t.Fatal(err)
	}
	rep := simulator.Simulate(simulator.SimConfig{RunConfig: simulator.RunConfig{Seed: seed, Steps: 200, Faults: spec, Profile: profile}}).Report()
	return pinnedRun{profile: profile, seed: seed, steps: rep.Steps, hash: rep.TraceHash, verdict: pinVerdict(rep.Err)}
}

// TestPinnedTraces: a few seeds of the default sweep under the reference
// profile and under upstream race profiles give the steps, trace hash and
// verdict recorded before the simulator's speed work: being faster changes
// no trace and no finding. -short checks one seed of each profile.
func TestPinnedTraces(t *testing.T) {
	if os.Getenv("CPILAB_PIN_RECORD") != "" {
		for _, p := range []string{"reference", "upstream:a", "upstream:c", "upstream:e", "upstream:f", "upstream:h", "upstream:i"} {
			for _, s := range []simulator.Seed{1, 2, 3, 7, 42} {
				r := runPinned(t, p, s)
				fmt.Printf("\t{%q, %d, %d, %#x, %q},\n", r.profile, r.seed, r.steps, r.hash, r.verdict)
			}
		}
		return
	}
	if len(pinnedRuns) == 0 {
		t.Fatal("no pinned runs")
	}
	seen := map[string]bool{}
	for _, want := range pinnedRuns {
		// Under -short (make test's race step) each profile's first pinned
		// seed: the race detector needs the code paths, not all 35 runs
		// (about 5 s each under -race); the unit step checks them all.
		if testing.Short() && seen[want.profile] {
			continue
		}
		seen[want.profile] = true
		t.Run(fmt.Sprintf("%s/%d", want.profile, want.seed), func(t *testing.T) {
			t.Parallel()
			got := runPinned(t, want.profile, want.seed)
			if got != want {
				t.Errorf("seed %d under %s: got steps %d, hash %#x, %q; pinned steps %d, hash %#x, %q",
					want.seed, want.profile, got.steps, got.hash, got.verdict, want.steps, want.hash, want.verdict)
			}
		})
	}
}
