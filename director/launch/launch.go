// Package launch runs a complete reference Director for `cpilab director`,
// served over the network. It serves the HTTP API (TLS on loopback, token
// auth) over a director with a SQLite store, an mbus (an embedded NATS
// server unless a URL is given), and fakeiaas with the reference CPI (in
// process, or the fakeiaas-cpi executable), with a reference agent booted on
// every VM.
//
//	err := launch.Run(ctx, launch.Config{DataDir: dir, Out: os.Stdout})
//
// With Config.Database (PostgreSQL) and Config.Role, Run is one of several
// processes sharing one director: an api process or a worker process,
// driving one fake cloud served by `cpilab fakeiaas` (Config.CPIConfig);
// docs/director.md describes the roles.
//
// Run prints the URL, the CA certificate path, the admin credentials and the
// next steps (upload a cloud config and a stemcell, deploy, provide a disk:
// shell commands over example files it writes to DataDir/examples) to Out,
// then serves until ctx is done.
package launch

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/datadir"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/internal/redact"
	"github.com/cpilab/cpilab/mbus"
	"github.com/cpilab/cpilab/rt"
)

// Config configures Run. Zero fields take the documented defaults.
type Config struct {
	// DataDir holds director.db (SQLite), the fake cloud (fakeiaas/),
	// unpacked stemcells and ca.pem (required; created when missing).
	DataDir string
	// Listen is the API's address. Default "127.0.0.1:25555".
	Listen string
	// PlainHTTP serves the API without TLS. Default false. Only on a
	// loopback Listen address (127.0.0.0/8, ::1, localhost): Run refuses
	// any other with ErrPlainHTTPNotLoopback, since tokens and passwords
	// would cross the network in clear.
	PlainHTTP bool
	// Profile is the knob profile: "reference" (default) or "upstream".
	Profile string
	// Knobs names knobs (director.Knobs field names) turned on on top of
	// Profile. Default none.
	Knobs []string
	// CPIProfile is the CPI caller profile: "director-v1", "director-v2"
	// or "director-current" (default).
	CPIProfile string
	// CPIMaxAPIVersion caps the reference CPI's api_version (default 3).
	CPIMaxAPIVersion int
	// CPICommand runs the reference CPI executable (e.g.
	// ["bin/fakeiaas-cpi"]) instead of the in-process one.
	CPICommand []string
	// NATSURL is an external NATS server for the mbus. Default: an
	// embedded nats-server on 127.0.0.1 and a free port.
	NATSURL string
	// Users are the local users. Default: "admin" with bosh.admin and a
	// random password, printed to Out.
	Users []director.User
	// NormalWorkers, UrgentWorkers and DynamicDiskWorkers are
	// director.Config's (defaults 2, 1, 2).
	NormalWorkers, UrgentWorkers, DynamicDiskWorkers int
	// Out receives the start-up banner. Default os.Stdout.
	Out io.Writer
	// Ready, when set, is called once the API serves (for a worker: once
	// its workers run; Info then has no URL).
	Ready func(Info)

	// Database is a PostgreSQL URL (postgres://user@host:port/db) that
	// several director processes share (docs/director.md). Default "":
	// SQLite in DataDir, this process alone.
	Database string
	// Role is RoleAll (default: API and workers), RoleAPI (API only; tasks
	// are recorded for workers) or RoleWorker (workers only). API and
	// worker roles need Database and CPIConfig.
	Role string
	// CPIConfig is the cpi.json of a fake cloud served by another process
	// (`cpilab fakeiaas` prints its path): every director process on one
	// database drives that one cloud and its agents (over its agent.mbus,
	// unless NATSURL is given). Default "": a fake cloud of this process's
	// own in DataDir/fakeiaas.
	CPIConfig string
	// TaskLease is director.Config's (default 30 s): how long a task whose
	// worker stopped renewing stays its own before another takes it over.
	TaskLease time.Duration
	// LockLog, when set, is a file that gets one JSON line
	// (director.LockEvent) per lock acquisition and release. Default none.
	LockLog string
}

// Info describes a running director.
type Info struct {
	URL        string
	CACertPath string // "" for plain HTTP
	CACertPEM  []byte
	Users      []director.User
	// Cloud is the fake cloud the director runs on when it runs one in
	// this process (nil with --cpi-config): an embedding caller's oracle.
	Cloud *fakeiaas.Cloud
}

