package agent_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/agent"
)

// docs/upstream.md (agent): the dynamic_disks directory is 0700; links are
// relative (absolute with Knobs.AbsoluteLinks); remove_dynamic_disk removes
// recursively and treats absence as success.
func TestDynamicDiskLinksAsUpstream(t *testing.T) {
	for _, knobs := range []agent.Knobs{{}, {AbsoluteLinks: true}, {NonAtomicLinks: true}} {
		c := newConfined(t, knobs)
		dir := filepath.Join(c.v.root, "var/vcap/data/dynamic_disks")
		if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
			t.Fatalf("%+v: dynamic_disks: %v, %v; want mode 0700", knobs, fi.Mode(), err)
		}
		if err := c.run("add_dynamic_disk", diskA, map[string]string{"path": "/dev/sdc"}); err != nil {
			t.Fatal(err)
		}
		want := "../../../../dev/sdc"
		if knobs.AbsoluteLinks {
			want = "/dev/sdc"
		}
		if got, err := os.Readlink(filepath.Join(dir, diskA)); err != nil || got != want {
			t.Errorf("%+v: link → %q, %v; want %q", knobs, got, err, want)
		}
		// The relative link leads to the device on the host too.
		if fi, err := os.Stat(filepath.Join(dir, diskA)); !knobs.AbsoluteLinks && (err != nil || fi.Size() != int64(len("data of "+diskA))) {
			t.Errorf("%+v: the link does not lead to the device inside the root: %v", knobs, err)
		}
		// Whatever sits at the name is removed, recursively; absence is success.
		mustMkdir(t, filepath.Join(dir, diskB, "sub"))
		if err := os.WriteFile(filepath.Join(dir, diskB, "sub", "f"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, cid := range []string{diskA, diskB, diskB, diskVictim} {
			if err := c.run("remove_dynamic_disk", cid); err != nil {
				t.Errorf("%+v: remove_dynamic_disk(%s): %v", knobs, cid, err)
			}
		}
		if ents, err := os.ReadDir(dir); err != nil || len(ents) != 0 {
			t.Errorf("%+v: dynamic_disks after removing everything: %v, %v", knobs, ents, err)
		}
	}
}

// add_dynamic_disk reloads the settings first (upstream LoadSettings): new
// settings are picked up; a failed fetch falls back to settings.json; with
// neither, the action fails with "Refreshing the settings".
func TestAddDynamicDiskReloadsSettings(t *testing.T) {
	c := newConfined(t, agent.Knobs{})
	s := testSettings("agent-1", "vm-1", "")
	s.Env = json.RawMessage(`{"bosh":{"note":"changed"}}`)
	c.settings.setUserData("vm-1", s)
	if err := c.run("add_dynamic_disk", diskA, map[string]string{"path": "/dev/sdc"}); err != nil {
		t.Fatal(err)
	}
	if got := string(c.a.Settings().Env); !strings.Contains(got, "changed") {
		t.Errorf("settings after add_dynamic_disk: env %s, want the changed settings", got)
	}
	c.settings.setDown(true)
	if err := c.run("add_dynamic_disk", diskA, map[string]string{"path": "/dev/sdc"}); err != nil {
		t.Errorf("with the metadata service down and settings.json cached: %v", err)
	}
	if c.a.SettingsSource() != agent.SourceCache {
		t.Errorf("settings source %q, want cache", c.a.SettingsSource())
	}
	if err := os.Remove(filepath.Join(c.v.root, "var/vcap/bosh/settings.json")); err != nil {
		t.Fatal(err)
	}
	err := c.run("add_dynamic_disk", diskB, map[string]string{"path": "/dev/sdd"})
	if err == nil || !strings.Contains(err.Error(), "result: Refreshing the settings") {
		t.Errorf("with no settings to be had: %v, want \"Refreshing the settings: …\"", err)
	}
	if _, err := os.Lstat(filepath.Join(c.v.root, "var/vcap/data/dynamic_disks", diskB)); !os.IsNotExist(err) {
		t.Errorf("a failed add_dynamic_disk linked the disk: %v", err)
	}
}
