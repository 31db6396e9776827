package director

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLen bounds disk, deployment and instance group names (bytes).
const MaxNameLen = 255

// ValidDiskName checks a dynamic disk name: 1 to MaxNameLen bytes of
// printable UTF-8 characters, no path separators, no NUL, not "." or "..".
func ValidDiskName(name string) error { return validName(name) }

func validName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("is required")
	case len(name) > MaxNameLen:
		return fmt.Errorf("is %d bytes long; at most %d", len(name), MaxNameLen)
	case name == "." || name == "..":
		return fmt.Errorf("%q is not a valid name", name)
	case strings.ContainsAny(name, "/\\\x00"):
		return fmt.Errorf("%q contains a path character or NUL", name)
	case !utf8.ValidString(name):
		// JSON would store it with U+FFFD in place of the bad bytes: the
		// record's name would differ from its key.
		return fmt.Errorf("%q is not valid UTF-8", name)
	}
	for _, r := range name {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return fmt.Errorf("%q contains a control or space character", name)
		}
	}
	return nil
}
