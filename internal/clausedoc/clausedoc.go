// Package clausedoc reads the clause tables of docs/contracts.md, so that
// each suite's tests can check that the clauses it defines are exactly the
// ones its section documents.
package clausedoc

import (
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
)

// Table returns the clause ids a section of the contracts document lists as
// table rows ("| `flex.attach.node` | …"), in order. heading is the
// start of the section's title ("FlexVolume drivers") and prefix the ids' first
// component ("flex"). A section that is missing, or lists an id twice, is
// an error.
func Table(path, heading, prefix string) ([]string, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	doc := "\n" + string(raw) // a heading on the first line too
	i := strings.Index(doc, "\n## "+heading)
	if i < 0 {
		return nil, fmt.Errorf("%s has no %q section", path, "## "+heading)
	}
	section := doc[i+1:]
	if j := strings.Index(section, "\n"); j >= 0 {
		section = section[j:] // after the heading's line
	}
	if j := strings.Index(section, "\n## "); j >= 0 {
		section = section[:j]
	}
	row := regexp.MustCompile("(?m)^\\| `(" + regexp.QuoteMeta(prefix) + "\\.[a-z0-9.-]+)` \\|")
	var ids []string
	for _, m := range row.FindAllStringSubmatch(section, -1) {
		if slices.Contains(ids, m[1]) {
			return nil, fmt.Errorf("%s lists %s twice in %q", path, m[1], heading)
		}
		ids = append(ids, m[1])
	}
	return ids, nil
}

// Mismatches compares the ids a section documents with the clauses a suite
// defines (id → one-line title) and says what differs: a clause without a
// title, one the document does not list, one it lists that the suite does
// not define. Nothing differs: nil.
func Mismatches(heading string, documented []string, titles map[string]string) []string {
	var out []string
	for _, id := range slices.Sorted(maps.Keys(titles)) {
		if titles[id] == "" {
			out = append(out, fmt.Sprintf("clause %s has no title", id))
		}
		if !slices.Contains(documented, id) {
			out = append(out, fmt.Sprintf("clause %s is not in the %q table of docs/contracts.md", id, heading))
		}
	}
	for _, id := range documented {
		if _, ok := titles[id]; !ok {
			out = append(out, fmt.Sprintf("docs/contracts.md lists %s, which the suite does not define", id))
		}
	}
	return out
}
