package fakeiaas

import (
	"slices"
	"strings"
)

// VMSize is how big a VM is, as fakeiaas makes it from the VM's
// cloud_properties: the size of its instance_type, if fakeiaas knows it,
// else DefaultVMSize; then "cpu", "ram" (MiB) and "ephemeral_disk": {"size"}
// (MiB), each where given, override that part. It is what
// calculate_vm_cloud_properties must ask for: the Director creates VMs of
// at least the vm_resources it handed the CPI.
type VMSize struct {
	CPU              int `json:"cpu"`
	RAMMiB           int `json:"ram_mib"`
	EphemeralDiskMiB int `json:"ephemeral_disk_mib"`
	// InstanceType is the instance_type the VM was created with ("" when
	// none); one fakeiaas does not know gives DefaultVMSize.
	InstanceType string `json:"instance_type,omitempty"`
}

// DefaultVMSize is the size of a VM whose cloud_properties name no known
// instance_type and none of cpu, ram or ephemeral_disk.size: 1 CPU,
// 1024 MiB of RAM, a 10240 MiB ephemeral disk.
var DefaultVMSize = VMSize{CPU: 1, RAMMiB: 1024, EphemeralDiskMiB: 10240}

// InstanceTypes are the instance types fakeiaas knows, each with its size
// (the ephemeral disk is the type's default; ephemeral_disk.size overrides
// it):
//
//	small   1 CPU   2048 MiB   10240 MiB
//	medium  2 CPU   4096 MiB   20480 MiB
//	large   4 CPU   8192 MiB   40960 MiB
//	xlarge  8 CPU  16384 MiB   81920 MiB
var InstanceTypes = map[string]VMSize{
	"small":  {CPU: 1, RAMMiB: 2048, EphemeralDiskMiB: 10240},
	"medium": {CPU: 2, RAMMiB: 4096, EphemeralDiskMiB: 20480},
	"large":  {CPU: 4, RAMMiB: 8192, EphemeralDiskMiB: 40960},
	"xlarge": {CPU: 8, RAMMiB: 16384, EphemeralDiskMiB: 81920},
}

// Limits on a VM's size: MaxVMCPU CPUs and MaxVMRAMMiB of RAM (4 TiB); the
// ephemeral disk is bounded by MaxDiskSizeMiB.
const (
	MaxVMCPU    = 1024
	MaxVMRAMMiB = 4 << 20
)

// vmSizing is the part of a VM's cloud_properties that sizes it; nil
// fields were not given.
type vmSizing struct {
	InstanceType  string `json:"instance_type,omitempty"`
	CPU           *int   `json:"cpu,omitempty"`
	RAM           *int   `json:"ram,omitempty"`
	EphemeralDisk *struct {
		Size *int `json:"size,omitempty"`
	} `json:"ephemeral_disk,omitempty"`
}

// size resolves the sizing into a VMSize, refusing values that are not
// positive or beyond the limits.
func (s vmSizing) size() (VMSize, *Error) {
	out := DefaultVMSize
	if t, ok := InstanceTypes[s.InstanceType]; ok {
		out = t
	}
	out.InstanceType = s.InstanceType
	for _, f := range []struct {
		name  string
		v     *int
		max   int
		limit string
		dst   *int
	}{
		{"cpu", s.CPU, MaxVMCPU, "MaxVMCPU", &out.CPU},
		{"ram", s.RAM, MaxVMRAMMiB, "MaxVMRAMMiB", &out.RAMMiB},
		{"ephemeral_disk.size", s.ephemeralSize(), MaxDiskSizeMiB, "MaxDiskSizeMiB", &out.EphemeralDiskMiB},
	} {
		switch {
		case f.v == nil:
		case *f.v <= 0:
			return out, invalid("VM cloud_properties: %s %d must be positive", f.name, *f.v)
		case *f.v > f.max:
			return out, tooLarge("VM cloud_properties: %s %d exceeds fakeiaas's limit of %d (%s)", f.name, *f.v, f.max, f.limit)
		default:
			*f.dst = *f.v
		}
	}
	return out, nil
}

func (s vmSizing) ephemeralSize() *int {
	if s.EphemeralDisk == nil {
		return nil
	}
	return s.EphemeralDisk.Size
}

// InstanceTypeNames lists the known instance types, smallest first.
func InstanceTypeNames() []string {
	names := make([]string, 0, len(InstanceTypes))
	for n := range InstanceTypes {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int {
		if d := InstanceTypes[a].RAMMiB - InstanceTypes[b].RAMMiB; d != 0 {
			return d
		}
		return strings.Compare(a, b)
	})
	return names
}
