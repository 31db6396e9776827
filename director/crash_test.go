package director_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/rt"
)

// The crash helper: when CPILAB_DIRECTOR_CRASH_DIR is set, the test binary
// runs a director with SQLite and a durable fakeiaas in that directory and
// queues a random workload forever, printing "ack <task id>" once each
// queueing call has returned. The parent kills it with SIGKILL.
func TestMain(m *testing.M) {
	if dir := os.Getenv("CPILAB_DIRECTOR_CRASH_DIR"); dir != "" {
		seed, _ := strconv.ParseUint(os.Getenv("CPILAB_DIRECTOR_CRASH_SEED"), 10, 64)
		if err := crashWorkload(dir, seed); err != nil {
			fmt.Fprintln(os.Stderr, "crash workload:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

type crashEnv struct {
	lab *lab.Lab
	st  *store.SQLite
	d   *director.Director
}

func openCrashEnv(dir string, seed uint64) (*crashEnv, error) {
	r := rt.Real(seed)
	l, err := lab.New(lab.Config{Runtime: r, DataDir: filepath.Join(dir, "iaas"), FakeIaaSStore: "sqlite"})
	if err != nil {
		return nil, err
	}
	st, err := store.OpenSQLite(filepath.Join(dir, "director.db"))
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	d, err := director.New(director.Config{Runtime: r, Store: st, CPI: l.CPI, Agents: l.Agents, Inventory: l,
		AgentTimeout: 5 * time.Second, AgentPingTimeout: 200 * time.Millisecond})
	if err != nil {
		_ = st.Close()
		_ = l.Close()
		return nil, err
	}
	return &crashEnv{lab: l, st: st, d: d}, nil
}

func (e *crashEnv) close() {
	_ = e.d.Close()
	_ = e.st.Close()
	_ = e.lab.Close()
}

func crashWorkload(dir string, seed uint64) error {
	e, err := openCrashEnv(dir, seed)
	if err != nil {
		return err
	}
	d := e.d
	wait := func(id int64, err error) error {
		if err != nil {
			return err
		}
		t, err := d.WaitTask(id, time.Minute)
		if err != nil {
			return err
		}
		if t.State != director.TaskDone {
			return fmt.Errorf("setup task %d: %s", id, t.Error)
		}
		return nil
	}
	if deps, _ := d.Deployments(); len(deps) == 0 {
		mf, err := os.ReadFile(filepath.Join(fixtures, "stemcell-v2", "stemcell.MF"))
		if err != nil {
			return err
		}
		img, _ := filepath.Abs(filepath.Join(fixtures, "stemcell-v2", "image"))
		cc, _ := os.ReadFile(filepath.Join(fixtures, "cloud-config.yml"))
		m, _ := os.ReadFile(filepath.Join(fixtures, "manifest.yml"))
		for _, step := range []func() (int64, error){
			func() (int64, error) { return d.UploadStemcell("admin", mf, img) },
			func() (int64, error) { return d.UpdateCloudConfig("admin", cc) },
			func() (int64, error) { return d.Deploy("admin", m) },
		} {
			if err := wait(step()); err != nil {
				return err
			}
		}
	}
	insts, err := d.Instances("workers")
	if err != nil {
		return err
	}
	fmt.Println("ready")
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := 0; ; i++ {
		name := fmt.Sprintf("disk-%d", rng.IntN(6))
		var id int64
		switch rng.IntN(5) {
		case 4: // a VM's delete and create, killed anywhere in between
			id, err = d.ChangeInstanceState("admin", director.InstanceStateRequest{InstanceID: insts[rng.IntN(len(insts))].ID,
				State: "recreate", ReattachDynamicDisks: true})
		case 0, 1:
			id, err = d.Provide("admin", director.ProvideRequest{DiskSize: 4, DiskName: name, DiskPoolName: "small",
				InstanceID: insts[rng.IntN(len(insts))].ID})
		case 2:
			id, err = d.DetachDynamicDisk("admin", name)
		default:
			id, err = d.DeleteDynamicDisk("admin", name)
		}
		if err != nil {
			return err
		}
		fmt.Printf("ack %d\n", id)
		if i%3 == 0 {
			_, _ = d.WaitTask(id, time.Minute)
		}
	}
}

// A kill -9 at any point loses no acknowledged task; on restart, tasks in
// flight end as error with a reason, queued ones run, and the IaaS matches
// the records: every IaaS disk is a recorded dynamic disk or an orphan.
func TestRestartAfterKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns director processes")
	}
	dir := t.TempDir()
	rounds := 4
	if n, err := strconv.Atoi(os.Getenv("CPILAB_DIRECTOR_CRASH_ROUNDS")); err == nil {
		rounds = n
	}
	for round := range rounds {
		seed := uint64(round + 1)
		acked := runUntilKilled(t, dir, seed, 4+int(seed)*7)
		logStates(t, dir)
		e, err := openCrashEnv(dir, seed+100)
		if err != nil {
			t.Fatalf("round %d: restart: %v", round, err)
		}
		checkRecovered(t, e, acked)
		e.close()
	}
}

func runUntilKilled(t *testing.T, dir string, seed uint64, acks int) []int64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "CPILAB_DIRECTOR_CRASH_DIR="+dir, fmt.Sprintf("CPILAB_DIRECTOR_CRASH_SEED=%d", seed))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var acked []int64
	sc := bufio.NewScanner(out)
	for sc.Scan() && len(acked) < acks {
		if s, ok := strings.CutPrefix(sc.Text(), "ack "); ok {
			id, _ := strconv.ParseInt(s, 10, 64)
			acked = append(acked, id)
		}
	}
	_ = cmd.Process.Kill() // SIGKILL
	_ = cmd.Wait()
	if len(acked) < acks {
		t.Fatalf("the director process acknowledged %d tasks before exiting; stderr:\n%s", len(acked), stderr.String())
	}
	return acked
}

