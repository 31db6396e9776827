package termsafe_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cpilab/cpilab/internal/termsafe"
)

func TestStringEscapesWhatATerminalWouldObey(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"plain text, ünïcode ✔\n\tindented", "plain text, ünïcode ✔\n\tindented"},
		{"\x1b[2J\x1b[H cleared", `\x1b[2J\x1b[H cleared`},
		{"\x1b]0;pwned\x07title", `\x1b]0;pwned\x07title`},
		{"\x1b]52;c;ZWNobyBoaQ==\x07clipboard", `\x1b]52;c;ZWNobyBoaQ==\x07clipboard`},
		{"nul\x00byte", `nul\x00byte`},
		{"over\rwrite", `over\x0dwrite`},
		{"del\x7f", `del\x7f`},
		{"c1 \u009b31m csi", `c1 \u009b31m csi`},
		{"bad \xff\xfe utf8", `bad \xff\xfe utf8`},
		{"bidi \u202eevil", `bidi \u202eevil`},
	} {
		if got := termsafe.String(tc.in); got != tc.want {
			t.Errorf("String(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if termsafe.Safe(tc.in) != (tc.in == tc.want) {
			t.Errorf("Safe(%q) = %v", tc.in, termsafe.Safe(tc.in))
		}
	}
}

func TestWriterEscapesEveryWrite(t *testing.T) {
	var b bytes.Buffer
	w := termsafe.NewWriter(&b)
	n, err := fmt.Fprintf(w, "CPI said: %s\n", "\x1b[31mred\x1b[0m")
	if err != nil || n != len("CPI said: \x1b[31mred\x1b[0m\n") {
		t.Fatalf("n %d err %v", n, err)
	}
	if got := b.String(); got != "CPI said: \\x1b[31mred\\x1b[0m\n" {
		t.Fatalf("wrote %q", got)
	}
	if termsafe.NewWriter(w) != w {
		t.Fatal("a safe writer wrapped twice")
	}
}
