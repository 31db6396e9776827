package cpiv2_test

import (
	"context"
	"fmt"
	"sync"

	"github.com/cpilab/cpilab/cpiv2"
)

// memCPI is a small in-memory CPI with real state, used behind a Loopback
// and a Dispatcher in tests. It implements every capability.
type memCPI struct {
	mu       sync.Mutex
	next     int
	vms      map[string]bool
	disks    map[string]string // disk cid → attached vm cid ("" detached)
	calls    []cpiv2.CallInfo  // the CallInfo of every call, in order
	infoErr  error             // returned by Info when set
	zeroHint bool              // AttachDisk returns a zero hint
	fail     error             // returned by CreateDisk when set
}

func newMemCPI() *memCPI {
	return &memCPI{vms: map[string]bool{}, disks: map[string]string{}}
}

func (m *memCPI) record(ctx context.Context) {
	ci, _ := cpiv2.CallInfoFrom(ctx)
	m.mu.Lock()
	m.calls = append(m.calls, ci)
	m.mu.Unlock()
}

func (m *memCPI) id(prefix string) string {
	m.next++
	return fmt.Sprintf("%s-%d", prefix, m.next)
}

func (m *memCPI) Info(ctx context.Context) (cpiv2.Info, error) {
	m.record(ctx)
	if m.infoErr != nil {
		return cpiv2.Info{}, m.infoErr
	}
	return cpiv2.Info{StemcellFormats: []string{"mem-raw"}}, nil
}

func (m *memCPI) CreateStemcell(ctx context.Context, a cpiv2.CreateStemcellArgs) (cpiv2.StemcellCID, error) {
	m.record(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	tags := ""
	if a.Env != nil {
		tags = fmt.Sprintf("-tags%d", len(a.Env.Tags))
	}
	return cpiv2.NewStemcellCID(m.id("sc") + tags)
}

func (m *memCPI) DeleteStemcell(ctx context.Context, _ cpiv2.StemcellCID) error {
	m.record(ctx)
	return nil
}

func (m *memCPI) CreateVM(ctx context.Context, a cpiv2.CreateVMArgs) (cpiv2.CreateVMResult, error) {
	m.record(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	cid := cpiv2.MustCID[cpiv2.VMKind](m.id("vm"))
	m.vms[cid.String()] = true
	return cpiv2.CreateVMResult{VMCID: cid, Networks: a.Networks}, nil
}

func (m *memCPI) DeleteVM(ctx context.Context, cid cpiv2.VMCID) error {
	m.record(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.vms[cid.String()] {
		return cpiv2.NewError(cpiv2.TypeVMNotFound, "VM %s not found", cid)
	}
	delete(m.vms, cid.String())
	return nil
}

func (m *memCPI) HasVM(ctx context.Context, cid cpiv2.VMCID) (bool, error) {
	m.record(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.vms[cid.String()], nil
}

func (m *memCPI) RebootVM(ctx context.Context, _ cpiv2.VMCID) error { m.record(ctx); return nil }

func (m *memCPI) SetVMMetadata(ctx context.Context, _ cpiv2.VMCID, _ cpiv2.Metadata) error {
	m.record(ctx)
	return nil
}

func (m *memCPI) CalculateVMCloudProperties(ctx context.Context, r cpiv2.VMResources) (cpiv2.CloudProps, error) {
	m.record(ctx)
	return cpiv2.NewCloudProps(map[string]int{"cpu": r.CPU, "ram": r.RAM})
}

func (m *memCPI) CreateDisk(ctx context.Context, a cpiv2.CreateDiskArgs) (cpiv2.DiskCID, error) {
	m.record(ctx)
	if m.fail != nil {
		return cpiv2.DiskCID{}, m.fail
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	cid := cpiv2.MustCID[cpiv2.DiskKind](m.id(fmt.Sprintf("disk%d", a.SizeMiB)))
	m.disks[cid.String()] = ""
	return cid, nil
}

func (m *memCPI) DeleteDisk(ctx context.Context, cid cpiv2.DiskCID) error {
	m.record(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.disks[cid.String()]; !ok {
		return cpiv2.NewError(cpiv2.TypeDiskNotFound, "disk %s not found", cid)
	}
	delete(m.disks, cid.String())
	return nil
}

func (m *memCPI) HasDisk(ctx context.Context, cid cpiv2.DiskCID) (bool, error) {
	m.record(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	_, ok := m.disks[cid.String()]
	return ok, nil
}

func (m *memCPI) AttachDisk(ctx context.Context, vm cpiv2.VMCID, disk cpiv2.DiskCID) (cpiv2.DiskHint, error) {
	m.record(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.disks[disk.String()]; !ok {
		return cpiv2.DiskHint{}, cpiv2.NewError(cpiv2.TypeDiskNotFound, "disk %s not found", disk)
	}
	m.disks[disk.String()] = vm.String()
	if m.zeroHint {
		return cpiv2.DiskHint{}, nil
	}
	return cpiv2.DiskHint{Path: "/dev/sdc", ID: disk.String()}, nil
}

func (m *memCPI) DetachDisk(ctx context.Context, _ cpiv2.VMCID, disk cpiv2.DiskCID) error {
	m.record(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.disks[disk.String()] == "" {
		return cpiv2.NewError(cpiv2.TypeDiskNotAttached, "disk %s is not attached", disk).Retryable()
	}
	m.disks[disk.String()] = ""
	return nil
}

func (m *memCPI) SetDiskMetadata(ctx context.Context, _ cpiv2.DiskCID, _ cpiv2.Metadata) error {
	m.record(ctx)
	return nil
}

func (m *memCPI) GetDisks(ctx context.Context, vm cpiv2.VMCID) ([]cpiv2.DiskCID, error) {
	m.record(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []cpiv2.DiskCID
	for d, v := range m.disks {
		if v == vm.String() {
			out = append(out, cpiv2.MustCID[cpiv2.DiskKind](d))
		}
	}
	return out, nil
}

func (m *memCPI) ResizeDisk(ctx context.Context, _ cpiv2.DiskCID, _ int) error {
	m.record(ctx)
	return nil
}

func (m *memCPI) UpdateDisk(ctx context.Context, a cpiv2.UpdateDiskArgs) (cpiv2.DiskCID, error) {
	m.record(ctx)
	return cpiv2.DiskCID{}, nil
}

func (m *memCPI) SnapshotDisk(ctx context.Context, cid cpiv2.DiskCID, _ cpiv2.Metadata) (cpiv2.SnapshotCID, error) {
	m.record(ctx)
	return cpiv2.NewSnapshotCID("snap-" + cid.String())
}

func (m *memCPI) DeleteSnapshot(ctx context.Context, _ cpiv2.SnapshotCID) error {
	m.record(ctx)
	return nil
}

// coreOnly hides every optional capability of a CPI.
type coreOnly struct{ cpiv2.Core }

var _ cpiv2.CPI = (*memCPI)(nil)
