package vmroot

import (
	"path"
	"testing"
)

// matcher's shortcuts answer as path.Match does, on names that hold no '/'.
func TestMatcherIsPathMatch(t *testing.T) {
	patterns := []string{"*", "**", "*abc", "abc*", "*a*", "a*c", "*[ab]", "[ab]*", "*?", "?*", `*\*`, `\**`, "*-1", "virtio-*",
		"*disk-aeed6e3e-7b89", "", "abc"}
	names := []string{"", "a", "abc", "xabc", "abcx", "*abc", "abc*", "virtio-disk-aeed6e3e-7b89", "scsi-1", "-1", "b", "*", "ab*"}
	wellFormed := 0
	for _, p := range patterns {
		for _, n := range names {
			want, _ := path.Match(p, n)
			if got := matcher(p)(n); got != want {
				t.Errorf("matcher(%q)(%q) = %v; path.Match says %v", p, n, got, want)
			}
		}
		if _, err := path.Match(p, ""); err == nil {
			wellFormed++
		}
	}
	if wellFormed < len(patterns)-1 {
		t.Errorf("only %d patterns are well formed", wellFormed)
	}
}
