package cpisuite

import (
	"fmt"
	"slices"

	"github.com/cpilab/cpilab/cpiv2"
	. "github.com/onsi/ginkgo/v2"
)

// diskChangeSpecs registers the contract specs of disk changes: resize, update, snapshots.
func (c *contractSpecs) diskChangeSpecs() {
	st, cc := c.st, c.cc
	It(ClauseText(ClauseResize), labels("iaas", cpiv2.MethodCreateDisk, cpiv2.MethodResizeDisk), func(ctx SpecContext) {
		t := st.tracker()
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
		// No multiple of a GiB, as for create_disk: a cloud may round
		// it up to the next GiB, never down.
		size := st.cfg.Env.ResizeToMiB + 3
		x := st.client.Call(ctx, cpiv2.MethodResizeDisk, "", d, size)
		skipIfNotSupported(x, "resize_disk")
		mustUnread(x, ClauseResize)
		if st.cfg.Oracle == nil {
			notChecked("resize_disk succeeded; the new size is not checked: no oracle")
		}
		od, ok, err := st.cfg.Oracle.Disk(ctx, d)
		if err != nil || !ok || od.SizeMiB < size || od.SizeMiB > roundUpGiB(size) {
			violate(violation(ClauseResize, fmt.Sprintf("resize_disk to %d MiB succeeded but the IaaS disk is %d MiB (oracle: %v)", size, od.SizeMiB, err), x))
		}
	})

	It(ClauseText(ClauseUpdateDisk), labels("iaas", cpiv2.MethodCreateDisk, cpiv2.MethodUpdateDisk), func(ctx SpecContext) {
		if st.client.APIVersion < 2 {
			skipWith("not applicable: update_disk exists from api_version 2")
		}
		t := st.tracker()
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
		size := st.cfg.Env.ResizeToMiB + 3 // no multiple of a GiB, as for resize_disk
		x := st.client.Call(ctx, cpiv2.MethodUpdateDisk, "", d, size, st.cfg.Env.DiskCloudProperties)
		skipIfNotSupported(x, "update_disk")
		mustOK(x, ClauseUpdateDisk)
		cur := d
		if string(x.Response.Result) != "null" {
			nd, err := decodeCID[cpiv2.DiskKind](x.Response.Result)
			if err != nil {
				violate(violation(ClauseUpdateDisk, "update_disk must return a disk_cid or null: "+err.Error(), x))
			}
			if nd != d {
				t.Add(Resource{Kind: KindDisk, CID: nd})
				cur = nd
			}
		}
		if st.cfg.Oracle == nil {
			notChecked("update_disk answered; the new size is not checked: no oracle")
		}
		od, ok, err := st.cfg.Oracle.Disk(ctx, cur)
		if err != nil || !ok || od.SizeMiB < size || od.SizeMiB > roundUpGiB(size) {
			violate(violation(ClauseUpdateDisk, fmt.Sprintf("update_disk to %d MiB answered but the IaaS disk %s is %d MiB (oracle: %v)", size, cur, od.SizeMiB, err), x))
		}
	})

	snapMethods := []string{cpiv2.MethodCreateDisk, cpiv2.MethodSnapshotDisk, cpiv2.MethodDeleteSnapshot}
	snapText := ""
	if cc.Thorough {
		snapMethods = append(snapMethods, cpiv2.MethodCreateVM, cpiv2.MethodAttachDisk)
		snapText = " (the second of two disks on one VM)"
	}
	It(ClauseText(ClauseSnapshot)+snapText, labels("iaas", snapMethods...), func(ctx SpecContext) {
		t := st.tracker()
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
		if cc.Thorough {
			// The Director snapshots an instance's disks while they
			// are attached: a CPI that snapshots the first disk it
			// finds on the VM, not the one it was given, shows here.
			// A VM of its own: the spec must not depend on what
			// earlier specs did to the context's VM.
			v := st.createVM(ctx, t, c.stemcell, cc.Stemcell).CID
			other := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
			st.attach(ctx, t, v, other)
			st.attach(ctx, t, v, d)
		}
		sc, x := st.snapshot(ctx, t, d)
		if st.cfg.Oracle != nil && !slices.Contains(st.inventory(ctx).Snapshots, sc) {
			violate(violation(ClauseSnapshot, fmt.Sprintf("snapshot_disk returned %s, but the IaaS has no such snapshot", sc), x))
		}
		st.checkSnapshotSource(ctx, sc, d, x)
		dx := st.client.Call(ctx, cpiv2.MethodDeleteSnapshot, "", sc)
		mustUnread(dx, ClauseSnapshot)
		t.Forget(Resource{Kind: KindSnapshot, CID: sc})
		if st.cfg.Oracle != nil {
			inv := st.inventory(ctx)
			if slices.Contains(inv.Snapshots, sc) {
				violate(violation(ClauseSnapshot, fmt.Sprintf("delete_snapshot of %s succeeded, but the IaaS still has it", sc), dx))
			}
			// The Director deletes a snapshot and keeps its disk.
			if !slices.Contains(inv.Disks, d) {
				violate(violation(ClauseSnapshot, fmt.Sprintf("delete_snapshot of %s also deleted disk %s, the disk it was taken of", sc, d), dx))
			}
		}
	})

	It(ClauseText(ClauseDeleteSnapshot), labels("errors", cpiv2.MethodCreateDisk, cpiv2.MethodSnapshotDisk, cpiv2.MethodDeleteSnapshot), func(ctx SpecContext) {
		t := st.tracker()
		d := st.createDisk(ctx, t, st.cfg.Env.DiskSizeMiB, "")
		sc, _ := st.snapshot(ctx, t, d)
		mustUnread(st.client.Call(ctx, cpiv2.MethodDeleteSnapshot, "", sc), ClauseSnapshot)
		t.Forget(Resource{Kind: KindSnapshot, CID: sc})
		x := st.client.Call(ctx, cpiv2.MethodDeleteSnapshot, "", sc)
		checkWire(x)
		if e := x.Response.Error; e != nil && e.Type != cpiv2.TypeDiskNotFound {
			violate(violation(ClauseDeleteSnapshot, fmt.Sprintf("delete_snapshot of deleted snapshot %s returned %s: %q (the Director's orphan clean-up tolerates only success or DiskNotFound)", sc, e.Type, e.Message), x))
		}
	})
}
