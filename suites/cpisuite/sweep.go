package cpisuite

import (
	"context"
	"fmt"
	"strings"

	"github.com/cpilab/cpilab/cpiv2"
)

// Sweep deletes, through the CPI, whatever the embedded cloud still holds
// (cfg.Oracle's inventory): what a run stopped short left (an interrupt,
// the run's time limit or --fail-fast, or a call in flight when Ctrl-C
// came that created a VM or a disk after its spec's clean-up had run). It
// returns a note saying what it deleted ("" when nothing was left).
func Sweep(cfg Config) string {
	ctx, cancel := context.WithTimeout(context.Background(), 2*cfg.withDefaults().Timeouts.Call)
	defer cancel()
	inv, err := cfg.Oracle.Inventory(ctx)
	if err != nil || len(inv.Stemcells)+len(inv.VMs)+len(inv.Disks)+len(inv.Snapshots) == 0 {
		return ""
	}
	cl, _, err := NewClient(ctx, cfg, cpiv2.ProfileDirectorCurrent, Switch{})
	if err != nil {
		return fmt.Sprintf("stopped short: could not clean up what the run left (%v)", err)
	}
	tr := NewTracker(cl)
	var names []string
	for _, g := range []struct {
		kind Kind
		cids []string
	}{{KindStemcell, inv.Stemcells}, {KindVM, inv.VMs}, {KindDisk, inv.Disks}, {KindSnapshot, inv.Snapshots}} {
		for _, cid := range g.cids {
			tr.Add(Resource{Kind: g.kind, CID: cid})
			names = append(names, string(g.kind)+" "+cid)
		}
	}
	note := "stopped short: deleted through the CPI what the run left when an interrupt, its time limit or --fail-fast stopped it: " + strings.Join(names, ", ")
	if err := tr.Cleanup(ctx); err != nil {
		note += fmt.Sprintf(" (not all: %v)", err)
	}
	return note
}