// Run starts everything, serves until ctx is done, then shuts down in
// reverse order.
func Run(ctx context.Context, cfg Config) (err error) {
	knobs, cpiProfile, err := prepare(&cfg)
	if err != nil {
		return err
	}
	var cl closers
	defer func() { err = errors.Join(err, cl.close()) }()
	// One director per data dir: a second one would overwrite its CA and
	// database. kill -9 releases the lock too.
	lock, err := datadir.Acquire(cfg.DataDir, "cpilab director")
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	cl.add(lock.Release)
	// I/O edge: the real runtime of a served director, seeded from the wall
	// clock (launch is wiring, not director logic).
	r := rt.Real(uint64(time.Now().UnixNano()))
	uuid := "director-" + randomHex(8)
	mbusName := uuid
	if cfg.Database != "" {
		// Every process on one database is one director; each has its own
		// name on the mbus, so that agents' replies come back to it.
		uuid = sharedUUID(cfg.Database)
		mbusName = uuid + "-" + cfg.Role + "-" + randomHex(4)
	}
	w, natsURL, err := startWorld(cfg, r, cpiProfile, knobs, mbusName, &cl)
	if err != nil {
		return err
	}
	st, err := openStore(cfg, filepath.Join(cfg.DataDir, "director.db"))
	if err != nil {
		return err
	}
	cl.add(st.Close)
	var observe func(director.LockEvent)
	if cfg.LockLog != "" {
		ll, err := openLockLog(cfg.LockLog)
		if err != nil {
			return err
		}
		cl.add(ll.Close)
		observe = ll.record
	}
	owner := ""
	if cfg.Database != "" {
		owner = fmt.Sprintf("%s-%d-%s", cfg.Role, os.Getpid(), randomHex(3))
	}
	d, err := director.New(director.Config{Runtime: r, Store: st, CPI: w.cpi, Inventory: w.inv, Agents: w.agents,
		UUID: uuid, Knobs: knobs, NormalWorkers: cfg.NormalWorkers, UrgentWorkers: cfg.UrgentWorkers,
		DynamicDiskWorkers: cfg.DynamicDiskWorkers, Shared: cfg.Database != "", NoWorkers: cfg.Role == RoleAPI,
		Owner: owner, TaskLease: cfg.TaskLease, LockObserver: observe})
	if err != nil {
		return err
	}
	cl.add(d.Close)
	if cfg.Role == RoleWorker {
		fmt.Fprintf(cfg.Out, "cpilab director %s worker %s (profile %s, CPI caller %s, mbus %s, database %s)\n", uuid, owner,
			profileName(cfg), cpiProfile.Name, natsURL, redact.DSN(cfg.Database))
		if cfg.Ready != nil {
			cfg.Ready(Info{})
		}
		<-ctx.Done()
		return nil
	}
	info, err := serveAPI(cfg, r, d, w, &cl)
	if err != nil {
		return err
	}
	fmt.Fprintf(cfg.Out, "cpilab director %s (profile %s, CPI caller %s, mbus %s)\n  url: %s\n", uuid,
		profileName(cfg), cpiProfile.Name, natsURL, info.URL)
	if cfg.Database != "" {
		fmt.Fprintf(cfg.Out, "  role: %s  owner: %s  database: %s\n", cfg.Role, owner, redact.DSN(cfg.Database))
	}
	if err := announce(cfg, info); err != nil {
		return err
	}
	if cfg.Ready != nil {
		cfg.Ready(info)
	}
	<-ctx.Done()
	return nil
}

// closers are what Run closes when it returns, last opened first.
type closers []func() error

func (c *closers) add(f func() error) { *c = append(*c, f) }

func (c closers) close() error {
	var err error
	for i := len(c) - 1; i >= 0; i-- {
		err = errors.Join(err, c[i]())
	}
	return err
}

// prepare fills cfg's defaults, refuses what cannot work, makes the data
// directory, and returns the profile's knobs and the CPI caller profile.
func prepare(cfg *Config) (director.Knobs, cpiv2.Profile, error) {
	if cfg.DataDir == "" {
		return director.Knobs{}, cpiv2.Profile{}, errors.New("launch: Config.DataDir is required")
	}
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:25555"
	}
	if cfg.Out == nil {
		cfg.Out = os.Stdout
	}
	if err := checkListen(cfg.Listen, cfg.PlainHTTP); err != nil {
		return director.Knobs{}, cpiv2.Profile{}, err
	}
	if err := checkRole(cfg); err != nil {
		return director.Knobs{}, cpiv2.Profile{}, err
	}
	knobs, err := director.Profile(cfg.Profile)
	if err != nil {
		return knobs, cpiv2.Profile{}, err
	}
	for _, name := range cfg.Knobs {
		if err := knobs.Set(name); err != nil {
			return knobs, cpiv2.Profile{}, err
		}
	}
	cpiProfile := cpiv2.ProfileDirectorCurrent
	if cfg.CPIProfile != "" {
		if cpiProfile, err = cpiv2.ParseProfile(cfg.CPIProfile); err != nil {
			return knobs, cpiProfile, err
		}
	}
	cpiProfile = director.CPIProfile(knobs, cpiProfile)
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return knobs, cpiProfile, fmt.Errorf("launch: %w", err)
	}
	return knobs, cpiProfile, nil
}

