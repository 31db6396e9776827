package fakeiaas

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"

	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go)
)

// sqliteStore keeps objects and history in one SQLite database in WAL mode
// with synchronous=FULL: a commit is on disk when it returns. Batches are
// group-committed: whichever caller finds no commit running becomes the
// leader and commits everything queued in one transaction (one fsync) while
// the others wait, so throughput grows with concurrency instead of being
// capped at one fsync per operation.
//
// This is an I/O adapter at the edge (never used under the simulator), so
// it uses sync directly rather than the injected runtime.
type sqliteStore struct {
	db                *sql.DB
	putS, delS, histS *sql.Stmt // prepared once; used only by the committing leader

	mu         sync.Mutex
	pending    []*sqlTicket // guarded by mu; in enqueue order
	committing bool         // guarded by mu
	commits    int64        // guarded by mu; transactions committed
	batches    int64        // guarded by mu; batches they carried
	broken     error        // guarded by mu; set when a commit fails
}

type sqlTicket struct {
	s    *sqliteStore
	b    batch
	done chan error
}

const sqliteFile = "fakeiaas.db"

func openSQLite(dataDir string) (*sqliteStore, error) {
	path := filepath.Join(dataDir, sqliteFile)
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=journal_mode(WAL)&_pragma=synchronous(FULL)&_pragma=busy_timeout(5000)")
	if err != nil {
		return nil, fmt.Errorf("fakeiaas: open %s: %w", path, err)
	}
	db.SetMaxOpenConns(1)
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS objects (kind TEXT NOT NULL, id TEXT NOT NULL, data BLOB NOT NULL, PRIMARY KEY (kind, id))`,
		`CREATE TABLE IF NOT EXISTS history (seq INTEGER PRIMARY KEY, data BLOB NOT NULL)`,
	} {
		if _, err := db.Exec(q); err != nil {
			db.Close()
			return nil, fmt.Errorf("fakeiaas: initialise %s: %w", path, err)
		}
	}
	st := &sqliteStore{db: db}
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&st.putS, `INSERT OR REPLACE INTO objects (kind, id, data) VALUES (?, ?, ?)`},
		{&st.delS, `DELETE FROM objects WHERE kind = ? AND id = ?`},
		{&st.histS, `INSERT INTO history (seq, data) VALUES (?, ?)`},
	} {
		if *p.dst, err = db.Prepare(p.q); err != nil {
			db.Close()
			return nil, fmt.Errorf("fakeiaas: prepare in %s: %w", path, err)
		}
	}
	return st, nil
}

func (s *sqliteStore) load() (map[string]map[string][]byte, int64, error) {
	rows, err := s.db.Query(`SELECT kind, id, data FROM objects`)
	if err != nil {
		return nil, 0, fmt.Errorf("fakeiaas: load objects: %w", err)
	}
	defer rows.Close()
	out := map[string]map[string][]byte{}
	for rows.Next() {
		var kind, id string
		var data []byte
		if err := rows.Scan(&kind, &id, &data); err != nil {
			return nil, 0, fmt.Errorf("fakeiaas: load objects: %w", err)
		}
		if out[kind] == nil {
			out[kind] = map[string][]byte{}
		}
		out[kind][id] = data
	}
	if err := rows.Err(); err != nil {
		return nil, 0, fmt.Errorf("fakeiaas: load objects: %w", err)
	}
	var last sql.NullInt64
	if err := s.db.QueryRow(`SELECT MAX(seq) FROM history`).Scan(&last); err != nil {
		return nil, 0, fmt.Errorf("fakeiaas: load history: %w", err)
	}
	return out, last.Int64, nil
}

func (s *sqliteStore) enqueue(b batch) ticket {
	t := &sqlTicket{s: s, b: b, done: make(chan error, 1)}
	s.mu.Lock()
	s.pending = append(s.pending, t)
	s.mu.Unlock()
	return t
}

func (t *sqlTicket) wait() error {
	s := t.s
	s.mu.Lock()
	if s.committing {
		s.mu.Unlock()
		return <-t.done
	}
	s.committing = true
	s.mu.Unlock()
	runtime.Gosched() // let operations already running enqueue, so they share this commit
	s.mu.Lock()
	for len(s.pending) > 0 {
		group := s.pending
		s.pending = nil
		err := s.broken
		s.mu.Unlock()
		if err == nil {
			err = s.commit(group)
		}
		for _, g := range group {
			g.done <- err
		}
		s.mu.Lock()
		s.commits++
		s.batches += int64(len(group))
		if err != nil && s.broken == nil {
			s.broken = err
		}
	}
	s.committing = false
	s.mu.Unlock()
	return <-t.done
}

func (s *sqliteStore) commit(group []*sqlTicket) (err error) {
	tx, err := s.db.Begin()
	if err != nil {
		return fmt.Errorf("fakeiaas: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	put, del, hist := tx.Stmt(s.putS), tx.Stmt(s.delS), tx.Stmt(s.histS)
	for _, t := range group {
		for _, r := range t.b.records {
			if r.Data == nil {
				_, err = del.Exec(r.Kind, r.ID)
			} else {
				_, err = put.Exec(r.Kind, r.ID, r.Data)
			}
			if err != nil {
				return fmt.Errorf("fakeiaas: write %s %q: %w", r.Kind, r.ID, err)
			}
		}
		for _, h := range t.b.history {
			data, _ := json.Marshal(h)
			if _, err = hist.Exec(h.Seq, data); err != nil {
				return fmt.Errorf("fakeiaas: write history %d: %w", h.Seq, err)
			}
		}
	}
	if err = tx.Commit(); err != nil {
		return fmt.Errorf("fakeiaas: commit: %w", err)
	}
	return nil
}

func (s *sqliteStore) history(f HistoryFilter, limit int) ([]HistoryEntry, error) {
	rows, err := s.db.Query(`SELECT data FROM history WHERE seq > ? ORDER BY seq`, f.Since)
	if err != nil {
		return nil, fmt.Errorf("fakeiaas: read history: %w", err)
	}
	defer rows.Close()
	var out []HistoryEntry
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("fakeiaas: read history: %w", err)
		}
		var h HistoryEntry
		if err := json.Unmarshal(data, &h); err != nil {
			return nil, fmt.Errorf("fakeiaas: decode history: %w", err)
		}
		if f.match(h) {
			out = append(out, h)
			if limit > 0 && len(out) >= limit {
				break
			}
		}
	}
	return out, rows.Err()
}

func (s *sqliteStore) close() error {
	// Drain anything still queued so nothing acknowledged is lost.
	s.mu.Lock()
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	if len(pending) > 0 {
		err := s.commit(pending)
		for _, g := range pending {
			g.done <- err
		}
	}
	return s.db.Close()
}
