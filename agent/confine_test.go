package agent_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"pgregory.net/rapid"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/fakeiaas/vmssh"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
)

// confined is a VM root served over SFTP with an agent on it, inside a data
// dir that also holds things the agent and the SFTP user must never change:
// the disks' backing files (hard-linked into the root as device nodes) and
// a sentinel tree.
type confined struct {
	v        *vmRoot
	sentinel string // <data dir>/sentinel
	srv      *vmssh.Server
	sftp     *vmssh.Client
	cfg      agent.Config
	a        *agent.Agent
	settings *settingsServer
}

const (
	diskVictim = "disk-victim-00000000-0000-4000-8000-000000000000"
)

func newConfined(t testing.TB, knobs agent.Knobs) *confined {
	t.Helper()
	v := newVMRoot(t, "vm-1")
	v.attach(t, diskA, 'c', "sd", 1)
	v.attach(t, diskB, 'd', "sd", 1)
	for _, img := range []string{diskA, diskB} {
		if err := os.WriteFile(filepath.Join(v.dataDir, "disks", img+".img"), []byte("data of "+img), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := &confined{v: v, sentinel: filepath.Join(v.dataDir, "sentinel")}
	mustMkdir(t, filepath.Join(c.sentinel, "dir"))
	for p, content := range map[string]string{"file": "keep me", "dir/file": "keep me too", diskVictim: "a file named like a disk CID", "settings.json.tmp": "x"} {
		if err := os.WriteFile(filepath.Join(c.sentinel, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}

	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	keys := &vmssh.AuthorizedKeys{}
	keys.Add("vm-1", sshPub)
	c.srv, err = vmssh.Start(vmssh.Config{Authorize: keys.Authorize, RootFor: func(cid string) (string, bool) { return v.root, cid == "vm-1" }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.srv.Close() })
	c.sftp, err = vmssh.Dial(vmssh.ClientConfig{Addr: c.srv.Addr(), VMCID: "vm-1", Signer: signer, HostKey: c.srv.HostKey()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.sftp.Close() })

	s := newSettingsServer(t)
	s.setUserData("vm-1", testSettings("agent-1", "vm-1", ""))
	c.settings = s
	r := rt.Real(5)
	m := mbus.NewMemory(r)
	t.Cleanup(func() { _ = m.Close() })
	c.cfg = agent.Config{
		Root: v.root, VMCID: "vm-1", StemcellAPIVersion: 2, Transport: m, Runtime: r,
		MetadataURL: "http://fakeiaas.invalid/metadata", Fetcher: agent.HandlerFetcher(s.srv.Config.Handler),
		DeviceResolver: agent.ResolverMapped, DeviceTimeout: 20 * time.Millisecond, DevicePollInterval: 5 * time.Millisecond,
		Knobs: knobs,
	}
	c.start(t)
	t.Cleanup(func() {
		if c.a != nil {
			c.a.Stop()
		}
	})
	return c
}

// start (re)starts the agent; an agent that cannot start (its files were
// tampered with) is left stopped.
func (c *confined) start(t testing.TB) error {
	if c.a != nil {
		c.a.Stop()
		c.a = nil
	}
	a, err := agent.Start(c.cfg)
	if err != nil {
		return err
	}
	c.a = a
	return nil
}

// run runs an agent action to its end and returns its error.
func (c *confined) run(method string, args ...any) error {
	if c.a == nil {
		return errors.New("agent not running")
	}
	raw := make([]json.RawMessage, len(args))
	for i, a := range args {
		raw[i], _ = json.Marshal(a)
	}
	reply := c.a.Dispatch(method, raw)
	for {
		if reply.Exception != nil {
			return errors.New(reply.Exception.Message)
		}
		ts, running := mbus.RunningTask(reply.Value)
		if !running {
			return nil
		}
		time.Sleep(2 * time.Millisecond)
		id, _ := json.Marshal(ts.AgentTaskID)
		reply = c.a.Dispatch("get_task", []json.RawMessage{id})
	}
}

// outside hashes everything in the data dir but the VM root: names, types,
// modes, contents and link targets.
func (c *confined) outside(t testing.TB) string {
	t.Helper()
	h := sha256.New()
	var lines []string
	err := filepath.WalkDir(c.v.dataDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == c.v.root {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		line := fmt.Sprintf("%s %v", strings.TrimPrefix(p, c.v.dataDir), fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " → " + target
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			line += " " + hex.EncodeToString(sum[:8])
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(lines)
	for _, l := range lines {
		h.Write([]byte(l + "\n"))
	}
	return strings.Join(lines, "\n") + "\n" + hex.EncodeToString(h.Sum(nil))
}

// namesOf counts the names inside the root that are the file at host path p
// (the same inode): a device node and any hard link to it.
func (c *confined) namesOf(t testing.TB, p string) int {
	t.Helper()
	want, err := os.Stat(p)
	if err != nil {
		return 0
	}
	n := 0
	_ = filepath.WalkDir(c.v.root, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := os.Lstat(q); err == nil && os.SameFile(fi, want) {
				n++
			}
		}
		return nil
	})
	return n
}

// userRename moves the agent's link src to dst over SFTP, as reported. With
// upstream's absolute links SFTP allows it; cpilab's relative links climb,
// so SFTP refuses to move them closer to the root, and the move is then made
// as a guest root would make it, to check the agent's own confinement.
func (c *confined) userRename(t testing.TB, knobs agent.Knobs, src, dst string) {
	t.Helper()
	err := c.sftp.PosixRename(src, dst)
	switch {
	case err == nil:
	case knobs.AbsoluteLinks:
		t.Fatalf("SFTP rename %s → %s: %v", src, dst, err)
	case !errors.Is(err, os.ErrPermission):
		t.Fatalf("SFTP rename %s → %s: %v, want permission denied (the relative link would climb out)", src, dst, err)
	default:
		if err := os.Rename(filepath.Join(c.v.root, src), filepath.Join(c.v.root, dst)); err != nil {
			t.Fatal(err)
		}
	}
}

// The reported escape: an SFTP user renames the agent's dynamic disk link
// onto settings.json.tmp; the agent's next settings write must replace the
// link, not write through it to where it points (here, with upstream's
// absolute links, a file outside the root).
func TestEscapeRenameLinkOntoSettingsTmp(t *testing.T) {
	for _, knobs := range []agent.Knobs{{}, {AbsoluteLinks: true}, {AbsoluteLinks: true, NonAtomicLinks: true}} {
		t.Run(fmt.Sprintf("%+v", knobs), func(t *testing.T) {
			c := newConfined(t, knobs)
			c.cfg.DeviceResolver = agent.ResolverIdentity // a hint naming a host path as a guest path
			if err := c.start(t); err != nil {
				t.Fatal(err)
			}
			before := c.outside(t)
			victim := filepath.Join(c.sentinel, "settings.json.tmp")
			if err := c.run("add_dynamic_disk", diskA, map[string]string{"path": victim}); err != nil {
				t.Fatalf("add_dynamic_disk: %v", err)
			}
			c.userRename(t, knobs, "/var/vcap/data/dynamic_disks/"+diskA, "/var/vcap/bosh/settings.json.tmp")
			// Every action that writes settings.json: a restart and
			// add_dynamic_disk (which reloads settings first).
			if err := c.start(t); err != nil {
				t.Fatalf("restart: %v", err)
			}
			if err := c.run("add_dynamic_disk", diskB, map[string]string{"path": "/dev/sdd"}); err != nil {
				t.Fatalf("add_dynamic_disk: %v", err)
			}
			if after := c.outside(t); after != before {
				t.Fatalf("outside the root changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
			if fi, err := os.Lstat(filepath.Join(c.v.root, "var/vcap/bosh/settings.json")); err != nil || !fi.Mode().IsRegular() {
				t.Errorf("settings.json is not a regular file: %v", err)
			}
		})
	}
}

// The reported escape: an SFTP user replaces the dynamic_disks directory by
// a link leading outside the root (here the agent's own absolute link,
// renamed); add_dynamic_disk must not create links there, nor
// remove_dynamic_disk delete files there.
func TestEscapeRenameLinkOntoDynamicDisksDir(t *testing.T) {
	for _, knobs := range []agent.Knobs{{}, {AbsoluteLinks: true, NonAtomicLinks: true}} {
		t.Run(fmt.Sprintf("%+v", knobs), func(t *testing.T) {
			c := newConfined(t, knobs)
			c.cfg.DeviceResolver = agent.ResolverIdentity
			if err := c.start(t); err != nil {
				t.Fatal(err)
			}
			before := c.outside(t)
			if err := c.run("add_dynamic_disk", diskA, map[string]string{"path": c.sentinel}); err != nil {
				t.Fatalf("add_dynamic_disk: %v", err)
			}
			dd := "/var/vcap/data/dynamic_disks"
			c.userRename(t, knobs, dd+"/"+diskA, "/var/vcap/data/link")
			if err := c.sftp.RemoveDirectory(dd); err != nil {
				t.Fatalf("SFTP rmdir: %v", err)
			}
			c.userRename(t, knobs, "/var/vcap/data/link", dd)
			_ = c.run("add_dynamic_disk", diskB, map[string]string{"path": "/dev/sdd"})
			_ = c.run("remove_dynamic_disk", diskVictim)
			_ = c.run("dynamic_disk_usage")
			_ = c.start(t)
			if after := c.outside(t); after != before {
				t.Fatalf("outside the root changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		})
	}
}

// The reported escape: a hard link to a device node made over SFTP kept a
// detached disk readable. Links to anything under dev/ are refused, so
// after detach nothing in the root is the backing file any more.
func TestEscapeHardLinkToDevice(t *testing.T) {
	c := newConfined(t, agent.Knobs{})
	for _, l := range [][2]string{{"/dev/sdc", "/var/vcap/store/keep"}, {"/dev/disk/by-id/../../sdc", "/keep"}, {"/var/vcap/data/../../../dev/sdc", "/keep"}} {
		if err := c.sftp.Link(l[0], l[1]); !errors.Is(err, os.ErrPermission) {
			t.Errorf("SFTP link %s → %s: %v, want permission denied", l[0], l[1], err)
		}
	}
	if err := c.sftp.PosixRename("/dev/sdc", "/keep"); !errors.Is(err, os.ErrPermission) {
		t.Errorf("SFTP rename of a device node: %v, want permission denied", err)
	}
	c.v.detach(t, diskA, 'c', "sd")
	if n := c.namesOf(t, filepath.Join(c.v.dataDir, "disks", diskA+".img")); n != 0 {
		t.Errorf("after detach %d names in the root still reach the disk's backing file", n)
	}
}

// Property: whatever mix of SFTP operations (symlinks with absolute and
// climbing targets, renames, hard links, mkdir, remove) and of a guest
// root's own operations the user makes, interleaved with agent actions and
// restarts, nothing outside the VM root changes, and, when only SFTP was
// used, no second name for a device node appears.
func TestPropertyNothingEscapesTheRoot(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		knobs := agent.Knobs{AbsoluteLinks: rapid.Bool().Draw(rt, "absolute"), NonAtomicLinks: rapid.Bool().Draw(rt, "non-atomic"), LaxNames: rapid.Bool().Draw(rt, "lax")}
		c := newConfined(t, knobs)
		disks := []string{diskA, diskB, diskVictim}
		hints := []string{"/dev/sdc", "/dev/sdd", "/var/vcap/data/dynamic_disks/" + diskA, "/x"}
		if knobs.LaxNames { // names upstream accepts and cpilab refuses by default
			disks = append(disks, "..", ".", "../../bosh/settings.json", "a/b", "../../../../../../"+strings.TrimPrefix(c.sentinel, "/")+"/file")
			hints = append(hints, "../../../../sentinel", "/dev/../../..", "relative/sdc", c.sentinel)
		}
		before := c.outside(t)
		paths := []string{
			"/var/vcap/bosh/settings.json", "/var/vcap/bosh/settings.json.tmp", "/var/vcap/bosh",
			"/var/vcap/bosh/persistent_disk_hints.json.tmp", "/var/vcap/bosh/mounts.json.tmp",
			"/var/vcap/data/dynamic_disks", "/var/vcap/data/dynamic_disks/" + diskA, "/var/vcap/data/dynamic_disks/" + diskB,
			"/var/vcap/data/dynamic_disks/" + diskVictim, "/var/vcap/data/dynamic_disks.tmp", "/var/vcap/data/dynamic_disks.tmp/" + diskA,
			"/var/vcap/data", "/var/vcap/store", "/dev/sdc", "/dev/sdd", "/dev/disk/by-id/virtio-" + diskA[:20], "/x", "/x/y",
		}
		targets := []string{
			c.sentinel, filepath.Join(c.sentinel, "file"), filepath.Join(c.sentinel, "settings.json.tmp"), filepath.Join(c.v.dataDir, "disks"),
			"../../../../../../../../../../" + strings.TrimPrefix(c.sentinel, "/"), "../../../../..", "..", "/", "/dev/sdc", "../../../../dev/sdc",
			"../../sdc", "/var/vcap/bosh", "/x",
		}
		root, err := os.OpenRoot(c.v.root)
		if err != nil {
			t.Fatal(err)
		}
		defer root.Close()
		guestOps := false // a guest root can make hard links itself
		steps := rapid.IntRange(1, 25).Draw(rt, "steps")
		for range steps {
			p := rapid.SampledFrom(paths).Draw(rt, "path")
			q := rapid.SampledFrom(paths).Draw(rt, "path2")
			target := rapid.SampledFrom(targets).Draw(rt, "target")
			rel := strings.TrimPrefix(p, "/")
			switch op := rapid.SampledFrom([]string{
				"sftp-symlink", "sftp-rename", "sftp-link", "sftp-mkdir", "sftp-remove", "sftp-rmdir",
				"guest-symlink", "guest-rename", "guest-removeall",
				"add_dynamic_disk", "remove_dynamic_disk", "add_persistent_disk", "mount_disk", "unmount_disk",
				"remove_persistent_disk", "dynamic_disk_usage", "restart",
			}).Draw(rt, "op"); op {
			case "sftp-symlink":
				_ = c.sftp.Symlink(target, p)
			case "sftp-rename":
				_ = c.sftp.PosixRename(p, q)
			case "sftp-link":
				_ = c.sftp.Link(p, q)
			case "sftp-mkdir":
				_ = c.sftp.Mkdir(p)
			case "sftp-remove":
				_ = c.sftp.Remove(p)
			case "sftp-rmdir":
				_ = c.sftp.RemoveDirectory(p)
			case "guest-symlink": // a guest root may link anywhere
				guestOps = true
				_ = root.Remove(rel)
				_ = root.Symlink(target, rel)
			case "guest-rename":
				guestOps = true
				_ = root.Rename(rel, strings.TrimPrefix(q, "/"))
			case "guest-removeall":
				guestOps = true
				_ = root.RemoveAll(rel)
			case "add_dynamic_disk", "add_persistent_disk":
				disk := rapid.SampledFrom(disks).Draw(rt, "disk")
				hint := rapid.SampledFrom(hints).Draw(rt, "hint")
				_ = c.run(op, disk, map[string]string{"path": hint})
			case "remove_dynamic_disk", "mount_disk", "unmount_disk", "remove_persistent_disk":
				_ = c.run(op, rapid.SampledFrom(disks).Draw(rt, "disk"))
			case "dynamic_disk_usage":
				_ = c.run(op)
			case "restart":
				_ = c.start(t)
			}
			if after := c.outside(t); after != before {
				rt.Fatalf("outside the root changed:\nbefore:\n%s\nafter:\n%s", before, after)
			}
		}
		for _, d := range []string{diskA, diskB} {
			if guestOps {
				break
			}
			if n := c.namesOf(t, filepath.Join(c.v.dataDir, "disks", d+".img")); n > 1 {
				rt.Fatalf("%d names in the root reach the backing file of %s", n, d)
			}
		}
	})
}
