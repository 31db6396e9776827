package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
)

// CONTRACTS §4: where the agent finds its settings, by stemcell api_version
// and by where the CPI put them.
func TestSettingsSource(t *testing.T) {
	cases := []struct {
		name          string
		stemcell      int
		inUserData    bool // full settings in user-data (else a registry pointer)
		inRegistry    bool
		wantSource    string
		wantMetaHits  int
		wantRegHits   int
		wantStartFail bool
	}{
		{name: "v2 stemcell, settings in user-data", stemcell: 2, inUserData: true, inRegistry: true, wantSource: agent.SourceMetadata, wantMetaHits: 1},
		{name: "v2 stemcell, settings in registry", stemcell: 2, inRegistry: true, wantSource: agent.SourceRegistry, wantMetaHits: 1, wantRegHits: 1},
		{name: "v1 stemcell, settings in registry", stemcell: 1, inRegistry: true, wantSource: agent.SourceRegistry, wantRegHits: 1},
		{name: "v1 stemcell never reads user-data", stemcell: 1, inUserData: true, wantRegHits: 1, wantStartFail: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newSettingsServer(t)
			v := newVMRoot(t, "vm-1")
			want := testSettings("agent-1", "vm-1", "nats://unused")
			if c.inUserData {
				s.setUserData("vm-1", want)
			} else {
				s.setUserData("vm-1", s.registryPointer("vm-1"))
			}
			if c.inRegistry {
				s.setRegistry("vm-1", want)
			}
			m := mbus.NewMemory(rt.Real(1))
			defer m.Close()
			a, err := agent.Start(agent.Config{
				Root: v.root, VMCID: "vm-1", StemcellAPIVersion: c.stemcell, Transport: m,
				MetadataURL: s.srv.URL + "/metadata", RegistryURL: s.srv.URL + "/registry",
				RegistryUser: s.user, RegistryPassword: s.pass,
			})
			if got := [2]int{s.hitCount("metadata"), s.hitCount("registry")}; got != [2]int{c.wantMetaHits, c.wantRegHits} {
				t.Errorf("metadata, registry accesses = %v, want %v", got, [2]int{c.wantMetaHits, c.wantRegHits})
			}
			if c.wantStartFail {
				if err == nil {
					a.Stop()
					t.Fatalf("Start succeeded, want an error (no settings where this agent looks)")
				}
				return
			}
			if err != nil {
				t.Fatalf("Start: %v", err)
			}
			defer a.Stop()
			if a.SettingsSource() != c.wantSource || a.AgentID() != "agent-1" {
				t.Errorf("source %q, agent ID %q; want %q, agent-1", a.SettingsSource(), a.AgentID(), c.wantSource)
			}
			var cached agent.Settings
			b, err := os.ReadFile(filepath.Join(v.root, "var/vcap/bosh/settings.json"))
			if err != nil || json.Unmarshal(b, &cached) != nil || cached.AgentID != "agent-1" || cached.VM.Name != "vm-1" {
				t.Errorf("settings.json cache = %s, %v; want the settings", b, err)
			}
		})
	}
}

