package clausedoc

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestTableAndMismatches(t *testing.T) {
	path := filepath.Join(t.TempDir(), "contracts.md")
	doc := "# Contracts\n\n## CSI drivers\n\n| id | text |\n|---|---|\n| `csi.a` | one |\n| `csi.b` | two |\n| `flex.c` | not this prefix |\n\n## Next\n\n| `csi.d` | another section |\n"
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	ids, err := Table(path, "CSI drivers", "csi")
	if err != nil || !slices.Equal(ids, []string{"csi.a", "csi.b"}) {
		t.Fatalf("Table = %v, %v; want [csi.a csi.b]", ids, err)
	}
	got := Mismatches("CSI drivers", ids, map[string]string{"csi.a": "one", "csi.x": ""})
	want := []string{"clause csi.x has no title", `clause csi.x is not in the "CSI drivers" table of docs/contracts.md`, "docs/contracts.md lists csi.b, which the suite does not define"}
	if !slices.Equal(got, want) {
		t.Errorf("Mismatches =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if _, err := Table(path, "FlexVolume drivers", "flex"); err == nil || !strings.Contains(err.Error(), "no \"## FlexVolume drivers\" section") {
		t.Errorf("a missing section: %v", err)
	}
	if err := os.WriteFile(path, []byte("## CSI drivers\n| `csi.a` | x |\n| `csi.a` | y |\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Table(path, "CSI drivers", "csi"); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("an id listed twice: %v", err)
	}
}
