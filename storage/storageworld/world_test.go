package storageworld_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/simulator/simrt"
	"github.com/cpilab/cpilab/storage"
	"github.com/cpilab/cpilab/storage/boshdirector"
	"github.com/cpilab/cpilab/storage/storageworld"
)

const mib = 1 << 20

// chunk is the byte pattern the workload writes, one MiB per chunk, so
// every chunk is allocated (the agent reports allocated bytes as used).
func chunk(i int64) []byte { return bytes.Repeat([]byte{byte('a' + i%26)}, mib) }

// The controller runs for four virtual days on the simulated runtime against
// the real Director (its HTTP API, resize included), the agents' usage
// reports and the fake cloud, while a workload fills the disk through the
// VM root. On the way: a controller restart (only the status file
// survives), a Director outage of four hours, and a VM recreate queued while
// a resize is in flight. Every tick, the fake cloud's oracle decides: every
// disk stays within request and limit, and the resizes it performed
// (resize_disk, or create_disk beyond the first) never exceed the daily
// budget in any sliding 24 h. At the end the disk has grown, holds every
// byte written, and is attached and linked to the instance's new VM.
func TestControllerEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("four virtual days of the whole world")
	}
	dataDir, statusPath := t.TempDir(), filepath.Join(t.TempDir(), "status.json")
	policy := storage.Policy{RequestMiB: 64, LimitMiB: 320, TargetBuffer: 20,
		Window:     storage.Window{Schedule: "0 */6 * * *", Duration: 2 * time.Hour},
		Emergency:  storage.Emergency{CriticalThreshold: 90, CriticalMinimumFreeMiB: 4, MaxActionsPerDay: 4, ReservedForEmergency: 1},
		MinStepMiB: 16, MaxStepMiB: 128}
	if err := policy.Validate(); err != nil {
		t.Fatal(err)
	}
	const (
		tick       = 10 * time.Minute
		days       = 4
		restartAt  = 30 * time.Hour
		outageAt   = 50 * time.Hour
		outageFor  = 4 * time.Hour
		recreateAt = 60 * time.Hour // the first resize in flight from then on
	)
	var (
		failure                      error
		problems                     []string
		restarts, outageErrors       int
		recreateTask                 int64
		recreatedDuring              string
		written, fullTicks, detached int64
		finalSize                    int
	)
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	res := simrt.Run(simrt.Config{Seed: 1, MaxTime: (days + 1) * 24 * time.Hour}, func(s *simrt.Sim) {
		ctx := context.Background()
		w, err := storageworld.New(storageworld.Config{Runtime: s, DataDir: dataDir, Fixtures: "../../fixtures/director"})
		if err != nil {
			failure = err
			return
		}
		defer w.Close()
		inst := w.Instances[0]
		vol := storage.Volume{ID: "pg-main/data", DiskName: "pg-data", InstanceID: inst.ID, DiskPool: "small", Policy: policy}
		newController := func() *storage.Controller {
			st, err := boshdirector.OpenFileStore(statusPath)
			if err != nil {
				failure = err
				return nil
			}
			c, err := storage.New(storage.Config{Director: boshdirector.NewDirector(w.Client),
				Usage: boshdirector.NewUsage(w.Client, w.Lab.Agents), Store: st})
			if err != nil {
				failure = err
			}
			return c
		}
		ctl := newController()
		oracle := func() fakeiaas.State {
			st, err := w.Lab.Cloud.State(ctx)
			if err != nil {
				failure = err
			}
			return st
		}
		// device finds the volume's disk on the instance's VM, as the
		// workload inside the VM sees it.
		device := func() (string, int) {
			dd, err := w.Director.DynamicDisk(vol.DiskName)
			if err != nil {
				return "", 0
			}
			in, _ := w.Director.Instances("workers")
			vmCID := ""
			for _, x := range in {
				if x.ID == inst.ID {
					vmCID = x.VMCID
				}
			}
			st := oracle()
			size := 0
			for _, d := range st.Disks {
				if d.CID.String() == dd.CID {
					size = d.SizeMiB
				}
			}
			for _, v := range st.VMs {
				if v.CID.String() != vmCID {
					continue
				}
				for _, a := range v.Attachments {
					if a.DiskCID.String() == dd.CID {
						return filepath.Join(v.Root, "dev", a.Device), size
					}
				}
			}
			return "", size
		}
		start := s.Now()
		for i := 0; time.Duration(i)*tick < days*24*time.Hour && failure == nil; i++ {
			since := time.Duration(i) * tick
			switch since {
			case restartAt:
				ctl = newController() // the old one is gone; only the status file survives
				restarts++
			case outageAt:
				w.SetDirectorDown(true)
			case outageAt + outageFor:
				w.SetDirectorDown(false)
			}
			// The workload: 8 MiB at once, then 1 MiB every 20 minutes.
			want := int64(0)
			if i > 0 {
				want = 8 + int64(i)/2
			}
			for written < want {
				dev, size := device()
				if dev == "" {
					detached++
					break
				}
				if written+1 > int64(size) {
					fullTicks++
					break
				}
				f, err := os.OpenFile(dev, os.O_WRONLY, 0)
				if err != nil {
					failure = err
					return
				}
				_, err = f.WriteAt(chunk(written), written*mib)
				f.Close()
				if err != nil {
					failure = err
					return
				}
				written++
			}
			_, err := ctl.Reconcile(ctx, vol, s.Now())
			switch {
			case err == nil:
			case errors.Is(err, storage.ErrDirector) && since >= outageAt && since < outageAt+outageFor:
				outageErrors++
			default:
				bad("%s: reconcile: %v", since, err)
			}
			if recreateTask == 0 && since >= recreateAt {
				// A VM recreate lands while a resize is in flight.
				st, _, _ := mustStore(statusPath).Load(ctx, vol.ID)
				id, _ := strconv.ParseInt(st.PendingTask, 10, 64)
				if task, err := w.Director.Task(id); err == nil && id > 0 && !task.State.Final() {
					recreatedDuring = st.PendingTask
					recreateTask, err = w.Director.ChangeInstanceState("admin", director.InstanceStateRequest{Deployment: "workers",
						InstanceID: inst.ID, State: "recreate", ReattachDynamicDisks: true})
					if err != nil {
						failure = err
						return
					}
				}
			}
			hist, err := w.Lab.Cloud.History(ctx, fakeiaas.HistoryFilter{}, 0)
			if err != nil {
				failure = err
				return
			}
			checkOracle(oracle(), hist, policy, s.Now(), bad)
			s.Sleep(tick)
		}
		if failure != nil {
			return
		}
		if recreateTask != 0 {
			task, err := w.Director.WaitTask(recreateTask, time.Hour)
			if err != nil || task.State != director.TaskDone {
				bad("recreate task %d: %v %s %s", recreateTask, err, task.State, task.Error)
			}
		}
		// The end: grown, every byte there, attached and linked on the new VM.
		dev, size := device()
		finalSize = size
		if dev == "" {
			bad("at the end the disk is not attached to the instance's VM")
			return
		}
		f, err := os.Open(dev)
		if err != nil {
			failure = err
			return
		}
		defer f.Close()
		for c := int64(0); c < written; c++ {
			got := make([]byte, mib)
			if _, err := f.ReadAt(got, c*mib); err != nil || !bytes.Equal(got, chunk(c)) {
				bad("chunk %d of %d lost (%v)", c, written, err)
				break
			}
		}
		dd, _ := w.Director.DynamicDisk(vol.DiskName)
		now, _ := w.Director.Instances("workers")
		if now[0].VMCID == inst.VMCID {
			bad("the instance kept VM %s: no recreate happened", inst.VMCID)
		}
		if _, err := os.Lstat(filepath.Join(w.Lab.Cloud.VMRoot(mustVM(now[0].VMCID)), agent.DynamicDiskLink(dd.CID))); err != nil {
			bad("the agent on %s has no link to %s: %v", now[0].VMCID, dd.CID, err)
		}
		if n := len(oracle().Disks); n != 1 {
			bad("the cloud holds %d disks, want 1 (every resize in place)", n)
		}
		if in, _ := w.Director.Intents(); len(in) != 0 {
			bad("intents left: %+v", in)
		}
		resizes, _ := w.Lab.Cloud.History(ctx, fakeiaas.HistoryFilter{Op: fakeiaas.OpResizeDisk}, 0)
		if len(resizes) == 0 {
			bad("the cloud never resized the disk")
		}
		t.Logf("%s simulated: %d MiB written, final size %d MiB, %d resize_disk calls, %d ticks full, %d ticks detached, resize task %s in flight at the recreate",
			s.Now().Sub(start), written, size, len(resizes), fullTicks, detached, recreatedDuring)
	})
	if failure != nil {
		t.Fatal(failure)
	}
	if res.Err != nil {
		t.Fatalf("simulator: %v", res.Err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if restarts != 1 || outageErrors == 0 || recreateTask == 0 {
		t.Errorf("the run missed an event: %d restarts, %d reconciliations refused by the outage, recreate task %d", restarts, outageErrors, recreateTask)
	}
	if finalSize <= int(policy.RequestMiB) {
		t.Errorf("final size %d MiB: the controller never grew the disk", finalSize)
	}
}

// checkOracle decides from the fake cloud alone: sizes within the policy,
// and the resizes the cloud performed (resize_disk, or a create_disk after
// the first, which is a copy) within the budget in the sliding 24 h ending
// now.
func checkOracle(st fakeiaas.State, hist []fakeiaas.HistoryEntry, p storage.Policy, now time.Time, bad func(string, ...any)) {
	for _, d := range st.Disks {
		if int64(d.SizeMiB) < p.RequestMiB || int64(d.SizeMiB) > p.LimitMiB {
			bad("%s: disk %s is %d MiB, outside [%d, %d]", now.Format(time.RFC3339), d.CID, d.SizeMiB, p.RequestMiB, p.LimitMiB)
		}
	}
	n, creates := 0, 0
	for _, h := range hist {
		if h.Result != "ok" {
			continue
		}
		switch h.Op {
		case fakeiaas.OpCreateDisk:
			creates++
			if creates == 1 {
				continue // the provide
			}
		case fakeiaas.OpResizeDisk:
		default:
			continue
		}
		if h.Time.After(now.Add(-24 * time.Hour)) {
			n++
		}
	}
	if n > p.Emergency.MaxActionsPerDay {
		bad("%s: the cloud resized %d times in 24 h, the budget is %d", now.Format(time.RFC3339), n, p.Emergency.MaxActionsPerDay)
	}
}

func mustVM(cid string) cpiv2.VMCID { return cpiv2.MustCID[cpiv2.VMKind](cid) }

func mustStore(path string) *boshdirector.FileStore {
	s, err := boshdirector.OpenFileStore(path)
	if err != nil {
		panic(err)
	}
	return s
}
