package agent_test

import (
	"encoding/json"
	"errors"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/mbus"
)

const (
	diskA = "disk-aaaaaaaa-1111-4111-8111-111111111111"
	diskB = "disk-bbbbbbbb-2222-4222-8222-222222222222"
)

// readLink returns the guest path the disk's link names: its target read
// from the link's directory, as the guest reads a relative link.
func readLink(t *testing.T, v *vmRoot, cid string) string {
	t.Helper()
	target, err := os.Readlink(filepath.Join(v.root, "var/vcap/data/dynamic_disks", cid))
	if err != nil {
		t.Fatalf("dynamic disk link for %s: %v", cid, err)
	}
	if !path.IsAbs(target) {
		target = path.Join("/var/vcap/data/dynamic_disks", target)
	}
	return target
}

// CONTRACTS §5: every action, over a real embedded NATS, through the
// Director-side client.
func TestActionsOverNATS(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	v.attach(t, diskA, 'c', "sd", 4)
	startAgent(t, e.config(v, "agent-1")) // connects to the settings' mbus URL
	c := e.client

	if err := c.WaitUntilReady("agent-1", 5*time.Second); err != nil {
		t.Fatalf("WaitUntilReady: %v", err)
	}
	v1, err := c.Send("agent-1", "get_state")
	var st agent.State
	if err != nil || json.Unmarshal(v1, &st) != nil || st.AgentID != "agent-1" || st.VM.Name != "vm-1" || st.JobState != "running" {
		t.Errorf("get_state = %s, %v", v1, err)
	}

	// Persistent disks: add (async, saves the hint), mount, list, unmount, remove.
	if _, err := c.Run("agent-1", "add_persistent_disk", diskA, map[string]string{"path": "/dev/sdc"}); err != nil {
		t.Fatalf("add_persistent_disk: %v", err)
	}
	hints := map[string]agent.DiskSettings{}
	b, err := os.ReadFile(filepath.Join(v.root, "var/vcap/bosh/persistent_disk_hints.json"))
	if err != nil || json.Unmarshal(b, &hints) != nil || hints[diskA].Path != "/dev/sdc" || hints[diskA].ID != diskA {
		t.Fatalf("persistent_disk_hints.json = %s, %v; want the hint for %s", b, err, diskA)
	}
	if _, err := c.Run("agent-1", "mount_disk", diskA); err != nil {
		t.Fatalf("mount_disk: %v", err)
	}
	v1, err = c.Run("agent-1", "list_disk")
	if err != nil || string(v1) != `["`+diskA+`"]` {
		t.Errorf("list_disk = %s, %v; want [%s]", v1, err, diskA)
	}
	mounts := map[string]agent.Mount{}
	b, _ = os.ReadFile(filepath.Join(v.root, "var/vcap/bosh/mounts.json"))
	if json.Unmarshal(b, &mounts) != nil || mounts[diskA] != (agent.Mount{Device: "/dev/sdc", MountPoint: "/var/vcap/store"}) {
		t.Errorf("mounts.json = %s, want %s on /dev/sdc at /var/vcap/store", b, diskA)
	}
	v1, err = c.Run("agent-1", "unmount_disk", diskA)
	var msg map[string]string
	if err != nil || json.Unmarshal(v1, &msg) != nil || msg["message"] == "" {
		t.Errorf("unmount_disk = %s, %v; want {\"message\": …}", v1, err)
	}
	if v1, err = c.Run("agent-1", "list_disk"); err != nil || string(v1) != `[]` {
		t.Errorf("list_disk after unmount = %s, %v; want []", v1, err)
	}
	if _, err := c.Run("agent-1", "remove_persistent_disk", diskA); err != nil {
		t.Fatalf("remove_persistent_disk: %v", err)
	}
	if _, err := c.Run("agent-1", "mount_disk", diskA); err == nil {
		t.Errorf("mount_disk of a removed disk succeeded")
	}

	// Dynamic disks: link to the device as the guest sees it, then remove.
	if _, err := c.Run("agent-1", "add_dynamic_disk", diskA, map[string]string{"path": "/dev/sdc"}); err != nil {
		t.Fatalf("add_dynamic_disk: %v", err)
	}
	if got := readLink(t, v, diskA); got != "/dev/sdc" {
		t.Errorf("dynamic disk link → %q, want /dev/sdc (an in-guest path)", got)
	}
	v1, err = c.Send("agent-1", "dynamic_disk_usage")
	var usage []agent.DiskUsage
	if err != nil || json.Unmarshal(v1, &usage) != nil || len(usage) != 1 || usage[0].TotalBytes != 4<<20 {
		t.Errorf("dynamic_disk_usage = %s, %v; want one 4 MiB disk", v1, err)
	}
	if _, err := c.Send("agent-1", "remove_dynamic_disk", diskA); err != nil {
		t.Fatalf("remove_dynamic_disk: %v", err)
	}
	if _, err := os.Lstat(filepath.Join(v.root, "var/vcap/data/dynamic_disks", diskA)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("link still there after remove_dynamic_disk: %v", err)
	}
	if _, err := c.Send("agent-1", "remove_dynamic_disk", diskA); err != nil {
		t.Errorf("remove_dynamic_disk of an absent link: %v, want success", err)
	}

	// A device that never appears: the task fails with the resolver's message.
	_, err = c.Run("agent-1", "add_dynamic_disk", diskB, map[string]string{"path": "/dev/sdz"})
	var ae *mbus.AgentError
	if !errors.As(err, &ae) {
		t.Errorf("add_dynamic_disk of a missing device: %v, want an agent exception", err)
	}

	// Unknown methods and unknown tasks.
	if _, err := c.Send("agent-1", "frobnicate"); !errors.Is(err, mbus.ErrUnknownMessage) {
		t.Errorf("frobnicate: %v, want unknown message", err)
	} else if errors.As(err, &ae); ae.Message != "unknown message frobnicate" {
		t.Errorf("frobnicate: message %q, want \"unknown message frobnicate\"", ae.Message)
	}
	if _, err := c.Send("agent-1", "get_task", "no-such-task"); !errors.As(err, &ae) {
		t.Errorf("get_task of an unknown task: %v, want an exception", err)
	}
	// Bad arguments are exceptions, not crashes.
	if _, err := c.Run("agent-1", "add_dynamic_disk"); !errors.As(err, &ae) {
		t.Errorf("add_dynamic_disk with no arguments: %v, want an exception", err)
	}
	if _, err := c.Run("agent-1", "mount_disk", 42); !errors.As(err, &ae) {
		t.Errorf("mount_disk(42): %v, want an exception", err)
	}
}

