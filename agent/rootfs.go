package agent

import (
	"errors"
	"fmt"
	"path"
	"strings"
)

// ErrUnsafe is wrapped by every refusal of a CID, hint value or path that
// could reach outside the VM root.
var ErrUnsafe = errors.New("agent: refusing unsafe name")

// Limits on names and paths taken from the Director or a CPI.
const (
	// MaxNameLen is the longest CID or path element accepted (NAME_MAX).
	MaxNameLen = 255
	// MaxPathLen is the longest in-guest path accepted (PATH_MAX).
	MaxPathLen = 4096
)

// CheckName returns an error wrapping ErrUnsafe unless s can be one path
// element inside the VM root: not empty, not "." or "..", no '/' or NUL, at
// most MaxNameLen bytes. Disk CIDs are checked with it before they name a
// symlink or a file entry.
func CheckName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrUnsafe, what)
	case len(s) > MaxNameLen:
		return fmt.Errorf("%w: %s is %d bytes long, more than %d", ErrUnsafe, what, len(s), MaxNameLen)
	case s == "." || s == "..":
		return fmt.Errorf("%w: %s %q", ErrUnsafe, what, s)
	case strings.ContainsAny(s, "/\x00"):
		return fmt.Errorf("%w: %s %q contains '/' or NUL", ErrUnsafe, what, s)
	}
	return nil
}

// checkLaxName is all Knobs.LaxNames asks of a CID: not empty, no NUL (no
// path can hold one).
func checkLaxName(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is empty", ErrUnsafe, what)
	case strings.ContainsRune(s, 0):
		return fmt.Errorf("%w: %s %q contains NUL", ErrUnsafe, what, s)
	}
	return nil
}

// checkGlobToken is CheckName plus no glob metacharacters, for hint values
// that become part of a glob pattern.
func checkGlobToken(what, s string) error {
	if err := CheckName(what, s); err != nil {
		return err
	}
	if strings.ContainsAny(s, `*?[]\`) {
		return fmt.Errorf("%w: %s %q contains a glob metacharacter", ErrUnsafe, what, s)
	}
	return nil
}

// CheckGuestPath returns an error wrapping ErrUnsafe unless p is an
// absolute, clean in-guest path ("/dev/sdc"): no "..", no NUL, at most
// MaxPathLen bytes. Such a path always maps inside the VM root.
func CheckGuestPath(what, p string) error {
	switch {
	case p == "":
		return fmt.Errorf("%w: %s is empty", ErrUnsafe, what)
	case len(p) > MaxPathLen:
		return fmt.Errorf("%w: %s is %d bytes long, more than %d", ErrUnsafe, what, len(p), MaxPathLen)
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("%w: %s %q contains NUL", ErrUnsafe, what, p)
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%w: %s %q is not an absolute path", ErrUnsafe, what, p)
	case path.Clean(p) != p:
		return fmt.Errorf("%w: %s %q is not a clean path (\"..\", \"//\" or a trailing '/')", ErrUnsafe, what, p)
	}
	for _, el := range strings.Split(p[1:], "/") {
		if len(el) > MaxNameLen {
			return fmt.Errorf("%w: %s %q has an element longer than %d bytes", ErrUnsafe, what, p, MaxNameLen)
		}
	}
	return nil
}
