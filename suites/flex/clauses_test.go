package flex

import (
	"os"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/internal/clausedoc"
)

// TestClausesAreDocumented: the final section of docs/contracts.md lists
// exactly the suite's clause ids, each check is named after one of them,
// and every clause but the harness's has an area.
func TestClausesAreDocumented(t *testing.T) {
	documented, err := clausedoc.Table("../../docs/contracts.md", "FlexVolume drivers", "flex")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range clausedoc.Mismatches("FlexVolume drivers", documented, ClauseTitles) {
		t.Error(m)
	}
	for id := range ClauseTitles {
		if _, ok := clauseArea[id]; !ok && id != ClauseSetup && !strings.HasPrefix(id, "flex.output.") && id != ClauseTimeout && id != ClauseAttachIdempotent {
			t.Errorf("clause %s has no area", id)
		}
	}
	for _, c := range Checks() {
		if _, ok := ClauseTitles[c.Clause]; !ok {
			t.Errorf("check %s is named after no clause", c.Clause)
		}
	}
	if raw, err := os.ReadFile("../../docs/contracts.md"); err != nil || strings.Contains(string(raw), "contracts-flex") {
		t.Errorf("docs/contracts.md points to docs/contracts-flex.md, which points back here (%v)", err)
	}
}
