package vmssh

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

const (
	testVM       = "vm-3f1c2b7e-0000-4000-8000-000000000001"
	testDisk     = "disk-5a6b7c8d-1111-4222-8333-444455556666"
	sentinelData = "SENTINEL-OUTSIDE-THE-ROOT"
	diskData     = "bytes on the disk"
)

// virtioName is the by-id name of testDisk (first 20 characters).
var virtioName = "virtio-" + testDisk[:20]

// fixture is one running server over one VM root laid out as
// docs/seams.md says, beside a sentinel file outside the root.
type fixture struct {
	base     string // holds the data dir; nothing but the layout below may appear here
	root     string // <base>/vms/<vm>/root
	disk     string // <base>/disks/<disk>.img, hard-linked as <root>/dev/sdc
	sentinel string // <base>/outside.txt
	srv      *Server
	signer   ssh.Signer
	logs     *logRecorder
	before   []string // every path under base, outside the root, at start
}

func newSigner(t *testing.T) ssh.Signer {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newFixture(t *testing.T, tune func(*Config)) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{
		base:     base,
		root:     filepath.Join(base, "vms", testVM, "root"),
		disk:     filepath.Join(base, "disks", testDisk+".img"),
		sentinel: filepath.Join(base, "outside.txt"),
		signer:   newSigner(t),
		logs:     &logRecorder{},
	}
	for _, d := range []string{
		"dev/disk/by-id", "sys/bus/scsi/devices/2:0:2:0/block/sdc",
		"var/vcap/bosh", "var/vcap/data/dynamic_disks", "var/vcap/store",
	} {
		mustDo(t, os.MkdirAll(filepath.Join(f.root, d), 0o755))
	}
	mustDo(t, os.MkdirAll(filepath.Dir(f.disk), 0o755))
	mustDo(t, os.WriteFile(f.disk, []byte(diskData), 0o644))
	mustDo(t, os.Link(f.disk, filepath.Join(f.root, "dev/sdc")))
	mustDo(t, os.Symlink("../../sdc", filepath.Join(f.root, "dev/disk/by-id", virtioName)))
	mustDo(t, os.Symlink("/dev/sdc", filepath.Join(f.root, "var/vcap/data/dynamic_disks", testDisk)))
	mustDo(t, os.WriteFile(f.sentinel, []byte(sentinelData), 0o644))
	// Escape attempts planted inside the root, as a compromised guest
	// (or a careless host process) could leave them.
	mustDo(t, os.Symlink(f.sentinel, filepath.Join(f.root, "abs-out")))
	mustDo(t, os.Symlink("/etc", filepath.Join(f.root, "etc-link")))
	mustDo(t, os.Symlink("../../../outside.txt", filepath.Join(f.root, "rel-out")))
	mustDo(t, os.Symlink("../../..", filepath.Join(f.root, "up")))
	mustDo(t, os.Symlink("../../sdc", filepath.Join(f.root, "var/vcap/deep-link")))
	f.before = f.outsideTree(t)

	keys := &AuthorizedKeys{}
	keys.Add(testVM, f.signer.PublicKey())
	cfg := Config{
		Authorize: keys.Authorize,
		RootFor: func(vmCID string) (string, bool) {
			if vmCID != testVM {
				return "", false
			}
			return f.root, true
		},
		Logger: slog.New(f.logs),
	}
	if tune != nil {
		tune(&cfg)
	}
	srv, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return f
}

