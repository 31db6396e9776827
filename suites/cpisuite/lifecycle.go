package cpisuite

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// unknownMethod is the method name the suites send to see how a CPI
// answers a method it does not know; methodUnknown is how spec labels and
// the recorded methods name it.
const (
	unknownMethod = "cpilab_no_such_method"
	methodUnknown = "unknown"
)

// beforeSpec is every container's BeforeEach: record the spec's calls, run
// the container's setup unless this is the setup spec (the teardown and
// leak specs run it only when nothing ran it: a focused rerun), then skip
// what cannot be checked.
func (st *state) beforeSpec(ctx SpecContext) {
	GinkgoHelper()
	st.beginSpec()
	switch ClauseOf(CurrentSpecReport().LeafNodeText) {
	case ClauseSetup:
	case ClauseTeardown, ClauseNoLeak:
		if st.setupState == setupNotRun {
			st.ensureSetup(ctx)
		}
		if st.setupState == setupFailed && st.madeNothing() {
			// Clean-up of nothing is no pass: a CPI that always fails
			// would earn one per context.
			notChecked("the setup of this context failed (see its " + ClauseSetup + " spec) before it created anything to clean up")
		}
	default:
		st.ensureSetup(ctx)
	}
	st.skipIfSkipped()
	requireLabelledCaps(st.cfg)
}

// madeNothing reports whether the container holds nothing to clean up:
// nothing shared, nothing a spec could not delete.
func (st *state) madeNothing() bool {
	st.leftMu.Lock()
	defer st.leftMu.Unlock()
	return len(st.leftover) == 0 && (st.shared == nil || len(st.shared.Resources()) == 0)
}

// afterContainer tears down and checks for leaks when the teardown and
// leak specs were filtered out (their failures then show on the last spec
// that ran). It is the container's AfterAll, and Ginkgo runs AfterAll
// before the clean-ups the last spec deferred (its tracker): so the work is
// deferred too, to an after-all clean-up, which Ginkgo runs after the
// spec's own. Otherwise a filter that cuts a context would see what its
// last spec made as a leak of the context.
func (st *state) afterContainer() {
	GinkgoHelper()
	DeferCleanup(func(ctx SpecContext) {
		if st.setupState == setupNotRun || st.tornDown {
			return
		}
		st.checkNoLeak(ctx)
	})
}

// takeInventory records the IaaS inventory before the container makes
// anything (with an oracle).
func (st *state) takeInventory(ctx SpecContext) {
	GinkgoHelper()
	if st.cfg.Oracle == nil {
		return
	}
	inv := st.inventory(ctx)
	st.before = &inv
}

// inventory reads the oracle's inventory; the oracle must be there.
func (st *state) inventory(ctx SpecContext) Inventory {
	GinkgoHelper()
	inv, err := st.cfg.Oracle.Inventory(ctx)
	if err != nil {
		Fail(fmt.Sprintf("oracle inventory: %v", err))
	}
	return inv
}

// teardown deletes what the container shares (newest first); it runs
// once.
func (st *state) teardown(ctx SpecContext) {
	GinkgoHelper()
	if st.tornDown {
		return
	}
	st.tornDown = true
	if st.shared == nil {
		return
	}
	st.created = append(st.created, st.shared.Resources()...)
	err := st.shared.Cleanup(ctx)
	// What specs could not delete (a disk a broken detach left on a shared
	// VM): try again now that the shared VMs are gone, as the Director
	// deletes disks after VMs. The specs failed for anything but a disk;
	// what still cannot be deleted fails here.
	st.leftMu.Lock()
	left := NewTracker(st.client)
	for _, r := range st.leftover {
		if r.Kind != KindAttachment {
			left.Add(r)
		}
	}
	st.leftover = nil
	st.leftMu.Unlock()
	err = errors.Join(err, left.Cleanup(withCleanup(ctx)))
	if err != nil {
		violate(violation(ClauseTeardown, err.Error(), nil))
	}
}

// checkNoLeak tears down (if not done) and checks that nothing the
// container made is left: with an oracle, the IaaS inventory is what it was
// before the setup; without one, has_vm and has_disk deny every VM and disk
// the container shared.
func (st *state) checkNoLeak(ctx SpecContext) {
	GinkgoHelper()
	st.teardown(ctx)
	if st.before != nil {
		if l := leaked(*st.before, st.inventory(ctx)); len(l) > 0 {
			violate(violation(ClauseNoLeak, fmt.Sprintf("%s left %s in the IaaS", st.name, strings.Join(l, ", ")), nil))
		}
		return
	}
	if st.client == nil {
		return
	}
	for _, res := range st.created {
		var method string
		switch res.Kind {
		case KindVM:
			method = cpiv2.MethodHasVM
		case KindDisk:
			method = cpiv2.MethodHasDisk
		default:
			continue
		}
		x := st.client.Call(ctx, method, "", res.CID)
		if x.RunErr == nil && cpiv2.IsNotImplemented(x.Response.Error) {
			notChecked(fmt.Sprintf("leaks of %s: the CPI answers NotImplemented for %s and there is no oracle", res, method))
		}
		mustOK(x, ClauseNoLeak)
		switch string(x.Response.Result) {
		case "true":
			violate(violation(ClauseNoLeak, fmt.Sprintf("%s is still there after clean-up", res), x))
		case "false":
		default:
			violate(violation(ClauseNoLeak, fmt.Sprintf("%s must return a bool, returned %s", method, excerpt(x.Response.Result)), x))
		}
	}
}

// snapshot takes a snapshot of disk d, tracked by t; it skips the spec
// when the CPI answers NotImplemented (the Director skips snapshots then).
func (st *state) snapshot(ctx SpecContext, t *Tracker, d string) (string, *Exchange) {
	GinkgoHelper()
	x := st.client.Call(ctx, cpiv2.MethodSnapshotDisk, "", d, map[string]string{"deployment": "cpilab"})
	skipIfNotImplemented(x)
	mustOK(x, ClauseSnapshot)
	sc, err := decodeCID[cpiv2.SnapshotKind](x.Response.Result)
	if err != nil {
		violate(violation(ClauseSnapshot, "snapshot_disk: "+err.Error(), x))
	}
	t.Add(Resource{Kind: KindSnapshot, CID: sc})
	return sc, x
}

// checkSnapshotSource checks, with an oracle that knows (SnapshotSources),
// that snapshot sc was taken of disk d: the Director records the snapshot
// against the disk it asked for, and restores that disk from it.
func (st *state) checkSnapshotSource(ctx SpecContext, sc, d string, x *Exchange) {
	GinkgoHelper()
	src, ok := st.cfg.Oracle.(SnapshotSources)
	if st.cfg.Oracle == nil || !ok {
		AddReportEntry("not checked", "which disk the snapshot was taken of: the oracle cannot tell", ReportEntryVisibilityNever)
		return
	}
	disk, found, err := src.SnapshotSource(ctx, sc)
	if err != nil {
		Fail(fmt.Sprintf("oracle snapshot %s: %v", sc, err))
	}
	if found && disk != d {
		violate(violation(ClauseSnapshot, fmt.Sprintf("snapshot_disk of %s returned %s, a snapshot of %s", d, sc, disk), x))
	}
}
