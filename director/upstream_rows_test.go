package director_test

import (
	"encoding/json"
	"net/http"
	"testing"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
)

// The rows of docs/upstream.md where cpilab now answers as upstream does,
// whatever the profile.

// A disk created without metadata lists "metadata": {} and "cpi": "" (the
// cpi column defaults to the empty string, a null metadata_json reads as {}), and
// "metadata": {} on such a disk is no change: set_disk_metadata is not
// called (upstream's `{} != {}` is false).
func TestAPIListUnsetFieldsAsUpstream(t *testing.T) {
	a := newAPIWorld(t)
	inst := a.insts[0]
	a.done(a.d.CreateDynamicDisk("admin", director.CreateDiskRequest{DiskName: "bare", DiskPoolName: "small",
		Deployment: inst.Deployment, AZ: inst.AZ, DiskSize: 4}))
	status, b := a.call(t, a.token(t), route{method: "GET", path: "/dynamic_disks"})
	var raw []map[string]json.RawMessage
	if status != http.StatusOK || json.Unmarshal(b, &raw) != nil || len(raw) != 1 {
		t.Fatalf("GET /dynamic_disks = %d %s", status, b)
	}
	if string(raw[0]["metadata"]) != "{}" || string(raw[0]["cpi"]) != `""` {
		t.Errorf("a disk created without metadata lists metadata %s, cpi %s; want {} and \"\"", raw[0]["metadata"], raw[0]["cpi"])
	}
	for _, op := range []func() (int64, error){
		func() (int64, error) {
			return a.d.AttachDynamicDisk("admin", director.AttachRequest{DiskName: "bare", InstanceID: inst.ID, Metadata: map[string]any{}})
		},
		func() (int64, error) {
			return a.d.Provide("admin", director.ProvideRequest{DiskName: "bare", DiskPoolName: "small", DiskSize: 4,
				InstanceID: inst.ID, Metadata: map[string]any{}})
		},
	} {
		a.done(op())
	}
	if n := a.history(fakeiaas.OpSetDiskMetadata, ""); n != 0 {
		t.Errorf("metadata {} on a disk without metadata called set_disk_metadata %d times; want none", n)
	}
	a.done(a.d.Provide("admin", director.ProvideRequest{DiskName: "bare", DiskPoolName: "small", DiskSize: 4,
		InstanceID: inst.ID, Metadata: map[string]any{"k": "v"}}))
	if n := a.history(fakeiaas.OpSetDiskMetadata, ""); n != 1 {
		t.Errorf("new metadata called set_disk_metadata %d times; want 1", n)
	}
}
