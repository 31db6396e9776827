package cpisuite

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// checkDeleteVMKeepsDisks attaches two disks to a new VM and deletes the
// VM without detaching them, as the Director does when it recreates a VM:
// every disk must still exist (has_disk, the oracle) and be detached. With
// data, a marker written on each disk before is read back after attaching
// it to another VM.
func (st *state) checkDeleteVMKeepsDisks(ctx SpecContext, stemcell string, sv int, data bool) {
	GinkgoHelper()
	o := st.cfg.Oracle
	t := st.tracker()
	v := st.createVM(ctx, t, stemcell, sv)
	disks := []string{st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, v.CID), st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, v.CID)}
	for _, d := range disks {
		st.attach(ctx, t, v.CID, d)
	}
	marks := map[string][]byte{}
	if data {
		fs := st.openVM(ctx, v)
		for _, d := range disks {
			dev := st.deviceOf(ctx, d, v.CID)
			marks[d] = []byte(st.names.next("marker-"+d) + "\n")
			if err := fs.WriteAt(dev, marks[d], markerOffset); err != nil {
				fs.Close()
				Fail(fmt.Sprintf("writing through %s on %s over SFTP: %v", dev, v.CID, err))
			}
		}
		fs.Close()
	}
	x := st.client.Call(ctx, cpiv2.MethodDeleteVM, v.CID, v.CID)
	mustUnread(x, ClauseDeleteVMDisks)
	t.Forget(Resource{Kind: KindVM, CID: v.CID})
	for _, d := range disks {
		t.Forget(Resource{Kind: KindAttachment, CID: d, VM: v.CID})
	}
	for _, d := range disks {
		if o != nil {
			od, ok, err := o.Disk(ctx, d)
			if err != nil {
				Fail(fmt.Sprintf("oracle disk %s: %v", d, err))
			}
			if !ok {
				violate(violation(ClauseDeleteVMDisks, fmt.Sprintf("delete_vm of %s also deleted disk %s, which was attached to it: the Director keeps persistent disks across VM recreation", v.CID, d), x))
			}
			if od.AttachedTo == v.CID {
				violate(violation(ClauseDeleteVMDisks, fmt.Sprintf("after delete_vm of %s the IaaS still shows disk %s attached to it", v.CID, d), x))
			}
		}
		if ok, hx := st.callBool(ctx, ClauseDeleteVMDisks, cpiv2.MethodHasDisk, d); !ok {
			violate(violation(ClauseDeleteVMDisks, fmt.Sprintf("after delete_vm of %s, has_disk of %s (attached to it) returned false", v.CID, d), hx))
		}
	}
	if !data {
		return
	}
	v2 := st.createVM(ctx, t, stemcell, sv)
	for _, d := range disks {
		st.attach(ctx, t, v2.CID, d)
	}
	fs := st.openVM(ctx, v2)
	defer fs.Close()
	for _, d := range disks {
		dev := st.deviceOf(ctx, d, v2.CID)
		got, err := fs.ReadAt(dev, len(marks[d]), markerOffset)
		if err != nil {
			Fail(fmt.Sprintf("reading %s on %s over SFTP: %v", dev, v2.CID, err))
		}
		if string(got) != string(marks[d]) {
			violate(violation(ClauseDeleteVMDisks, fmt.Sprintf("wrote %q on disk %s on %s; after delete_vm of that VM and attach_disk to %s, %s reads %q", marks[d], d, v.CID, v2.CID, dev, got), x))
		}
	}
}

// deviceOf is the device path of disk d on vmCID, as the IaaS attached it.
func (st *state) deviceOf(ctx SpecContext, d, vmCID string) string {
	GinkgoHelper()
	od, ok, err := st.oracle().Disk(ctx, d)
	if err != nil || !ok || od.AttachedTo != vmCID || od.Device == "" {
		Fail(fmt.Sprintf("oracle: disk %s is not attached to %s (attached to %q as %q; ok=%v err=%v)", d, vmCID, od.AttachedTo, od.Device, ok, err))
	}
	return "/dev/" + od.Device
}

func (st *state) openVM(ctx SpecContext, v vm) VMFS {
	GinkgoHelper()
	fs, err := st.cfg.Files.Open(ctx, VMAccess{VMCID: v.CID, AgentID: v.AgentID, IP: v.IP})
	if err != nil {
		Fail(fmt.Sprintf("opening %s over SFTP: %v", v.CID, err))
	}
	return fs
}

// holdWait bounds how long the parallel spec waits for its calls to reach
// the held IaaS at once.
const holdWait = 20 * time.Second

