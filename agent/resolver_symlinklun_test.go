package agent_test

import (
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/simulator/simrt"
)

const azureByLun = "/dev/disk/azure/data/by-lun"

// azureNVMe: Azure's udev rules name each data disk's LUN under
// /dev/disk/azure/data/by-lun; on an NVMe VM size the disk at LUN 2 is
// nvme0n2, which the scsi resolver cannot find.
func azureNVMe(t testing.TB) guest {
	g := azure(t)
	g.dev("/dev/nvme0n2").link("../../../../nvme0n2", azureByLun+"/2")
	return g
}

// bosh-agent's LunDeviceSymlinkPath (provider.go, symlink_lun_device_path_
// resolver.go, fallback_device_path_resolver.go): the LUN symlink first,
// then the configured resolver on any failure.
func TestResolverSymlinkLun(t *testing.T) {
	hostID := "{" + azureVMBus + "}"
	scsi := agent.ResolverConfig{Type: agent.ResolverSCSI, LunDeviceSymlinkPath: azureByLun, SymlinkLunTimeout: 50 * time.Millisecond}
	identity := agent.ResolverConfig{LunDeviceSymlinkPath: azureByLun, SymlinkLunTimeout: 50 * time.Millisecond}
	runCases(t, azureNVMe, []resolveCase{
		{name: "the LUN symlink wins over scsi", cfg: scsi, ds: agent.DiskSettings{ID: "d", Lun: "2", HostDeviceID: hostID}, want: "/dev/nvme0n2"},
		{name: "no symlink for the LUN: scsi by lun", cfg: scsi, ds: agent.DiskSettings{ID: "d", Lun: "3", HostDeviceID: hostID}, want: "/dev/sdd"},
		{name: "no lun: identity", cfg: identity, ds: agent.DiskSettings{ID: "d", Path: "/dev/sdc"}, want: "/dev/sdc"},
		{name: "symlink dangling, identity without a path", cfg: identity, ds: agent.DiskSettings{ID: "d", Lun: "2"}, err: agent.ErrHintUnusable,
			prep: func(g guest) { _ = os.Remove(g.host("/dev/nvme0n2")) }},
		{name: "a lun that is a path", cfg: scsi, ds: agent.DiskSettings{ID: "d", Lun: "../../../../sda", HostDeviceID: hostID}, err: agent.ErrUnsafe},
		{name: "without LunDeviceSymlinkPath the scsi resolver alone", cfg: agent.ResolverConfig{Type: agent.ResolverSCSI},
			ds: agent.DiskSettings{ID: "d", Lun: "2", HostDeviceID: hostID}, want: "/dev/sdc"},
	})
	// A failure of both says so, and keeps the secondary's error.
	g := azureNVMe(t)
	cfg := scsi
	cfg.Root = g.root
	_, err := resolverWith(t, cfg).Resolve(agent.DiskSettings{ID: "d", Lun: "7", HostDeviceID: hostID})
	if !errors.Is(err, agent.ErrDeviceTimeout) || !strings.Contains(err.Error(), "Secondary resolver also failed") {
		t.Errorf("lun 7 nowhere: %v; want the secondary's time-out, named", err)
	}
	if _, err := agent.NewResolver(agent.ResolverConfig{LunDeviceSymlinkPath: azureByLun}); err == nil {
		t.Error("a symlink-LUN resolver without a VM root was accepted")
	}
}

// The LUN symlink is awaited 50 s, 100 ms apart, before the fallback.
func TestResolverSymlinkLunWaitsAsUpstream(t *testing.T) {
	g := azureNVMe(t)
	var dev string
	var err error
	res := simrt.Run(simrt.Config{Seed: 1, MaxTime: time.Hour}, func(sim *simrt.Sim) {
		r, nerr := agent.NewResolver(agent.ResolverConfig{Root: g.root, Runtime: sim, LunDeviceSymlinkPath: azureByLun})
		if nerr != nil {
			err = nerr
			return
		}
		dev, err = r.Resolve(agent.DiskSettings{ID: "d", Lun: "9", Path: "/dev/sdq"})
	})
	if err != nil || dev != "/dev/sdq" {
		t.Fatalf("lun 9 without a symlink, identity fallback: %q, %v; want /dev/sdq", dev, err)
	}
	if res.Elapsed < 50*time.Second || res.Elapsed > 50*time.Second+200*time.Millisecond {
		t.Errorf("fell back after %s (virtual); want 50 s", res.Elapsed)
	}
}
