package agent_test

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
)

var hostileCIDs = []string{"", ".", "..", "/", "../x", "a/b", "../../../../etc", "a\x00b", strings.Repeat("d", 256)}

// Safety: a CID that would name a link or a file outside the VM root is
// refused with ErrUnsafe.
func TestHostileCIDs(t *testing.T) {
	for _, cid := range hostileCIDs {
		_, err := agent.DecodeDiskSettings(cid, json.RawMessage(`"/dev/sdc"`))
		if !errors.Is(err, agent.ErrUnsafe) {
			t.Errorf("DecodeDiskSettings(%q): %v, want ErrUnsafe", cid, err)
		}
	}
	if _, err := agent.DecodeDiskSettings(strings.Repeat("d", 255), json.RawMessage(`"/dev/sdc"`)); err != nil {
		t.Errorf("a 255-byte CID: %v, want accepted", err)
	}
}

// Safety: hint values that would become paths or patterns outside the root
// are refused; non-string hash values are cpiv2.ErrBadDiskHint, never a panic.
func TestHostileHints(t *testing.T) {
	unsafe := []string{
		`"relative/sdc"`, `"/dev/../etc/passwd"`, `"/dev//sdc"`, `"/dev/sdc/"`, `"/dev/sdc\u0000"`,
		`{"path":"../../etc"}`, `{"path":"/` + strings.Repeat("a", 256) + `"}`, `{"path":"/` + strings.Repeat("a/", 2100) + `a"}`,
		`{"id":"../../../x"}`, `{"id":"*"}`, `{"volume_id":"1/../../x"}`, `{"volume_id":"*"}`,
		`{"lun":"?"}`, `{"lun":"2","host_device_id":"../3"}`, `{"lun":"[0-9]","host_device_id":"2"}`,
	}
	for _, h := range unsafe {
		_, err := agent.DecodeDiskSettings(diskA, json.RawMessage(h))
		if !errors.Is(err, agent.ErrUnsafe) {
			t.Errorf("hint %.60s: %v, want ErrUnsafe", h, err)
		}
	}
	bad := []string{
		`{"path":3}`, `{"lun":2}`, `{"volume_id":null}`, `{"id":true}`, `{"path":["/dev/sdc"]}`,
		`{"iscsi_settings":{"username":1}}`, `{"iscsi_settings":"x"}`, `{"unknown":{}}`,
		`42`, `null`, `[1]`, `{}`, `""`, `{`,
	}
	for _, h := range bad {
		_, err := agent.DecodeDiskSettings(diskA, json.RawMessage(h))
		if !errors.Is(err, cpiv2.ErrBadDiskHint) {
			t.Errorf("hint %s: %v, want cpiv2.ErrBadDiskHint", h, err)
		}
	}
}