func mustDo(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) dial(t *testing.T) *Client {
	t.Helper()
	c, err := Dial(ClientConfig{Addr: f.srv.Addr(), VMCID: testVM, Signer: f.signer, HostKey: f.srv.HostKey(), Timeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// outsideTree lists every path under base that is not inside the root.
func (f *fixture) outsideTree(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(f.base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == f.root {
			return filepath.SkipDir
		}
		out = append(out, p)
		return nil
	})
	mustDo(t, err)
	return out
}

// checkOutside asserts that nothing outside the root was written or
// created: the sentinel keeps its content and no new path appeared.
func (f *fixture) checkOutside(t *testing.T) {
	t.Helper()
	got, err := os.ReadFile(f.sentinel)
	if err != nil || string(got) != sentinelData {
		t.Errorf("sentinel outside the root: content %q, err %v; want %q untouched", got, err, sentinelData)
	}
	if after := f.outsideTree(t); !slices.Equal(after, f.before) {
		t.Errorf("paths outside the root changed:\nbefore %q\nafter  %q", f.before, after)
	}
	if d, err := os.ReadFile(f.disk); err == nil && strings.Contains(string(d), sentinelData) {
		t.Errorf("disk backing file holds sentinel data")
	}
}

// readAll reads a file through the client; it fails the test if the
// sentinel's content ever comes back.
func readAll(t *testing.T, c *Client, p string) ([]byte, error) {
	t.Helper()
	fh, err := c.Open(p)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	b, err := io.ReadAll(fh)
	if bytes.Contains(b, []byte(sentinelData)) {
		t.Fatalf("read %q returned the sentinel file outside the root", p)
	}
	return b, err
}

func writeFile(c *Client, p, data string) error {
	fh, err := c.Create(p)
	if err != nil {
		return err
	}
	if _, err := fh.Write([]byte(data)); err != nil {
		fh.Close()
		return err
	}
	return fh.Close()
}

func TestRoundTrip(t *testing.T) {
	f := newFixture(t, nil)
	c := f.dial(t)

	if err := writeFile(c, "/var/vcap/store/hello.txt", "hello"); err != nil {
		t.Fatalf("write: %v", err)
	}
	if b, err := readAll(t, c, "/var/vcap/store/hello.txt"); err != nil || string(b) != "hello" {
		t.Fatalf("read back: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(f.root, "var/vcap/store/hello.txt")); err != nil || string(b) != "hello" {
		t.Fatalf("on the host: %q, %v", b, err)
	}
	// Relative paths start at the VM root.
	if b, err := readAll(t, c, "var/vcap/store/hello.txt"); err != nil || string(b) != "hello" {
		t.Fatalf("read by relative path: %q, %v", b, err)
	}
	mustDo(t, c.Mkdir("/var/vcap/store/d"))
	mustDo(t, c.Rename("/var/vcap/store/hello.txt", "/var/vcap/store/d/hi.txt"))
	entries, err := c.ReadDir("/var/vcap/store/d")
	if err != nil || len(entries) != 1 || entries[0].Name() != "hi.txt" || entries[0].Size() != 5 {
		t.Fatalf("ReadDir: %v, %v", entries, err)
	}
	top, err := c.ReadDir("/")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range top {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	want := []string{"abs-out", "dev", "etc-link", "rel-out", "sys", "up", "var"}
	if !slices.Equal(names, want) {
		t.Fatalf("ReadDir(/) = %q, want %q", names, want)
	}
	if fi, err := c.Stat("/"); err != nil || !fi.IsDir() {
		t.Fatalf("Stat(/): %v, %v", fi, err)
	}
	if wd, err := c.Getwd(); err != nil || wd != "/" {
		t.Fatalf("Getwd = %q, %v; want /", wd, err)
	}
	mustDo(t, c.Remove("/var/vcap/store/d/hi.txt"))
	mustDo(t, c.RemoveDirectory("/var/vcap/store/d"))

	// The links the suites read through.
	byID := "/dev/disk/by-id/" + virtioName
	dyn := "/var/vcap/data/dynamic_disks/" + testDisk
	for _, l := range []struct{ link, target string }{{byID, "../../sdc"}, {dyn, "/dev/sdc"}} {
		if got, err := c.ReadLink(l.link); err != nil || got != l.target {
			t.Errorf("ReadLink(%s) = %q, %v; want %q", l.link, got, err, l.target)
		}
		if fi, err := c.Lstat(l.link); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("Lstat(%s): %v, %v; want a symlink", l.link, fi, err)
		}
		if fi, err := c.Stat(l.link); err != nil || !fi.Mode().IsRegular() || fi.Size() != int64(len(diskData)) {
			t.Errorf("Stat(%s): %v, %v; want the %d-byte device", l.link, fi, err, len(diskData))
		}
		if got, err := c.RealPath(l.link); err != nil || got != "/dev/sdc" {
			t.Errorf("RealPath(%s) = %q, %v; want /dev/sdc", l.link, got, err)
		}
		if b, err := readAll(t, c, l.link); err != nil || string(b) != diskData {
			t.Errorf("read through %s: %q, %v; want %q", l.link, b, err, diskData)
		}
	}
	// Writing through the dynamic-disk link reaches the disk's backing
	// file, through the hard link dev/sdc.
	fh, err := c.OpenFile(dyn, os.O_WRONLY)
	mustDo(t, err)
	_, err = fh.WriteAt([]byte("BYTES"), 0)
	mustDo(t, err)
	mustDo(t, fh.Close())
	if b, err := os.ReadFile(f.disk); err != nil || string(b) != "BYTES on the disk" {
		t.Errorf("disk backing file after write through %s: %q, %v", dyn, b, err)
	}

	// In-root links can be made, as fakeiaas lays them out.
	mustDo(t, c.Symlink("../../sdc", "/dev/disk/by-id/virtio-other"))
	if b, err := readAll(t, c, "/dev/disk/by-id/virtio-other"); err != nil || string(b) != "BYTES on the disk" {
		t.Errorf("read through a new in-root symlink: %q, %v", b, err)
	}
	// A second name for a device node would keep the disk readable after
	// detach: hard links to anything under dev/ are refused, whatever path
	// leads there, and device nodes cannot be moved.
	for _, l := range [][2]string{{"/dev/sdc", "/dev/sdd"}, {"/dev/sdc", "/keep"}, {"/var/vcap/data/dynamic_disks/../../../../dev/sdc", "/keep"}} {
		if err := c.Link(l[0], l[1]); !errors.Is(err, os.ErrPermission) {
			t.Errorf("Link(%s, %s): %v, want permission denied", l[0], l[1], err)
		}
	}
	if err := c.PosixRename("/dev/sdc", "/keep"); !errors.Is(err, os.ErrPermission) {
		t.Errorf("PosixRename(/dev/sdc, /keep): %v, want permission denied", err)
	}
	if err := c.Rename("/dev", "/devices"); !errors.Is(err, os.ErrPermission) {
		t.Errorf("Rename(/dev, /devices): %v, want permission denied", err)
	}
	if _, err := os.Lstat(filepath.Join(f.root, "keep")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a refused link or rename left /keep: %v", err)
	}
	// Hard links between the user's own files work.
	fh, err = c.Create("/var/vcap/store/a")
	mustDo(t, err)
	mustDo(t, fh.Close())
	mustDo(t, c.Link("/var/vcap/store/a", "/var/vcap/store/b"))
	if fi, err := os.Stat(filepath.Join(f.root, "var/vcap/store/b")); err != nil || !os.SameFile(fi, mustStat(t, filepath.Join(f.root, "var/vcap/store/a"))) {
		t.Errorf("hard link of a user file: %v", err)
	}
	// A device node's mode and size are its backing file's: refused
	// (TestDeviceNodeAttributesStayTheDisks); a user file's are the user's.
	if err := c.Chmod("/dev/sdc", 0o600); !errors.Is(err, os.ErrPermission) {
		t.Errorf("Chmod of a device node: %v, want permission denied", err)
	}
	mustDo(t, c.Chmod("/var/vcap/store/a", 0o600))
	if fi, err := c.Stat("/var/vcap/store/a"); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("Chmod: %v, %v", fi, err)
	}
	mustDo(t, c.Truncate("/var/vcap/store/a", 0))
	f.checkOutside(t)
}

func mustStat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(p)
	mustDo(t, err)
	return fi
}

// wantCode asserts that err is an SFTP status with the given code, as the
// client reports it.
func wantCode(t *testing.T, what string, err error, code error) {
	t.Helper()
	switch {
	case code == sftp.ErrSSHFxNoSuchFile:
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: got %v, want not-exist", what, err)
		}
	case code == sftp.ErrSSHFxPermissionDenied:
		if !errors.Is(err, fs.ErrPermission) {
			t.Errorf("%s: got %v, want permission denied", what, err)
		}
	default:
		var se *sftp.StatusError
		if !errors.As(err, &se) || se.FxCode() != code {
			t.Errorf("%s: got %v, want status %v", what, err, code)
		}
	}
}

