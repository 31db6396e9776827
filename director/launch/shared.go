package launch

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/director/store"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/refcpi"
	"github.com/cpilab/cpilab/internal/redact"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
)

// Roles of a director process (Config.Role).
const (
	// RoleAll serves the API and runs the workers (the default).
	RoleAll = "all"
	// RoleAPI serves the API and records tasks; worker processes run them.
	RoleAPI = "api"
	// RoleWorker runs workers only: no API.
	RoleWorker = "worker"
)

// ErrRoleNeedsDatabase is returned by Run for an api or worker role
// without a shared database.
var ErrRoleNeedsDatabase = errors.New("launch: an api or worker process shares its store with others: give --database postgres://…")

// ErrRoleNeedsCloud is returned by Run for an api or worker role without a
// shared fake cloud.
var ErrRoleNeedsCloud = errors.New("launch: an api or worker process shares one fake cloud with the others: give --cpi-config with the cpi.json `cpilab fakeiaas` prints")

// checkRole validates Role, Database and CPIConfig together.
func checkRole(cfg *Config) error {
	switch cfg.Role {
	case "":
		cfg.Role = RoleAll
	case RoleAll, RoleAPI, RoleWorker:
	default:
		return fmt.Errorf("launch: role %q: want %s, %s or %s", cfg.Role, RoleAll, RoleAPI, RoleWorker)
	}
	if cfg.Database != "" && !strings.HasPrefix(cfg.Database, "postgres://") && !strings.HasPrefix(cfg.Database, "postgresql://") {
		return fmt.Errorf("launch: database %q: want a postgres:// URL (leave it out for SQLite in the data dir)", redact.DSN(cfg.Database))
	}
	if cfg.Role != RoleAll {
		if cfg.Database == "" {
			return fmt.Errorf("%w (role %s)", ErrRoleNeedsDatabase, cfg.Role)
		}
		if cfg.CPIConfig == "" {
			return fmt.Errorf("%w (role %s)", ErrRoleNeedsCloud, cfg.Role)
		}
	}
	return nil
}

// sharedUUID is the director UUID of every process on one database: drawn
// from the database's identity (dbIdentity), so that the API of any api
// process names the same director however its connection string is
// spelled.
func sharedUUID(dbURL string) string {
	sum := sha256.Sum256([]byte(dbIdentity(dbURL)))
	return "director-" + hex.EncodeToString(sum[:8])
}

// dbIdentity names the database a connection string reaches, without its
// spelling: user, hosts and ports (defaults filled in), database name.
// The password, its place (user info or ?password=), the scheme's
// spelling, the parameters' order and TLS settings do not change it. A
// string that does not parse is named by its redacted text.
func dbIdentity(dsn string) string {
	pc, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return redact.DSN(dsn)
	}
	hosts := []string{net.JoinHostPort(pc.Host, strconv.Itoa(int(pc.Port)))}
	for _, f := range pc.Fallbacks {
		if h := net.JoinHostPort(f.Host, strconv.Itoa(int(f.Port))); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return "postgres://" + url.PathEscape(pc.User) + "@" + strings.Join(hosts, ",") + "/" + url.PathEscape(pc.Database)
}

// world is what a director process drives: a CPI, an inventory, agents.
type world struct {
	cpi    director.CPI
	inv    director.DiskLister
	agents director.Agents
	mbus   string
	close  func() error
	cloud  *fakeiaas.Cloud // the in-process fake cloud, nil for a remote one
}

// remoteWorld connects to a fake cloud served by another process (`cpilab
// fakeiaas`), described by its cpi.json: the reference CPI (in process over
// the cloud's HTTP API, or cfg.CPICommand with that cpi.json), the oracle
// as inventory, and the agents over the cpi.json's mbus (or cfg.NATSURL).
func remoteWorld(cfg Config, r rt.Runtime, profile cpiv2.Profile, lenient bool, mbusName string) (*world, error) {
	fc, err := refcpi.LoadFileConfig(cfg.CPIConfig)
	if err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	client := fakeiaas.NewClient(fc.Cloud.Properties.Fakeiaas.URL)
	w := &world{inv: lab.Inventory{Oracle: client}}
	if len(cfg.CPICommand) > 0 {
		argv := append(append([]string(nil), cfg.CPICommand...), "-configPath", cfg.CPIConfig)
		w.cpi = cpiv2.NewRunner(cpiv2.RunnerConfig{Command: argv, Profile: profile, DirectorUUID: mbusName,
			LenientJSON: lenient, WaitForPipes: lenient})
	} else {
		rc := fc.Config()
		rc.Runtime = r
		if cfg.CPIMaxAPIVersion > 0 && (rc.MaxAPIVersion == 0 || cfg.CPIMaxAPIVersion < rc.MaxAPIVersion) {
			rc.MaxAPIVersion = cfg.CPIMaxAPIVersion
		}
		cpi := refcpi.New(rc, client)
		w.cpi = cpiv2.NewLoopback(cpi, cpiv2.LoopbackConfig{Profile: profile, LenientJSON: lenient,
			MaxAPIVersion: cpi.MaxAPIVersion(), DirectorUUID: mbusName})
	}
	w.mbus = cfg.NATSURL
	if w.mbus == "" {
		w.mbus = fc.Cloud.Properties.Agent.MBus
	}
	if w.mbus == "" {
		return nil, fmt.Errorf("launch: %s names no agent.mbus; give --nats-url", cfg.CPIConfig)
	}
	tr, err := mbus.Connect(mbus.NATSConfig{URL: w.mbus, Name: mbusName})
	if err != nil {
		return nil, fmt.Errorf("launch: mbus %s: %w", w.mbus, err)
	}
	ac, err := mbus.NewClient(mbus.ClientConfig{Transport: tr, Runtime: r, DirectorUUID: mbusName})
	if err != nil {
		_ = tr.Close()
		return nil, fmt.Errorf("launch: mbus client: %w", err)
	}
	w.agents = ac
	w.close = func() error { return errors.Join(ac.Close(), tr.Close()) }
	return w, nil
}

// lockLog appends every lock event as one JSON line to a file
// (Config.LockLog), written through at once so that kill -9 loses none.
type lockLog struct {
	mu sync.Mutex
	f  *os.File
	w  *bufio.Writer
}

func openLockLog(path string) (*lockLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("launch: lock log: %w", err)
	}
	return &lockLog{f: f, w: bufio.NewWriter(f)}, nil
}

func (l *lockLog) record(ev director.LockEvent) {
	b, _ := json.Marshal(ev)
	l.mu.Lock()
	defer l.mu.Unlock()
	_, _ = l.w.Write(append(b, '\n'))
	_ = l.w.Flush()
}

func (l *lockLog) Close() error { return l.f.Close() }

// openStore opens the director's store: PostgreSQL at cfg.Database, else
// SQLite at path.
func openStore(cfg Config, path string) (store.Store, error) {
	if cfg.Database == "" {
		return store.OpenSQLite(path)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return OpenPostgres(ctx, cfg.Database)
}

// OpenPostgres opens the director's store in the PostgreSQL database at dsn
// (a URL or key=value connection string), as 'cpilab director --database'
// does; its errors never show the password.
func OpenPostgres(ctx context.Context, dsn string) (director.Store, error) {
	st, err := store.OpenPostgres(ctx, store.PostgresConfig{URL: dsn})
	if err != nil {
		return nil, err
	}
	return st, nil
}
