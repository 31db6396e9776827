package agent_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/mbus"
)

const (
	volA = "vol-aaaaaaaa-1111-4111-8111-111111111111"
	volB = "vol-bbbbbbbb-2222-4222-8222-222222222222"
)

// dockerAgentEnv is the settings file as the BOSH Docker CPI writes it
// (bosh-cpi-go's AgentEnv, marshalled): persistent disks map to a string
// hint, the bind path of their volume, or null when none is attached.
func dockerAgentEnv(agentID, vmName, mbusURL, persistent string) []byte {
	return []byte(`{"agent_id":"` + agentID + `","vm":{"name":"` + vmName + `","id":"` + vmName + `"},` +
		`"mbus":"` + mbusURL + `","ntp":[],"blobstore":{"provider":"local","options":{"blobstore_path":"/var/vcap/micro_bosh/data/cache"}},` +
		`"networks":{"default":{"type":"manual","ip":"10.244.0.5","netmask":"255.255.255.0","gateway":"10.244.0.1",` +
		`"dns":["10.244.0.2"],"default":["dns","gateway"],"routes":null,"mac":"","preconfigured":true}},` +
		`"disks":{"system":"","ephemeral":null,"persistent":` + persistent + `},"env":{}}`)
}

// writeEnvFile writes the settings file into the root as the CPI does.
func writeEnvFile(t testing.TB, v *vmRoot, data []byte) {
	t.Helper()
	p := filepath.Join(v.root, filepath.FromSlash(agent.WardenSettingsFile[1:]))
	mustMkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, data, 0o640); err != nil {
		t.Fatal(err)
	}
}

// fileConfig is an agent on v that reads the Docker CPI's settings file,
// with identity device paths and directory disks, as on a docker stemcell.
// The metadata service and the registry are configured too, so a test can
// see that they are never asked.
func (e *env) fileConfig(v *vmRoot) agent.Config {
	return agent.Config{
		Root: v.root, VMCID: v.vmCID,
		MetadataURL: e.settings.srv.URL + "/metadata", RegistryURL: e.settings.srv.URL + "/registry",
		RegistryUser: e.settings.user, RegistryPassword: e.settings.pass,
		StemcellAPIVersion: 2, DeviceResolver: agent.ResolverIdentity,
		SettingsFile: agent.WardenSettingsFile, BindMountPersistentDisk: true,
		DeviceTimeout: 2 * time.Second, DevicePollInterval: 5 * time.Millisecond,
		Runtime: e.r,
	}
}

// The settings come from the file the Docker CPI writes, in its own shape,
// never from the metadata service or the registry; the agent joins the mbus
// the file names and reports the CPI's VM name.
func TestSettingsFileSource(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	writeEnvFile(t, v, dockerAgentEnv("agent-1", "c-1", e.nats.URL(), "null"))
	a := startAgent(t, e.fileConfig(v))
	if got := a.SettingsSource(); got != agent.SourceFile {
		t.Errorf("SettingsSource = %q, want %q", got, agent.SourceFile)
	}
	if n := e.settings.hitCount("metadata") + e.settings.hitCount("registry"); n != 0 {
		t.Errorf("the agent asked the metadata service or the registry %d times; it must read the file only", n)
	}
	if err := e.client.WaitUntilReady("agent-1", 5*time.Second); err != nil {
		t.Fatalf("the agent does not answer on the mbus the file names: %v", err)
	}
	raw, err := e.client.Send("agent-1", "get_state")
	var st agent.State
	if err != nil || json.Unmarshal(raw, &st) != nil || st.VM.Name != "c-1" {
		t.Errorf("get_state = %s, %v; want vm.name c-1 (the CPI's VM CID)", raw, err)
	}
	s := a.Settings()
	if s.Disks.Persistent != nil || s.Disks.Ephemeral != nil {
		t.Errorf("disks = %+v, want no persistent and no ephemeral disk", s.Disks)
	}
}