func TestEscapesAreRefusedOrConfined(t *testing.T) {
	f := newFixture(t, nil)
	c := f.dial(t)
	notExist := sftp.ErrSSHFxNoSuchFile

	// Reads: paths are read inside the root, whatever they say.
	for _, p := range []string{
		"../../outside.txt",
		"/../../../outside.txt",
		"/etc/passwd", // maps to <root>/etc/passwd
		"../../../../etc/passwd",
		f.sentinel,        // the sentinel's host path maps inside the root
		"/abs-out",        // planted link to the sentinel's host path
		"/rel-out",        // planted relative link climbing out
		"/up/outside.txt", // planted "../../.." is clamped at the root
		"/up/up/../../outside.txt",
		"/etc-link/passwd",    // planted link to /etc
		"/var/vcap/deep-link", // "../../sdc" from var/vcap is <root>/sdc
	} {
		_, err := readAll(t, c, p)
		wantCode(t, "read "+p, err, notExist)
		_, err = c.Stat(p)
		wantCode(t, "stat "+p, err, notExist)
	}
	if _, err := c.ReadDir("/etc-link"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadDir through a link to /etc: %v, want not-exist", err)
	}
	upList, err := c.ReadDir("/up")
	mustDo(t, err)
	rootList, err := c.ReadDir("/")
	mustDo(t, err)
	if len(upList) != len(rootList) {
		t.Errorf("ReadDir(/up) has %d entries, want the root's %d (clamped)", len(upList), len(rootList))
	}
	if got, err := c.RealPath("/up/../../.."); err != nil || got != "/" {
		t.Errorf("RealPath climbing out = %q, %v; want /", got, err)
	}

	// Writes through the planted links land inside the root or fail.
	wantCode(t, "write through absolute link", writeFile(c, "/abs-out", "x"), notExist)
	mustDo(t, writeFile(c, "/rel-out", "confined"))
	if b, err := os.ReadFile(filepath.Join(f.root, "outside.txt")); err != nil || string(b) != "confined" {
		t.Errorf("write through rel-out should create <root>/outside.txt: %q, %v", b, err)
	}
	mustDo(t, writeFile(c, "../../escaped.txt", "confined"))
	if _, err := os.Stat(filepath.Join(f.root, "escaped.txt")); err != nil {
		t.Errorf("write to ../../escaped.txt should create <root>/escaped.txt: %v", err)
	}
	mustDo(t, c.Mkdir("../../newdir"))
	if _, err := os.Stat(filepath.Join(f.root, "newdir")); err != nil {
		t.Errorf("mkdir ../../newdir should create <root>/newdir: %v", err)
	}

	// Symlink creation to outside targets is refused, and nothing is made.
	perm := sftp.ErrSSHFxPermissionDenied
	for _, target := range []string{
		f.sentinel, "/tmp/outside", "/dev/sdc",
		"../outside.txt", "../../../..", "dev/../../outside.txt", "up/..",
	} {
		wantCode(t, "symlink to "+target, c.Symlink(target, "/mine"), perm)
	}
	wantCode(t, "symlink from dev/disk climbing 3", c.Symlink("../../../../outside.txt", "/dev/disk/x"), perm)
	for _, p := range []string{"mine", "dev/disk/x"} {
		if _, err := os.Lstat(filepath.Join(f.root, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("refused symlink %s exists: %v", p, err)
		}
	}

	// Hard links: the old name is read inside the root; a symlink may not
	// be linked to where it climbs out.
	wantCode(t, "link ../../missing", c.Link("../../missing", "/hl"), notExist)
	mustDo(t, c.Link("../outside.txt", "/hl")) // <root>/outside.txt, written above
	if fi, err := os.Stat(filepath.Join(f.root, "hl")); err != nil || os.SameFile(fi, mustStat(t, f.sentinel)) ||
		!os.SameFile(fi, mustStat(t, filepath.Join(f.root, "outside.txt"))) {
		t.Errorf("link ../outside.txt must link <root>/outside.txt, not the sentinel: %v", err)
	}
	mustDo(t, c.Remove("/hl"))
	wantCode(t, "link sentinel host path", c.Link(f.sentinel, "/hl"), notExist)
	wantCode(t, "link deep-link to the top", c.Link("/var/vcap/deep-link", "/hl"), perm)
	mustDo(t, c.Link("/abs-out", "/hl-abs")) // a symlink, still read in the root
	_, err = readAll(t, c, "/hl-abs")
	wantCode(t, "read through linked absolute symlink", err, notExist)

	// Rename cannot move anything out, nor move a link to where it climbs out.
	mustDo(t, writeFile(c, "/var/vcap/store/f", "f"))
	mustDo(t, c.Rename("/var/vcap/store/f", "../x"))
	if _, err := os.Stat(filepath.Join(f.root, "x")); err != nil {
		t.Errorf("rename to ../x should land at <root>/x: %v", err)
	}
	mustDo(t, c.PosixRename("/x", "../../outside.txt"))
	wantCode(t, "rename deep-link to the top", c.Rename("/var/vcap/deep-link", "/moved"), perm)
	wantCode(t, "rename dir holding deep-link to the top", c.Rename("/var/vcap", "/vcap2"), perm)
	mustDo(t, c.Rename("/var/vcap/deep-link", "/var/vcap/store/deeper")) // deeper is fine

	f.checkOutside(t)
}

func TestInvalidNames(t *testing.T) {
	f := newFixture(t, nil)
	c := f.dial(t)
	bad := sftp.ErrSSHFxBadMessage
	long := strings.Repeat("n", MaxNameLen+1)
	longPath := strings.Repeat("/dir", MaxPathLen/4+1)
	for _, p := range []string{"/var/a\x00b", "/" + long, longPath} {
		_, err := c.Open(p)
		wantCode(t, "open", err, bad)
		wantCode(t, "create", writeFile(c, p, "x"), bad)
		wantCode(t, "mkdir", c.Mkdir(p), bad)
		_, err = c.Lstat(p)
		wantCode(t, "lstat", err, bad)
		wantCode(t, "rename to", c.Rename("/dev/sdc", p), bad)
		wantCode(t, "symlink target", c.Symlink("a"+p, "/ok-name"), bad)
	}
	if _, err := os.Lstat(filepath.Join(f.root, "ok-name")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a symlink with an invalid target was created: %v", err)
	}
	f.checkOutside(t)
}

func TestSymlinkLoop(t *testing.T) {
	f := newFixture(t, nil)
	c := f.dial(t)
	mustDo(t, c.Symlink("loop", "/loop"))
	if _, err := c.Stat("/loop"); err == nil {
		t.Fatal("Stat of a symlink loop succeeded")
	}
}

func TestAuthRefusals(t *testing.T) {
	f := newFixture(t, nil)
	cases := []struct {
		name   string
		user   string
		signer ssh.Signer
	}{
		{"unknown VM CID", "vm-unknown", f.signer},
		{"wrong key", testVM, newSigner(t)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Dial(ClientConfig{Addr: f.srv.Addr(), VMCID: tc.user, Signer: tc.signer, Timeout: 5 * time.Second})
			if err == nil {
				c.Close()
				t.Fatal("Dial succeeded")
			}
			var authErr *ssh.ServerAuthError
			if !f.logs.waitFor(func(err error) bool { return errors.As(err, &authErr) }) {
				t.Fatalf("client error %v, but the server logged no *ssh.ServerAuthError", err)
			}
		})
	}
	t.Run("password", func(t *testing.T) {
		cfg := &ssh.ClientConfig{
			User:            testVM,
			Auth:            []ssh.AuthMethod{ssh.Password("secret")},
			HostKeyCallback: ssh.FixedHostKey(f.srv.HostKey()),
			Timeout:         5 * time.Second,
		}
		if c, err := ssh.Dial("tcp", f.srv.Addr(), cfg); err == nil {
			c.Close()
			t.Fatal("password login succeeded")
		}
	})
	t.Run("wrong host key", func(t *testing.T) {
		c, err := Dial(ClientConfig{Addr: f.srv.Addr(), VMCID: testVM, Signer: f.signer, HostKey: newSigner(t).PublicKey(), Timeout: 5 * time.Second})
		if err == nil {
			c.Close()
			t.Fatal("Dial accepted a server with another host key")
		}
	})
}