// bosh-anchors §3.3: the link is idempotent, and replaced when the device
// changed (a disk re-attached under another letter).
// Linking one disk must not touch another disk's link, whatever its name
// (CIDs may end in ".new"), and a 255-byte CID (accepted by
// DecodeDiskSettings) must be linkable.
func TestDynamicDiskLinksAreIndependent(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	v.attach(t, diskA, 'c', "sd", 1)
	v.attach(t, diskB, 'd', "sd", 1)
	cfg := e.config(v, "agent-1")
	cfg.DeviceResolver = agent.ResolverIdentity // virtio would match diskA's by-id link for other
	startAgent(t, cfg)
	c := e.client
	other := diskA + ".new"
	long := strings.Repeat("d", 255)
	links := []struct{ cid, dev string }{{other, "/dev/sdd"}, {diskA, "/dev/sdc"}, {long, "/dev/sdd"}}
	for i, l := range links {
		if _, err := c.Run("agent-1", "add_dynamic_disk", l.cid, map[string]string{"path": l.dev}); err != nil {
			t.Fatalf("add_dynamic_disk(%q, %s): %v", l.cid, l.dev, err)
		}
		for _, prev := range links[:i+1] {
			if got := readLink(t, v, prev.cid); got != prev.dev {
				t.Fatalf("after linking %q: link of %q → %q, want %q", l.cid, prev.cid, got, prev.dev)
			}
		}
	}
}