// checkParallel runs n create_disk calls at once, each with its own size;
// with a fault injector the IaaS holds them until all n are in flight, so
// the overlap is proven, not hoped for. Then it deletes half of the disks
// and asks has_disk of all n at once. Any crossing shows as a duplicate
// CID, a wrong size or a wrong answer.
func (st *state) checkParallel(ctx SpecContext) {
	GinkgoHelper()
	t := st.tracker()
	n := max(st.cfg.Parallel, 8)
	type made struct {
		cid  string
		size int
		x    *Exchange
	}
	res := make([]made, n)
	var gate Gate
	if f := st.cfg.Faults; f != nil {
		g, err := f.Hold(ctx, cpiv2.MethodCreateDisk)
		if err != nil {
			Fail(fmt.Sprintf("holding create_disk in the IaaS: %v", err))
		}
		gate = g
		DeferCleanup(func(ctx SpecContext) { _ = g.Release(ctx) })
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		parallel(n, func(i int) {
			// Sizes a GiB apart: a cloud rounding up to GiB cannot confuse them.
			size := st.cfg.Env.DiskSizeMiB + i*1024
			x := st.client.Call(ctx, cpiv2.MethodCreateDisk, "", size, st.cfg.Env.DiskCloudProperties, nil)
			res[i] = made{size: size, x: x}
			if x.Err() == nil {
				if cid, err := decodeCID[cpiv2.DiskKind](x.Response.Result); err == nil {
					res[i].cid = cid
					t.Add(Resource{Kind: KindDisk, CID: cid})
				}
			}
		})
	}()
	if gate != nil {
		held, err := waitHeld(ctx, gate, n, done)
		if rerr := gate.Release(ctx); rerr != nil && err == nil {
			err = rerr
		}
		<-done
		if err != nil {
			Fail(fmt.Sprintf("holding create_disk in the IaaS: %v", err))
		}
		AddReportEntry("in flight", fmt.Sprintf("%d create_disk calls held in the IaaS at once", held), ReportEntryVisibilityNever)
		if held < n {
			violate(violation(ClauseParallel, fmt.Sprintf("of %d create_disk calls started at once, at most %d reached the IaaS together within %s: the CPI serialises calls", n, held, holdWait), res[0].x))
		}
	} else {
		<-done
	}
	xs := make([]*Exchange, n)
	for i, r := range res {
		xs[i] = r.x
	}
	overlap := maxOverlap(xs)
	AddReportEntry("overlap", fmt.Sprintf("at most %d of %d create_disk calls overlapped in time", overlap, n), ReportEntryVisibilityNever)
	if gate != nil && overlap < n {
		violate(violation(ClauseParallel, fmt.Sprintf("only %d of %d held create_disk calls overlapped in time", overlap, n), res[0].x))
	}
	seen := map[string]int{}
	for i, r := range res {
		mustOK(r.x, ClauseParallel)
		if r.cid == "" {
			violate(violation(ClauseParallel, "create_disk returned no disk_cid", r.x))
		}
		if j, dup := seen[r.cid]; dup {
			violate(violation(ClauseParallel, fmt.Sprintf("concurrent create_disk calls %d and %d both returned %s", j, i, r.cid), r.x))
		}
		seen[r.cid] = i
	}
	if o := st.cfg.Oracle; o != nil {
		sizes := map[int]bool{}
		var wrong []string
		var first *Exchange
		for _, r := range res {
			od, ok, err := o.Disk(ctx, r.cid)
			sizes[od.SizeMiB] = true
			if err != nil || !ok || od.SizeMiB < r.size || od.SizeMiB > roundUpGiB(r.size) {
				wrong = append(wrong, fmt.Sprintf("create_disk of %d MiB returned %s, which the IaaS holds as %d MiB (oracle: ok=%v, %v)", r.size, r.cid, od.SizeMiB, ok, err))
				if first == nil {
					first = r.x
				}
			}
		}
		switch {
		case len(wrong) == 0:
		case len(sizes) == 1 && n > 1:
			// Every disk has the same size although each asked for its own:
			// not crossed results, a CPI that does not pass the size on.
			violate(violation(ClauseParallel, fmt.Sprintf("the IaaS holds all %d disks at one size whatever create_disk asked for: the CPI ignores the size (%s)", n, strings.Join(wrong, "; ")), first))
		default:
			violate(violation(ClauseParallel, strings.Join(wrong, "; ")+": results crossed", first))
		}
	}
	deletes := make([]*Exchange, n)
	parallel(n, func(i int) {
		if i%2 == 0 {
			deletes[i] = st.client.Call(ctx, cpiv2.MethodDeleteDisk, "", res[i].cid)
		}
	})
	for i := 0; i < n; i += 2 {
		mustUnread(deletes[i], ClauseHasDisk)
		t.Forget(Resource{Kind: KindDisk, CID: res[i].cid})
	}
	answers := make([]*Exchange, n)
	parallel(n, func(i int) {
		answers[i] = st.client.Call(ctx, cpiv2.MethodHasDisk, "", res[i].cid)
	})
	for i, x := range answers {
		skipIfNotImplemented(x) // the Director skips has_disk on NotImplemented
		mustOK(x, ClauseParallel)
		want := "true"
		if i%2 == 0 {
			want = "false"
		}
		if string(x.Response.Result) != want {
			violate(violation(ClauseParallel, fmt.Sprintf("concurrent has_disk of %s returned %s, want %s", res[i].cid, x.Response.Result, want), x))
		}
	}
}

