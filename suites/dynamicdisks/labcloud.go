package dynamicdisks

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
)

// InProcessCloud gives the suite the oracle, the agents' links and the
// gates of a fake cloud running in this process (a director a test or
// certify-director's embedded director launched here): the same checks
// FakeCloud and SFTPLinks give for a cloud served elsewhere.
func InProcessCloud(c *fakeiaas.Cloud) (Oracle, Links, Gates) {
	return labOracle{c}, labLinks{c}, labGates{c}
}

// labOracle reads the in-process fake cloud's state.
type labOracle struct{ c *fakeiaas.Cloud }

func (o labOracle) Disk(ctx context.Context, cid string) (OracleDisk, bool, error) {
	st, err := o.c.State(ctx)
	if err != nil {
		return OracleDisk{}, false, err
	}
	for _, d := range st.Disks {
		if d.CID.String() == cid {
			return OracleDisk{AttachedTo: d.VMCID.String(), Metadata: d.Metadata}, true, nil
		}
	}
	return OracleDisk{}, false, nil
}

func (o labOracle) Disks(ctx context.Context) ([]string, error) {
	st, err := o.c.State(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(st.Disks))
	for _, d := range st.Disks {
		out = append(out, d.CID.String())
	}
	return out, nil
}

// labLinks reads the agent's links in the VM roots fakeiaas keeps (the file
// system an SFTP session onto the VM shows).
type labLinks struct{ c *fakeiaas.Cloud }

func (k labLinks) DynamicDiskLink(_ context.Context, vm VM, diskCID string) (string, bool, error) {
	vmCID, err := cpiv2.NewVMCID(vm.VMCID)
	if err != nil {
		return "", false, err
	}
	target, err := os.Readlink(filepath.Join(k.c.VMRoot(vmCID), agent.DynamicDiskLink(diskCID)))
	if errors.Is(err, fs.ErrNotExist) {
		return "", false, nil
	}
	return target, err == nil, err
}

// labGates hold fakeiaas operations with pause fault rules.
type labGates struct{ c *fakeiaas.Cloud }

func (g labGates) Hold(ctx context.Context, op string) (Gate, error) {
	r, err := g.c.AddFault(ctx, fakeiaas.Rule{Op: fakeiaas.Op(op), Effect: fakeiaas.Effect{Kind: fakeiaas.EffectPause}})
	if err != nil {
		return nil, err
	}
	return labGate{c: g.c, id: r.ID}, nil
}

type labGate struct {
	c  *fakeiaas.Cloud
	id string
}

func (g labGate) Held(ctx context.Context) (int, error) {
	all, err := g.c.Faults(ctx)
	if err != nil {
		return 0, err
	}
	for _, s := range all {
		if s.ID == g.id {
			return s.Paused, nil
		}
	}
	return 0, nil // released
}

func (g labGate) Release(ctx context.Context) error {
	err := g.c.RemoveFault(ctx, g.id)
	if errors.Is(err, fakeiaas.ErrNotFound) {
		return nil // released before
	}
	return err
}
