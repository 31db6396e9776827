package simulator

import (
	"context"
	"encoding/json"
	"maps"
	"path"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/simulator/diskmodel"
)

// The records check compares what each disk was made with and carries:
// each planted difference between the cloud, the API and the workload's
// request is named; the honest state is clean.
func TestDiskContentsCheck(t *testing.T) {
	const cid = "disk-1"
	deployment, az, inst := "sim", "z1", "worker/i-0"
	honestProps := `{"encrypted":true,"iops":3000,"name":"d","tags":{"tier":"gold"},"type":"fast"}`
	honest := func() (View, map[string]fakeiaas.Disk) {
		sent := jsonValue(OpMetadata(7)).(map[string]any)
		v := View{
			Disks: []director.DiskInfo{{Name: "d", CID: cid, Deployment: &deployment, Instance: &inst, AZ: &az, DiskPoolName: DiskPool,
				SizeMiB: WorkloadDiskMiB, Metadata: sent}},
			Instances:  []director.InstanceInfo{{Job: "worker", ID: "i-0", AZ: &az}},
			Deployment: deployment,
			LastOK:     map[string]Promise{"d": {Instance: "i0", CID: cid, Meta: 7}},
		}
		d := fakeiaas.Disk{CID: cpiv2.MustCID[cpiv2.DiskKind](cid), SizeMiB: WorkloadDiskMiB, CloudProperties: json.RawMessage(honestProps),
			Locality: cpiv2.MustCID[cpiv2.VMKind]("vm-1"),
			Metadata: cpiv2.Metadata{"director": DirectorName, "deployment": deployment, "set_by": "cpilab-simulate", "serial": "7",
				"labels": `{"serial":7,"tier":"gold"}`, "slot-1": "cpilab"}}
		return v, map[string]fakeiaas.Disk{cid: d}
	}
	v, iaas := honest()
	if bad := checkDiskContents(v, iaas); len(bad) != 0 {
		t.Fatalf("the honest state: %v", bad)
	}
	for _, c := range []struct {
		name  string
		plant func(v *View, d *fakeiaas.Disk)
		want  string
	}{
		{"the disk type's cloud properties dropped", func(v *View, d *fakeiaas.Disk) { d.CloudProperties = json.RawMessage(`{"name":"d"}`) }, "create_disk was given cloud_properties"},
		{"the name left out", func(v *View, d *fakeiaas.Disk) {
			d.CloudProperties = json.RawMessage(`{"encrypted":true,"iops":3000,"tags":{"tier":"gold"},"type":"fast"}`)
		}, "create_disk was given cloud_properties"},
		{"the properties nested under a key", func(v *View, d *fakeiaas.Disk) {
			d.CloudProperties = json.RawMessage(`{"name":"d","cloud_properties":{"encrypted":true,"iops":3000,"tags":{"tier":"gold"},"type":"fast"}}`)
		}, "create_disk was given cloud_properties"},
		{"another deployment listed", func(v *View, d *fakeiaas.Disk) { other := "other"; v.Disks[0].Deployment = &other }, `lists deployment "other"`},
		{"no AZ listed for an attached disk", func(v *View, d *fakeiaas.Disk) { v.Disks[0].AZ = nil }, "lists it in AZ null, attached to instance worker/i-0 of AZ \"z1\""},
		{"no VM for locality", func(v *View, d *fakeiaas.Disk) { d.Locality = cpiv2.VMCID{} }, "no VM for locality"},
		{"an unknown disk pool listed", func(v *View, d *fakeiaas.Disk) { v.Disks[0].DiskPoolName = "huge" }, "which the cloud config does not have"},
		{"made from the other disk pool", func(v *View, d *fakeiaas.Disk) {
			v.Disks[0].DiskPoolName = LargeDiskPool
			d.CloudProperties = json.RawMessage(`{"encrypted":false,"iops":500,"name":"d","tags":{"tier":"bronze"},"type":"standard"}`)
		}, `lists disk pool "large"; the workload asked for "small"`},
		{"the API lists no metadata", func(v *View, d *fakeiaas.Disk) { v.Disks[0].Metadata = map[string]any{} }, "lists metadata {}"},
		{"the API lists older metadata", func(v *View, d *fakeiaas.Disk) {
			v.Disks[0].Metadata = jsonValue(OpMetadata(6)).(map[string]any)
		}, "lists metadata"},
		{"the new metadata merged into the older", func(v *View, d *fakeiaas.Disk) {
			merged := jsonValue(OpMetadata(6)).(map[string]any)
			maps.Copy(merged, v.Disks[0].Metadata)
			v.Disks[0].Metadata = merged
		}, `"slot-0":"cpilab"`},
		{"the cloud never got the metadata", func(v *View, d *fakeiaas.Disk) { d.Metadata = nil }, "tag deployment is absent"},
		{"the director tag missing", func(v *View, d *fakeiaas.Disk) { delete(d.Metadata, "director") }, "tag director is absent"},
		{"the deployment tag wrong", func(v *View, d *fakeiaas.Disk) { d.Metadata["deployment"] = "other" }, `tag deployment is "other"`},
		{"a number sent as Go prints it", func(v *View, d *fakeiaas.Disk) { d.Metadata["serial"] = "7.0" }, `tag serial is "7.0"`},
		{"an object sent as Go prints it", func(v *View, d *fakeiaas.Disk) { d.Metadata["labels"] = "map[serial:7 tier:gold]" }, `tag labels is "map[serial:7 tier:gold]"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			v, iaas := honest()
			d := iaas[cid]
			d.Metadata = maps.Clone(d.Metadata)
			c.plant(&v, &d)
			iaas[cid] = d
			bad := checkDiskContents(v, iaas)
			if len(bad) == 0 || !strings.Contains(strings.Join(bad, "; "), c.want) {
				t.Fatalf("got %q, want a finding containing %q", bad, c.want)
			}
		})
	}
	// Without metadata sent, none is asked of the disk.
	v, iaas = honest()
	v.LastOK["d"] = Promise{Instance: "i0", CID: cid}
	d := iaas[cid]
	d.Metadata = nil
	iaas[cid] = d
	if bad := checkDiskContents(v, iaas); len(bad) != 0 {
		t.Fatalf("no metadata sent: %v", bad)
	}
}

// End to end: a provide with metadata on the reference Director is clean;
// the same run with the cloud's tags changed behind the Director's back
// fails director-records-match-iaas naming the tag.
func TestMetadataPromiseEndToEnd(t *testing.T) {
	ops := controlOps(t, "c0 provide disk=d vm=0 meta=7")
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true, SkipLinearizability: true}
	if o := Simulate(cfg); o.Err != nil {
		t.Fatalf("the reference Director: %v", o.Err)
	}
	changed := 0
	cfg.tamper.afterOp = func(w *World, o Op) {
		changed += retagEveryDisk(t, w, func(meta cpiv2.Metadata) { meta["serial"] = "8" })
	}
	o := Simulate(cfg)
	if changed != 1 {
		t.Fatalf("changed the tags of %d disks, want 1", changed)
	}
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvRecords || !strings.Contains(v.Err.Error(), `tag serial is "8"`) {
		t.Fatalf("tags changed behind the Director's back: got %v, want %s naming the tag", o.Err, InvRecords)
	}
}

// An agent that leaves its dynamic disks directory readable by all: the
// links are right, the directory's mode is not. agent-links-match-iaas
// fires at quiescence; the honest run is clean.
func TestLinkDirModeCheck(t *testing.T) {
	ops := controlOps(t, "c0 provide disk=d vm=0")
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true, SkipLinearizability: true}
	if o := Simulate(cfg); o.Err != nil {
		t.Fatalf("the reference agent: %v", o.Err)
	}
	opened := 0
	cfg.tamper.afterOp = func(w *World, o Op) {
		st, err := w.Cloud.State(context.Background())
		if err != nil {
			t.Error(err)
			return
		}
		for _, vm := range st.VMs {
			r, err := w.Cloud.Files().Open(vm.Root)
			if err != nil {
				continue
			}
			if err := r.ChmodDir(path.Dir(agent.DynamicDiskLink("x")), 0o755); err == nil {
				opened++
			}
			r.Close()
		}
	}
	o := Simulate(cfg)
	if opened == 0 {
		t.Fatal("no VM had a dynamic disks directory to open up")
	}
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvLinks || !strings.Contains(v.Err.Error(), "want a directory of mode drwx------") {
		t.Fatalf("a dynamic disks directory of mode 0755: got %v, want %s naming the mode", o.Err, InvLinks)
	}
}

// A disk left attached without its link is allowed only after a provide
// or attach that failed on an injected CPI fault (a set_disk_metadata
// between attach and link failed) or whose outcome is unknown, until an OK
// disk operation on the name; VM operations, recorded on every name, do
// not end that.
func TestUnlinkedNames(t *testing.T) {
	op := func(kind diskmodel.OpKind, vm string, call, ret int64, outcome diskmodel.Outcome) porcupine.Operation {
		return porcupine.Operation{Input: diskmodel.Input{Kind: kind, Disk: "d0", VM: vm}, Call: call, Return: ret,
			Output: diskmodel.Output{Outcome: outcome, Injected: outcome == diskmodel.Failed}}
	}
	for _, c := range []struct {
		name string
		ops  []porcupine.Operation
		want bool
	}{
		{"a failed provide", []porcupine.Operation{op(diskmodel.Provide, "i0", 1, 5, diskmodel.Failed)}, true},
		{"an attach of unknown outcome", []porcupine.Operation{op(diskmodel.Attach, "i0", 1, 5, diskmodel.Unknown)}, true},
		{"an OK provide", []porcupine.Operation{op(diskmodel.Provide, "i0", 1, 5, diskmodel.OK)}, false},
		{"a failed provide, then an OK provide", []porcupine.Operation{op(diskmodel.Provide, "i0", 1, 5, diskmodel.Failed), op(diskmodel.Provide, "i0", 6, 9, diskmodel.OK)}, false},
		{"a failed provide, then an OK detach", []porcupine.Operation{op(diskmodel.Provide, "i0", 1, 5, diskmodel.Failed), op(diskmodel.Detach, "", 6, 9, diskmodel.OK)}, false},
		{"a failed provide, then another instance's recreate", []porcupine.Operation{op(diskmodel.Provide, "i0", 1, 5, diskmodel.Failed), op(diskmodel.Reattach, "i2", 6, 9, diskmodel.OK), op(diskmodel.Evict, "i1", 10, 12, diskmodel.OK)}, true},
		{"a failed detach", []porcupine.Operation{op(diskmodel.Detach, "", 1, 5, diskmodel.Failed)}, false},
		{"a failed provide, then a failed detach", []porcupine.Operation{op(diskmodel.Provide, "i0", 1, 5, diskmodel.Failed), op(diskmodel.Detach, "", 6, 9, diskmodel.Failed)}, true},
		{"a failed provide, then a refused attach", []porcupine.Operation{op(diskmodel.Provide, "i0", 1, 5, diskmodel.Failed), op(diskmodel.Attach, "i1", 6, 9, diskmodel.Refused)}, true},
		// Race (g): a provide that failed because the Director did not wait
		// for the agent is no injected fault, and its unlinked disk is the bug.
		{"a provide failed without an injected fault", []porcupine.Operation{{Input: diskmodel.Input{Kind: diskmodel.Provide, Disk: "d0", VM: "i0"}, Call: 1, Return: 5,
			Output: diskmodel.Output{Outcome: diskmodel.Failed}}}, false},
	} {
		if got := unlinkedNames(c.ops)["d0"]; got != c.want {
			t.Errorf("%s: unlinked %v, want %v", c.name, got, c.want)
		}
	}
}

// The metadata an OK provide sent is checked when it answers: a later
// provide without metadata ends its promise before the workload is idle,
// and the planted change would go unseen by the idle and quiescent checks.
func TestMetadataCheckedWhenTheProvideAnswers(t *testing.T) {
	for _, ops := range [][]Op{
		controlOps(t, "c0 provide disk=d vm=0 meta=7", "c0 provide disk=d vm=0"),
		controlOps(t, "c0 create disk=d vm=0", "c0 attach disk=d vm=0 meta=7", "c0 provide disk=d vm=0"), // attach answers no CID
	} {
		checkMetadataWhenItAnswers(t, ops)
	}
}

func checkMetadataWhenItAnswers(t *testing.T, ops []Op) {
	t.Helper()
	cfg := SimConfig{RunConfig: RunConfig{Seed: 1}, Ops: ops, Scripted: true, SkipLinearizability: true}
	if o := Simulate(cfg); o.Err != nil {
		t.Fatalf("%v: the reference Director: %v", ops, o.Err)
	}
	cfg.tamper.afterOp = func(w *World, o Op) {
		if o.Meta != 0 {
			retagEveryDisk(t, w, func(meta cpiv2.Metadata) { delete(meta, "set_by") })
		}
	}
	o := Simulate(cfg)
	v, ok := AsViolation(o.Err)
	if !ok || v.Invariant != InvRecords || v.Phase != AfterStep || !strings.Contains(v.Err.Error(), "tag set_by is absent") {
		t.Fatalf("%v: a tag dropped right after the operation answered: got %v, want %s after the step", ops, o.Err, InvRecords)
	}
}

// retagEveryDisk changes the cloud's tags of every disk behind the
// Director's back (a copy of each disk's tags, changed by edit, set
// again) and returns how many it changed.
func retagEveryDisk(t *testing.T, w *World, edit func(cpiv2.Metadata)) int {
	t.Helper()
	st, err := w.Cloud.State(context.Background())
	if err != nil {
		t.Error(err)
		return 0
	}
	for _, d := range st.Disks {
		meta := maps.Clone(d.Metadata)
		edit(meta)
		if err := w.Cloud.SetDiskMetadata(context.Background(), d.CID, meta); err != nil {
			t.Error(err)
		}
	}
	return len(st.Disks)
}
