package boothook_test

import (
	"testing"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/agent/boothook"
	"github.com/cpilab/cpilab/fakeiaas"
)

// The VM's own fields come from the BootInfo; the agent ID too, unless the
// agent reads a settings file (a Docker VM: the cloud's agent ID is the
// container's name, the file's is BOSH's).
func TestAgentConfig(t *testing.T) {
	bi := fakeiaas.BootInfo{VMCID: "vm-1", AgentID: "c-1", Root: "/data/vms/vm-1/root", StemcellAPIVersion: 2,
		DeviceResolver: agent.ResolverIdentity, MetadataURL: "http://127.0.0.1:1/metadata"}
	h := boothook.New(boothook.Config{Fleet: agent.NewFleet(nil)})
	c := h.AgentConfig(bi)
	if c.AgentID != "c-1" || c.VMCID != "vm-1" || c.Root != bi.Root || c.StemcellAPIVersion != 2 || c.MetadataURL != bi.MetadataURL {
		t.Errorf("AgentConfig = %+v", c)
	}
	h = boothook.New(boothook.Config{Fleet: agent.NewFleet(nil), Base: agent.Config{SettingsFile: agent.WardenSettingsFile, BindMountPersistentDisk: true}})
	c = h.AgentConfig(bi)
	if c.AgentID != "" || c.VMCID != "vm-1" || c.SettingsFile != agent.WardenSettingsFile || !c.BindMountPersistentDisk {
		t.Errorf("AgentConfig with a settings file = %+v; want no agent ID (the file's), the file and directory disks", c)
	}
}
