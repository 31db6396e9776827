package vmssh

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// newJail builds a small VM root with the links the suites read through
// and a few planted escape attempts, and returns a jail on it.
func newJail(t *testing.T) (*jail, string) {
	t.Helper()
	base := t.TempDir()
	root := filepath.Join(base, "root")
	for _, d := range []string{"dev/disk/by-id", "var/vcap/data/dynamic_disks", "var/vcap/store"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	links := map[string]string{
		"dev/disk/by-id/virtio-disk-0123456789abcdef": "../../sdc",
		"var/vcap/data/dynamic_disks/disk-1":          "/dev/sdc",
		"abs-out":                                     filepath.Join(base, "outside.txt"),
		"rel-out":                                     "../../../outside.txt",
		"up":                                          "../../..",
		"loop":                                        "loop",
		"chain":                                       "var/vcap/data/dynamic_disks/disk-1",
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "dev/sdc"), []byte("disk"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &jail{root: r}, base
}

func TestResolve(t *testing.T) {
	j, base := newJail(t)
	cases := []struct {
		path       string
		followLast bool
		want       string
	}{
		{"/", true, "."},
		{"/../../..", true, "."},
		{"/etc/passwd", true, "etc/passwd"},
		{"../../etc/passwd", true, "etc/passwd"},
		{"/dev/disk/by-id/virtio-disk-0123456789abcdef", true, "dev/sdc"},
		{"/dev/disk/by-id/virtio-disk-0123456789abcdef", false, "dev/disk/by-id/virtio-disk-0123456789abcdef"},
		{"/var/vcap/data/dynamic_disks/disk-1", true, "dev/sdc"},
		{"/chain", true, "dev/sdc"},
		{"/abs-out", true, strings.TrimPrefix(filepath.Join(base, "outside.txt"), "/")},
		{"/rel-out", true, "outside.txt"},
		{"/up", true, "."},
		{"/up/up/up/dev/sdc", true, "dev/sdc"},
		{"/up/../../x", true, "x"},
		{"/rel-out", false, "rel-out"},
		{"/var/missing/../vcap", true, "var/vcap"},
	}
	for _, c := range cases {
		got, err := j.resolve("test", c.path, c.followLast)
		if err != nil {
			t.Errorf("resolve(%q, follow=%v): %v", c.path, c.followLast, err)
			continue
		}
		if got != c.want {
			t.Errorf("resolve(%q, follow=%v) = %q, want %q", c.path, c.followLast, got, c.want)
		}
	}
}

func TestResolveLoop(t *testing.T) {
	j, _ := newJail(t)
	_, err := j.resolve("test", "/loop", true)
	if !errors.Is(err, syscall.ELOOP) {
		t.Fatalf("resolve of a symlink loop: got %v, want ELOOP", err)
	}
}

func TestResolveInvalidNames(t *testing.T) {
	j, _ := newJail(t)
	for _, p := range []string{
		"/var/a\x00b",
		"/" + strings.Repeat("a", MaxNameLen+1),
		strings.Repeat("/abcdefgh", MaxPathLen/9+1),
	} {
		if _, err := j.resolve("test", p, true); !errors.Is(err, ErrInvalidName) {
			t.Errorf("resolve(%.40q…): got %v, want ErrInvalidName", p, err)
		}
	}
	if _, err := j.resolve("test", "/"+strings.Repeat("a", MaxNameLen), true); err != nil {
		t.Errorf("a %d-byte name must be accepted: %v", MaxNameLen, err)
	}
}

func TestCheckNewLinkTarget(t *testing.T) {
	cases := []struct {
		target   string
		dirDepth int
		want     error
	}{
		{"../../sdc", 3, nil},
		{"sdc", 0, nil},
		{"./a/b", 0, nil},
		{"../../..", 3, nil},
		{"../../../..", 3, ErrEscape},
		{"/dev/sdc", 5, ErrEscape},
		{"/tmp/outside", 0, ErrEscape},
		{"a/../../x", 5, ErrEscape},
		{"s/..", 1, ErrEscape},
		{"", 0, ErrInvalidName},
		{"a\x00b", 0, ErrInvalidName},
		{strings.Repeat("x", MaxNameLen+1), 0, ErrInvalidName},
	}
	for _, c := range cases {
		err := checkNewLinkTarget(c.target, c.dirDepth)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("checkNewLinkTarget(%.40q, %d) = %v, want %v", c.target, c.dirDepth, err, c.want)
		}
	}
}

func TestClimb(t *testing.T) {
	cases := map[string]int{
		"a/b":           0,
		"../a":          1,
		"../../a/../..": 3,
		"a/../..":       1,
		"/x/../../..":   0,
	}
	for target, want := range cases {
		if got := climb(target); got != want {
			t.Errorf("climb(%q) = %d, want %d", target, got, want)
		}
	}
}

// deepJail is a root holding d/d/…/d (depth levels) with a file at the
// bottom and, at every level, a symlink "up" → "..".
func deepJail(t testing.TB, depth int) (*jail, string) {
	t.Helper()
	root := t.TempDir()
	p := strings.TrimSuffix(strings.Repeat("d/", depth), "/")
	if err := os.MkdirAll(filepath.Join(root, p), 0o755); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= depth; i++ {
		if err := os.Symlink("..", filepath.Join(root, strings.Repeat("d/", i), "up")); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, p, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return &jail{root: r}, "/" + p + "/f"
}

// countLookups resolves p and returns how many look-ups it made.
func countLookups(t testing.TB, j *jail, p string) int64 {
	t.Helper()
	before := lookups.Load()
	if _, err := j.resolve("stat", p, true); err != nil {
		t.Fatalf("resolve %.40s…: %v", p, err)
	}
	return lookups.Load() - before
}

// Resolution cost grows linearly with depth: at most two look-ups per
// component walked (the path's and the links' targets'), counted, not
// timed. A stat at depth 835 once cost a second of CPU (quadratic).
func TestResolveCostLinearInDepth(t *testing.T) {
	for _, depth := range []int{10, 100, 835} {
		j, p := deepJail(t, depth)
		if n := countLookups(t, j, p); n > int64(2*(depth+1)) {
			t.Errorf("depth %d: %d look-ups, want ≤ %d", depth, n, 2*(depth+1))
		}
		// Climbing back up through links (as many as a resolution may
		// follow), then down again: still linear in what is walked.
		links := min(depth, maxLinkHops)
		up := strings.Repeat("d/", depth) + strings.Repeat("up/", links) + strings.Repeat("d/", links) + "f"
		if len(up) < MaxPathLen {
			if n, walked := countLookups(t, j, up), depth+3*links+1; n > int64(2*walked) {
				t.Errorf("depth %d, %d links: %d look-ups, want ≤ %d", depth, links, n, 2*walked)
			}
		}
	}
}

// BenchmarkResolveDepth: one resolution of a file 835 levels down.
func BenchmarkResolveDepth(b *testing.B) {
	j, p := deepJail(b, 835)
	b.ResetTimer()
	for range b.N {
		if _, err := j.resolve("stat", p, true); err != nil {
			b.Fatal(err)
		}
	}
}