func TestDynamicDiskSymlinkIdempotent(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	v.attach(t, diskA, 'c', "sd", 1)
	startAgent(t, e.config(v, "agent-1"))
	c := e.client
	hint := map[string]string{"path": "/dev/sdc"}
	if _, err := c.Run("agent-1", "add_dynamic_disk", diskA, hint); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(v.root, "var/vcap/data/dynamic_disks", diskA)
	before, err := os.Lstat(link)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Run("agent-1", "add_dynamic_disk", diskA, hint); err != nil {
		t.Fatalf("second add_dynamic_disk: %v", err)
	}
	after, err := os.Lstat(link)
	if err != nil || !os.SameFile(before, after) {
		t.Errorf("second add_dynamic_disk replaced an identical link (%v)", err)
	}

	v.detach(t, diskA, 'c', "sd")
	v.attach(t, diskA, 'e', "sd", 1)
	if _, err := c.Run("agent-1", "add_dynamic_disk", diskA, map[string]string{"path": "/dev/sde"}); err != nil {
		t.Fatal(err)
	}
	if got := readLink(t, v, diskA); got != "/dev/sde" {
		t.Errorf("link after re-attach → %q, want /dev/sde", got)
	}
}

// CONTRACTS §7 (h): an old agent answers add_dynamic_disk with "unknown
// message", which the client reports as ErrUnknownMessage.
func TestOldAgent(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	v.attach(t, diskA, 'c', "sd", 1)
	cfg := e.config(v, "agent-1")
	cfg.Mode = agent.ModeOld
	startAgent(t, cfg)
	for _, m := range []string{"add_dynamic_disk", "remove_dynamic_disk"} {
		_, err := e.client.Run("agent-1", m, diskA, "/dev/sdc")
		if !errors.Is(err, mbus.ErrUnknownMessage) {
			t.Errorf("old agent %s: %v, want ErrUnknownMessage", m, err)
		}
	}
	if _, err := os.Lstat(filepath.Join(v.root, "var/vcap/data/dynamic_disks", diskA)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("old agent made a link: %v", err)
	}
	if err := e.client.Ping("agent-1"); err != nil {
		t.Errorf("old agent ping: %v", err)
	}
}

// CONTRACTS §7 (g): a VM that restarts on attach. The agent stops
// answering, comes back on the same root, and keeps what it keeps on disk.
func TestRestartKeepsState(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	v.attach(t, diskA, 'c', "sd", 1)
	v.attach(t, diskB, 'd', "sd", 1)
	cfg := e.config(v, "agent-1")
	a := startAgent(t, cfg)
	c := e.client
	for _, step := range []struct {
		method string
		args   []any
	}{
		{"add_persistent_disk", []any{diskA, "/dev/sdc"}},
		{"mount_disk", []any{diskA}},
		{"add_dynamic_disk", []any{diskB, map[string]string{"path": "/dev/sdd"}}},
	} {
		if _, err := c.Run("agent-1", step.method, step.args...); err != nil {
			t.Fatalf("%s: %v", step.method, err)
		}
	}
	a.Stop()
	a.Stop() // idempotent
	if err := c.Ping("agent-1"); !errors.Is(err, mbus.ErrTimeout) {
		t.Fatalf("ping of a stopped agent: %v, want ErrTimeout", err)
	}

	e.settings.setDown(true) // the restarted agent must rely on its cache
	a2 := startAgent(t, cfg)
	if a2.SettingsSource() != agent.SourceCache {
		t.Errorf("restarted agent settings from %q, want cache", a2.SettingsSource())
	}
	if err := c.WaitUntilReady("agent-1", 5*time.Second); err != nil {
		t.Fatalf("WaitUntilReady after restart: %v", err)
	}
	v1, err := c.Run("agent-1", "list_disk")
	if err != nil || string(v1) != `["`+diskA+`"]` {
		t.Errorf("list_disk after restart = %s, %v", v1, err)
	}
	if got := readLink(t, v, diskB); got != "/dev/sdd" {
		t.Errorf("dynamic link after restart → %q", got)
	}
	if _, err := c.Run("agent-1", "unmount_disk", diskA); err != nil {
		t.Errorf("unmount_disk after restart (hint from persistent_disk_hints.json): %v", err)
	}
}

