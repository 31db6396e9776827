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
	{"reference", 1, 12998, 0xab0a3b1f08196c3, "PASS"},
	{"reference", 2, 9749, 0x92c67171cd640a26, "PASS"},
	{"reference", 3, 11052, 0xeaa8a818289cb6ed, "PASS"},
	{"reference", 7, 12010, 0x831d1d2f74e52568, "PASS"},
	{"reference", 42, 7213, 0x2a5587039df9eaee, "PASS"},
	{"upstream:a", 1, 11990, 0x25ebfa30b79afe50, "invariant \"every-failure-explained\" violated after step 37 (seed 1): task 49 (c4 attach disk=d2 vm=2 delay=4.704s meta=81) failed: \"attach_disk disk-aeed6e3e-7b89-4a0b-8594-a42167cfa325 to vm-6b6f94a9-6d00-4fff-acf9-04ffa882aba8: cpi attach_disk (request_id cpi-000022): Bosh::Clouds::DiskNotFound: disk \\\"disk-aeed6e3e-7b89-4a0b-8594-a42167cfa325\\\" not found\"; no fault was on its path, the request was valid, and the error is no documented refusal; it overlapped c1 provide disk=d1 vm=2 delay=3.284s wait=no meta=135, c5 detach disk=d1 delay=4.465s, c7 provide disk=d2 vm=0 delay=3.205s wait=no, c7 provide disk=d2 vm=0 delay=73ms meta=225, c8 attach disk=d0 vm=2 delay=2.102s, c0 detach disk=d1 delay=2.386s, c6 delete disk=d1 delay=2.59s wait=no, task 45 (c6 recreate vm=1 delay=113ms), c3 delete disk=d0 delay=4.138s wait=no, c1 attach disk=d1 vm=0 delay=3.104s, c2 delete disk=d2 delay=3.768s wait=no, c6 delete-vm vm=1 delay=32ms, task 51 (c3 stop-hard vm=0 delay=4.242s), c3 provide disk=d2 vm=0 delay=106ms, c2 attach disk=d1 vm=1 delay=4.223s"},
	{"upstream:a", 2, 10227, 0xe3484aee778c1f78, "invariant \"no-attach-of-disk-attached-elsewhere\" violated after step 22 (seed 2): attach_disk(vm-96da979c-42c5-42ea-ad40-d54f2bec4579, disk-1d3c2bde-359f-4c17-9cfc-3e05c9e2e8d1) called while the IaaS has disk-1d3c2bde-359f-4c17-9cfc-3e05c9e2e8d1 attached to vm-582dfb06-70a9-4de3-90d5-1efd0516b7e6"},
	{"upstream:a", 3, 12735, 0x145314b8e617efe9, "invariant \"no-attach-of-disk-attached-elsewhere\" violated after step 147 (seed 3): attach_disk(vm-00eb1df4-0e95-4bf2-a9ae-f6100452545e, disk-af4d1018-dec9-490e-b282-652b28fe49ed) called while the IaaS has disk-af4d1018-dec9-490e-b282-652b28fe49ed attached to vm-d2073ec1-9524-4ee6-8421-e74975e33bb3"},
	{"upstream:a", 7, 13454, 0xc8f8efbda5b0d8e0, "PASS"},
	{"upstream:a", 42, 9969, 0x680c9be5b482ff82, "PASS"},
	{"upstream:c", 1, 11421, 0xe2a69f2596629722, "invariant \"every-failure-explained\" violated after step 12 (seed 1): task 14 (c8 provide disk=d2 vm=1 delay=72ms meta=719) failed: \"agent 5fc58093-90e0-448b-b06e-7e744242b109 add_dynamic_disk: mbus: timed out after 10s waiting for agent 5fc58093-90e0-448b-b06e-7e744242b109 to answer get_task\"; no fault was on its path, the request was valid, and the error is no documented refusal; it overlapped task 5 (c3 attach disk=d1 vm=0 delay=56ms wait=no), task 6 (c1 delete-vm vm=0 delay=64ms), task 7 (c4 provide disk=d2 vm=1 delay=78ms meta=759), task 8 (c8 attach disk=d1 vm=0 delay=103ms wait=no meta=348), task 9 (c5 detach disk=d1 delay=108ms), task 11 (c7 provide disk=d1 vm=0 delay=143ms wait=no), task 12 (c6 detach disk=d1 delay=14ms), task 13 (c0 provide disk=d1 vm=0 delay=149ms wait=no meta=255), task 15 (c5 stop-hard vm=1 delay=137ms), c5 provide disk=d1 vm=0 delay=114ms wait=no, c4 delete-vm vm=0 delay=14ms, c0 provide disk=d2 vm=1 delay=1.692s wait=no meta=771, c7 delete disk=d0 delay=2.378s wait=no, c7 detach disk=d1 delay=29ms, c3 detach disk=d1 delay=2.756s wait=no, c3 provide disk=d2 vm=1 delay=115ms wait=no meta=476, c3 provide disk=d2 vm=0 delay=89ms, c2 detach disk=d0 delay=3.539s, c1 provide disk=d2 vm=1 delay=83ms wait=no meta=74, c0 detach disk=d1 delay=2.183s wait=no, c0 attach disk=d2 vm=1 delay=70ms wait=no, c0 provide disk=d1 vm=0 delay=173ms meta=800, c6 detach disk=d1 delay=2.99s wait=no, c6 provide disk=d2 vm=0 delay=154ms, c5 detach disk=d1 delay=4.465s, c1 provide disk=d1 vm=2 delay=3.284s wait=no meta=135, task 33 (c1 stop-hard vm=0 delay=16ms), c1 attach disk=d1 vm=0 delay=3.104s"},
	{"upstream:c", 2, 10696, 0x363f603312d29614, "invariant \"every-failure-explained\" violated after step 134 (seed 2): task 141 (c5 stop-hard vm=1 delay=693ms) failed: \"detach_disk disk-c2d1c187-e4f9-4130-99a1-8706c2ac6c17 from vm-676f1e71-ee98-4225-8f72-b0ab8bd921bc: cpi detach_disk (request_id cpi-000094): Bosh::Clouds::DiskNotFound: disk \\\"disk-c2d1c187-e4f9-4130-99a1-8706c2ac6c17\\\" not found\"; no fault was on its path, the request was valid, and the error is no documented refusal; it overlapped c2 stop-hard vm=1 delay=2.649s, task 120 (c0 stop-hard vm=0 delay=4.7s), c4 stop vm=0 delay=2.113s, c12 stop-hard vm=0 delay=2.539s, c7 detach disk=d1 delay=3.415s, task 136 (c9 detach disk=d0 delay=1.383s), c11 provide disk=d0 vm=1 delay=500ms, c1 provide disk=d0 vm=2 delay=932ms, c10 provide disk=d0 vm=2 delay=1.63s, c6 provide disk=d0 vm=2 delay=3.116s meta=802, c3 provide disk=d2 vm=0 delay=4.144s meta=170, c13 delete disk=d2 delay=2.206s"},
	{"upstream:c", 3, 10698, 0x925702b1fe025343, "invariant \"every-failure-explained\" violated after step 32 (seed 3): task 44 (c5 detach disk=d1 delay=11ms) failed: \"dynamic disk \\\"d1\\\" is detaching (task 9)\"; the disk is still detaching under task 9 (c7 detach disk=d1 delay=83ms), which had ended before this operation was called: a state left behind; it overlapped task 25 (c8 detach disk=d0 delay=179ms), c10 delete-vm vm=1 delay=4.076s, c0 detach disk=d0 delay=4.118s, c9 provide disk=d0 vm=2 delay=29ms, c7 provide disk=d2 vm=1 delay=4.731s, c4 delete disk=d1 delay=115ms, c3 create disk=d2 vm=1 delay=4.746s, task 40 (c6 attach disk=d1 vm=0 delay=33ms), c1 stop vm=1 delay=1.707s, c2 provide disk=d0 vm=2 delay=1.521s meta=907, c8 provide disk=d1 vm=2 delay=46ms"},
	{"upstream:c", 7, 12673, 0x1e44ef0cee3fa6cc, "invariant \"every-failure-explained\" violated after step 118 (seed 7): task 120 (c3 provide disk=d2 vm=1 delay=4.244s wait=no) failed: \"attach_disk disk-93976c0c-ee49-4316-87c0-78d135277852 to vm-96c76ba2-ae32-4752-8e4d-e46da166e7d8: cpi attach_disk (request_id cpi-000093): Bosh::Clouds::VMNotFound: VM \\\"vm-96c76ba2-ae32-4752-8e4d-e46da166e7d8\\\" not found\"; no fault was on its path, the request was valid, and the error is no documented refusal; it overlapped task 107 (c2 attach disk=d0 vm=2 delay=4.031s wait=no), task 109 (c9 delete disk=d0 delay=4.796s wait=no), task 110 (c9 delete disk=d0 delay=1.229s wait=no), c1 provide disk=d0 vm=0 delay=97ms, c2 provide disk=d3 vm=2, task 113 (c0 detach disk=d1 delay=135ms), task 115 (c4 detach disk=d1 delay=610ms), task 117 (c3 attach disk=d1 vm=2 delay=175ms wait=no), task 119 (c6 restart vm=2 delay=1.415s), c7 create disk=d0 vm=0 delay=4.046s, c8 provide disk=d1 vm=0 delay=494ms, task 123 (c5 stop vm=1 delay=4.199s wait=no), c5 delete disk=d2 delay=1.143s wait=no, c3 delete-vm vm=1 delay=3.109s wait=no, task 126 (c6 start vm=0 delay=736ms wait=no), c6 attach disk=d1 vm=1 delay=165ms wait=no meta=649, c6 provide disk=d1 vm=1 delay=38ms wait=no meta=948, c6 provide disk=d0 vm=2 delay=42ms wait=no, c5 provide disk=d0 vm=2 delay=3.872s, c3 detach disk=d0 delay=3.012s, c6 provide disk=d0 vm=2 delay=4.505s wait=no, c6 provide disk=d1 vm=2 delay=72ms, c0 provide disk=d0 vm=2 delay=129ms wait=no, c0 attach disk=d2 vm=1 delay=134ms wait=no, c4 provide disk=d1 vm=2 delay=97ms wait=no, c4 provide disk=d1 vm=1 delay=198ms wait=no, c4 provide disk=d2 vm=1 delay=100ms meta=854, c0 detach disk=d1 delay=2.648s wait=no, c0 provide disk=d1 vm=1 delay=5ms wait=no, c0 detach disk=d1 delay=201ms wait=no, c0 provide disk=d0 vm=1 delay=943ms wait=no"},
	{"upstream:c", 42, 8930, 0x8590233bceb45f76, "invariant \"every-failure-explained\" violated after step 2 (seed 42): task 5 (c3 provide disk=d1 vm=2 delay=17ms meta=458) failed: \"attach_disk disk-771f1a8f-1de1-447c-b903-4d413d77e24b to vm-09c980d7-3bca-4cdb-b40e-11d48c33cfd7: cpi attach_disk (request_id cpi-000011): Bosh::Clouds::VMNotFound: VM \\\"vm-09c980d7-3bca-4cdb-b40e-11d48c33cfd7\\\" not found\"; no fault was on its path, the request was valid, and the error is no documented refusal; it overlapped task 4 (c3 provide disk=d2 vm=0 delay=16ms wait=no), c0 detach disk=d2 delay=66ms, c4 detach disk=d2 delay=77ms wait=no, c1 detach disk=d2 delay=134ms, task 9 (c4 recreate vm=2 delay=88ms), c2 provide disk=d2 vm=1 delay=1.297s, c4 attach disk=d1 vm=2 delay=89ms wait=no meta=451, c4 provide disk=d1 vm=2 delay=4.649s"},
	{"upstream:e", 1, 11584, 0xb19123181d9d53c3, "invariant \"no-delete-disk-of-attached-disk\" violated after step 184 (seed 1): delete_disk(disk-2d75d4d0-1eb6-4c88-b1e7-0430e3b4c7b6) called while the IaaS has it attached to vm-8d653a32-ee7c-49cf-8e42-e38deecb467e"},
	{"upstream:e", 2, 11303, 0x1a4fb807b3816222, "invariant \"no-delete-disk-of-attached-disk\" violated after step 7 (seed 2): delete_disk(disk-720ccfb5-6100-49ce-9a5d-a461e0811333) called while the IaaS has it attached to vm-992696dc-a2bd-4da3-8688-b0377e256ae5"},
	{"upstream:e", 3, 9884, 0xe21a7219ccee92fc, "invariant \"no-delete-disk-of-attached-disk\" violated after step 12 (seed 3): delete_disk(disk-dd27ca5c-7258-4936-8b8e-c2daf3a67d2d) called while the IaaS has it attached to vm-5fac9f8c-d9d5-45f8-a168-febcba1a5bb3"},
	{"upstream:e", 7, 12336, 0xf804b63e7808ad7d, "invariant \"no-delete-disk-of-attached-disk\" violated after step 16 (seed 7): delete_disk(disk-ddcf34c9-757a-413c-b609-1c695f1fc0b1) called while the IaaS has it attached to vm-4e18bf41-7a30-4508-b2fd-7833f913b9bd"},
	{"upstream:e", 42, 9950, 0xa22e42480f8180d0, "invariant \"no-delete-disk-of-attached-disk\" violated after step 8 (seed 42): delete_disk(disk-05049a53-6fee-4d8a-a2a7-0634945374ce) called while the IaaS has it attached to vm-112126bb-7f18-4871-851a-10ccaf47f7be"},
	{"upstream:f", 1, 10703, 0xe1c07eeede6f09ab, "PASS"},
	{"upstream:f", 2, 11526, 0x6361da1efc46771d, "PASS"},
	{"upstream:f", 3, 11898, 0xf384c93bda2bc2c1, "PASS"},
	{"upstream:f", 7, 14509, 0xa49edc4676c014f5, "PASS"},
	{"upstream:f", 42, 10228, 0xe4ed3ad531d2e782, "PASS"},
	{"upstream:h", 1, 10797, 0x89cc687513b501ec, "PASS"},
	{"upstream:h", 2, 10822, 0x5eb413bc3ee3c061, "PASS"},
	{"upstream:h", 3, 13515, 0xe3d1de86923654e, "PASS"},
	{"upstream:h", 7, 14357, 0xecbcb902c83d2600, "PASS"},
	{"upstream:h", 42, 9421, 0xf5f8b7ec03b4845f, "PASS"},
	{"upstream:i", 1, 11916, 0x8adfda7c982e4069, "invariant \"task-liveness\" violated at quiescence 200 (seed 1): task 4 (c4 detach disk=d1 delay=13ms wait=no) still queued; task 5 (c3 attach disk=d1 vm=0 delay=56ms wait=no) still queued; task 7 (c4 provide disk=d2 vm=1 delay=78ms meta=759) still queued; and 162 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
	{"upstream:i", 2, 11467, 0x934d5dd6e6152c81, "invariant \"task-liveness\" violated at quiescence 200 (seed 2): task 4 (c11 provide disk=d2 vm=2 delay=67ms) still queued; task 5 (c5 provide disk=d1 vm=0 delay=209ms) still queued; task 6 (c7 detach disk=d2 delay=548ms) still queued; and 152 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
	{"upstream:i", 3, 10993, 0x3ec57504bb740c97, "invariant \"task-liveness\" violated at quiescence 200 (seed 3): task 4 (c7 provide disk=d2 vm=0 delay=60ms meta=32) still queued; task 5 (c9 delete disk=d1 delay=74ms) still queued; task 6 (c8 detach disk=d2 delay=75ms) still queued; and 174 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
	{"upstream:i", 7, 11568, 0x37f7ffe435f238f2, "invariant \"task-liveness\" violated at quiescence 200 (seed 7): task 4 (c9 provide disk=d0 vm=2 delay=48ms wait=no) still queued; task 5 (c7 provide disk=d1 vm=1 delay=127ms) still queued; task 6 (c1 detach disk=d0 delay=130ms wait=no) still queued; and 161 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
	{"upstream:i", 42, 11463, 0x1dec352a19017aa9, "invariant \"task-liveness\" violated at quiescence 200 (seed 42): task 4 (c3 provide disk=d2 vm=0 delay=16ms wait=no) still queued; task 5 (c3 provide disk=d1 vm=2 delay=17ms meta=458) still queued; task 6 (c0 detach disk=d2 delay=66ms) still queued; and 153 more (30m0s after faults healed): upstream race (i), zero dedicated dynamic-disk workers: tasks stay queued forever; --disk-workers N runs N workers to get past it"},
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