func checkRecovered(t *testing.T, e *crashEnv, acked []int64) {
	t.Helper()
	d := e.d
	for _, id := range acked {
		task, err := d.Task(id)
		if err != nil {
			t.Fatalf("acknowledged task %d lost: %v", id, err)
		}
		if task.State == director.TaskError && task.StartedAt.IsZero() {
			t.Fatalf("task %d failed without starting: %s", id, task.Error)
		}
		if _, err := d.WaitTask(id, time.Minute); err != nil {
			t.Fatalf("acknowledged task %d never ended: %v", id, err)
		}
	}
	tasks, _ := d.Tasks(0, nil)
	for _, task := range tasks {
		if task.State == director.TaskProcessing || task.State == director.TaskQueued {
			if _, err := d.WaitTask(task.ID, time.Minute); err != nil {
				t.Fatal(err)
			}
		}
	}
	disks, _ := d.DynamicDisks()
	orphans, _ := d.OrphanedDisks()
	known := map[string]director.DynamicDisk{}
	for _, dd := range disks {
		known[dd.CID] = dd
		if dd.State != director.DiskReady {
			t.Errorf("disk %s left %s after recovery", dd.Name, dd.State)
		}
	}
	orph := map[string]bool{}
	for _, o := range orphans {
		orph[o.CID] = true
	}
	st, err := e.lab.Cloud.State(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inIaaS := map[string]bool{}
	for _, disk := range st.Disks {
		cid := disk.CID.String()
		inIaaS[cid] = true
		dd, ok := known[cid]
		switch {
		case !ok && !orph[cid]:
			t.Errorf("IaaS disk %s is neither a dynamic disk nor an orphan: leaked", cid)
		case ok && dd.VMCID != disk.VMCID.String():
			t.Errorf("disk %s: record says VM %q, IaaS says %q", dd.Name, dd.VMCID, disk.VMCID)
		}
	}
	for _, dd := range disks {
		if !inIaaS[dd.CID] {
			t.Errorf("disk %s (%s) recorded but not in the IaaS", dd.Name, dd.CID)
		}
	}
	// VMs: the records equal the IaaS, whatever create_vm or delete_vm the
	// kill interrupted.
	vms, _ := d.VMs()
	recVM := map[string]bool{}
	for _, v := range vms {
		recVM[v.CID] = true
	}
	for _, v := range st.VMs {
		if !recVM[v.CID.String()] {
			t.Errorf("IaaS VM %s (agent %s) is not recorded: leaked", v.CID, v.AgentID)
		}
		delete(recVM, v.CID.String())
	}
	for cid := range recVM {
		t.Errorf("VM %s recorded but not in the IaaS", cid)
	}
	if in, _ := d.Intents(); len(in) != 0 {
		t.Errorf("intents left unsettled after restart: %+v", in)
	}
}

// logStates logs the task states the killed process left.
func logStates(t *testing.T, dir string) {
	st, err := store.OpenSQLite(filepath.Join(dir, "director.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	n := map[director.TaskState]int{}
	_ = st.View(func(tx store.Tx) error {
		return tx.List(store.Tasks, func(_ string, raw []byte) error {
			var task director.Task
			if err := json.Unmarshal(raw, &task); err != nil {
				return err
			}
			n[task.State]++
			return nil
		})
	})
	t.Logf("after kill -9: tasks by state %v", n)
}