// The usage report reads allocated blocks and size of the backing file.
func TestDynamicDiskUsage(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	dev := v.attach(t, diskA, 'c', "sd", 8)
	a := startAgent(t, e.config(v, "agent-1"))
	if _, err := e.client.Run("agent-1", "add_dynamic_disk", diskA, dev); err != nil {
		t.Fatal(err)
	}
	u, err := a.DynamicDiskUsage()
	if err != nil || len(u) != 1 {
		t.Fatalf("usage = %+v, %v", u, err)
	}
	sparse := u[0].UsedBytes
	if u[0].TotalBytes != 8<<20 || sparse >= 1<<20 {
		t.Errorf("fresh sparse disk usage %+v, want total 8 MiB and almost nothing used", u[0])
	}
	// Write 1 MiB through the backing file (another VM's view of the disk).
	f, err := os.OpenFile(filepath.Join(v.dataDir, "disks", diskA+".img"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 1<<20), 2<<20); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	f.Close()
	u, err = a.DynamicDiskUsage()
	if err != nil || u[0].UsedBytes < sparse+1<<20 || u[0].TotalBytes != 8<<20 {
		t.Errorf("usage after writing 1 MiB: %+v, %v; want used ≥ %d", u, err, sparse+1<<20)
	}
	// A dangling link is reported, not fatal.
	v.detach(t, diskA, 'c', "sd")
	u, err = a.DynamicDiskUsage()
	if err != nil || len(u) != 1 || u[0].Error == "" || u[0].UsedBytes != 0 {
		t.Errorf("usage of a dangling link: %+v, %v; want an entry with Error", u, err)
	}
	want := []agent.DiskUsage{{DiskCID: diskA, Device: "/dev/sdc"}}
	u[0].Error = ""
	if !reflect.DeepEqual(u, want) {
		t.Errorf("usage = %+v, want %+v", u, want)
	}
}

// Stop ends a task that is still polling for its device, promptly.
func TestStopInterruptsPolling(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	cfg := e.config(v, "agent-1")
	cfg.DeviceTimeout = time.Minute
	f := agent.NewFleet(e.r)
	if err := f.Boot(cfg); err != nil {
		t.Fatal(err)
	}
	reply, err := e.client.Send("agent-1", "add_dynamic_disk", diskA, "/dev/sdq")
	if _, running := mbus.RunningTask(reply); err != nil || !running {
		t.Fatalf("add_dynamic_disk = %s, %v; want a running task", reply, err)
	}
	start := time.Now()
	f.Halt("vm-1")
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("Stop took %s with a task polling, want it prompt", el)
	}
	if f.Agent("vm-1") != nil || len(f.VMs()) != 0 {
		t.Errorf("fleet still lists the halted VM")
	}
	// Boot twice is a restart: one agent answers.
	for range 2 {
		if err := f.Boot(cfg); err != nil {
			t.Fatal(err)
		}
	}
	defer f.StopAll()
	if err := e.client.WaitUntilReady("agent-1", 5*time.Second); err != nil {
		t.Errorf("after reboot: %v", err)
	}
	if got := f.VMs(); len(got) != 1 || got[0] != "vm-1" {
		t.Errorf("VMs = %v, want [vm-1]", got)
	}
}
