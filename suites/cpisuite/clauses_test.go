package cpisuite

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
)

var clauseID = regexp.MustCompile(`^[a-z]+(\.[a-z0-9-]+)+$`)

// TestClausesAreDocumented: every clause id the code defines is in
// AllClauses with a title, and docs/contracts.md documents exactly the ids
// of AllClauses.
func TestClausesAreDocumented(t *testing.T) {
	var ids []string
	for _, c := range AllClauses {
		if !clauseID.MatchString(c.ID) || c.Title == "" {
			t.Errorf("clause %q: want a lowercase dotted id and a title, title %q", c.ID, c.Title)
		}
		if slices.Contains(ids, c.ID) {
			t.Errorf("clause %q listed twice", c.ID)
		}
		ids = append(ids, c.ID)
	}
	// Every Clause* constant of the package.
	fset := token.NewFileSet()
	files, _ := filepath.Glob("*.go")
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			vs, ok := n.(*ast.ValueSpec)
			if !ok {
				return true
			}
			for i, name := range vs.Names {
				if !strings.HasPrefix(name.Name, "Clause") || i >= len(vs.Values) {
					continue
				}
				lit, ok := vs.Values[i].(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				v, _ := strconv.Unquote(lit.Value)
				if !slices.Contains(ids, v) {
					t.Errorf("%s: %s = %q is not in AllClauses", f, name.Name, v)
				}
			}
			return true
		})
	}
	doc, err := os.ReadFile("../../docs/contracts.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^### `([^`]+)`").FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	for _, id := range ids {
		if !slices.Contains(documented, id) {
			t.Errorf("clause %s is not documented in docs/contracts.md (a \"### `%s`\" section)", id, id)
		}
	}
	for _, id := range documented {
		if !slices.Contains(ids, id) {
			t.Errorf("docs/contracts.md documents %s, which is not in AllClauses", id)
		}
	}
}

func TestClauseOf(t *testing.T) {
	if got := ClauseOf(ClauseText(ClauseDeleteDisk) + " (extra)"); got != ClauseDeleteDisk {
		t.Fatalf("ClauseOf = %q", got)
	}
	if got := ClauseOf("step 1: nothing"); got != "" {
		t.Fatalf("ClauseOf of a non-clause = %q", got)
	}
}

func TestHintNames(t *testing.T) {
	od := OracleDisk{Device: "xvdc", LUN: 2, AttachedTo: "vm-1"}
	cid := "disk-0123456789abcdef0123456789"
	for _, tc := range []struct {
		name  string
		hint  string
		wrong bool
	}{
		{"path", `{"path":"/dev/sdc"}`, false},
		{"exact", `{"path":"/dev/xvdc"}`, false},
		{"string", `"/dev/sdc"`, false},
		{"other disk", `{"path":"/dev/sdd"}`, true},
		{"sdz", `"/dev/sdz"`, true},
		{"id", `{"id":"` + cid + `"}`, false},
		{"id prefix", `{"id":"` + cid[:20] + `"}`, false},
		{"wrong id", `{"id":"disk-other"}`, true},
		{"volume_id", `{"volume_id":"2"}`, false},
		{"wrong volume_id", `{"volume_id":"3"}`, true},
		{"lun", `{"lun":"2","host_device_id":"x"}`, false},
		{"wrong lun", `{"lun":"0","host_device_id":"x"}`, true},
		{"by-id", `{"path":"/dev/disk/by-id/virtio-` + cid[:20] + `"}`, false},
	} {
		var h = mustHint(t, tc.hint)
		checked, wrong := hintNames(h, od, cid)
		if !checked || (wrong != "") != tc.wrong {
			t.Errorf("%s: checked %v, wrong %q; want wrong=%v", tc.name, checked, wrong, tc.wrong)
		}
	}
}

func mustHint(t *testing.T, s string) (h cpiv2.DiskHint) {
	t.Helper()
	if err := h.UnmarshalJSON([]byte(s)); err != nil {
		t.Fatal(err)
	}
	return h
}
