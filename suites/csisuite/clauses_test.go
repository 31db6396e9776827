package csisuite

import (
	"testing"

	"github.com/cpilab/cpilab/internal/clausedoc"
)

// TestClausesAreDocumented: the final section of docs/contracts.md lists
// exactly the suite's clause ids, each check is named after one of them,
// and every check's clause has an area.
func TestClausesAreDocumented(t *testing.T) {
	documented, err := clausedoc.Table("../../docs/contracts.md", "CSI drivers", "csi")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range clausedoc.Mismatches("CSI drivers", documented, ClauseTitles) {
		t.Error(m)
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
