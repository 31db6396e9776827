package cpiv2_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
)

// tracer collects a caller's CallRecords.
type tracer struct{ recs []cpiv2.CallRecord }

func (tr *tracer) add(r cpiv2.CallRecord) { tr.recs = append(tr.recs, r) }

func (tr *tracer) methods() string {
	var m []string
	for _, r := range tr.recs {
		m = append(m, r.Method)
	}
	return strings.Join(m, ",")
}

func TestNegotiationMatrix(t *testing.T) {
	ctx := cpiv2.WithStemcellAPIVersion(context.Background(), 2)
	for _, p := range cpiv2.Profiles() {
		for cpiMax := 1; cpiMax <= 3; cpiMax++ {
			t.Run(fmt.Sprintf("%s/cpi-v%d", p.Name, cpiMax), func(t *testing.T) {
				tr := &tracer{}
				l := cpiv2.NewLoopback(newMemCPI(), cpiv2.LoopbackConfig{Profile: p, MaxAPIVersion: cpiMax, Trace: tr.add})
				ok, err := l.HasVM(ctx, cpiv2.MustCID[cpiv2.VMKind]("vm-x"))
				var want int
				switch p.Name {
				case "director-v1":
					want = 1
				case "director-current":
					if cpiMax < 2 {
						if !errors.Is(err, cpiv2.ErrRefused) || !errors.Is(err, cpiv2.ErrNotSupported) {
							t.Fatalf("err = %v, want a NotSupported refusal", err)
						}
						if tr.methods() != "info" {
							t.Errorf("calls = %s, want info only", tr.methods())
						}
						return
					}
					want = min(3, cpiMax)
				default:
					want = min(2, cpiMax)
				}
				if err != nil || ok {
					t.Fatalf("has_vm = %v, %v", ok, err)
				}
				last := tr.recs[len(tr.recs)-1]
				if p.Name == "director-v1" {
					if tr.methods() != "has_vm" {
						t.Errorf("calls = %s, want has_vm only (no negotiation)", tr.methods())
					}
					if strings.Contains(string(last.Request), "api_version") {
						t.Errorf("director-v1 sent an api_version: %s", last.Request)
					}
					return
				}
				if tr.methods() != "info,has_vm" {
					t.Errorf("calls = %s, want info,has_vm", tr.methods())
				}
				info := tr.recs[0]
				sent, err := cpiv2.DecodeRequest(info.Request)
				if err != nil {
					t.Fatal(err)
				}
				if wantInfo := p.InfoAPIVersion; info.APIVersion != wantInfo || sent.APIVersion != wantInfo {
					t.Errorf("info request %s, want api_version %d", info.Request, wantInfo)
				}
				if last.APIVersion != want || !strings.HasSuffix(string(last.Request), fmt.Sprintf(`,"api_version":%d}`, want)) {
					t.Errorf("has_vm request %s, want api_version %d", last.Request, want)
				}
				if !strings.Contains(string(last.Request), `"vm":{"stemcell":{"api_version":2}}`) {
					t.Errorf("has_vm request %s lacks the stemcell api_version", last.Request)
				}
				if v, err := l.Negotiate(ctx); v != want || err != nil {
					t.Errorf("Negotiate = %d, %v; want %d", v, err, want)
				}
			})
		}
	}
}

func TestInfoNotImplemented(t *testing.T) {
	ctx := context.Background()
	for _, p := range cpiv2.Profiles()[1:] {
		m := newMemCPI()
		m.infoErr = cpiv2.NewError(cpiv2.TypeNotImplemented, "no info here")
		l := cpiv2.NewLoopback(m, cpiv2.LoopbackConfig{Profile: p})
		v, err := l.Negotiate(ctx)
		if p.MinCPIAPIVersion >= 2 {
			var re *cpiv2.RefusalError
			if !errors.As(err, &re) || !errors.Is(err, cpiv2.ErrNotSupported) || re.Err.Message != "CPI must report api_version via info" {
				t.Errorf("%s: err = %v, want NotSupported %q", p.Name, err, "CPI must report api_version via info")
			}
			continue
		}
		if v != 1 || err != nil {
			t.Errorf("%s: Negotiate = %d, %v; want 1 (NotImplemented on info means a v1 CPI)", p.Name, v, err)
		}
	}
	// Any other info error fails the negotiation as it is.
	m := newMemCPI()
	m.infoErr = cpiv2.NewError(cpiv2.TypeCloudError, "IaaS down")
	_, err := cpiv2.NewLoopback(m, cpiv2.LoopbackConfig{Profile: cpiv2.ProfileCLI}).Negotiate(ctx)
	if !errors.Is(err, cpiv2.ErrCloudError) || errors.Is(err, cpiv2.ErrRefused) {
		t.Errorf("err = %v, want the CloudError", err)
	}
}

