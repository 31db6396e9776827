package store

import (
	"encoding/json"
	"fmt"
)

// The record codec and row handling the SQL stores (SQLite, PostgreSQL)
// share: each record is a JSON body under its key in the table of its kind.

// encodeBody checks a write of kind k and encodes v as a record body.
func encodeBody(k Kind, key string, v any, write bool) (string, error) {
	if err := checkWrite(k, key, "write to", write); err != nil {
		return "", err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return "", fmt.Errorf("store: encode %s/%s: %w", k, key, err)
	}
	return string(b), nil
}

// checkWrite refuses an unknown kind and a write (what says which) in a
// read-only transaction.
func checkWrite(k Kind, key, what string, write bool) error {
	if err := validKind(k); err != nil {
		return err
	}
	if !write {
		return fmt.Errorf("store: %s %s/%s in a read-only transaction", what, k, key)
	}
	return nil
}

// decodeBody decodes a record body of k/key into v.
func decodeBody(k Kind, key, body string, v any) error {
	if err := json.Unmarshal([]byte(body), v); err != nil {
		return fmt.Errorf("store: decode %s/%s: %w", k, key, err)
	}
	return nil
}

// rowScanner is what database/sql's and pgx's result rows have in common.
type rowScanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// listRows reads every (key, body) row of rows, closes them with closeRows,
// then calls fn for each in order: fn may run queries of its own, which a
// transaction cannot while rows are open.
func listRows(k Kind, rows rowScanner, closeRows func() error, fn func(string, []byte) error) error {
	type rec struct {
		key  string
		body []byte
	}
	var recs []rec
	for rows.Next() {
		var key, body string
		if err := rows.Scan(&key, &body); err != nil {
			_ = closeRows()
			return fmt.Errorf("store: list %s: %w", k, err)
		}
		recs = append(recs, rec{key, []byte(body)})
	}
	if err := closeRows(); err != nil {
		return fmt.Errorf("store: list %s: %w", k, err)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("store: list %s: %w", k, err)
	}
	for _, r := range recs {
		if err := fn(r.key, r.body); err != nil {
			return err
		}
	}
	return nil
}