// Under Knobs.LaxNames the agent takes the names upstream takes, and still
// changes nothing outside the VM root.
func TestLaxNamesStayInRoot(t *testing.T) {
	c := newConfined(t, agent.Knobs{LaxNames: true})
	before := c.outside(t)
	for _, cid := range append(hostileCIDs[1:], "a*b", "disk-[0-9]") {
		if strings.ContainsRune(cid, 0) {
			continue
		}
		for _, m := range []string{"add_dynamic_disk", "add_persistent_disk", "mount_disk", "unmount_disk", "remove_persistent_disk", "remove_dynamic_disk"} {
			_ = c.run(m, cid, map[string]string{"path": "/dev/../../../" + strings.TrimPrefix(c.sentinel, "/") + "/file"})
		}
	}
	if err := c.run("add_dynamic_disk", "a/b", "/dev/sdc"); err != nil {
		t.Errorf("a CID with a slash under LaxNames: %v", err)
	}
	if got, err := os.Readlink(filepath.Join(c.v.root, "var/vcap/data/dynamic_disks/a/b")); err != nil || got != "../../../../../dev/sdc" {
		t.Errorf("link for CID a/b → %q, %v; want ../../../../../dev/sdc", got, err)
	}
	if after := c.outside(t); after != before {
		t.Fatalf("outside the root changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

// Over the mbus, hostile CIDs and hints are exceptions, and nothing is
// created or removed outside var/vcap/data/dynamic_disks.
func TestHostileOverMbus(t *testing.T) {
	e := newEnv(t)
	v := newVMRoot(t, "vm-1")
	v.attach(t, diskA, 'c', "sd", 1)
	startAgent(t, e.config(v, "agent-1"))
	before := snapshot(t, v.dataDir)
	for _, cid := range hostileCIDs {
		for _, m := range []string{"add_dynamic_disk", "remove_dynamic_disk", "add_persistent_disk", "mount_disk", "unmount_disk", "remove_persistent_disk"} {
			_, err := e.client.Run("agent-1", m, cid, "/dev/sdc")
			var ae *mbus.AgentError
			if !errors.As(err, &ae) {
				t.Errorf("%s(%q): %v, want an exception", m, cid, err)
			}
		}
	}
	for _, hint := range []any{"/dev/../../../etc", map[string]any{"path": 7}, map[string]string{"volume_id": "*"}} {
		if _, err := e.client.Run("agent-1", "add_dynamic_disk", diskA, hint); err == nil {
			t.Errorf("add_dynamic_disk with hint %v succeeded", hint)
		}
	}
	if after := snapshot(t, v.dataDir); after != before {
		t.Errorf("hostile requests changed the data dir:\nbefore %s\nafter  %s", before, after)
	}
	if err := e.client.Ping("agent-1"); err != nil {
		t.Errorf("agent dead after hostile requests: %v", err)
	}
}

// snapshot lists every path under dir, except the agent's own bookkeeping.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if strings.HasSuffix(p, ".json") {
			return nil
		}
		b.WriteString(strings.TrimPrefix(p, dir) + " ")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// FuzzHintDecoding: any CID and wire hint either decodes to settings that
// every resolver handles inside the root, or is an error — never a panic,
// never a path outside the root.
func FuzzHintDecoding(f *testing.F) {
	for _, s := range []struct{ cid, hint string }{
		{diskA, `"/dev/sdc"`}, {diskA, `"3"`}, {diskA, `{"path":"/dev/sdc"}`},
		{diskA, `{"id":"` + diskA + `","path":"/dev/sdc"}`}, {diskA, `{"volume_id":"2"}`},
		{diskA, `{"lun":"2","host_device_id":"2"}`}, {diskA, `{"iscsi_settings":{"username":"u","target":"t"}}`},
		{"../x", `"/dev/sdc"`}, {diskA, `{"path":1}`}, {diskA, `{"lun":{"x":1}}`}, {"", `null`},
	} {
		f.Add(s.cid, []byte(s.hint))
	}
	v := newVMRoot(f, "vm-1")
	v.attach(f, diskA, 'c', "sd", 1)
	var resolvers []agent.Resolver
	for _, typ := range []string{agent.ResolverIdentity, agent.ResolverMapped, agent.ResolverVirtio, agent.ResolverSCSI, agent.ResolverISCSI} {
		r, err := agent.NewResolver(agent.ResolverConfig{Type: typ, Root: v.root, Runtime: rt.Real(1),
			Timeout: time.Microsecond, PollInterval: time.Microsecond, VirtioIDWait: time.Microsecond,
			SCSIIDTimeout: time.Microsecond, SCSILunTimeout: time.Microsecond, ISCSITimeout: time.Microsecond,
			SCSIVolumeIDRetries: 1, SCSIVolumeIDWait: time.Microsecond})
		if err != nil {
			f.Fatal(err)
		}
		resolvers = append(resolvers, r)
	}
	f.Fuzz(func(t *testing.T, cid string, hint []byte) {
		ds, err := agent.DecodeDiskSettings(cid, hint)
		if err != nil {
			if !errors.Is(err, agent.ErrUnsafe) && !errors.Is(err, cpiv2.ErrBadDiskHint) {
				t.Fatalf("DecodeDiskSettings(%q, %s): untyped error %v", cid, hint, err)
			}
			return
		}
		if err := agent.CheckName("cid", ds.ID); err != nil {
			t.Fatalf("accepted unsafe CID %q", ds.ID)
		}
		if ds.Path != "" {
			// A string hint may be a SCSI target ("3") rather than a path:
			// then it must be one safe name.
			if err := agent.CheckGuestPath("path", ds.Path); err != nil && (ds.VolumeID != ds.Path || agent.CheckName("volume_id", ds.Path) != nil || strings.ContainsAny(ds.Path, "*?[]\\")) {
				t.Fatalf("accepted unsafe path %q", ds.Path)
			}
		}
		for _, r := range resolvers {
			dev, err := r.Resolve(ds)
			if err != nil {
				continue
			}
			if err := agent.CheckGuestPath("device", dev); err != nil {
				t.Fatalf("resolver answered unsafe device %q for %+v", dev, ds)
			}
		}
	})
}