func TestUpdateDiskRefusedWithoutRequest(t *testing.T) {
	ctx := context.Background()
	args := cpiv2.UpdateDiskArgs{DiskCID: cpiv2.MustCID[cpiv2.DiskKind]("disk-1"), NewSizeMiB: 2048}
	for _, tc := range []struct {
		p         cpiv2.Profile
		cpiMax    int
		wantCalls string
	}{
		{cpiv2.ProfileDirectorV1, 3, ""},
		{cpiv2.ProfileCLI, 1, "info"},
		{cpiv2.ProfileDirectorV2, 1, "info"},
	} {
		tr := &tracer{}
		m := newMemCPI()
		l := cpiv2.NewLoopback(m, cpiv2.LoopbackConfig{Profile: tc.p, MaxAPIVersion: tc.cpiMax, Trace: tr.add})
		_, err := l.UpdateDisk(ctx, args)
		var re *cpiv2.RefusalError
		if !errors.As(err, &re) || !errors.Is(err, cpiv2.ErrNotSupported) || re.Method != "update_disk" {
			t.Errorf("%s with a v%d CPI: err = %v, want an update_disk refusal", tc.p.Name, tc.cpiMax, err)
		}
		if tr.methods() != tc.wantCalls {
			t.Errorf("%s with a v%d CPI: calls = %q, want %q", tc.p.Name, tc.cpiMax, tr.methods(), tc.wantCalls)
		}
	}
	// At 2 it goes through; a null result means the CID is unchanged.
	cid, err := cpiv2.NewLoopback(newMemCPI(), cpiv2.LoopbackConfig{Profile: cpiv2.ProfileCLI}).UpdateDisk(ctx, args)
	if err != nil || !cid.IsZero() {
		t.Errorf("update_disk at 2 = %v, %v; want the zero CID", cid, err)
	}
}

func TestResultShapesFollowVersion(t *testing.T) {
	ctx := context.Background()
	for _, p := range cpiv2.Profiles() {
		l := cpiv2.NewLoopback(newMemCPI(), cpiv2.LoopbackConfig{Profile: p})
		v, err := l.Negotiate(ctx)
		if err != nil {
			t.Fatal(err)
		}
		nets := cpiv2.Networks{"default": {Type: "manual", IP: "10.0.0.5"}}
		vm, err := l.CreateVM(ctx, cpiv2.CreateVMArgs{AgentID: "a", StemcellCID: cpiv2.MustCID[cpiv2.StemcellKind]("sc-1"), Networks: nets})
		if err != nil {
			t.Fatalf("%s: create_vm: %v", p.Name, err)
		}
		if vm.VMCID.IsZero() || (v >= 2) != (vm.Networks != nil) {
			t.Errorf("%s (v%d): create_vm = %+v", p.Name, v, vm)
		}
		if v >= 2 && vm.Networks["default"].IP != "10.0.0.5" {
			t.Errorf("%s: networks = %+v", p.Name, vm.Networks)
		}
		disk, err := l.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 10, VMCID: vm.VMCID})
		if err != nil {
			t.Fatal(err)
		}
		hint, err := l.AttachDisk(ctx, vm.VMCID, disk)
		if err != nil {
			t.Fatalf("%s: attach_disk: %v", p.Name, err)
		}
		if (v >= 2) == hint.IsZero() {
			t.Errorf("%s (v%d): attach_disk hint = %+v", p.Name, v, hint)
		}
		disks, err := l.GetDisks(ctx, vm.VMCID)
		if err != nil || len(disks) != 1 || disks[0] != disk {
			t.Errorf("%s: get_disks = %v, %v", p.Name, disks, err)
		}
		sc, err := l.CreateStemcell(ctx, cpiv2.CreateStemcellArgs{ImagePath: "/img", Env: &cpiv2.StemcellEnv{Tags: map[string]string{"a": "b"}}})
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasSuffix(sc.String(), "-tags1") != (v >= 3) {
			t.Errorf("%s (v%d): create_stemcell env passed = %v", p.Name, v, strings.HasSuffix(sc.String(), "-tags1"))
		}
	}
}

