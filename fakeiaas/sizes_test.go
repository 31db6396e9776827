package fakeiaas_test

import (
	"encoding/json"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
)

// TestVMSizeFromCloudProperties: a VM's size comes from its instance_type
// (a known one; an unknown one gives the default), overridden by cpu, ram
// and ephemeral_disk.size; nothing gives DefaultVMSize; the size is kept
// with the VM; values that are not positive integers are refused.
func TestVMSizeFromCloudProperties(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 2)
	for _, tc := range []struct {
		name  string
		props map[string]any
		want  fakeiaas.VMSize
	}{
		{"none", nil, fakeiaas.DefaultVMSize},
		{"other keys only", map[string]any{"disk_hint": "id", "zone": "z1"}, fakeiaas.DefaultVMSize},
		{"instance type", map[string]any{"instance_type": "medium"}, fakeiaas.VMSize{CPU: 2, RAMMiB: 4096, EphemeralDiskMiB: 20480, InstanceType: "medium"}},
		{"unknown instance type", map[string]any{"instance_type": "m9.huge"},
			fakeiaas.VMSize{CPU: 1, RAMMiB: 1024, EphemeralDiskMiB: 10240, InstanceType: "m9.huge"}},
		{"explicit", map[string]any{"cpu": 3, "ram": 3072, "ephemeral_disk": map[string]any{"size": 15360, "type": "ssd"}},
			fakeiaas.VMSize{CPU: 3, RAMMiB: 3072, EphemeralDiskMiB: 15360}},
		{"instance type and ephemeral size", map[string]any{"instance_type": "large", "ephemeral_disk": map[string]any{"size": 5000}},
			fakeiaas.VMSize{CPU: 4, RAMMiB: 8192, EphemeralDiskMiB: 5000, InstanceType: "large"}},
		{"ram only", map[string]any{"ram": 8192}, fakeiaas.VMSize{CPU: 1, RAMMiB: 8192, EphemeralDiskMiB: 10240}},
	} {
		vm := mustVM(t, c, sc, tc.props)
		if vm.Size != tc.want {
			t.Errorf("%s: create_vm gave size %+v, want %+v", tc.name, vm.Size, tc.want)
		}
		got, err := c.VM(bg, vm.CID)
		if err != nil || got.Size != tc.want {
			t.Errorf("%s: the VM as read back has size %+v (%v), want %+v", tc.name, got.Size, err, tc.want)
		}
	}
	for _, bad := range []struct {
		props string
		code  *fakeiaas.Error
	}{
		{`{"cpu": 0}`, fakeiaas.ErrInvalid},
		{`{"ram": -1}`, fakeiaas.ErrInvalid},
		{`{"ram": "2G"}`, fakeiaas.ErrInvalid},
		{`{"cpu": 1.5}`, fakeiaas.ErrInvalid},
		{`{"ephemeral_disk": {"size": 0}}`, fakeiaas.ErrInvalid},
		{`{"instance_type": 3}`, fakeiaas.ErrInvalid},
		{`{"cpu": 100000}`, fakeiaas.ErrTooLarge},
		{`{"ephemeral_disk": {"size": 99999999}}`, fakeiaas.ErrTooLarge},
	} {
		_, err := c.CreateVM(bg, fakeiaas.VMSpec{AgentID: "agent-1", StemcellCID: sc.CID, CloudProperties: json.RawMessage(bad.props)})
		wantErr(t, "create_vm with "+bad.props, err, cpiv2.ErrCloudError, bad.code)
	}
	if names := fakeiaas.InstanceTypeNames(); len(names) != len(fakeiaas.InstanceTypes) || names[0] != "small" || names[len(names)-1] != "xlarge" {
		t.Errorf("InstanceTypeNames() = %v, want smallest first", names)
	}
}
