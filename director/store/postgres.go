package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/cpilab/cpilab/internal/redact"
)

// Postgres is the Store for several director processes sharing one
// database: the same tables and migrations as SQLite, each Update a
// SERIALIZABLE transaction, each View a REPEATABLE READ snapshot. Where two processes' transactions conflict,
// PostgreSQL aborts one with a serialization failure and Postgres runs that
// Update's fn again from the start, so fn must be safe to call more than
// once (it may set variables it returns; it must not have effects outside
// the transaction). Insert's refusal of an existing key is enforced by the
// primary key, so names (dynamic disks, locks) stay unique across processes.
type Postgres struct {
	pool *pgxpool.Pool

	mu     sync.Mutex
	closed bool // guarded by mu
}

// PostgresConfig configures OpenPostgres.
type PostgresConfig struct {
	// URL is a libpq connection string or URL (postgres://user@host:port/db).
	URL string
	// MaxConns bounds the pool (default 8).
	MaxConns int32
	// Retries bounds how often a conflicting Update is run again (default 20).
	Retries int
}

// OpenPostgres connects to the database at cfg.URL and applies pending
// migrations (under an advisory lock, so that processes starting together
// migrate once).
func OpenPostgres(ctx context.Context, cfg PostgresConfig) (*Postgres, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("store: postgres URL %s: %w", redact.DSN(cfg.URL), redact.Error(err, pgPassword(cfg.URL)))
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	} else {
		pc.MaxConns = 8
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("store: postgres %s: %w", redact.DSN(cfg.URL), redact.Error(err, pc.ConnConfig.Password))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: postgres %s: %w", redact.DSN(cfg.URL), redact.Error(err, pc.ConnConfig.Password))
	}
	s := &Postgres{pool: pool}
	if err := s.migrate(ctx); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// pgPassword is the password a connection string holds ("" when none or
// unparsable), for masking in errors.
func pgPassword(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		return ""
	}
	if pw, ok := u.User.Password(); ok {
		return pw
	}
	return u.Query().Get("password")
}

// migrationLock is the advisory lock id held while migrating.
const migrationLock = 0x63706c6162 // "cplab"

