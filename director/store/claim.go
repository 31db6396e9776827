package store

import (
	"encoding/json"
	"errors"
	"slices"
	"sort"
)

// Match selects records by their top-level JSON string fields: a record
// matches when, for every field named, its value is one of the listed ones.
// An empty Match selects every record.
type Match map[string][]string

// Matches reports whether the JSON object raw satisfies m. A record that is
// not a JSON object matches only the empty Match.
func (m Match) Matches(raw []byte) bool {
	if len(m) == 0 {
		return true
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return false
	}
	for name, want := range m {
		var got string
		if err := json.Unmarshal(fields[name], &got); err != nil || !slices.Contains(want, got) {
			return false
		}
	}
	return true
}

// fieldsSorted lists m's fields in a fixed order (for stable SQL).
func (m Match) fieldsSorted() []string {
	out := make([]string, 0, len(m))
	for f := range m {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// Claimer is implemented by every Store: it hands one record to one caller
// among many, which is how director workers (in one process or in several
// sharing PostgreSQL) take queued tasks without two of them taking one.
type Claimer interface {
	// ClaimFirst calls fn, inside one read-write transaction, with the
	// first record of kind (in key order) that matches m and that no other
	// transaction in flight holds; fn writes the claimed record (so that it
	// no longer matches) and commits with the transaction. ClaimFirst
	// reports false, without calling fn, when no record matches. An error
	// from fn rolls the transaction back and is returned.
	ClaimFirst(kind Kind, m Match, fn func(tx Tx, key string, raw []byte) error) (bool, error)
}

// claimInUpdate is ClaimFirst for stores whose Update already runs
// transactions one at a time (Memory, SQLite): the first match in a scan.
func claimInUpdate(s Store, kind Kind, m Match, fn func(tx Tx, key string, raw []byte) error) (bool, error) {
	if err := validKind(kind); err != nil {
		return false, err
	}
	found := false
	err := s.Update(func(tx Tx) error {
		found = false
		var key string
		var body []byte
		err := tx.List(kind, func(k string, raw []byte) error {
			if m.Matches(raw) {
				key, body, found = k, raw, true
				return errStopList
			}
			return nil
		})
		if err != nil && err != errStopList {
			return err
		}
		if !found {
			return nil
		}
		return fn(tx, key, body)
	})
	return found, err
}

// errStopList ends a List early inside this package.
var errStopList = errors.New("store: stop listing")

// ClaimFirst implements Claimer.
func (m *Memory) ClaimFirst(kind Kind, match Match, fn func(tx Tx, key string, raw []byte) error) (bool, error) {
	return claimInUpdate(m, kind, match, fn)
}

// ClaimFirst implements Claimer.
func (s *SQLite) ClaimFirst(kind Kind, match Match, fn func(tx Tx, key string, raw []byte) error) (bool, error) {
	return claimInUpdate(s, kind, match, fn)
}
