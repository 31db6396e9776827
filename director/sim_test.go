package director_test

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/simulator/simrt"
)

// simWorkload runs a director with fakeiaas, the reference CPI and agents on
// the simulator's runtime: deploy, then concurrent provides, detaches,
// deletes and a recreate. It returns the run's result and a digest of every
// task's outcome and the final records.
func simWorkload(t *testing.T, seed uint64, knobs director.Knobs, trace io.Writer) (simrt.Result, string) {
	t.Helper()
	dir := t.TempDir()
	img, _ := filepath.Abs(filepath.Join(fixtures, "stemcell-v2", "image"))
	mf, cc := readFixture(t, "stemcell-v2/stemcell.MF"), readFixture(t, "cloud-config.yml")
	m := manifestWith(t, 2)
	var digest strings.Builder
	var failure error
	res := simrt.Run(simrt.Config{Seed: seed, MaxSteps: 20_000_000, MaxTime: time.Hour, Trace: trace}, func(s *simrt.Sim) {
		l, err := lab.New(lab.Config{Runtime: s, DataDir: dir})
		if err != nil {
			failure = err
			return
		}
		d, err := director.New(director.Config{Runtime: s, CPI: l.CPI, Agents: l.Agents, Inventory: l, Knobs: knobs})
		if err != nil {
			failure = err
			return
		}
		wait := func(id int64, err error) director.Task {
			if err != nil {
				failure = err
				return director.Task{}
			}
			task, err := d.WaitTask(id, 10*time.Minute)
			if err != nil && failure == nil {
				failure = err
			}
			return task
		}
		for _, q := range []func() (int64, error){
			func() (int64, error) { return d.UploadStemcell("admin", mf, img) },
			func() (int64, error) { return d.UpdateCloudConfig("admin", cc) },
			func() (int64, error) { return d.Deploy("admin", m) },
		} {
			if task := wait(q()); task.State != director.TaskDone {
				failure = fmt.Errorf("setup task %d: %s", task.ID, task.Error)
				return
			}
		}
		insts, _ := d.Instances("workers")
		p := func(name string, i int) func() (int64, error) {
			return func() (int64, error) {
				return d.Provide("admin", director.ProvideRequest{DiskSize: 4, DiskName: name, DiskPoolName: "small", InstanceID: insts[i].ID})
			}
		}
		var ids []int64
		for _, q := range []func() (int64, error){
			p("a", 0), p("a", 1), p("b", 1),
			func() (int64, error) { return d.DetachDynamicDisk("admin", "a") },
			func() (int64, error) {
				return d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: insts[0].ID, State: "recreate", ReattachDynamicDisks: true})
			},
			p("a", 0),
			func() (int64, error) { return d.DeleteDynamicDisk("admin", "b") },
		} {
			id, err := q()
			if err != nil {
				failure = err
				return
			}
			ids = append(ids, id)
		}
		for _, id := range ids {
			task := wait(id, nil)
			fmt.Fprintf(&digest, "task %d %s %s %q\n", task.ID, task.Type, task.State, task.Error)
		}
		disks, _ := d.DynamicDisks()
		for _, dd := range disks {
			fmt.Fprintf(&digest, "disk %s %s on %q\n", dd.Name, dd.CID, dd.VMCID)
		}
		_ = d.Close()
		_ = l.Close()
	})
	if failure != nil {
		t.Fatalf("seed %d: %v", seed, failure)
	}
	if res.Err != nil {
		t.Fatalf("seed %d: simulator: %v", seed, res.Err)
	}
	return res, digest.String()
}

// The director runs on the simulator's runtime, and the same seed replays
// the same run: same trace hash, same task outcomes, same records.
func TestSimulatorReplaysTheDirector(t *testing.T) {
	upstream, _ := director.Profile(director.ProfileUpstream)
	upstream.ZeroDynamicDiskWorkers = false // else the disk tasks never run
	n := 6
	if s := os.Getenv("CPILAB_DIRECTOR_SIM_SEEDS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		knobs := director.Knobs{}
		if seed%3 == 0 {
			knobs = upstream
		}
		var t1, t2 strings.Builder
		r1, d1 := simWorkload(t, seed, knobs, &t1)
		r2, d2 := simWorkload(t, seed, knobs, &t2)
		if r1.TraceHash != r2.TraceHash || d1 != d2 {
			a, b := strings.Split(t1.String(), "\n"), strings.Split(t2.String(), "\n")
			i := 0
			for i < len(a) && i < len(b) && a[i] == b[i] {
				i++
			}
			lo := max(0, i-5)
			t.Fatalf("seed %d replayed differently: trace %x vs %x; traces diverge at line %d:\n%s\n---\n%s\ndigests:\n%s\nvs\n%s",
				seed, r1.TraceHash, r2.TraceHash, i, strings.Join(a[lo:min(len(a), i+3)], "\n"), strings.Join(b[lo:min(len(b), i+3)], "\n"), d1, d2)
		}
		t.Logf("seed %d: %d steps, %s virtual, trace %x\n%s", seed, r1.Steps, r1.Elapsed, r1.TraceHash, d1)
	}
}
