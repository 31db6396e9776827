package vmroot

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// Errors, matched with errors.Is.
var (
	// ErrEscape: a path that names something outside the root (it holds
	// "..", or a NUL byte).
	ErrEscape = errors.New("vmroot: path leaves the root")
	// ErrSymlink: a strict operation met a symlink in its path.
	ErrSymlink = errors.New("vmroot: symlink in a path that must have none")
	// ErrNotRegular: a file read is not a regular file (a FIFO, a device,
	// a directory).
	ErrNotRegular = errors.New("vmroot: not a regular file")
	// ErrTooLarge: a file read is larger than MaxReadSize.
	ErrTooLarge = errors.New("vmroot: file too large")
)

// Limits.
const (
	// MaxReadSize is the largest file ReadFile and ReadFileIn return (16 MiB).
	MaxReadSize = 16 << 20
	// MaxLinkHops bounds symlink expansions in one guest-view resolution,
	// as the kernel's MAXSYMLINKS does.
	MaxLinkHops = 40
)

// SymlinkMode says how Symlink replaces an existing entry.
type SymlinkMode int

const (
	// SymlinkAtomic makes the new link under the same name in a sibling
	// directory "<dir>.tmp" and renames it over the old entry: at no moment
	// is the name absent. An existing directory at the name is an error.
	SymlinkAtomic SymlinkMode = iota
	// SymlinkReplace removes whatever is at the name (recursively, as
	// bosh-utils' Symlink does) and then creates the link.
	SymlinkReplace
)

// rel turns an in-guest or root-relative path into a clean relative path
// ("." for the root), refusing ".." and NUL.
func rel(op, p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", &fs.PathError{Op: op, Path: p, Err: fmt.Errorf("%w: NUL byte", ErrEscape)}
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", &fs.PathError{Op: op, Path: p, Err: fmt.Errorf("%w: \"..\"", ErrEscape)}
		}
	}
	r := path.Clean("/" + p)
	if r == "/" {
		return ".", nil
	}
	return r[1:], nil
}

// split returns the parent and the last component of a clean relative path.
func split(r string) (dir, name string) {
	i := strings.LastIndexByte(r, '/')
	if i < 0 {
		return ".", r
	}
	return r[:i], r[i+1:]
}

// Resolve follows symlinks in guest path p as the guest would, inside the
// root: an absolute target restarts at the root, ".." at the root stays
// there. It returns the guest path ("/dev/sdc") of what p names; when an
// element does not exist the error wraps fs.ErrNotExist. Every look-up is
// strict, on the part already resolved.
func (r *Root) Resolve(p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", &fs.PathError{Op: "resolve", Path: p, Err: fmt.Errorf("%w: NUL byte", ErrEscape)}
	}
	cur, _, err := r.walk(p, "/", 0, strings.Split(strings.TrimPrefix(p, "/"), "/"))
	return cur, err
}

// walk is Resolve's loop: it goes on from guest directory cur, already
// resolved with hops links followed, through the elements of rest, and
// returns where it ends and the links followed in all. Errors name p.
func (r *Root) walk(p, cur string, hops int, rest []string) (string, int, error) {
	for len(rest) > 0 {
		el := rest[0]
		rest = rest[1:]
		switch el {
		case "", ".":
			continue
		case "..":
			cur = path.Dir(cur)
			continue
		}
		next := path.Join(cur, el)
		fi, err := r.Lstat(next)
		if err != nil {
			return "", hops, err
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			if len(rest) > 0 && !fi.IsDir() {
				return "", hops, &fs.PathError{Op: "resolve", Path: p, Err: fmt.Errorf("%s is not a directory: %w", next, fs.ErrNotExist)}
			}
			cur = next
			continue
		}
		hops++
		if hops > MaxLinkHops {
			return "", hops, &fs.PathError{Op: "resolve", Path: p, Err: errors.New("too many levels of symbolic links")}
		}
		target, err := r.Readlink(next)
		if err != nil {
			return "", hops, err
		}
		if strings.IndexByte(target, 0) >= 0 {
			return "", hops, &fs.PathError{Op: "resolve", Path: next, Err: fmt.Errorf("%w: NUL byte in link target", ErrEscape)}
		}
		if strings.HasPrefix(target, "/") {
			cur = "/"
		}
		rest = append(strings.Split(strings.TrimPrefix(target, "/"), "/"), rest...)
	}
	return cur, hops, nil
}