// waitHeld waits until gate holds n requests (or the calls ended, or
// holdWait passed) and returns the most it saw held at once.
func waitHeld(ctx SpecContext, gate Gate, n int, done <-chan struct{}) (int, error) {
	deadline := time.Now().Add(holdWait)
	most := 0
	for {
		w, err := gate.Waiting(ctx)
		if err != nil {
			return most, err
		}
		most = max(most, w)
		if w >= n || time.Now().After(deadline) {
			return most, nil
		}
		select {
		case <-done:
			return most, nil
		case <-ctx.Done():
			return most, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// maxOverlap returns the largest number of calls in flight at one moment,
// from their start and end times.
func maxOverlap(xs []*Exchange) int {
	type ev struct {
		at    time.Time
		delta int
	}
	var evs []ev
	for _, x := range xs {
		if x == nil || x.Start.IsZero() {
			continue
		}
		evs = append(evs, ev{x.Start, 1}, ev{x.End, -1})
	}
	slices.SortFunc(evs, func(a, b ev) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.delta - b.delta // an end before a start at the same instant
	})
	cur, most := 0, 0
	for _, e := range evs {
		cur += e.delta
		most = max(most, cur)
	}
	return most
}

// checkRetry makes the IaaS fail the next VM creation as a transient
// capacity error and runs the Director's create_vm loop: the first answer
// must be VMCreationFailed with ok_to_retry, a later try must succeed, and
// the failed try must leave no VM behind.
func (st *state) checkRetry(ctx SpecContext, stemcell string, sv int) {
	GinkgoHelper()
	var before Inventory
	if st.cfg.Oracle != nil {
		before = st.inventory(ctx)
	}
	clear, err := st.cfg.Faults.FailVMCreations(ctx, 1)
	if err != nil {
		Fail(fmt.Sprintf("injecting a create_vm failure: %v", err))
	}
	DeferCleanup(clear)
	t := st.tracker()
	var first *Exchange
	for try := 1; try <= MaxVMCreateTries; try++ {
		x := st.client.CreateVM(ctx, VMRequest{AgentID: st.names.next("agent"), StemcellCID: stemcell,
			StemcellAPIVersion: sv, CloudProperties: st.cfg.Env.VMCloudProperties, Networks: st.cfg.Env.Networks})
		checkWire(x)
		if first == nil {
			first = x
			e := x.Response.Error
			if e == nil {
				// The CPI absorbed the failure itself (retried inside the
				// call, another zone, …): fine, but the path the spec is
				// about was not taken.
				if cid := salvageCID(x.Response.Result); cid != "" {
					t.Add(Resource{Kind: KindVM, CID: cid})
				}
				notChecked("the CPI absorbed the injected VM creation failure within the call, so the Director's retry path was not exercised")
			}
			if !errors.Is(e, cpiv2.ErrVMCreationFailed) || !e.OkToRetry {
				violate(violation(ClauseRetry, fmt.Sprintf("on a transient IaaS failure create_vm returned %s (ok_to_retry %v): the Director does not retry", e.Type, e.OkToRetry), x))
			}
			continue
		}
		if e := x.Response.Error; e != nil {
			if errors.Is(e, cpiv2.ErrVMCreationFailed) && e.OkToRetry {
				continue
			}
			violate(violation(ClauseRetry, fmt.Sprintf("try %d of create_vm failed with %s (ok_to_retry %v): the Director stops there", try, e.Type, e.OkToRetry), x))
		}
		cid, err := st.client.DecodeVMCID(x.Response.Result)
		if err != nil {
			if c := salvageCID(x.Response.Result); c != "" {
				t.Add(Resource{Kind: KindVM, CID: c})
			}
			violate(violation(ClauseCreateVM, err.Error(), x))
		}
		t.Add(Resource{Kind: KindVM, CID: cid})
		if st.cfg.Oracle != nil {
			var vms []string
			for _, l := range leaked(before, st.inventory(ctx)) {
				if strings.HasPrefix(l, string(KindVM)+" ") && l != string(KindVM)+" "+cid {
					vms = append(vms, l)
				}
			}
			if len(vms) > 0 {
				violate(violation(ClauseRetry, fmt.Sprintf("the failed create_vm left %v behind in the IaaS", vms), first))
			}
		}
		return
	}
	violate(violation(ClauseRetry, fmt.Sprintf("create_vm still failed after %d tries with the fault cleared after one", MaxVMCreateTries), first))
}
