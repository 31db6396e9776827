package shellword

import (
	"os/exec"
	"strings"
	"testing"
)

// A shell reads each quoted word back as it was.
func TestQuoteSurvivesAShell(t *testing.T) {
	words := []string{"plain", "a b", "it's", "", `\d+$`, "x;rm -rf /", "$HOME", "ünï", "a'b'c", "--focus=x"}
	out, err := exec.Command("sh", "-c", `for a in `+Join(words)+`; do printf '%s\n' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	if strings.Join(got, "|") != strings.Join(words, "|") {
		t.Errorf("the shell read %q, want %q", got, words)
	}
	if Quote("a/b-c.d=e") != "a/b-c.d=e" || Quote("a b") != "'a b'" {
		t.Errorf("Quote: %q, %q", Quote("a/b-c.d=e"), Quote("a b"))
	}
}
