package vmroot_test

import (
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/vmroot"
)

// tree is a root holding a few real entries and links planted where the
// strict calls must not follow them, next to an outside directory.
func tree(t *testing.T) (*vmroot.Root, string, string) {
	t.Helper()
	base := t.TempDir()
	root, outside := filepath.Join(base, "root"), filepath.Join(base, "outside")
	for _, d := range []string{"root/dev/disk/by-id", "root/var/vcap/bosh", "root/var/vcap/data", "outside/dir"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	files := map[string]string{"root/dev/sdc": "disk", "outside/secret": "secret", "outside/dir/f": "f"}
	for p, c := range files {
		if err := os.WriteFile(filepath.Join(base, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"root/dev/disk/by-id/virtio-1": "../../sdc",
		"root/abs":                     "/dev/sdc",
		"root/out-abs":                 outside,
		"root/out-rel":                 "../outside",
		"root/var/vcap/bosh/x.tmp":     filepath.Join(outside, "secret"),
		"root/var/vcap/data/dd":        outside,
		"root/up":                      "../../../../..",
	}
	for p, target := range links {
		if err := os.Symlink(target, filepath.Join(base, p)); err != nil {
			t.Fatal(err)
		}
	}
	r, err := vmroot.Open(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r, root, outside
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Strict calls meet a symlink anywhere in the path: an error wrapping
// ErrSymlink, and nothing outside is read, written or removed.
func TestStrictRefusesSymlinks(t *testing.T) {
	r, _, outside := tree(t)
	checks := []struct {
		name string
		err  error
	}{
		{"read through a link", func() error { _, err := r.ReadFile("/out-abs/secret"); return err }()},
		{"read a link", func() error { _, err := r.ReadFile("/abs"); return err }()},
		{"mkdir under a link", r.MkdirAll("/var/vcap/data/dd/new", 0o755)},
		{"mkdir of a link to an existing directory", r.MkdirAll("/var/vcap/data/dd", 0o755)},
		{"mkdir of an existing directory under a link", r.MkdirAll("/var/vcap/data/dd/dir", 0o755)},
		{"write under a link", r.WriteFileAtomic("/out-rel/secret", []byte("x"), 0o644)},
		{"remove under a link", r.Remove("/out-abs/secret")},
		{"removeall under a link", r.RemoveAll("/var/vcap/data/dd/dir")},
		{"symlink under a link", r.Symlink("/dev/sdc", "/var/vcap/data/dd/l", vmroot.SymlinkAtomic)},
		{"readdir of a link", func() error { _, err := r.ReadDir("/out-abs"); return err }()},
		{"chmod of a link", r.ChmodDir("/out-abs", 0o700)},
		{"lstat under a link", func() error { _, err := r.Lstat("/out-abs/secret"); return err }()},
	}
	for _, c := range checks {
		if !errors.Is(c.err, vmroot.ErrSymlink) {
			t.Errorf("%s: %v, want ErrSymlink", c.name, c.err)
		}
	}
	if read(t, filepath.Join(outside, "secret")) != "secret" || read(t, filepath.Join(outside, "dir/f")) != "f" {
		t.Errorf("outside changed")
	}
	if fi, err := os.Stat(outside); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("outside dir mode changed: %v", err)
	}
	for _, p := range []string{"new", "l"} {
		if _, err := os.Lstat(filepath.Join(outside, p)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s created outside", p)
		}
	}
}

// MkdirAll of directories that are all there already succeeds and changes
// nothing; of a path whose last component is a file, it fails.
func TestMkdirAllExisting(t *testing.T) {
	r, root, _ := tree(t)
	for _, p := range []string{"/", "/var", "/var/vcap/bosh", "/dev/disk/by-id/"} {
		if err := r.MkdirAll(p, 0o700); err != nil {
			t.Errorf("MkdirAll(%q) of an existing directory: %v", p, err)
		}
	}
	if fi, err := os.Stat(filepath.Join(root, "var/vcap/bosh")); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("existing directory's mode changed: %v %v", fi, err)
	}
	if err := r.MkdirAll("/dev/sdc", 0o755); err == nil {
		t.Errorf("MkdirAll of a regular file: no error")
	}
	if err := r.MkdirAll("/var/vcap/store/a/b", 0o755); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(filepath.Join(root, "var/vcap/store/a/b")); err != nil || !fi.IsDir() {
		t.Errorf("MkdirAll made no directory: %v", err)
	}
}

// ".." and NUL never name anything: ErrEscape.
func TestEscapeRefused(t *testing.T) {
	r, _, _ := tree(t)
	for _, p := range []string{"/../outside/secret", "var/../../outside", "/a\x00b"} {
		if _, err := r.ReadFile(p); !errors.Is(err, vmroot.ErrEscape) {
			t.Errorf("ReadFile(%q): %v, want ErrEscape", p, err)
		}
		if err := r.MkdirAll(p, 0o755); !errors.Is(err, vmroot.ErrEscape) {
			t.Errorf("MkdirAll(%q): %v, want ErrEscape", p, err)
		}
	}
}

// A file is replaced by a fresh one renamed over it: a symlink planted at
// the temporary name or at the name itself is replaced, not written through.
func TestWriteFileAtomicReplacesLinks(t *testing.T) {
	r, root, outside := tree(t)
	if err := os.Symlink(filepath.Join(outside, "secret"), filepath.Join(root, "var/vcap/bosh/x")); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteFileAtomic("/var/vcap/bosh/x", []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	if read(t, filepath.Join(outside, "secret")) != "secret" {
		t.Fatalf("wrote through a planted link")
	}
	fi, err := os.Lstat(filepath.Join(root, "var/vcap/bosh/x"))
	if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o600 || read(t, filepath.Join(root, "var/vcap/bosh/x")) != "new" {
		t.Fatalf("x is not the new regular file: %v %v", fi, err)
	}
	if _, err := os.Lstat(filepath.Join(root, "var/vcap/bosh/x.tmp")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("x.tmp left behind: %v", err)
	}
	if b, err := r.ReadFile("/var/vcap/bosh/x"); err != nil || string(b) != "new" {
		t.Errorf("ReadFile = %q, %v", b, err)
	}
}

// Symlink: atomic replacement and upstream's remove-then-link; an
// identical link is left alone; RemoveAll removes a link, never its target.
func TestSymlinkAndRemoveAll(t *testing.T) {
	r, root, outside := tree(t)
	for _, mode := range []vmroot.SymlinkMode{vmroot.SymlinkAtomic, vmroot.SymlinkReplace} {
		if err := r.Symlink("../../../dev/sdc", "/var/vcap/data/l", mode); err != nil {
			t.Fatal(err)
		}
		before, _ := os.Lstat(filepath.Join(root, "var/vcap/data/l"))
		if err := r.Symlink("../../../dev/sdc", "/var/vcap/data/l", mode); err != nil {
			t.Fatal(err)
		}
		after, _ := os.Lstat(filepath.Join(root, "var/vcap/data/l"))
		if !os.SameFile(before, after) {
			t.Errorf("mode %d: an identical link was replaced", mode)
		}
		if err := r.Symlink("/dev/sdd", "/var/vcap/data/l", mode); err != nil {
			t.Fatal(err)
		}
		if got, err := r.Readlink("/var/vcap/data/l"); err != nil || got != "/dev/sdd" {
			t.Errorf("mode %d: link → %q, %v", mode, got, err)
		}
		if err := r.RemoveAll("/var/vcap/data/l"); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.RemoveAll("/var/vcap/data/dd"); err != nil || r.Exists("/var/vcap/data/dd") {
		t.Fatalf("RemoveAll of a link to outside: %v", err)
	}
	if read(t, filepath.Join(outside, "dir/f")) != "f" {
		t.Errorf("RemoveAll followed a link")
	}
	if err := r.RemoveAll("/absent/x"); err != nil {
		t.Errorf("RemoveAll of an absent path: %v", err)
	}
}

// The guest view follows links inside the root: absolute targets from the
// root, ".." clamped at the root.
func TestResolveAndGlobInRoot(t *testing.T) {
	r, _, _ := tree(t)
	cases := map[string]string{
		"/dev/disk/by-id/virtio-1": "/dev/sdc",
		"/abs":                     "/dev/sdc",
		"/up/dev/sdc":              "/dev/sdc",
		"/out-rel":                 "/outside", // clamped: /outside inside the root, absent
	}
	for p, want := range cases {
		got, err := r.Resolve(p)
		if want == "/outside" {
			if !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Resolve(%s) = %q, %v; want not found inside the root", p, got, err)
			}
			continue
		}
		if err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", p, got, err, want)
		}
	}
	if _, err := r.Resolve("/out-abs/secret"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("an absolute link to a host path resolved: %v", err)
	}
	m, err := r.Glob("/up/dev/disk/by-id/*1")
	if err != nil || !slices.Equal(m, []string{"/up/dev/disk/by-id/virtio-1"}) {
		t.Errorf("Glob = %v, %v", m, err)
	}
	if b, err := r.ReadFileIn("/dev/disk/by-id/virtio-1"); err != nil || string(b) != "disk" {
		t.Errorf("ReadFileIn = %q, %v", b, err)
	}
}

// globByResolve is Glob as specified: each element matched in the directory
// its guest prefix resolves to, every prefix resolved from the root.
func globByResolve(r *vmroot.Root, pattern string) []string {
	if !strings.HasPrefix(pattern, "/") {
		pattern = "/" + pattern
	}
	cur := []string{"/"}
	for _, el := range strings.Split(pattern[1:], "/") {
		if el == "" {
			continue
		}
		var next []string
		for _, dir := range cur {
			if !strings.ContainsAny(el, `*?[\`) {
				if _, err := r.Resolve(path.Join(dir, el)); err == nil {
					next = append(next, path.Join(dir, el))
				}
				continue
			}
			real, err := r.Resolve(dir)
			if err != nil {
				continue
			}
			names, err := r.ReadDir(real)
			if err != nil {
				continue
			}
			for _, n := range names {
				if ok, _ := path.Match(el, n.Name()); ok {
					next = append(next, path.Join(dir, n.Name()))
				}
			}
		}
		cur = next
	}
	slices.Sort(cur)
	return cur
}

// Glob, which goes on from each resolved prefix, matches the specification
// that resolves every prefix from the root: through links, chains of links,
// dangling links, "..", "." and a loop.
func TestGlobMatchesResolveEverywhere(t *testing.T) {
	r, root, _ := tree(t)
	links := map[string]string{
		"dev/disk/by-id/virtio-2": "virtio-1", "dev/disk/by-id/dangling": "../../none",
		"dev/disk/by-uuid": "by-id", "d": "dev/disk", "dd": "/d", "loop1": "loop2", "loop2": "loop1",
		"dev/disk/by-id/dirlink": "/var/vcap",
	}
	for p, target := range links {
		if err := os.Symlink(target, filepath.Join(root, p)); err != nil {
			t.Fatal(err)
		}
	}
	patterns := []string{"/dev/disk/by-id/*", "/dev/disk/*/virtio-*", "/d/by-*/*", "/dd/by-uuid/virtio-2",
		"/dd/by-id/dirlink/*", "/dd/by-id/dirlink/bosh", "/*/disk/by-id/virtio-1", "/dev/disk/by-id/./virtio-1",
		"/dev/disk/by-id/dirlink/../vcap/*", "/up/*/sdc", "/loop1/*", "/*/*", "/*", "/dev/disk/by-id/dangling",
		"/dev/disk/by-id/dangling/x", "/d/../dev/sd?", "/dev/sdc/x", "/dev/disk/by-id/virtio-[12]", "dev/*/by-id"}
	matched := 0
	for _, p := range patterns {
		got, err := r.Glob(p)
		if err != nil {
			t.Errorf("Glob(%q): %v", p, err)
			continue
		}
		matched += len(got)
		if want := globByResolve(r, p); !slices.Equal(got, want) {
			t.Errorf("Glob(%q) = %q; resolving every prefix gives %q", p, got, want)
		}
	}
	if matched < 20 {
		t.Errorf("the patterns matched %d paths in all: the tree no longer exercises Glob", matched)
	}
}
