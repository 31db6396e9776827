package simulator

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/rt"
)

// Devices is how the world's VMs present an attached disk to their agent:
// the stemcell agent's device path resolver (agent.json
// device_path_resolution_type), the disk hint style the CPI's attach_disk
// returns (fakeiaas's disk_hint VM cloud property) and the device names'
// prefix (device_prefix). Each pair is one an IaaS ships; an agent that
// resolves one of them wrongly links the wrong device, which the link
// checks see (linkReachesDisk follows the link to the disk's file).
type Devices struct {
	Resolver, Hint, Prefix string
}

// FixtureDevices is the embedded stemcell's virtio resolver with path
// hints on sd devices: what scenario files without devices= run with.
var FixtureDevices = Devices{Resolver: agent.ResolverVirtio, Hint: "path", Prefix: "sd"}

// DeviceStyles are the pairs a run draws from, one per seed.
var DeviceStyles = []Devices{
	FixtureDevices,
	{Resolver: agent.ResolverVirtio, Hint: "id", Prefix: "vd"},       // OpenStack: by-id, then mapped
	{Resolver: agent.ResolverSCSI, Hint: "lun", Prefix: "sd"},        // Azure: lun and host_device_id
	{Resolver: agent.ResolverSCSI, Hint: "volume_id", Prefix: "sd"},  // scsi_volume_id
	{Resolver: agent.ResolverIdentity, Hint: "string", Prefix: "sd"}, // a bare device path, as attached
	{Resolver: agent.ResolverMapped, Hint: "path", Prefix: "xvd"},    // Xen: /dev/sdX is /dev/xvdX
}

// String is "resolver/hint/prefix", as a scenario's devices= writes it.
func (d Devices) String() string { return d.Resolver + "/" + d.Hint + "/" + d.Prefix }

// ParseDevices reads "resolver/hint/prefix"; it must be one of DeviceStyles.
func ParseDevices(text string) (Devices, error) {
	for _, d := range DeviceStyles {
		if d.String() == text {
			return d, nil
		}
	}
	names := make([]string, len(DeviceStyles))
	for i, d := range DeviceStyles {
		names[i] = d.String()
	}
	return Devices{}, fmt.Errorf("devices %q: want one of %s", text, strings.Join(names, ", "))
}

// DrawDevices is the device style of the run with workload sub-seed seed,
// from its own stream: the other draws of a seed do not change with it.
func DrawDevices(seed uint64) Devices {
	rng := rand.New(rand.NewPCG(seed, rt.StreamSeed(seed, "world/devices")))
	return DeviceStyles[rng.IntN(len(DeviceStyles))]
}
