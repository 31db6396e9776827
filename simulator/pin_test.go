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
	{"reference", 1, 11606, 0xac4390387d2a5f9e, "PASS"},
	{"reference", 2, 13357, 0xcd0341fc4141ba3f, "PASS"},
	{"reference", 3, 11149, 0x29a343159256de08, "PASS"},
	{"reference", 7, 10870, 0x936b2124e07ed8ca, "PASS"},
	{"reference", 42, 7715, 0xb52da9c4865b2ffa, "PASS"},
	{"upstream:a", 1, 11317, 0x5efaf4a59564185, "invariant \"no-delete-disk-of-attached-disk\" violated after step 54 (seed 1): delete_disk(disk-aeed6e3e-7b89-4a0b-8594-a42167cfa325) called while the IaaS has it attached to vm-6b6f94a9-6d00-4fff-acf9-04ffa882aba8"},
	{"upstream:a", 2, 10604, 0xce3f6c4990ae6ec1, "invariant \"no-attach-of-disk-attached-elsewhere\" violated after step 47 (seed 2): attach_disk(vm-e72a37ba-0106-4cdb-808b-edb6c3631833, disk-50ae46a0-c530-4c89-9356-391fe15f32a6) called while the IaaS has disk-50ae46a0-c530-4c89-9356-391fe15f32a6 attached to vm-180d3d9f-aa5c-41e7-a362-0766d627b4c6"},
	{"upstream:a", 3, 11237, 0x5960876ebe5029d7, "invariant \"no-attach-of-disk-attached-elsewhere\" violated after step 128 (seed 3): attach_disk(vm-fe56e2a3-de74-44d8-958e-0ad85e8195ea, disk-d2073ec1-9524-4ee6-8421-e74975e33bb3) called while the IaaS has disk-d2073ec1-9524-4ee6-8421-e74975e33bb3 attached to vm-f3d037ad-033c-4d14-b278-cd23281ce04d"},
	{"upstream:a", 7, 10005, 0x3b1b3b1b6b38a52a, "PASS"},
	{"upstream:a", 42, 8757, 0xa72b01d836ee6a15, "PASS"},
	{"upstream:c", 1, 10749, 0x141b9d2a31b081f6, "invariant \"one-disk-call-per-vm\" violated after step 53 (seed 1): attach_disk(vm-6b6f94a9-6d00-4fff-acf9-04ffa882aba8, disk-4e4db6cf-5ec4-4063-930a-484bf39d17cc) called while detach_disk(vm-6b6f94a9-6d00-4fff-acf9-04ffa882aba8, disk-689d5197-77fd-4643-aa17-a205d53783f7), made 0s before, was still in flight on the VM"},
	{"upstream:c", 2, 11825, 0xa9ec38940991f0e5, "invariant \"one-disk-call-per-vm\" violated after step 179 (seed 2): attach_disk(vm-7eb0554b-1f05-4e97-990b-dd66e5d0fdff, disk-6a7e8612-3519-4e1c-9f0a-4c1013c8d08e) called while detach_disk(vm-7eb0554b-1f05-4e97-990b-dd66e5d0fdff, disk-02f9d68d-e8ff-4616-b4ea-46048a2c8f53), made 0s before, was still in flight on the VM"},
	{"upstream:c", 3, 12212, 0xa73c26f2d8bbb73f, "PASS"},
	{"upstream:c", 7, 9721, 0x2345c960224b9a60, "invariant \"one-disk-call-per-vm\" violated after step 0 (seed 7): detach_disk(vm-f71f1a3f-d9df-47e3-b965-d38472f8ab84, disk-945a438b-1738-4ef0-97ce-cc24a6419550) called while detach_disk(vm-f71f1a3f-d9df-47e3-b965-d38472f8ab84, disk-945a438b-1738-4ef0-97ce-cc24a6419550), made 0s before, was still in flight on the VM"},
	{"upstream:c", 42, 10569, 0x8801ea179f900007, "invariant \"no-delete-vm-with-attached-dynamic-disk\" violated after step 1 (seed 42): delete_vm(vm-09c980d7-3bca-4cdb-b40e-11d48c33cfd7) called while the IaaS has disk-d9f1ac6b-74a8-4d9d-a408-15f7e0f96bc1 attached to it"},
	{"upstream:e", 1, 10443, 0xbb7ac8a7823182a8, "invariant \"no-delete-disk-of-attached-disk\" violated after step 123 (seed 1): delete_disk(disk-74b8fccc-471e-476d-9252-28f139a3dcf3) called while the IaaS has it attached to vm-aa64a6a0-c4a4-4ed0-9b31-5f54f8c5386a"},
	{"upstream:e", 2, 10720, 0xbef4b9b9ec624d97, "invariant \"no-delete-disk-of-attached-disk\" violated after step 6 (seed 2): delete_disk(disk-720ccfb5-6100-49ce-9a5d-a461e0811333) called while the IaaS has it attached to vm-992696dc-a2bd-4da3-8688-b0377e256ae5"},
	{"upstream:e", 3, 11427, 0x777b14d5951256e7, "invariant \"no-delete-disk-of-attached-disk\" violated after step 12 (seed 3): delete_disk(disk-dd27ca5c-7258-4936-8b8e-c2daf3a67d2d) called while the IaaS has it attached to vm-5fac9f8c-d9d5-45f8-a168-febcba1a5bb3"},
	{"upstream:e", 7, 10681, 0xe7ef5af7dd91c21b, "invariant \"no-delete-disk-of-attached-disk\" violated after step 25 (seed 7): delete_disk(disk-15b4e40a-b3a8-4f25-9bcb-ca988573e246) called while the IaaS has it attached to vm-b2744230-1677-41c7-b2e3-a3983aba5595"},
	{"upstream:e", 42, 7808, 0x1ee3e99fa7783bcd, "invariant \"no-delete-disk-of-attached-disk\" violated after step 9 (seed 42): delete_disk(disk-05049a53-6fee-4d8a-a2a7-0634945374ce) called while the IaaS has it attached to vm-112126bb-7f18-4871-851a-10ccaf47f7be"},
	{"upstream:f", 1, 11227, 0xa72044b7653ffa9f, "PASS"},
	{"upstream:f", 2, 11555, 0x4bd68f3454abc6ca, "PASS"},
	{"upstream:f", 3, 8116, 0xecd83ab6289c7169, "PASS"},
	{"upstream:f", 7, 9813, 0x47d27011bcfa285c, "PASS"},
	{"upstream:f", 42, 8379, 0x1739977c7fe452da, "PASS"},
	{"upstream:h", 1, 10105, 0x39b3c97af612d4a, "invariant \"agent-links-match-iaas\" violated after step 189 (seed 1): provide of d0 (disk-4e4db6cf-5ec4-4063-930a-484bf39d17cc) succeeded and the IaaS has the disk attached to vm-aa64a6a0-c4a4-4ed0-9b31-5f54f8c5386a, but its agent has no symlink"},
	{"upstream:h", 2, 11452, 0x6d5b139ea1332a9d, "PASS"},
	{"upstream:h", 3, 12107, 0x3954999fee4ad9e7, "PASS"},
	{"upstream:h", 7, 11079, 0x577354631e4a8547, "PASS"},
	{"upstream:h", 42, 8490, 0x7f52c16f587a1854, "PASS"},
	{"upstream:i", 1, 11436, 0x2b206cd7b9156240, "invariant \"task-liveness\" violated at quiescence 200 (seed 1): task 4 (c4 detach disk=d1 delay=13ms wait=no) still queued; task 5 (c3 attach disk=d1 vm=0 delay=56ms wait=no) still queued; task 7 (c4 provide disk=d2 vm=1 delay=78ms) still queued; and 162 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
	{"upstream:i", 2, 10820, 0x7d4a716a9e980662, "invariant \"every-failure-explained\" violated after step 68 (seed 2): task 77 (c5 restart vm=2 delay=3.1s) failed: \"mbus: timed out after 10s waiting for agent 7eb92cae-d1e8-45ef-9079-01df2a91958c to answer stop\"; no fault was on its path, the request was valid, and the error is no documented refusal; it overlapped task 4 (c11 provide disk=d2 vm=2 delay=67ms), task 5 (c5 provide disk=d1 vm=0 delay=209ms), task 6 (c7 detach disk=d2 delay=548ms), task 8 (c9 provide disk=d0 vm=0 delay=879ms), task 10 (c6 attach disk=d2 vm=1 delay=1.258s), task 11 (c1 provide disk=d1 vm=0 delay=1.428s), task 12 (c3 provide disk=d2 vm=2 delay=1.516s), task 13 (c2 provide disk=d1 vm=0 delay=2.396s), task 15 (c8 detach disk=d0 delay=2.997s), task 16 (c4 delete disk=d2 delay=3.622s), task 17 (c13 delete disk=d2 delay=3.745s), task 18 (c12 detach disk=d0 delay=2.404s), task 19 (c0 detach disk=d2 delay=4.26s), task 22 (c10 attach disk=d0 vm=2 delay=1.576s), task 24 (c11 provide disk=d2 vm=2 delay=1.285s), task 25 (c7 provide disk=d2 vm=2 delay=2.463s), task 26 (c2 delete disk=d2 delay=1.689s), task 29 (c9 provide disk=d1 vm=2 delay=3.054s), task 30 (c5 detach disk=d2 delay=4.313s), task 31 (c1 provide disk=d1 vm=1 delay=3.189s), task 32 (c0 provide disk=d2 vm=1 delay=892ms), task 33 (c8 provide disk=d2 vm=1 delay=2.731s), task 34 (c12 provide disk=d2 vm=1 delay=1.927s), task 37 (c13 detach disk=d0 delay=3.341s), task 38 (c6 delete disk=d0 delay=388ms), task 39 (c10 detach disk=d1 delay=3.92s), task 40 (c4 detach disk=d0 delay=2.051s), task 41 (c3 provide disk=d0 vm=1 delay=4.872s), task 42 (c5 provide disk=d0 vm=0 delay=17ms), task 43 (c11 detach disk=d1 delay=3.418s), task 44 (c0 delete disk=d1 delay=900ms), task 45 (c9 detach disk=d2 delay=2.003s), task 46 (c2 detach disk=d0 delay=2.709s), task 47 (c7 provide disk=d0 vm=1 delay=4.211s), task 48 (c1 provide disk=d2 vm=1 delay=2.971s), task 49 (c12 provide disk=d2 vm=1 delay=3.013s), task 50 (c8 delete disk=d1 delay=4.311s), task 51 (c13 detach disk=d2 delay=3.907s), task 52 (c6 provide disk=d2 vm=1 delay=4.137s), task 53 (c10 provide disk=d2 vm=2 delay=4.544s), task 54 (c4 provide disk=d1 vm=0 delay=3.198s), task 55 (c3 provide disk=d2 vm=1 delay=3.938s), task 57 (c11 provide disk=d0 vm=1 delay=2.555s), task 58 (c0 detach disk=d1 delay=1.494s), task 59 (c5 detach disk=d1 delay=1.988s), task 60 (c9 create disk=d2 vm=0 delay=3.161s), task 61 (c8 delete disk=d1 delay=166ms), task 64 (c2 detach disk=d2 delay=4.199s), task 66 (c13 detach disk=d1 delay=1.038s), task 67 (c1 create disk=d0 vm=0 delay=2.84s), task 68 (c12 create disk=d1 vm=2 delay=3.229s), c6 detach disk=d0 delay=3.886s, c7 provide disk=d2 vm=2 delay=2.162s, c4 provide disk=d0 vm=1 delay=2.814s, c10 detach disk=d0 delay=3.26s, c3 detach disk=d0 delay=2.584s, c11 provide disk=d1 vm=0 delay=2.417s, c13 create disk=d2 vm=1 delay=123ms, task 79 (c8 delete-vm vm=1 delay=2.945s), c0 delete-vm vm=2 delay=3.078s, c2 start vm=1 delay=3.15s, c9 delete disk=d0 delay=4.529s, c12 attach disk=d1 vm=2 delay=783ms, c8 stop-hard vm=0 delay=3.422s, c1 create disk=d0 vm=2 delay=3.766s"},
	{"upstream:i", 3, 10674, 0xd41295309adde682, "invariant \"task-liveness\" violated at quiescence 200 (seed 3): task 4 (c7 provide disk=d2 vm=0 delay=60ms) still queued; task 5 (c9 delete disk=d1 delay=74ms) still queued; task 6 (c8 detach disk=d2 delay=75ms) still queued; and 174 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
	{"upstream:i", 7, 11132, 0x2d2e112e213b14c8, "invariant \"task-liveness\" violated at quiescence 200 (seed 7): task 4 (c9 provide disk=d0 vm=2 delay=48ms wait=no) still queued; task 5 (c7 provide disk=d1 vm=1 delay=127ms) still queued; task 6 (c1 detach disk=d0 delay=130ms wait=no) still queued; and 164 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
	{"upstream:i", 42, 10946, 0x2d50887c9de8b514, "invariant \"task-liveness\" violated at quiescence 200 (seed 42): task 4 (c3 provide disk=d2 vm=0 delay=16ms wait=no) still queued; task 5 (c3 provide disk=d1 vm=2 delay=17ms) still queued; task 6 (c0 detach disk=d2 delay=66ms) still queued; and 153 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
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
// no trace and no finding.
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
	for _, want := range pinnedRuns {
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
