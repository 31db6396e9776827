package director

import (
	"strings"
	"testing"
)

// truncateResult cuts as upstream's JobRunner#truncate does: strip, keep
// 129 characters, and when that is more than 128 drop the last (partial)
// word and the blanks before it, then append "...".
func TestTruncateResultAsUpstream(t *testing.T) {
	words := strings.Repeat("word ", 30)
	for _, c := range []struct{ in, want string }{
		{"  short  ", "short"},
		{strings.Repeat("a", 128), strings.Repeat("a", 128)},
		{strings.Repeat("a", 130), strings.Repeat("a", 129) + "..."}, // no blank: nothing to drop
		{words, strings.Repeat("word ", 24) + "word..."},
		{strings.Repeat("é", 100) + " " + strings.Repeat("é", 100), strings.Repeat("é", 100) + "..."}, // characters, not bytes
	} {
		if got := truncateResult(c.in); got != c.want {
			t.Errorf("truncateResult(%q) = %q; want %q", c.in, got, c.want)
		}
	}
}

// GET /tasks?limit= under TaskListAsUpstream reads the number as Ruby's
// to_i does.
func TestRubyToI(t *testing.T) {
	for in, want := range map[string]int{"12": 12, " 7x": 7, "abc": 0, "-3": -3, "+4": 4, "": 0, "99999999999999999999": MaxTaskListLimit} {
		if got := rubyToI(in); got != want {
			t.Errorf("rubyToI(%q) = %d; want %d", in, got, want)
		}
	}
}