func TestOnlySFTP(t *testing.T) {
	f := newFixture(t, nil)
	cfg := &ssh.ClientConfig{
		User:            testVM,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(f.signer)},
		HostKeyCallback: ssh.FixedHostKey(f.srv.HostKey()),
		Timeout:         5 * time.Second,
	}
	c, err := ssh.Dial("tcp", f.srv.Addr(), cfg)
	mustDo(t, err)
	defer c.Close()
	s, err := c.NewSession()
	mustDo(t, err)
	defer s.Close()
	if out, err := s.Output("cat /etc/passwd"); err == nil {
		t.Fatalf("exec succeeded: %q", out)
	}
	if _, _, err := c.OpenChannel("direct-tcpip", nil); err == nil {
		t.Fatal("a direct-tcpip channel was opened")
	}
}

func TestMaxSessions(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.MaxSessions = 1 })
	first := f.dial(t)
	_, err := Dial(ClientConfig{Addr: f.srv.Addr(), VMCID: testVM, Signer: f.signer, Timeout: 5 * time.Second})
	var oce *ssh.OpenChannelError
	if !errors.As(err, &oce) || oce.Reason != ssh.ResourceShortage {
		t.Fatalf("second session: got %v, want an ssh.ResourceShortage channel error", err)
	}
	mustDo(t, first.Close())
	// The slot is given back when the session ends.
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := Dial(ClientConfig{Addr: f.srv.Addr(), VMCID: testVM, Signer: f.signer, Timeout: 5 * time.Second})
		if err == nil {
			c.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no session after the first closed: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestStartValidates(t *testing.T) {
	if _, err := Start(Config{RootFor: func(string) (string, bool) { return "", false }}); err == nil {
		t.Error("Start without Authorize succeeded")
	}
	if _, err := Start(Config{Authorize: func(string, ssh.PublicKey) bool { return false }}); err == nil {
		t.Error("Start without RootFor succeeded")
	}
}

func TestCloseEndsSessions(t *testing.T) {
	f := newFixture(t, nil)
	c := f.dial(t)
	mustDo(t, f.srv.Close())
	if _, err := c.Stat("/"); err == nil {
		t.Fatal("a session survived Close")
	}
	if _, err := Dial(ClientConfig{Addr: f.srv.Addr(), VMCID: testVM, Signer: f.signer, Timeout: time.Second}); err == nil {
		t.Fatal("Dial after Close succeeded")
	}
}

// logRecorder is a slog.Handler that keeps the errors logged.
type logRecorder struct {
	mu   sync.Mutex
	errs []error
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if err, ok := a.Value.Any().(error); ok {
			l.mu.Lock()
			l.errs = append(l.errs, err)
			l.mu.Unlock()
		}
		return true
	})
	return nil
}

// waitFor reports whether an error matching ok is logged within 5 s (the
// server logs from its connection goroutine, after the client has seen
// the refusal).
func (l *logRecorder) waitFor(ok func(error) bool) bool {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		l.mu.Lock()
		found := slices.ContainsFunc(l.errs, ok)
		l.mu.Unlock()
		if found {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}
