// Package termsafe makes untrusted text safe to print on a terminal. A
// CPI's error message, a driver's answer, a Director's body or a forged
// report can hold escape sequences (clear the screen, set the window
// title, write the clipboard with OSC 52), NUL bytes or bidirectional
// overrides; cpilab's text output shows them escaped, as `\x1b`, `\x00`,
// `\u202e`, whether colour is on or not. JSON reports keep the text
// exact: only what goes to a terminal or a text file passes through here.
//
//	fmt.Fprintf(w, "CPI said: %s\n", termsafe.String(msg))
//	w = termsafe.NewWriter(w) // every write escaped
package termsafe

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// String returns s with every control character, every byte that is not
// UTF-8, and every bidirectional control escaped; newlines and tabs are
// kept (they lay text out, and move no cursor elsewhere).
func String(s string) string {
	if Safe(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case unsafeRune(r) && r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafeRune(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

// Safe reports whether s prints as itself: valid UTF-8 without control
// characters (but newline and tab) and without bidirectional controls.
func Safe(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && n <= 1) || unsafeRune(r) {
			return false
		}
		i += n
	}
	return true
}

func unsafeRune(r rune) bool {
	switch {
	case r == '\n' || r == '\t':
		return false
	case r < 0x20 || r == 0x7f: // C0 (ESC, NUL, CR, BEL, BS…) and DEL
		return true
	case r >= 0x80 && r <= 0x9f: // C1: CSI, OSC, DCS as single code points
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true // bidirectional controls: text that reads otherwise than it is
	}
	return false
}

// NewWriter returns a writer that escapes everything written to w as
// String does. A write reports len(p) bytes written when w took the
// escaped form whole.
func NewWriter(w io.Writer) io.Writer {
	if sw, ok := w.(*writer); ok {
		return sw
	}
	return &writer{w: w}
}

type writer struct{ w io.Writer }

func (sw *writer) Write(p []byte) (int, error) {
	s := string(p)
	if _, err := io.WriteString(sw.w, String(s)); err != nil {
		return 0, err
	}
	return len(p), nil
}
