package cpiv2_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
)

func TestCIDsRejectEmptyAndWrongTypes(t *testing.T) {
	if _, err := cpiv2.NewVMCID(""); !errors.Is(err, cpiv2.ErrEmptyCID) {
		t.Fatalf("NewVMCID(\"\") = %v, want ErrEmptyCID", err)
	}
	var c cpiv2.DiskCID
	if err := json.Unmarshal([]byte(`""`), &c); !errors.Is(err, cpiv2.ErrEmptyCID) {
		t.Fatalf("decoding \"\" as a disk CID: %v, want ErrEmptyCID", err)
	}
	if err := json.Unmarshal([]byte(`42`), &c); err == nil {
		t.Fatal("decoding 42 as a disk CID succeeded")
	}
	if err := json.Unmarshal([]byte(`null`), &c); err != nil || !c.IsZero() {
		t.Fatalf("null should decode to the zero CID: %v %v", c, err)
	}
	b, _ := json.Marshal(cpiv2.MustCID[cpiv2.VMKind]("vm-1"))
	if string(b) != `"vm-1"` {
		t.Fatalf("VM CID encodes as %s", b)
	}
	b, _ = json.Marshal(cpiv2.VMCID{})
	if string(b) != `null` {
		t.Fatalf("zero VM CID encodes as %s, want null", b)
	}
}

func TestDiskHintForms(t *testing.T) {
	cases := []struct {
		in      string
		want    cpiv2.DiskHint
		wantErr bool
	}{
		{in: `"/dev/sdc"`, want: cpiv2.StringHint("/dev/sdc")},
		{in: `{"path":"/dev/sdc","volume_id":"2"}`, want: cpiv2.DiskHint{Path: "/dev/sdc", VolumeID: "2"}},
		{in: `{"lun":"0","host_device_id":"abc","iscsi_settings":{"target":"t"}}`,
			want: cpiv2.DiskHint{LUN: "0", HostDeviceID: "abc", ISCSI: &cpiv2.ISCSISettings{Target: "t"}}},
		{in: `{"lun":0}`, wantErr: true},
		{in: `{"path":null}`, wantErr: true},
		{in: `{"unknown":["x"]}`, wantErr: true},
		{in: `{"iscsi_settings":{"target":1}}`, wantErr: true},
		{in: `{"iscsi_settings":"t"}`, wantErr: true},
		{in: `3`, wantErr: true},
		{in: `[]`, wantErr: true},
	}
	for _, tc := range cases {
		var h cpiv2.DiskHint
		err := json.Unmarshal([]byte(tc.in), &h)
		if tc.wantErr {
			if !errors.Is(err, cpiv2.ErrBadDiskHint) {
				t.Errorf("%s: err = %v, want ErrBadDiskHint", tc.in, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(h, tc.want) {
			t.Errorf("%s decoded to %+v, want %+v", tc.in, h, tc.want)
		}
		out, _ := json.Marshal(h)
		var back cpiv2.DiskHint
		if err := json.Unmarshal(out, &back); err != nil || !reflect.DeepEqual(back, h) {
			t.Errorf("%s did not round-trip: %s → %+v (%v)", tc.in, out, back, err)
		}
	}
	if (cpiv2.DiskHint{}).IsZero() != true || cpiv2.StringHint("3").IsZero() {
		t.Fatal("IsZero wrong")
	}
}

func TestErrorHierarchy(t *testing.T) {
	err := fmt.Errorf("delete_vm: %w", cpiv2.NewError(cpiv2.TypeVMNotFound, "vm-1 is gone"))
	if !errors.Is(err, cpiv2.ErrVMNotFound) || !errors.Is(err, cpiv2.ErrCloudError) {
		t.Fatal("VMNotFound should match itself and CloudError")
	}
	if errors.Is(err, cpiv2.ErrCpiError) || errors.Is(err, cpiv2.ErrDiskNotFound) {
		t.Fatal("VMNotFound matched an unrelated type")
	}
	if !errors.Is(cpiv2.NewError(cpiv2.TypeNotSupported, "x"), cpiv2.ErrCpiError) {
		t.Fatal("NotSupported should descend from CpiError")
	}
	var e *cpiv2.Error
	if !errors.As(err, &e) || e.Message != "vm-1 is gone" {
		t.Fatalf("errors.As lost the message: %+v", e)
	}
	if got := cpiv2.AsError(errors.New("boom")); got.Type != cpiv2.TypeCloudError || got.Message != "boom" {
		t.Fatalf("AsError of a plain error = %+v", got)
	}
	if cpiv2.TypeUnknown.Known() || !cpiv2.TypeDiskNotFound.Known() {
		t.Fatal("Known() disagrees with the Director's KNOWN_RPC_ERRORS")
	}
	if r := cpiv2.NewError(cpiv2.TypeVMCreationFailed, "x").Retryable(); !r.OkToRetry {
		t.Fatal("Retryable did not set ok_to_retry")
	}
}