// A settings file that is there but unusable is an error of its own, not
// "not written yet"; a missing one wraps ErrNoSettingsFile.
func TestSettingsFileErrors(t *testing.T) {
	e := newEnv(t)
	for _, tc := range []struct {
		name    string
		data    []byte
		missing bool
	}{
		{name: "missing", missing: true},
		{name: "not JSON", data: []byte(`{"agent_id": "agent-1", "vm": `)},
		{name: "no agent_id", data: dockerAgentEnv("", "c-1", e.nats.URL(), "null")},
		{name: "hint not a string", data: dockerAgentEnv("agent-1", "c-1", e.nats.URL(), `{"`+volA+`": {"path": 7}}`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := newVMRoot(t, "vm-1")
			if !tc.missing {
				writeEnvFile(t, v, tc.data)
			}
			a, err := agent.Start(e.fileConfig(v))
			if err == nil {
				a.Stop()
				t.Fatal("the agent started")
			}
			if got := errors.Is(err, agent.ErrNoSettingsFile); got != tc.missing {
				t.Errorf("Start: %v; errors.Is(ErrNoSettingsFile) = %v, want %v", err, got, tc.missing)
			}
		})
	}
	cfg := e.fileConfig(newVMRoot(t, "vm-2"))
	cfg.SettingsFile = "var/vcap/bosh/../settings.json"
	if _, err := agent.Start(cfg); !errors.Is(err, agent.ErrUnsafe) {
		t.Errorf("Start with SettingsFile %q: %v, want ErrUnsafe", cfg.SettingsFile, err)
	}
}

// The VM boots before the CPI writes the file (the Docker CPI writes it
// after starting the container): the fleet's boot keeps trying and the
// agent comes up once the file is there.
func TestSettingsFileWaitedForAfterBoot(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	f := agent.NewFleet(e.r)
	defer f.StopAll()
	f.Start(e.fileConfig(v), agent.BootOptions{Retry: 5 * time.Millisecond, Timeout: 10 * time.Second})
	if f.Agent("vm-1") != nil {
		t.Fatal("an agent runs although no settings file was written")
	}
	if err := f.LastError("vm-1"); !errors.Is(err, agent.ErrNoSettingsFile) {
		t.Fatalf("LastError = %v, want ErrNoSettingsFile", err)
	}
	writeEnvFile(t, v, dockerAgentEnv("agent-1", "c-1", e.nats.URL(), "null"))
	if err := e.client.WaitUntilReady("agent-1", 5*time.Second); err != nil {
		t.Fatalf("the agent did not come up once the file was written: %v", err)
	}
	if a := f.Agent("vm-1"); a == nil || a.SettingsSource() != agent.SourceFile {
		t.Fatalf("the fleet's agent: %v", a)
	}
}

