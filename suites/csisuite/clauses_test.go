package csisuite

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestClausesAreDocumented: the final section of docs/contracts.md lists
// exactly the suite's clause ids, each check is named after one of them,
// and every check's clause has an area.
func TestClausesAreDocumented(t *testing.T) {
	raw, err := os.ReadFile("../../docs/contracts.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	const heading = "\n## CSI drivers"
	i := strings.Index(doc, heading)
	if i < 0 {
		t.Fatalf("docs/contracts.md has no %q section", strings.TrimSpace(heading))
	}
	section := doc[i+len(heading):]
	if j := strings.Index(section, "\n## "); j >= 0 {
		section = section[:j]
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(csi\\.[a-z0-9.-]+)` \\|").FindAllStringSubmatch(section, -1) {
		if slices.Contains(documented, m[1]) {
			t.Errorf("docs/contracts.md lists %s twice", m[1])
		}
		documented = append(documented, m[1])
	}
	for id, title := range ClauseTitles {
		if title == "" {
			t.Errorf("clause %s has no title", id)
		}
		if !slices.Contains(documented, id) {
			t.Errorf("clause %s is not in docs/contracts.md's CSI table", id)
		}
	}
	for _, id := range documented {
		if _, ok := ClauseTitles[id]; !ok {
			t.Errorf("docs/contracts.md lists %s, which the suite does not define", id)
		}
	}
	for _, c := range Checks() {
		if _, ok := ClauseTitles[c.Clause]; !ok {
			t.Errorf("check %s is named after no clause", c.Clause)
		}
		if _, ok := clauseArea[c.Clause]; !ok {
			t.Errorf("check %s has no area", c.Clause)
		}
	}
}
