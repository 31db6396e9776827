package lab

import (
	"context"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
)

// Oracle is a fake cloud's oracle: *fakeiaas.Cloud in process, or
// *fakeiaas.Client for a served one.
type Oracle interface {
	State(ctx context.Context) (fakeiaas.State, error)
}

// Inventory lists a fake cloud's disks, VMs and stemcells from its oracle,
// as an IaaS console would, for the director's restart reconciliation
// (director.DiskLister, director.VMLister, director.StemcellLister).
type Inventory struct{ Oracle Oracle }

// ListDisks lists every IaaS disk.
func (i Inventory) ListDisks(ctx context.Context) ([]cpiv2.DiskCID, error) {
	return list(ctx, i.Oracle, func(st fakeiaas.State, out []cpiv2.DiskCID) []cpiv2.DiskCID {
		for _, d := range st.Disks {
			out = append(out, d.CID)
		}
		return out
	})
}

// ListVMs lists every IaaS VM with its agent ID, so that a VM whose
// create_vm was interrupted can be found.
func (i Inventory) ListVMs(ctx context.Context) ([]director.ListedVM, error) {
	return list(ctx, i.Oracle, func(st fakeiaas.State, out []director.ListedVM) []director.ListedVM {
		for _, v := range st.VMs {
			out = append(out, director.ListedVM{CID: v.CID, AgentID: v.AgentID})
		}
		return out
	})
}

// ListStemcells lists every IaaS stemcell.
func (i Inventory) ListStemcells(ctx context.Context) ([]cpiv2.StemcellCID, error) {
	return list(ctx, i.Oracle, func(st fakeiaas.State, out []cpiv2.StemcellCID) []cpiv2.StemcellCID {
		for _, s := range st.Stemcells {
			out = append(out, s.CID)
		}
		return out
	})
}

// list reads the oracle once and collects with pick; never nil on success.
func list[T any](ctx context.Context, o Oracle, pick func(fakeiaas.State, []T) []T) ([]T, error) {
	st, err := o.State(ctx)
	if err != nil {
		return nil, err
	}
	return pick(st, []T{}), nil
}