// startWorld starts what the director drives: the remote fake cloud of
// --cpi-config, or an in-process lab (fake cloud, agents, an embedded NATS
// unless cfg names one). It returns the world and the mbus URL.
func startWorld(cfg Config, r rt.Runtime, cpiProfile cpiv2.Profile, knobs director.Knobs, mbusName string, cl *closers) (*world, string, error) {
	if cfg.CPIConfig != "" {
		w, err := remoteWorld(cfg, r, cpiProfile, knobs.LenientCPIWire, mbusName)
		if err != nil {
			return nil, "", err
		}
		cl.add(w.close)
		return w, w.mbus, nil
	}
	natsURL := cfg.NATSURL
	if natsURL == "" {
		srv, err := mbus.StartEmbedded(mbus.EmbeddedConfig{})
		if err != nil {
			return nil, "", fmt.Errorf("launch: embedded NATS: %w", err)
		}
		cl.add(func() error { srv.Shutdown(); return nil })
		natsURL = srv.URL()
	}
	tr, err := mbus.Connect(mbus.NATSConfig{URL: natsURL})
	if err != nil {
		return nil, "", fmt.Errorf("launch: mbus %s: %w", natsURL, err)
	}
	cl.add(tr.Close)
	l, err := lab.New(lab.Config{Runtime: r, DataDir: filepath.Join(cfg.DataDir, "fakeiaas"), FakeIaaSStore: "sqlite",
		Transport: tr, CPIProfile: cpiProfile, LenientCPIWire: knobs.LenientCPIWire, CPIMaxAPIVersion: cfg.CPIMaxAPIVersion, CPICommand: cfg.CPICommand,
		DirectorUUID: mbusName})
	if err != nil {
		return nil, "", err
	}
	cl.add(l.Close)
	return &world{cpi: l.CPI, inv: l, agents: l.Agents, cloud: l.Cloud}, natsURL, nil
}

// serveAPI serves the director's API with cfg's users (or an admin with a
// random password) and writes its CA certificate into the data directory.
func serveAPI(cfg Config, r rt.Runtime, d *director.Director, w *world, cl *closers) (Info, error) {
	users := cfg.Users
	if len(users) == 0 {
		users = []director.User{{Name: "admin", Password: randomHex(12), Scopes: []string{director.ScopeAdmin}}}
	}
	auth, err := director.NewAuth(director.AuthConfig{Users: users, Runtime: r})
	if err != nil {
		return Info{}, err
	}
	api, err := director.NewAPI(director.APIConfig{Director: d, Auth: auth, DataDir: filepath.Join(cfg.DataDir, "stemcells")})
	if err != nil {
		return Info{}, err
	}
	srv, err := director.Serve(director.ServeConfig{Handler: api.Handler(), Addr: cfg.Listen, PlainHTTP: cfg.PlainHTTP})
	if err != nil {
		return Info{}, err
	}
	cl.add(srv.Close)
	info := Info{URL: srv.URL(), CACertPEM: srv.CACertPEM(), Users: users, Cloud: w.cloud}
	if len(info.CACertPEM) > 0 {
		info.CACertPath = filepath.Join(cfg.DataDir, "ca.pem")
		if err := os.WriteFile(info.CACertPath, info.CACertPEM, 0o644); err != nil {
			return info, fmt.Errorf("launch: %w", err)
		}
	}
	return info, nil
}

// announce prints how to reach the served director (its CA file, the
// generated admin password) and the next steps, with example files.
func announce(cfg Config, info Info) error {
	users := info.Users
	if info.CACertPath != "" {
		fmt.Fprintf(cfg.Out, "  ca_cert: %s\n", info.CACertPath)
	}
	if len(cfg.Users) == 0 {
		fmt.Fprintf(cfg.Out, "  user: admin  password: %s\n", users[0].Password)
	}
	examples, err := writeExamples(cfg.DataDir)
	if err != nil {
		return err
	}
	admin, password := users[0].Name, ""
	if len(cfg.Users) == 0 {
		password = users[0].Password
	}
	writeNextSteps(cfg.Out, info, examples, admin, password)
	return nil
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ErrPlainHTTPNotLoopback is returned by Run for PlainHTTP on an address
// that is not loopback.
var ErrPlainHTTPNotLoopback = errors.New("launch: the API without TLS listens only on loopback")

// checkListen refuses plain HTTP on any address but loopback: an empty host
// (every interface), a non-loopback IP, or a host name other than
// localhost.
func checkListen(addr string, plain bool) error {
	if !plain {
		return nil
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("launch: listen address %q: %w", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: listen address %q is not loopback; tokens and passwords would cross the network in clear: "+
		"listen on 127.0.0.1 or [::1], or serve TLS (no plain HTTP)", ErrPlainHTTPNotLoopback, addr)
}

// profileName is the profile as the banner shows it: its name, and the
// knobs turned on on top of it ("reference+NoTaskTakeover").
func profileName(cfg Config) string {
	return strings.Join(append([]string{orDefault(cfg.Profile, director.ProfileReference)}, cfg.Knobs...), "+")
}