func TestNoDiskHint(t *testing.T) {
	ctx := context.Background()
	m := newMemCPI()
	m.zeroHint = true
	l := cpiv2.NewLoopback(m, cpiv2.LoopbackConfig{})
	disk, _ := l.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 1})
	_, err := l.AttachDisk(ctx, cpiv2.MustCID[cpiv2.VMKind]("vm-1"), disk)
	var ir *cpiv2.InvalidResponseError
	if !errors.Is(err, cpiv2.ErrNoDiskHint) || !errors.As(err, &ir) || ir.Method != "attach_disk" || ir.RequestID == "" {
		t.Errorf("err = %v, want ErrNoDiskHint naming attach_disk and its request_id", err)
	}
	// At api_version 1 the result is not looked at.
	l1 := cpiv2.NewLoopback(m, cpiv2.LoopbackConfig{Profile: cpiv2.ProfileDirectorV1})
	if _, err := l1.AttachDisk(ctx, cpiv2.MustCID[cpiv2.VMKind]("vm-1"), disk); err != nil {
		t.Errorf("v1 attach_disk: %v", err)
	}
}

func TestLoopbackErrorsKeepIdentity(t *testing.T) {
	ctx := context.Background()
	m := newMemCPI()
	l := cpiv2.NewLoopback(m, cpiv2.LoopbackConfig{})
	err := l.DeleteVM(ctx, cpiv2.MustCID[cpiv2.VMKind]("vm-none"))
	var e *cpiv2.Error
	if !errors.Is(err, cpiv2.ErrVMNotFound) || !errors.As(err, &e) || e.Type != cpiv2.TypeVMNotFound {
		t.Errorf("delete_vm = %v, want VMNotFound", err)
	}
	disk, _ := l.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 1})
	err = l.DetachDisk(ctx, cpiv2.MustCID[cpiv2.VMKind]("vm-1"), disk)
	if !errors.As(err, &e) || e.Type != cpiv2.TypeDiskNotAttached || !e.OkToRetry {
		t.Errorf("detach_disk = %v, want a retryable DiskNotAttached", err)
	}
	m.fail = errors.New("plain Go error")
	_, err = l.CreateDisk(ctx, cpiv2.CreateDiskArgs{SizeMiB: 1})
	if !errors.As(err, &e) || e.Type != cpiv2.TypeCloudError || e.Message != "plain Go error" {
		t.Errorf("create_disk = %v, want a CloudError carrying the text", err)
	}
}

func TestLoopbackCallInfo(t *testing.T) {
	m := newMemCPI()
	l := cpiv2.NewLoopback(m, cpiv2.LoopbackConfig{DirectorUUID: "dir-1"})
	ctx := cpiv2.WithStemcellAPIVersion(context.Background(), 2)
	if _, err := l.HasVM(ctx, cpiv2.MustCID[cpiv2.VMKind]("vm-1")); err != nil {
		t.Fatal(err)
	}
	if len(m.calls) != 2 {
		t.Fatalf("%d calls, want 2", len(m.calls))
	}
	info, call := m.calls[0], m.calls[1]
	if info.APIVersion != 0 || info.RequestID != "cpi-000001" {
		t.Errorf("info CallInfo = %+v", info)
	}
	if call.APIVersion != 3 || call.StemcellAPIVersion != 2 || call.DirectorUUID != "dir-1" || call.RequestID != "cpi-000002" {
		t.Errorf("has_vm CallInfo = %+v", call)
	}
}
