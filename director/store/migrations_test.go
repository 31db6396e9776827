package store

import (
	"path/filepath"
	"testing"
)

// Every Kind has a table on a fresh database: a Kind added to AllKinds
// without its migration appended fails here, not in production.
func TestEveryKindHasATable(t *testing.T) {
	s, err := OpenSQLite(filepath.Join(t.TempDir(), "d.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, k := range AllKinds {
		var n int
		if err := s.db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, string(k)).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("kind %q has no table: append kindTable(%q) to migrations", k, k)
		}
	}
}
