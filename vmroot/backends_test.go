//go:build linux

// The memory backend models Linux: the machine's backend it is compared
// with is the openat2 one.

package vmroot_test

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cpilab/cpilab/vmroot"
)

// A backend under test: a host file system and a fresh base directory in
// it, holding "root" (the VM root) and "outside".
type backend struct {
	name string
	make func(t *testing.T) (host vmroot.Host, base string)
}

// processUmask is the umask the real backend's creations get: read once
// (syscall.Umask sets it, so it is set back at once, before any test runs).
var processUmask = func() fs.FileMode {
	u := syscall.Umask(0o022)
	syscall.Umask(u)
	return fs.FileMode(u)
}()

var backends = []backend{
	{"os", func(t *testing.T) (vmroot.Host, string) { return vmroot.OS, t.TempDir() }},
	{"mem", func(t *testing.T) (vmroot.Host, string) {
		m := vmroot.NewMem(processUmask)
		base := filepath.ToSlash(t.TempDir()) // the same length as the os one's: link sizes compare
		if err := m.MkdirAll(base, 0o755); err != nil {
			t.Fatal(err)
		}
		return m, base
	}},
}

// plant builds, through the API alone (so every backend gets the same
// tree), a root with real entries and links the strict calls must not
// follow, next to an outside directory; it returns the open root.
func plant(t *testing.T, h vmroot.Host, base string) *vmroot.Root {
	t.Helper()
	b, err := h.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	outside := path.Join(filepath.ToSlash(base), "outside")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"root/dev/disk/by-id", "root/var/vcap/bosh", "root/var/vcap/data", "root/empty", "outside/dir"} {
		must(b.MkdirAll(d, 0o755))
	}
	must(b.ChmodDir("root", 0o755))
	for _, f := range []struct{ p, c string }{{"root/dev/sdc", "disk"}, {"outside/secret", "secret"}, {"outside/dir/f", "f"}, {"root/var/vcap/bosh/settings.json", "{}"}} {
		must(b.WriteFileAtomic(f.p, []byte(f.c), 0o644))
	}
	for _, l := range []struct{ p, target string }{
		{"root/dev/disk/by-id/virtio-1", "../../sdc"},
		{"root/abs", "/dev/sdc"},
		{"root/out-abs", outside},
		{"root/out-rel", "../outside"},
		{"root/var/vcap/bosh/x.tmp", outside + "/secret"},
		{"root/var/vcap/data/dd", outside},
		{"root/up", "../../../../.."},
		{"root/loop1", "loop2"},
		{"root/loop2", "loop1"},
		{"root/self", "self"},
		{"root/dangling", "/none/x"},
		{"root/dev/disk/by-id/dirlink", "/var/vcap"},
	} {
		must(b.Symlink(l.target, l.p, vmroot.SymlinkReplace))
	}
	r, err := h.Open(path.Join(base, "root"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// sentinels an error is classified by.
var sentinels = []struct {
	name string
	err  error
}{
	{"ErrNotExist", fs.ErrNotExist}, {"ErrExist", fs.ErrExist}, {"ErrPermission", fs.ErrPermission},
	{"ErrSymlink", vmroot.ErrSymlink}, {"ErrEscape", vmroot.ErrEscape}, {"ErrNotRegular", vmroot.ErrNotRegular},
	{"ErrTooLarge", vmroot.ErrTooLarge}, {"ENOTDIR", syscall.ENOTDIR}, {"EISDIR", syscall.EISDIR},
	{"ENOTEMPTY", syscall.ENOTEMPTY}, {"ELOOP", syscall.ELOOP}, {"ENAMETOOLONG", syscall.ENAMETOOLONG},
	{"EINVAL", syscall.EINVAL}, {"EPERM", syscall.EPERM}, {"EBADF", syscall.EBADF}, {"ErrBadPattern", path.ErrBadPattern},
}

// describe is an error as the comparison sees it: its text with the base
// directory's path replaced, then every sentinel it wraps.
func describe(err error, base string) string {
	if err == nil {
		return "ok"
	}
	var is []string
	for _, s := range sentinels {
		if errors.Is(err, s.err) {
			is = append(is, s.name)
		}
	}
	return fmt.Sprintf("error %q is %v", strings.ReplaceAll(err.Error(), base, "$BASE"), is)
}

// dump lists everything under base, strictly (links are listed, never
// followed): path, mode, size and a link's target or a file's content.
func dump(t *testing.T, h vmroot.Host, base string) string {
	t.Helper()
	b, err := h.Open(base)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	var out []string
	var walk func(dir string)
	walk = func(dir string) {
		ents, err := b.ReadDir(dir)
		if err != nil {
			out = append(out, dir+": "+describe(err, base))
			return
		}
		for _, e := range ents {
			p := path.Join(dir, e.Name())
			fi, err := b.Lstat(p)
			if err != nil {
				out = append(out, p+": "+describe(err, base))
				continue
			}
			line := fmt.Sprintf("%s %v", p, fi.Mode())
			if e.Type() != fi.Mode().Type() {
				line += fmt.Sprintf(" (entry type %v)", e.Type())
			}
			switch {
			case fi.Mode()&fs.ModeSymlink != 0:
				target, err := b.Readlink(p)
				line += fmt.Sprintf(" size %d → %q %s", fi.Size(), strings.ReplaceAll(target, base, "$BASE"), describe(err, base))
			case fi.Mode().IsRegular():
				c, err := b.ReadFile(p)
				line += fmt.Sprintf(" size %d %q %s", fi.Size(), c, describe(err, base))
			}
			out = append(out, line)
			if fi.IsDir() {
				walk(p)
			}
		}
	}
	walk(".")
	return strings.Join(out, "\n")
}

// A case does something to a planted root and says what came of it; the
// outcome and the whole tree afterwards must be the same on every backend.
type bcase struct {
	name string
	do   func(r *vmroot.Root, h vmroot.Host, base string) string
}

func res(v any, err error, base string) string {
	if err != nil {
		return describe(err, base)
	}
	if fi, ok := v.(fs.FileInfo); ok {
		size := ""
		if !fi.IsDir() {
			size = fmt.Sprint(" size ", fi.Size())
		}
		return fmt.Sprintf("%s %v%s", fi.Name(), fi.Mode(), size)
	}
	if es, ok := v.([]fs.DirEntry); ok {
		var s []string
		for _, e := range es {
			s = append(s, fmt.Sprintf("%s:%v", e.Name(), e.Type()))
		}
		return strings.Join(s, " ")
	}
	if b, ok := v.([]byte); ok {
		return fmt.Sprintf("%q", b)
	}
	return strings.ReplaceAll(fmt.Sprint(v), base, "$BASE")
}

var long = strings.Repeat("n", 256)

func backendCases() []bcase {
	var cs []bcase
	e := func(name string, f func(r *vmroot.Root) error) {
		cs = append(cs, bcase{name, func(r *vmroot.Root, _ vmroot.Host, base string) string { return describe(f(r), base) }})
	}
	v := func(name string, f func(r *vmroot.Root) (any, error)) {
		cs = append(cs, bcase{name, func(r *vmroot.Root, _ vmroot.Host, base string) string {
			x, err := f(r)
			return res(x, err, base)
		}})
	}
	// Lstat, Readlink, ReadFile, ReadDir on every kind of entry and path.
	for _, p := range []string{"/", ".", "", "/dev", "dev/sdc", "/abs", "/out-abs", "/out-abs/secret", "/dev/disk/by-id/virtio-1/x",
		"/dev/sdc/x", "/none", "/none/x", "/../outside", "var/../../outside", "/a\x00b", "/up", "/up/dev", "/loop1", "/loop1/x",
		"/var/vcap/data/dd/dir", "/" + long, "/dev//sdc/", "/./dev/./sdc", "/var/vcap/bosh/x.tmp", "/empty"} {
		// What only reads, and what fails on most paths, in one sequence.
		cs = append(cs, bcase{"read " + p, func(r *vmroot.Root, _ vmroot.Host, base string) string {
			var out []string
			say := func(what string, v any, err error) { out = append(out, what+": "+res(v, err, base)) }
			fi, err := r.Lstat(p)
			say("lstat", fi, err)
			l, err := r.Readlink(p)
			say("readlink", l, err)
			b, err := r.ReadFile(p)
			say("readfile", b, err)
			es, err := r.ReadDir(p)
			say("readdir", es, err)
			g, err := r.Resolve(p)
			say("resolve", g, err)
			b, err = r.ReadFileIn(p)
			say("readfilein", b, err)
			say("exists", r.Exists(p), nil)
			say("chmod", nil, r.ChmodDir(p, 0o700))
			say("mkdirall under", nil, r.MkdirAll(p+"/new/sub", 0o777))
			say("write under", nil, r.WriteFileAtomic(p+"/new", []byte("new"), 0o600))
			say("symlink same", nil, r.Symlink("/dev/sdc", p, vmroot.SymlinkAtomic))
			return strings.Join(out, "\n")
		}})
		e("mkdirall "+p, func(r *vmroot.Root) error { return r.MkdirAll(p, 0o750) })
		e("write "+p, func(r *vmroot.Root) error { return r.WriteFileAtomic(p, []byte("new"), 0o666) })
		e("remove "+p, func(r *vmroot.Root) error { return r.Remove(p) })
		e("removeall "+p, func(r *vmroot.Root) error { return r.RemoveAll(p) })
		e("symlink atomic "+p, func(r *vmroot.Root) error { return r.Symlink("/dev/sdd", p, vmroot.SymlinkAtomic) })
		e("symlink replace "+p, func(r *vmroot.Root) error { return r.Symlink("../dev/sdd", p, vmroot.SymlinkReplace) })
	}
	// The guest view: links followed inside the root, the hop limit, loops.
	// A chain of MaxLinkHops+1 links is one too many; from its second link
	// it resolves.
	cs = append(cs, bcase{"hop limit", func(r *vmroot.Root, _ vmroot.Host, base string) string {
		for i := 0; i <= vmroot.MaxLinkHops; i++ {
			if err := r.Symlink(fmt.Sprintf("c%d", i+1), fmt.Sprintf("/c%d", i), vmroot.SymlinkReplace); err != nil {
				return describe(err, base)
			}
		}
		if err := r.Symlink("dev/sdc", fmt.Sprintf("/c%d", vmroot.MaxLinkHops+1), vmroot.SymlinkReplace); err != nil {
			return describe(err, base)
		}
		var out []string
		for _, p := range []string{"/c0", "/c1", "/c1/x", "/c0/x"} {
			g, err := r.Resolve(p)
			b, berr := r.ReadFileIn(p)
			m, merr := r.Glob(p)
			out = append(out, p+": "+res(g, err, base)+" "+res(b, berr, base)+" "+res(m, merr, base))
		}
		m, err := r.Glob("/c*")
		return strings.Join(append(out, res(m, err, base)), "\n")
	}})
	for _, p := range []string{"/dev/disk/by-id/virtio-1", "/up/dev/sdc", "/out-rel", "/dangling", "/self",
		"/dev/disk/by-id/dirlink/bosh/settings.json", "/dev/disk/by-id/dirlink/../vcap/bosh", "/abs/", "/up/up/abs"} {
		v("resolve "+p, func(r *vmroot.Root) (any, error) { return r.Resolve(p) })
		v("readfilein "+p, func(r *vmroot.Root) (any, error) { return r.ReadFileIn(p) })
	}
	for _, p := range []string{"/dev/disk/by-id/*", "/*", "/*/*", "/up/*/sdc", "/loop1/*", "/dev/disk/by-id/dirlink/*", "/[", "dev/*/by-id", "/dev/disk/by-id/dirlink/../vcap/*"} {
		v("glob "+p, func(r *vmroot.Root) (any, error) { return r.Glob(p) })
	}
	// Writes and links in sequence.
	e("write twice, replacing a link", func(r *vmroot.Root) error {
		if err := r.WriteFileAtomic("/var/vcap/bosh/x", []byte("one"), 0o600); err != nil {
			return err
		}
		return r.WriteFileAtomic("/var/vcap/bosh/x", []byte("two"), 0o640)
	})
	e("write over a tmp directory", func(r *vmroot.Root) error {
		if err := r.MkdirAll("/var/vcap/bosh/y.tmp/in", 0o755); err != nil {
			return err
		}
		return r.WriteFileAtomic("/var/vcap/bosh/y", []byte("y"), 0o600)
	})
	e("write a name too long for its tmp", func(r *vmroot.Root) error {
		return r.WriteFileAtomic("/"+strings.Repeat("w", 252), nil, 0o600)
	})
	e("symlink atomic over a link, then again", func(r *vmroot.Root) error {
		if err := r.Symlink("../../../dev/sdc", "/var/vcap/data/l", vmroot.SymlinkAtomic); err != nil {
			return err
		}
		return r.Symlink("/dev/sdd", "/var/vcap/data/l", vmroot.SymlinkAtomic)
	})
	e("symlink with an empty target", func(r *vmroot.Root) error { return r.Symlink("", "/var/vcap/data/e", vmroot.SymlinkReplace) })
	e("symlink atomic under a file", func(r *vmroot.Root) error { return r.Symlink("x", "/dev/sdc/l", vmroot.SymlinkAtomic) })
	e("symlink atomic where the tmp dir is a link", func(r *vmroot.Root) error {
		if err := r.Symlink("/out-abs", "/var/vcap/data.tmp", vmroot.SymlinkReplace); err != nil {
			return err
		}
		return r.Symlink("x", "/var/vcap/data/l", vmroot.SymlinkAtomic)
	})
	e("a directory swapped for a link", func(r *vmroot.Root) error {
		if err := r.RemoveAll("/var/vcap/bosh"); err != nil {
			return err
		}
		if err := r.Symlink("/out-abs", "/var/vcap/bosh", vmroot.SymlinkReplace); err != nil {
			return err
		}
		return r.WriteFileAtomic("/var/vcap/bosh/settings.json", []byte("x"), 0o600)
	})
	e("remove a non-empty directory", func(r *vmroot.Root) error { return r.Remove("/var/vcap") })
	e("removeall of the root", func(r *vmroot.Root) error { return r.RemoveAll("/") })
	e("mkdirall of a long path", func(r *vmroot.Root) error {
		return r.MkdirAll(strings.Repeat("/"+strings.Repeat("d", 200), 22), 0o755)
	})
	// Hard links from the host (the fake cloud's devices).
	cs = append(cs,
		bcase{"linkfrom a host file", func(r *vmroot.Root, h vmroot.Host, base string) string {
			err := r.LinkFrom(path.Join(base, "outside/secret"), "/dev/sdd")
			a, _ := h.Lstat(path.Join(base, "outside/secret"))
			b, berr := r.Lstat("/dev/sdd")
			same := berr == nil && vmroot.SameFile(a, b)
			other, _ := r.Lstat("/dev/sdc")
			return fmt.Sprintf("%s same=%v other=%v", describe(err, base), same, other != nil && vmroot.SameFile(a, other))
		}},
		bcase{"linkfrom over an entry", func(r *vmroot.Root, h vmroot.Host, base string) string {
			return describe(r.LinkFrom(path.Join(base, "outside/secret"), "/dev/sdc"), base)
		}},
		bcase{"linkfrom a directory", func(r *vmroot.Root, h vmroot.Host, base string) string {
			return describe(r.LinkFrom(path.Join(base, "outside/dir"), "/dev/sdd"), base)
		}},
		bcase{"linkfrom nothing", func(r *vmroot.Root, h vmroot.Host, base string) string {
			return describe(r.LinkFrom(path.Join(base, "outside/none"), "/dev/sdd"), base)
		}},
		bcase{"linkfrom under a link", func(r *vmroot.Root, h vmroot.Host, base string) string {
			return describe(r.LinkFrom(path.Join(base, "outside/secret"), "/out-abs/l"), base)
		}},
		bcase{"a root outlives its directory", func(r *vmroot.Root, h vmroot.Host, base string) string {
			err := h.RemoveAll(path.Join(base, "root"))
			_, lerr := r.Lstat("/dev")
			werr := r.MkdirAll("/dev", 0o755)
			return describe(err, base) + " " + describe(lerr, base) + " " + describe(werr, base)
		}},
		bcase{"a closed root", func(r *vmroot.Root, h vmroot.Host, base string) string {
			r2, err := h.Open(path.Join(base, "root"))
			if err != nil {
				return describe(err, base)
			}
			r2.Close()
			_, lerr := r2.Lstat("/dev")
			return describe(lerr, base)
		}},
		// The host side: what the fake cloud does to its data dir.
		bcase{"host", func(r *vmroot.Root, h vmroot.Host, base string) string {
			var out []string
			say := func(what string, err error) { out = append(out, what+": "+describe(err, base)) }
			d := path.Join(base, "vms/vm-1")
			say("mkdirall", h.MkdirAll(path.Join(base, "vms"), 0o755))
			say("mkdir", h.Mkdir(d, 0o755))
			say("mkdir again", h.Mkdir(d, 0o755))
			say("mkdirall of a file", h.MkdirAll(path.Join(base, "outside/secret/x"), 0o755))
			_, err := h.Open(path.Join(base, "outside/secret"))
			say("open a file", err)
			_, err = h.Open(path.Join(base, "none"))
			say("open nothing", err)
			img := path.Join(base, "disk.img")
			say("create", h.CreateExcl(img, 0o644))
			say("create again", h.CreateExcl(img, 0o644))
			say("truncate", h.Truncate(img, 64<<20))
			say("truncate a dir", h.Truncate(d, 1))
			say("truncate nothing", h.Truncate(path.Join(base, "none"), 1))
			fi, err := h.Lstat(img)
			say(res(fi, err, base), err)
			ents, err := h.ReadDir(base)
			say(res(ents, err, base), err)
			say("remove a full dir", h.Remove(path.Join(base, "vms")))
			say("removeall", h.RemoveAll(path.Join(base, "vms")))
			say("remove", h.Remove(img))
			say("remove again", h.Remove(img))
			say("removeall nothing", h.RemoveAll(path.Join(base, "vms")))
			return strings.Join(out, "\n")
		}},
	)
	return cs
}

// TestBackendsAgree runs every case on a freshly planted tree of each
// backend: the memory file system must answer as the machine's does, and
// leave the same tree.
func TestBackendsAgree(t *testing.T) {
	cases := backendCases()
	got := make([][]string, len(backends))
	for bi, b := range backends {
		for _, c := range cases {
			h, base := b.make(t)
			r := plant(t, h, base)
			out := c.do(r, h, base)
			got[bi] = append(got[bi], out+"\n"+dump(t, h, base))
		}
	}
	for i, c := range cases {
		if got[0][i] != got[1][i] {
			t.Errorf("%q: the backends differ (- %s, + %s):\n%s", c.name, backends[0].name, backends[1].name, lineDiff(got[0][i], got[1][i]))
		}
	}
	if len(cases) < 200 {
		t.Errorf("only %d cases", len(cases))
	}
}

// lineDiff lists the lines of a not in b (-) and of b not in a (+), in order.
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ina, inb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !inb[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ina[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

// A memory file system is safe for concurrent use: roots on it written and
// read from many goroutines at once (run with -race), each ending with
// what it wrote.
func TestMemConcurrent(t *testing.T) {
	m := vmroot.NewMem(0o022)
	if err := m.MkdirAll("/vms", 0o755); err != nil {
		t.Fatal(err)
	}
	const n = 8
	errs := make(chan error, n)
	for i := range n {
		go func() {
			errs <- func() error {
				dir := fmt.Sprintf("/vms/vm-%d", i)
				if err := m.MkdirAll(dir, 0o755); err != nil {
					return err
				}
				r, err := m.Open(dir)
				if err != nil {
					return err
				}
				defer r.Close()
				for j := range 50 {
					if err := r.MkdirAll("/dev/disk/by-id", 0o755); err != nil {
						return err
					}
					if err := r.WriteFileAtomic("/dev/sdc", []byte(fmt.Sprint(j)), 0o644); err != nil {
						return err
					}
					if err := r.Symlink("../../sdc", "/dev/disk/by-id/d", vmroot.SymlinkAtomic); err != nil {
						return err
					}
					if _, err := m.ReadDir("/vms"); err != nil {
						return err
					}
					if got, err := r.ReadFileIn("/dev/disk/by-id/d"); err != nil || string(got) != fmt.Sprint(j) {
						return fmt.Errorf("vm %d round %d: read %q, %v", i, j, got, err)
					}
					if j%10 == 9 {
						if err := r.RemoveAll("/dev"); err != nil {
							return err
						}
					}
				}
				return nil
			}()
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	ents, err := m.ReadDir("/vms")
	if err != nil || len(ents) != n {
		t.Errorf("ReadDir(/vms) = %d entries, %v; want %d", len(ents), err, n)
	}
}