// Directory disks, as the Docker CPI attaches them: the volume is a
// directory at /warden-cpi-dev/<volume> and the hint names it (a string, or
// a hash with a path). mount_disk binds it at /var/vcap/store (what the
// guest writes there lands on the volume), finds the hint in the settings
// file the CPI rewrote after the attach, and unmount_disk unbinds it.
func TestDirectoryDiskBindMount(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	for _, vol := range []string{volA, volB} {
		mustMkdir(t, filepath.Join(v.root, "warden-cpi-dev", vol))
	}
	if err := os.WriteFile(filepath.Join(v.root, "warden-cpi-dev", volA, "kept"), []byte("from the last VM"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeEnvFile(t, v, dockerAgentEnv("agent-1", "c-1", e.nats.URL(), "null"))
	a := startAgent(t, e.fileConfig(v))
	c := e.client
	if err := c.WaitUntilReady("agent-1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	// The CPI rewrites the file after attach; mount_disk reloads it.
	writeEnvFile(t, v, dockerAgentEnv("agent-1", "c-1", e.nats.URL(),
		`{"`+volA+`":"/warden-cpi-dev/`+volA+`","`+volB+`":{"path":"/warden-cpi-dev/`+volB+`"}}`))
	if _, err := c.Run("agent-1", "mount_disk", volA); err != nil {
		t.Fatalf("mount_disk of a directory disk named in the settings file: %v", err)
	}
	store := filepath.Join(v.root, "var/vcap/store")
	if b, err := os.ReadFile(filepath.Join(store, "kept")); err != nil || string(b) != "from the last VM" {
		t.Errorf("/var/vcap/store/kept = %q, %v; want the volume's file", b, err)
	}
	if err := os.WriteFile(filepath.Join(store, "new"), []byte("written on this VM"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(v.root, "warden-cpi-dev", volA, "new")); err != nil || string(b) != "written on this VM" {
		t.Errorf("a file written under /var/vcap/store is not on the volume: %q, %v", b, err)
	}
	mounts, err := a.Mounts()
	if err != nil || mounts[volA] != (agent.Mount{Device: "/warden-cpi-dev/" + volA, MountPoint: "/var/vcap/store", Bind: true}) {
		t.Errorf("mounts = %+v, %v", mounts, err)
	}
	if _, err := c.Run("agent-1", "mount_disk", volA); err != nil {
		t.Errorf("mount_disk again: %v, want success (idempotent)", err)
	}
	// A second disk (hash hint) goes to the migration target, as upstream.
	if _, err := c.Run("agent-1", "mount_disk", volB); err != nil {
		t.Fatalf("mount_disk of a second directory disk: %v", err)
	}
	if got, err := os.Readlink(filepath.Join(v.root, "var/vcap/store_migration_target")); err != nil || got != "../../warden-cpi-dev/"+volB {
		t.Errorf("store_migration_target → %q, %v", got, err)
	}
	// Dynamic disks link to the directory as they link to a device.
	if _, err := c.Run("agent-1", "add_dynamic_disk", volB, "/warden-cpi-dev/"+volB); err != nil {
		t.Fatalf("add_dynamic_disk of a directory disk: %v", err)
	}
	if got := readLink(t, v, volB); got != "/warden-cpi-dev/"+volB {
		t.Errorf("dynamic disk link → %q", got)
	}
	raw, err := c.Run("agent-1", "list_disk")
	if err != nil || string(raw) != `["`+volA+`","`+volB+`"]` {
		t.Errorf("list_disk = %s, %v", raw, err)
	}
	for _, vol := range []string{volA, volB} {
		if _, err := c.Run("agent-1", "unmount_disk", vol); err != nil {
			t.Fatalf("unmount_disk %s: %v", vol, err)
		}
	}
	for _, mp := range []string{"var/vcap/store", "var/vcap/store_migration_target"} {
		fi, err := os.Lstat(filepath.Join(v.root, mp))
		if err != nil || !fi.IsDir() {
			t.Errorf("/%s after unmount_disk: %v, %v; want an empty directory again", mp, fi, err)
			continue
		}
		if ents, _ := os.ReadDir(filepath.Join(v.root, mp)); len(ents) != 0 {
			t.Errorf("/%s after unmount_disk holds %d entries", mp, len(ents))
		}
	}
	if _, err := os.Stat(filepath.Join(v.root, "warden-cpi-dev", volA, "new")); err != nil {
		t.Errorf("the volume lost its file at unmount: %v", err)
	}
}

// What cannot be bound is refused and changes nothing: a disk path that is
// not a directory, a missing one, a mount point that holds files.
func TestDirectoryDiskRefusals(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	mustMkdir(t, filepath.Join(v.root, "warden-cpi-dev", volB))
	if err := os.WriteFile(filepath.Join(v.root, "warden-cpi-dev", volA), []byte("a file"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeEnvFile(t, v, dockerAgentEnv("agent-1", "c-1", e.nats.URL(),
		`{"`+volA+`":"/warden-cpi-dev/`+volA+`","`+volB+`":"/warden-cpi-dev/`+volB+`","vol-gone":"/warden-cpi-dev/vol-gone"}`))
	startAgent(t, e.fileConfig(v))
	c := e.client
	if err := c.WaitUntilReady("agent-1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	var ae *mbus.AgentError
	for _, cid := range []string{volA, "vol-gone"} {
		if _, err := c.Run("agent-1", "mount_disk", cid); !errors.As(err, &ae) {
			t.Errorf("mount_disk %s: %v, want an agent exception", cid, err)
		}
	}
	if err := os.WriteFile(filepath.Join(v.root, "var/vcap/store", "precious"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run("agent-1", "mount_disk", volB); !errors.As(err, &ae) {
		t.Errorf("mount_disk over a mount point with files: %v, want an agent exception", err)
	}
	if _, err := os.Stat(filepath.Join(v.root, "var/vcap/store", "precious")); err != nil {
		t.Errorf("a refused bind lost the mount point's file: %v", err)
	}
	if raw, err := c.Run("agent-1", "list_disk"); err != nil || string(raw) != `[]` {
		t.Errorf("list_disk after refusals = %s, %v; want []", raw, err)
	}
}

// An agent restarted on a root whose store is bound keeps the bind.
func TestDirectoryDiskSurvivesAgentRestart(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	mustMkdir(t, filepath.Join(v.root, "warden-cpi-dev", volA))
	writeEnvFile(t, v, dockerAgentEnv("agent-1", "c-1", e.nats.URL(), `{"`+volA+`":"/warden-cpi-dev/`+volA+`"}`))
	a, err := agent.Start(e.fileConfig(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.client.WaitUntilReady("agent-1", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client.Run("agent-1", "mount_disk", volA); err != nil {
		t.Fatal(err)
	}
	a.Stop()
	a2 := startAgent(t, e.fileConfig(v))
	mounts, err := a2.Mounts()
	if err != nil || !mounts[volA].Bind {
		t.Fatalf("mounts after restart = %+v, %v", mounts, err)
	}
	if got, err := os.Readlink(filepath.Join(v.root, "var/vcap/store")); err != nil || got != "../../warden-cpi-dev/"+volA {
		t.Errorf("/var/vcap/store after restart → %q, %v", got, err)
	}
}