// Exists reports whether guest path p exists, following links inside the
// root (the guest's test -e).
func (r *Root) Exists(p string) bool {
	_, err := r.Resolve(p)
	return err == nil
}

// ReadFileIn reads guest path p following links inside the root, as the
// guest would read it. Only regular files up to MaxReadSize are read.
func (r *Root) ReadFileIn(p string) ([]byte, error) {
	real, err := r.Resolve(p)
	if err != nil {
		return nil, err
	}
	return r.ReadFile(real)
}

// Glob returns the guest paths matching pattern (path.Match syntax per
// element, as filepath.Glob on the guest), following links in directories
// inside the root. Matches are sorted; a malformed pattern is
// path.ErrBadPattern.
func (r *Root) Glob(pattern string) ([]string, error) {
	if _, err := path.Match(pattern, ""); err != nil {
		return nil, err
	}
	if !strings.HasPrefix(pattern, "/") {
		pattern = "/" + pattern
	}
	if strings.IndexByte(pattern, 0) >= 0 {
		return nil, nil // Resolve refuses every path with a NUL: nothing matches
	}
	// Each candidate keeps where its guest path resolves (once known) and the
	// links followed to get there, so a longer path goes on from there
	// instead of walking again from the root: the same answer as
	// Resolve(guest), without its look-ups of the prefix.
	type cand struct {
		guest, real string // real: "" until resolved
		hops        int
		parent      *cand // of a match not yet resolved
	}
	// A match is resolved when a longer pattern needs it (its parent always
	// is: the directory read to find it).
	resolved := func(c *cand) bool {
		if c.real != "" {
			return true
		}
		real, hops, err := r.walk(c.guest, c.parent.real, c.parent.hops, []string{path.Base(c.guest)})
		if err != nil {
			return false
		}
		c.real, c.hops, c.parent = real, hops, nil
		return true
	}
	cur := []*cand{{guest: "/", real: "/"}}
	for _, el := range strings.Split(pattern[1:], "/") {
		if el == "" {
			continue
		}
		var next []*cand
		for _, dir := range cur {
			if !strings.ContainsAny(el, `*?[\`) {
				p := path.Join(dir.guest, el)
				if el == ".." {
					// path.Join drops ".." lexically: resolve what it names.
					if real, err := r.Resolve(p); err == nil {
						next = append(next, &cand{guest: p, real: real})
					}
					continue
				}
				if !resolved(dir) {
					continue
				}
				if real, hops, err := r.walk(p, dir.real, dir.hops, []string{el}); err == nil {
					next = append(next, &cand{guest: p, real: real, hops: hops})
				}
				continue
			}
			if !resolved(dir) {
				continue
			}
			names, err := r.ReadDir(dir.real)
			if err != nil {
				continue
			}
			match := matcher(el)
			for _, n := range names {
				if match(n.Name()) {
					next = append(next, &cand{guest: path.Join(dir.guest, n.Name()), parent: dir})
				}
			}
		}
		cur = next
	}
	var out []string
	for _, c := range cur {
		out = append(out, c.guest)
	}
	sort.Strings(out)
	return out, nil
}

// matcher is path.Match(el, name) for a pattern element already checked:
// "*suffix" and "prefix*" with no other special character (the resolvers'
// by-id look-ups) are a suffix or prefix test, as a name holds no '/'.
func matcher(el string) func(string) bool {
	if rest, ok := strings.CutPrefix(el, "*"); ok && !strings.ContainsAny(rest, `*?[\`) {
		return func(name string) bool { return strings.HasSuffix(name, rest) }
	}
	if rest, ok := strings.CutSuffix(el, "*"); ok && !strings.ContainsAny(rest, `*?[\`) {
		return func(name string) bool { return strings.HasPrefix(name, rest) }
	}
	return func(name string) bool {
		ok, _ := path.Match(el, name)
		return ok
	}
}
