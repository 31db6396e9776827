package explore_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpimodel"
	"github.com/cpilab/cpilab/cpimodel/explore"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/refcpi"
	"github.com/cpilab/cpilab/rt"
	"pgregory.net/rapid"
)

// inProcess drives a CPI in this process over an in-memory fakeiaas.
type inProcess struct {
	cloud *fakeiaas.Cloud
	d     *cpiv2.Dispatcher
}

func (p inProcess) Call(ctx context.Context, req []byte) ([]byte, error) {
	return p.d.Handle(ctx, req, io.Discard), nil
}

func (p inProcess) State(ctx context.Context) (cpimodel.State, error) {
	s, err := p.cloud.State(ctx)
	return s.Model(), err
}

// wrap lets a test break one method of the reference CPI.
type wrap func(cpi *refcpi.CPI, cloud *fakeiaas.Cloud) cpiv2.CPI

func newDriver(t testing.TB, w wrap) inProcess {
	t.Helper()
	// VM roots are directory trees: on tmpfs, when there is one, ten
	// thousand steps take seconds rather than minutes of a busy disk.
	dir := t.TempDir()
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		if d, err := os.MkdirTemp("/dev/shm", "cpimodel-test-"); err == nil {
			dir = d
			t.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	cloud, err := fakeiaas.New(fakeiaas.Config{DataDir: dir, Store: "memory", Runtime: rt.Real(1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cloud.Close() })
	var cpi cpiv2.CPI = refcpi.New(refcpi.Config{MaxAPIVersion: 3, Registry: cloud, RegistryEndpoint: "http://registry.example", MBus: "nats://mbus.example"}, cloud)
	if w != nil {
		cpi = w(cpi.(*refcpi.CPI), cloud)
	}
	return inProcess{cloud: cloud, d: cpiv2.NewDispatcher(cpi, cpiv2.DispatcherConfig{MaxAPIVersion: 3})}
}

var env = explore.Env{
	Stemcells: map[int]explore.StemcellImage{
		1: {Path: "../../fixtures/stemcells/fakeiaas-stemcell-v1.json"},
		2: {Path: "../../fixtures/stemcells/fakeiaas-stemcell-v2.json"},
	},
	VMCloudProperties:   json.RawMessage(`{"instance_type":"small"}`),
	DiskCloudProperties: json.RawMessage(`{"type":"ssd"}`),
	Networks:            json.RawMessage(`{"default":{"type":"manual","ip":"10.0.0.5","netmask":"255.255.255.0","gateway":"10.0.0.1","default":["dns","gateway"]}}`),
	MaxAPIVersion:       3,
	RunID:               "model-test",
}

// TestReferenceCPIKeepsTheModel: over many random lifecycles (every caller
// profile, valid and invalid calls, some concurrent), the reference CPI
// never leaves the cloud in a state the model calls illegal.
func TestReferenceCPIKeepsTheModel(t *testing.T) {
	d := newDriver(t, nil)
	// Lifecycles drawn one seed after another until ten thousand steps
	// ran (rapid's own check count shrinks under -short; the budget here
	// does not).
	gen := rapid.Custom(func(rt *rapid.T) []explore.Step { return explore.Draw(rt, env, 400) })
	steps, lifecycles := 0, 0
	for seed := 0; steps < 10000; seed++ {
		r := explore.NewRunner(d, env)
		done, failed, err := r.Run(context.Background(), gen.Example(seed))
		r.Cleanup(context.Background())
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		steps += len(done)
		lifecycles++
		if failed >= 0 {
			t.Fatalf("seed %d, step %d broke the model: %v\n%s", seed, failed+1, done[len(done)-1].Violations, trace(done))
		}
	}
	t.Logf("%d steps of %d lifecycles checked", steps, lifecycles)
}

func trace(done []explore.Done) string {
	var b strings.Builder
	for i, d := range done {
		b.WriteString(d.Step.String() + " → " + d.Response + "\n")
		_ = i
	}
	return b.String()
}

// detachOther detaches, as well, the VM's other disk with the lowest CID
// (a CPI that finds "the" attachment by listing the VM's volumes).
type detachOther struct {
	*refcpi.CPI
	cloud *fakeiaas.Cloud
}

func (c detachOther) DetachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) error {
	if err := c.CPI.DetachDisk(ctx, vm, disk); err != nil {
		return err
	}
	disks, err := c.cloud.VMDisks(ctx, vm)
	if err == nil && len(disks) > 0 {
		return c.CPI.DetachDisk(ctx, vm, disks[0])
	}
	return nil
}

// rebootForgets loses the VM's metadata on reboot (the reboot re-creates
// the instance from its launch template).
type rebootForgets struct {
	*refcpi.CPI
	cloud *fakeiaas.Cloud
}

func (c rebootForgets) RebootVM(ctx context.Context, vm cpiv2.VMCID) error {
	if err := c.CPI.RebootVM(ctx, vm); err != nil {
		return err
	}
	return c.cloud.SetVMMetadata(ctx, vm, cpiv2.Metadata{})
}

// hasDiskStale answers has_disk true for any disk CID the cloud ever
// made (a cache that is never invalidated).
type hasDiskStale struct {
	*refcpi.CPI
}

func (c hasDiskStale) HasDisk(ctx context.Context, cid cpiv2.DiskCID) (bool, error) {
	if strings.HasPrefix(cid.String(), "disk-") {
		return true, nil
	}
	return c.CPI.HasDisk(ctx, cid)
}

// TestModelFindsBugs: random lifecycles against a broken reference CPI
// break the model, each bug on its own clause, within a small budget.
func TestModelFindsBugs(t *testing.T) {
	for _, tc := range []struct {
		name, clause string
		w            wrap
	}{
		{"detach-other-disk", cpimodel.ClauseFrame, func(c *refcpi.CPI, cl *fakeiaas.Cloud) cpiv2.CPI { return detachOther{c, cl} }},
		{"reboot-forgets-metadata", cpimodel.ClauseFrame, func(c *refcpi.CPI, cl *fakeiaas.Cloud) cpiv2.CPI { return rebootForgets{c, cl} }},
		{"has-disk-stale", cpimodel.ClauseAnswers, func(c *refcpi.CPI, cl *fakeiaas.Cloud) cpiv2.CPI { return hasDiskStale{c} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDriver(t, tc.w)
			gen := rapid.Custom(func(rt *rapid.T) []explore.Step { return explore.Draw(rt, env, 60) })
			for seed := range 50 {
				r := explore.NewRunner(d, env)
				done, failed, err := r.Run(context.Background(), gen.Example(seed))
				r.Cleanup(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				if failed < 0 {
					continue
				}
				v := done[len(done)-1].Violations[0]
				if v.Clause != tc.clause {
					t.Fatalf("seed %d: want a %s violation, got %v\n%s", seed, tc.clause, v, trace(done))
				}
				t.Logf("seed %d, step %d: %v", seed, failed+1, v)
				return
			}
			t.Fatalf("50 lifecycles never broke the model")
		})
	}
}

// TestExploreShrinksAndReplays: an exploration of a broken CPI fails, the
// failure is shrunk to a few steps, the same seed gives the same sequence,
// and the sequence replayed alone fails the same way.
func TestExploreShrinksAndReplays(t *testing.T) {
	d := newDriver(t, func(c *refcpi.CPI, cl *fakeiaas.Cloud) cpiv2.CPI { return detachOther{c, cl} })
	o := explore.Options{Seed: 7, Lifecycles: 30, MaxSteps: 40, ShrinkTime: 10 * time.Second}
	f1, seed, err := explore.Explore(context.Background(), d, env, o)
	if err != nil || f1 == nil {
		t.Fatalf("exploring detach-other-disk: failure %v, err %v", f1, err)
	}
	if seed != 7 || f1.Violation.Clause != cpimodel.ClauseFrame {
		t.Fatalf("seed %d, violation %v", seed, f1.Violation)
	}
	t.Logf("shrunk to %d steps:\n%s", len(f1.Steps), f1.Explain())
	if len(f1.Steps) > 10 {
		t.Errorf("the failure was not shrunk: %d steps", len(f1.Steps))
	}
	shown := f1.Shown()
	if len(shown) != len(f1.Done) || len(shown) == 0 {
		t.Fatalf("Shown gave %d steps for %d run", len(shown), len(f1.Done))
	}
	for i, s := range shown {
		if s.Method != f1.Done[i].Step.Method || strings.Contains(string(mustMarshal(s.Args)), `"$`) {
			t.Errorf("shown step %d: %+v, want %s with its references resolved", i+1, s, f1.Done[i].Step.Method)
		}
	}
	if last := shown[len(shown)-1]; len(last.Violations) == 0 || last.Violations[0].Clause != f1.Violation.Clause {
		t.Errorf("the last shown step does not carry the violation %v: %+v", f1.Violation, last)
	}
	f2, _, err := explore.Explore(context.Background(), d, env, o)
	if err != nil || f2 == nil || fmt.Sprint(f2.Steps) != fmt.Sprint(f1.Steps) {
		t.Fatalf("the same seed gave another sequence:\n%v\n%v", f1.Steps, f2)
	}
	raw, _ := json.Marshal(f1.Replay())
	var rp explore.Replay
	if err := json.Unmarshal(raw, &rp); err != nil {
		t.Fatal(err)
	}
	f3, _, err := explore.RunReplay(context.Background(), d, env, rp)
	if err != nil || f3 == nil || f3.Violation.Clause != f1.Violation.Clause || f3.Violation.Method != f1.Violation.Method {
		t.Fatalf("the replay did not fail the same way: %v (err %v), want %v", f3, err, f1.Violation)
	}
	// The reference CPI passes the same replay.
	ref := newDriver(t, nil)
	if f, _, err := explore.RunReplay(context.Background(), ref, env, rp); err != nil || f != nil {
		t.Fatalf("the reference CPI fails the replay: %v %v", f, err)
	}
}

func mustMarshal(v any) []byte { b, _ := json.Marshal(v); return b }