func (s *Postgres) migrate(ctx context.Context) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("store: migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, migrationLock); err != nil {
		return fmt.Errorf("store: migration lock: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, migrationLock) //nolint:errcheck // released with the session anyway
	if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("store: migrations table: %w", err)
	}
	var v *int64
	if err := conn.QueryRow(ctx, `SELECT MAX(version) FROM schema_migrations`).Scan(&v); err != nil {
		return fmt.Errorf("store: read schema version: %w", err)
	}
	start := 0
	if v != nil {
		start = int(*v)
	}
	for i := start; i < len(migrations); i++ {
		err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, migrations[i]); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version) VALUES ($1)`, i+1)
			return err
		})
		if err != nil {
			return fmt.Errorf("store: migration %d: %w", i+1, err)
		}
	}
	return nil
}

// SchemaVersion is the number of migrations applied.
func (s *Postgres) SchemaVersion() (int, error) {
	var v *int64
	err := s.pool.QueryRow(context.Background(), `SELECT MAX(version) FROM schema_migrations`).Scan(&v)
	if v == nil {
		return 0, err
	}
	return int(*v), err
}

// Update implements Store. See Postgres for when fn runs more than once.
func (s *Postgres) Update(fn func(Tx) error) error { return s.run(fn, true) }

// View implements Store.
func (s *Postgres) View(fn func(Tx) error) error { return s.run(fn, false) }

// Close implements Store.
func (s *Postgres) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		s.pool.Close()
	}
	return nil
}

// pgTimeout bounds one transaction.
const pgTimeout = 30 * time.Second

// ErrConflict is returned when an Update still conflicted after its retries.
var ErrConflict = errors.New("store: transaction kept conflicting with other processes")

func (s *Postgres) run(fn func(Tx) error, write bool) error {
	opts := pgx.TxOptions{IsoLevel: pgx.Serializable, AccessMode: pgx.ReadWrite}
	if !write {
		// A View reads one snapshot: REPEATABLE READ gives it that and
		// never fails with a serialization error, nor makes a concurrent
		// Update fail with one (only SERIALIZABLE transactions take part in
		// the conflict tracking).
		opts = pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}
	}
	return s.inTx(opts, func(ctx context.Context, tx pgx.Tx) error {
		return fn(&pgTx{ctx: ctx, tx: tx, write: write})
	})
}

// inTx runs body in a transaction with opts, again (up to 20 times) while
// it fails with a serialization failure or a deadlock. body's own error is
// returned as it is; the transaction's are wrapped.
func (s *Postgres) inTx(opts pgx.TxOptions, body func(ctx context.Context, tx pgx.Tx) error) error {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return ErrClosed
	}
	var last error
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 {
			retryPause(attempt)
		}
		ctx, cancel := context.WithTimeout(context.Background(), pgTimeout)
		var bodyErr error
		err := pgx.BeginTxFunc(ctx, s.pool, opts, func(tx pgx.Tx) error {
			bodyErr = body(ctx, tx)
			return bodyErr
		})
		cancel()
		if err == nil {
			return nil
		}
		if bodyErr != nil && !retryable(bodyErr) {
			return bodyErr
		}
		if !retryable(err) {
			return fmt.Errorf("store: postgres transaction: %w", err)
		}
		last = err
	}
	return fmt.Errorf("%w: %v", ErrConflict, last)
}

// retryPause waits before running a conflicting transaction again: 2 ms
// more for each attempt (at most 40 ms), so that the processes it
// conflicted with can finish. (An I/O adapter's wait on the wall clock: the
// simulator never runs on PostgreSQL.)
func retryPause(attempt int) {
	time.Sleep(time.Duration(min(attempt, 20)) * 2 * time.Millisecond)
}

// retryable reports a serialization failure or a deadlock.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40001" || pe.Code == "40P01")
}

type pgTx struct {
	ctx   context.Context
	tx    pgx.Tx
	write bool
}

func (t *pgTx) Get(k Kind, key string, v any) (bool, error) {
	if err := validKind(k); err != nil {
		return false, err
	}
	var body string
	err := t.tx.QueryRow(t.ctx, `SELECT body FROM `+string(k)+` WHERE key = $1`, key).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
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

func (t *pgTx) encode(k Kind, key string, v any) (string, error) {
	return encodeBody(k, key, v, t.write)
}

func (t *pgTx) Put(k Kind, key string, v any) error {
	body, err := t.encode(k, key, v)
	if err != nil {
		return err
	}
	if _, err := t.tx.Exec(t.ctx, `INSERT INTO `+string(k)+` (key, body) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET body = excluded.body`, key, body); err != nil {
		return fmt.Errorf("store: put %s/%s: %w", k, key, err)
	}
	return nil
}

func (t *pgTx) Insert(k Kind, key string, v any) error {
	body, err := t.encode(k, key, v)
	if err != nil {
		return err
	}
	tag, err := t.tx.Exec(t.ctx, `INSERT INTO `+string(k)+` (key, body) VALUES ($1, $2) ON CONFLICT (key) DO NOTHING`, key, body)
	if err != nil {
		return fmt.Errorf("store: insert %s/%s: %w", k, key, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("%w: %s/%s", ErrExists, k, key)
	}
	return nil
}

func (t *pgTx) Delete(k Kind, key string) error {
	if err := checkWrite(k, key, "delete", t.write); err != nil {
		return err
	}
	if _, err := t.tx.Exec(t.ctx, `DELETE FROM `+string(k)+` WHERE key = $1`, key); err != nil {
		return fmt.Errorf("store: delete %s/%s: %w", k, key, err)
	}
	return nil
}

func (t *pgTx) List(k Kind, fn func(string, []byte) error) error {
	if err := validKind(k); err != nil {
		return err
	}
	rows, err := t.tx.Query(t.ctx, `SELECT key, body FROM `+string(k)+` ORDER BY key COLLATE "C"`)
	if err != nil {
		return fmt.Errorf("store: list %s: %w", k, err)
	}
	return listRows(k, rows, func() error { rows.Close(); return nil }, fn)
}

func (t *pgTx) NextID(seq string) (int64, error) {
	if !t.write {
		return 0, fmt.Errorf("store: NextID(%s) in a read-only transaction", seq)
	}
	var v int64
	err := t.tx.QueryRow(t.ctx, `INSERT INTO sequences (name, value) VALUES ($1, 1)
		ON CONFLICT (name) DO UPDATE SET value = sequences.value + 1 RETURNING value`, seq).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("store: next id %s: %w", seq, err)
	}
	return v, nil
}

// ClaimFirst implements Claimer with SELECT … FOR UPDATE SKIP LOCKED in a
// READ COMMITTED transaction: a record another process is claiming at the
// same moment is skipped, not waited for, and a record changed by a
// committed claim is checked against m again before it is returned, so two
// processes never claim one record.
func (s *Postgres) ClaimFirst(kind Kind, m Match, fn func(tx Tx, key string, raw []byte) error) (bool, error) {
	if err := validKind(kind); err != nil {
		return false, err
	}
	q := `SELECT key, body FROM ` + string(kind)
	var args []any
	for i, f := range m.fieldsSorted() {
		if i == 0 {
			q += ` WHERE `
		} else {
			q += ` AND `
		}
		q += fmt.Sprintf(`(body::jsonb ->> $%d) = ANY($%d)`, len(args)+1, len(args)+2)
		args = append(args, f, m[f])
	}
	q += ` ORDER BY key COLLATE "C" LIMIT 1 FOR UPDATE SKIP LOCKED`
	opts := pgx.TxOptions{IsoLevel: pgx.ReadCommitted, AccessMode: pgx.ReadWrite}
	found := false
	err := s.inTx(opts, func(ctx context.Context, tx pgx.Tx) error {
		found = false
		var key, body string
		err := tx.QueryRow(ctx, q, args...).Scan(&key, &body)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("store: claim from %s: %w", kind, err)
		}
		found = true
		return fn(&pgTx{ctx: ctx, tx: tx, write: true}, key, []byte(body))
	})
	if err != nil {
		return false, err
	}
	return found, nil
}
