package fakeiaas

import (
	crand "crypto/rand"
	"database/sql"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"

	"github.com/cpilab/cpilab/rt"

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
	seed              uint64    // startSeed: drawn at open
	existsS           *sql.Stmt // prepared once; used only by the committing leader
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
		`CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)`,
		`INSERT INTO meta (key, value) VALUES ('starts', 1) ON CONFLICT (key) DO UPDATE SET value = value + 1`,
	} {
		if _, err := db.Exec(q); err != nil {
			db.Close()
			return nil, fmt.Errorf("fakeiaas: initialise %s: %w", path, err)
		}
	}
	var starts int64
	if err := db.QueryRow(`SELECT value FROM meta WHERE key = 'starts'`).Scan(&starts); err != nil {
		db.Close()
		return nil, fmt.Errorf("fakeiaas: read the start count in %s: %w", path, err)
	}
	// A new seed on every open: the start count (never repeats on this data)
	// mixed with fresh entropy (never repeats across data dirs either).
	var nonce [8]byte
	_, _ = crand.Read(nonce[:])
	st := &sqliteStore{db: db, seed: rt.StreamSeed(binary.LittleEndian.Uint64(nonce[:]), "start-"+strconv.FormatInt(starts, 10))}
	for _, p := range []struct {
		dst **sql.Stmt
		q   string
	}{
		{&st.putS, `INSERT OR REPLACE INTO objects (kind, id, data) VALUES (?, ?, ?)`},
		{&st.delS, `DELETE FROM objects WHERE kind = ? AND id = ?`},
		{&st.histS, `INSERT INTO history (seq, data) VALUES (?, ?)`},
		{&st.existsS, `SELECT COUNT(*) FROM objects WHERE kind = ? AND id = ?`},
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
		var refused []error
		if err == nil {
			refused, err = s.commit(group)
		}
		for i, g := range group {
			if err == nil && refused[i] != nil {
				g.done <- refused[i]
				continue
			}
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

// commit writes group in one transaction. A ticket whose batch would
// create an object that exists is skipped whole and gets a
// *RecordExistsError in refused (indexed like group); err fails them all.
func (s *sqliteStore) commit(group []*sqlTicket) (refused []error, err error) {
	tx, err := s.db.Begin()
	if err != nil {
		return nil, fmt.Errorf("fakeiaas: begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	put, del, hist, exists := tx.Stmt(s.putS), tx.Stmt(s.delS), tx.Stmt(s.histS), tx.Stmt(s.existsS)
	refused = make([]error, len(group))
tickets:
	for i, t := range group {
		for _, r := range t.b.records {
			if !r.Create {
				continue
			}
			var n int
			if err = exists.QueryRow(r.Kind, r.ID).Scan(&n); err != nil {
				return nil, fmt.Errorf("fakeiaas: check %s %q: %w", r.Kind, r.ID, err)
			}
			if n > 0 {
				refused[i] = &RecordExistsError{Kind: r.Kind, ID: r.ID}
				continue tickets
			}
		}
		for _, r := range t.b.records {
			if r.Data == nil {
				_, err = del.Exec(r.Kind, r.ID)
			} else {
				_, err = put.Exec(r.Kind, r.ID, r.Data)
			}
			if err != nil {
				return nil, fmt.Errorf("fakeiaas: write %s %q: %w", r.Kind, r.ID, err)
			}
		}
		for _, h := range t.b.history {
			data, _ := json.Marshal(h)
			if _, err = hist.Exec(h.Seq, data); err != nil {
				return nil, fmt.Errorf("fakeiaas: write history %d: %w", h.Seq, err)
			}
		}
	}
	if err = tx.Commit(); err != nil {
		return nil, fmt.Errorf("fakeiaas: commit: %w", err)
	}
	return refused, nil
}

func (s *sqliteStore) startSeed() uint64 { return s.seed | 1 } // never 0: 0 means "not durable"

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
		refused, err := s.commit(pending)
		for i, g := range pending {
			if err == nil && refused[i] != nil {
				g.done <- refused[i]
				continue
			}
			g.done <- err
		}
	}
	return s.db.Close()
}
