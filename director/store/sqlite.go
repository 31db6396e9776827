package store

import (
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sync"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// SQLite is the durable Store: one embedded SQLite database file in WAL
// mode, one table per Kind, created by numbered migrations. A committed
// Update has reached the write-ahead log, so it survives kill -9 of the
// process (synchronous=NORMAL; power loss may lose the last commits).
type SQLite struct {
	db *sql.DB

	mu     sync.Mutex
	closed bool // guarded by mu
}

// migrations are applied in order; schema_migrations records the last one.
// Append only: never edit, remove or reorder an applied migration. A new
// Kind needs its own kindTable migration appended at the end (the list is
// not derived from AllKinds, so that adding a kind cannot shift the
// numbering under existing databases).
var migrations = []string{
	kindTable(Tasks), kindTable(Locks), kindTable(Stemcells), kindTable(CloudConfigs), kindTable(Deployments),
	kindTable(Instances), kindTable(VMs), kindTable(Disks), kindTable(DynamicDisks), kindTable(OrphanedDisks),
	kindTable(Users),
	`CREATE TABLE IF NOT EXISTS sequences (name TEXT PRIMARY KEY, value INTEGER NOT NULL)`,
	kindTable(Intents),
}

// kindTable is the migration creating a Kind's table.
func kindTable(k Kind) string {
	return fmt.Sprintf(`CREATE TABLE IF NOT EXISTS %s (key TEXT PRIMARY KEY, body TEXT NOT NULL)`, k)
}

// OpenSQLite opens (creating if needed) the database file at path and
// applies pending migrations.
func OpenSQLite(path string) (*SQLite, error) {
	q := url.Values{}
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(ON)")
	q.Set("_txlock", "immediate")
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	// One connection: SQLite has one writer anyway, and this keeps every
	// transaction serialised without SQLITE_BUSY.
	db.SetMaxOpenConns(1)
	s := &SQLite{db: db}
	if err := s.migrate(); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

func (s *SQLite) migrate() error {
	if _, err := s.db.Exec(`CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("store: migrations table: %w", err)
	}
	var v sql.NullInt64
	if err := s.db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return fmt.Errorf("store: read schema version: %w", err)
	}
	for i := int(v.Int64); i < len(migrations); i++ {
		tx, err := s.db.Begin()
		if err != nil {
			return fmt.Errorf("store: migration %d: %w", i+1, err)
		}
		if _, err := tx.Exec(migrations[i]); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("store: migration %d: %w", i+1, err)
		}
		if _, err := tx.Exec(`INSERT INTO schema_migrations (version) VALUES (?)`, i+1); err != nil {
			_ = tx.Rollback()
			return fmt.Errorf("store: migration %d: %w", i+1, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("store: migration %d: %w", i+1, err)
		}
	}
	return nil
}

// SchemaVersion is the number of migrations applied.
func (s *SQLite) SchemaVersion() (int, error) {
	var v sql.NullInt64
	err := s.db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&v)
	return int(v.Int64), err
}

// Update implements Store.
func (s *SQLite) Update(fn func(Tx) error) error { return s.run(fn, true) }

// View implements Store.
func (s *SQLite) View(fn func(Tx) error) error { return s.run(fn, false) }

// Close implements Store.
func (s *SQLite) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	return s.db.Close()
}

func (s *SQLite) run(fn func(Tx) error, write bool) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	tx, err := s.db.Begin()
	if err != nil {
		return fmt.Errorf("store: begin: %w", err)
	}
	if err := fn(&sqlTx{tx: tx, write: write}); err != nil {
		_ = tx.Rollback()
		return err
	}
	if !write {
		return tx.Rollback()
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("store: commit: %w", err)
	}
	return nil
}

type sqlTx struct {
	tx    *sql.Tx
	write bool
}

func (t *sqlTx) Get(k Kind, key string, v any) (bool, error) {
	if err := validKind(k); err != nil {
		return false, err
	}
	var body string
	err := t.tx.QueryRow(`SELECT body FROM `+string(k)+` WHERE key = ?`, key).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("store: get %s/%s: %w", k, key, err)
	}
	if err := decodeBody(k, key, body, v); err != nil {
		return false, err
	}
	return true, nil
}

func (t *sqlTx) encode(k Kind, key string, v any) (string, error) {
	return encodeBody(k, key, v, t.write)
}

func (t *sqlTx) Put(k Kind, key string, v any) error {
	body, err := t.encode(k, key, v)
	if err != nil {
		return err
	}
	if _, err := t.tx.Exec(`INSERT INTO `+string(k)+` (key, body) VALUES (?, ?)
		ON CONFLICT(key) DO UPDATE SET body = excluded.body`, key, body); err != nil {
		return fmt.Errorf("store: put %s/%s: %w", k, key, err)
	}
	return nil
}

func (t *sqlTx) Insert(k Kind, key string, v any) error {
	body, err := t.encode(k, key, v)
	if err != nil {
		return err
	}
	res, err := t.tx.Exec(`INSERT INTO `+string(k)+` (key, body) VALUES (?, ?) ON CONFLICT(key) DO NOTHING`, key, body)
	if err != nil {
		return fmt.Errorf("store: insert %s/%s: %w", k, key, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%w: %s/%s", ErrExists, k, key)
	}
	return nil
}

func (t *sqlTx) Delete(k Kind, key string) error {
	if err := checkWrite(k, key, "delete", t.write); err != nil {
		return err
	}
	if _, err := t.tx.Exec(`DELETE FROM `+string(k)+` WHERE key = ?`, key); err != nil {
		return fmt.Errorf("store: delete %s/%s: %w", k, key, err)
	}
	return nil
}

func (t *sqlTx) List(k Kind, fn func(string, []byte) error) error {
	if err := validKind(k); err != nil {
		return err
	}
	rows, err := t.tx.Query(`SELECT key, body FROM ` + string(k) + ` ORDER BY key`)
	if err != nil {
		return fmt.Errorf("store: list %s: %w", k, err)
	}
	return listRows(k, rows, rows.Close, fn)
}

func (t *sqlTx) NextID(seq string) (int64, error) {
	if !t.write {
		return 0, fmt.Errorf("store: NextID(%s) in a read-only transaction", seq)
	}
	var v int64
	err := t.tx.QueryRow(`INSERT INTO sequences (name, value) VALUES (?, 1)
		ON CONFLICT(name) DO UPDATE SET value = value + 1 RETURNING value`, seq).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("store: next id %s: %w", seq, err)
	}
	return v, nil
}
