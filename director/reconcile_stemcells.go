package director

import (
	"context"
	"fmt"
	"slices"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director/store"
)

// StemcellLister is optional: an IaaS adapter that lists every stemcell
// lets the director settle an upload a crash interrupted between
// create_stemcell and the stemcell's record (IntentCreateStemcell).
// Without it such a stemcell stays in the IaaS unrecorded, as upstream.
type StemcellLister interface {
	ListStemcells(ctx context.Context) ([]cpiv2.StemcellCID, error)
}

// stemcellIntent records the intent of an upload of sc (no CID yet) with
// the IaaS's stemcells before the call; without a StemcellInventory it
// records nothing (nothing could settle it) and returns a zero intent.
func (j *job) stemcellIntent(sc Stemcell) (Intent, error) {
	inv := j.d.cfg.StemcellInventory
	if inv == nil {
		return Intent{}, nil
	}
	before, err := inv.ListStemcells(context.Background())
	if err != nil {
		return Intent{}, fmt.Errorf("list the IaaS's stemcells before create_stemcell: %w", err)
	}
	in := Intent{Op: IntentCreateStemcell, Stemcell: &sc, StemcellAPIVersion: sc.APIVersion}
	for _, c := range before {
		in.StemcellsBefore = append(in.StemcellsBefore, c.String())
	}
	return in, j.update(func(tx store.Tx) error { return j.beginIntent(tx, &in) })
}

// settleCreateStemcell records the stemcell an interrupted upload made: the
// one IaaS stemcell that is neither in the intent's list from before the
// call nor recorded. None: the call made nothing. Several (uploads
// interrupted together): each intent takes the first left, in CID order.
func (d *Director) settleCreateStemcell(ctx context.Context, in Intent) (bool, string, error) {
	if d.cfg.StemcellInventory == nil || in.Stemcell == nil {
		return false, "no stemcell inventory to look for the stemcell in", nil
	}
	var now []cpiv2.StemcellCID
	if err := d.reconcileCall(func() error {
		var err error
		now, err = d.cfg.StemcellInventory.ListStemcells(ctx)
		return err
	}); err != nil {
		return false, fmt.Sprintf("listing the IaaS's stemcells failed: %v", err), nil
	}
	recorded, err := listAll[Stemcell](d.st, store.Stemcells, nil)
	if err != nil {
		return false, "", err
	}
	var fresh []string
	for _, c := range now {
		cid := c.String()
		if slices.Contains(in.StemcellsBefore, cid) ||
			slices.ContainsFunc(recorded, func(s Stemcell) bool { return s.CID == cid }) {
			continue
		}
		fresh = append(fresh, cid)
	}
	slices.Sort(fresh)
	key := stemcellKey(in.Stemcell.Name, in.Stemcell.Version)
	return true, "", d.st.Update(func(tx store.Tx) error {
		if len(fresh) > 0 {
			var have Stemcell
			ok, err := tx.Get(store.Stemcells, key, &have)
			if err != nil {
				return err
			}
			if !ok {
				sc := *in.Stemcell
				sc.CID = fresh[0]
				if err := tx.Put(store.Stemcells, key, sc); err != nil {
					return err
				}
			}
		}
		return endIntent(tx, in)
	})
}