// A v2 agent whose metadata service fails falls back to the configured
// registry; when both fail it uses the cached settings.json, and with no
// cache Start fails.
func TestSettingsFallbacks(t *testing.T) {
	s := newSettingsServer(t)
	v := newVMRoot(t, "vm-1")
	s.setRegistry("vm-1", testSettings("agent-1", "vm-1", "nats://unused"))
	m := mbus.NewMemory(rt.Real(1))
	defer m.Close()
	cfg := agent.Config{
		Root: v.root, VMCID: "vm-1", StemcellAPIVersion: 2, Transport: m,
		MetadataURL: s.srv.URL, // a bare server URL: "/metadata" is appended
		RegistryURL: s.srv.URL + "/registry", RegistryUser: s.user, RegistryPassword: s.pass,
	}
	a, err := agent.Start(cfg) // no user-data for vm-1: 404
	if err != nil {
		t.Fatalf("Start with no user-data: %v", err)
	}
	if a.SettingsSource() != agent.SourceRegistry || s.hitCount("metadata") != 1 {
		t.Errorf("source %q after %d metadata accesses, want registry after 1", a.SettingsSource(), s.hitCount("metadata"))
	}
	a.Stop()

	s.setDown(true)
	a, err = agent.Start(cfg)
	if err != nil {
		t.Fatalf("Start with the settings services down: %v", err)
	}
	if a.SettingsSource() != agent.SourceCache || a.AgentID() != "agent-1" {
		t.Errorf("source %q agent %q, want cache, agent-1", a.SettingsSource(), a.AgentID())
	}
	a.Stop()

	empty := newVMRoot(t, "vm-1")
	cfg.Root = empty.root
	if a, err := agent.Start(cfg); err == nil {
		a.Stop()
		t.Fatalf("Start with no settings anywhere succeeded")
	}

	// Wrong registry credentials are a failure too, not settings.
	s.setDown(false)
	cfg.RegistryPassword = "wrong"
	if a, err := agent.Start(cfg); err == nil {
		a.Stop()
		t.Fatalf("Start with wrong registry credentials succeeded")
	}
}

// The simulator serves settings in-process through HandlerFetcher.
func TestHandlerFetcher(t *testing.T) {
	s := newSettingsServer(t)
	v := newVMRoot(t, "vm-1")
	s.setUserData("vm-1", testSettings("agent-9", "vm-1", ""))
	m := mbus.NewMemory(rt.Real(1))
	defer m.Close()
	a, err := agent.Start(agent.Config{
		Root: v.root, VMCID: "vm-1", StemcellAPIVersion: 2, Transport: m,
		MetadataURL: "http://fakeiaas.invalid/metadata", Fetcher: agent.HandlerFetcher(s.srv.Config.Handler),
	})
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	defer a.Stop()
	if a.AgentID() != "agent-9" || a.SettingsSource() != agent.SourceMetadata {
		t.Errorf("agent %q from %q, want agent-9 from metadata", a.AgentID(), a.SettingsSource())
	}
}

func TestAgentIDMismatch(t *testing.T) {
	s := newSettingsServer(t)
	v := newVMRoot(t, "vm-1")
	s.setRegistry("vm-1", testSettings("agent-1", "vm-1", ""))
	m := mbus.NewMemory(rt.Real(1))
	defer m.Close()
	a, err := agent.Start(agent.Config{Root: v.root, VMCID: "vm-1", AgentID: "agent-2", Transport: m,
		RegistryURL: s.srv.URL + "/registry", RegistryUser: s.user, RegistryPassword: s.pass})
	if err == nil {
		a.Stop()
		t.Fatalf("Start with a configured agent ID that differs from the settings succeeded")
	}
}

// bosh-anchors §3.3: mount_disk reloads settings, so a disk the CPI put in
// the registry at attach time (v1 flow, no hint) is found.
func TestMountDiskReloadsRegistrySettings(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	v.attach(t, diskA, 'c', "sd", 1)
	cfg := e.config(v, "agent-1")
	cfg.DeviceResolver = agent.ResolverMapped
	startAgent(t, cfg)
	if _, err := e.client.Run("agent-1", "mount_disk", diskA); err == nil {
		t.Fatalf("mount_disk of a disk in no settings succeeded")
	}
	s := testSettings("agent-1", "vm-1", e.nats.URL())
	s.Disks.Persistent = map[string]cpiv2.DiskHint{diskA: cpiv2.StringHint("/dev/sdc")}
	e.settings.setRegistry("vm-1", s)
	if _, err := e.client.Run("agent-1", "mount_disk", diskA); err != nil {
		t.Fatalf("mount_disk after the registry named the disk: %v", err)
	}
	if v1, err := e.client.Run("agent-1", "list_disk"); err != nil || string(v1) != `["`+diskA+`"]` {
		t.Errorf("list_disk = %s, %v", v1, err)
	}
}
