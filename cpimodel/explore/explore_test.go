package explore_test

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"strings"
	"testing"

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
	steps := 0
	rapid.Check(t, func(rt *rapid.T) {
		lifecycle := explore.Draw(rt, env, 400)
		r := explore.NewRunner(d, env)
		defer r.Cleanup(context.Background())
		done, failed, err := r.Run(context.Background(), lifecycle)
		if err != nil {
			rt.Fatal(err)
		}
		steps += len(done)
		if failed >= 0 {
			rt.Fatalf("step %d broke the model: %v\n%s", failed+1, done[len(done)-1].Violations, trace(done))
		}
	})
	t.Logf("%d steps checked", steps)
	if steps < 10000 {
		t.Errorf("only %d steps were checked", steps)
	}
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
