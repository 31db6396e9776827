package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/launch"
	"github.com/cpilab/cpilab/internal/strictjson"
)

func init() {
	commands["director"] = command{summary: "run the reference Director (dynamic disks) with embedded NATS, SQLite and fakeiaas, or as an api or worker process on PostgreSQL", run: runDirector}
}

func runDirector(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("director", stderr)
	cfg := launch.Config{Out: stdout}
	var cpiCommand string
	fs.StringVar(&cfg.DataDir, "data-dir", "", "state directory: director.db, the fake cloud, ca.pem (default: the user's cache dir + cpilab/director)")
	fs.StringVar(&cfg.Listen, "listen", "127.0.0.1:25555", "API address; with --plain-http it must be loopback (127.0.0.1, [::1], localhost)")
	fs.BoolVar(&cfg.PlainHTTP, "plain-http", false, "serve the API without TLS")
	fs.StringVar(&cfg.Profile, "profile", "reference", "behaviour profile: reference (safe) or upstream (upstream's races and API details, see docs/upstream.md)")
	fs.Func("knob", "turn one behaviour knob on, on top of --profile (a field of director.Knobs, e.g. NoTaskTakeover; docs/upstream.md); repeatable", func(name string) error {
		cfg.Knobs = append(cfg.Knobs, name)
		return nil
	})
	fs.StringVar(&cfg.CPIProfile, "cpi-profile", "director-current", "CPI caller profile: director-v1, director-v2 or director-current")
	fs.IntVar(&cfg.CPIMaxAPIVersion, "cpi-api-version", 3, "the reference CPI's highest api_version (debug.cpi.api_version)")
	fs.StringVar(&cpiCommand, "cpi", "", "run this CPI executable (e.g. bin/fakeiaas-cpi) instead of the in-process reference CPI")
	fs.StringVar(&cfg.NATSURL, "nats-url", "", "external NATS server for the mbus (default: an embedded one on loopback)")
	fs.IntVar(&cfg.DynamicDiskWorkers, "dynamic-disk-workers", 2, "workers dedicated to the dynamic_disks queue")
	fs.StringVar(&cfg.Database, "database", "", "PostgreSQL URL (postgres://user@host:port/db) shared by several director processes (default: SQLite in the data dir)")
	fs.StringVar(&cfg.Role, "role", "all", "all (API and workers), api (API only: records tasks) or worker (workers only); api and worker need --database and --cpi-config")
	fs.StringVar(&cfg.CPIConfig, "cpi-config", "", "the cpi.json `FILE` of a fake cloud served by cpilab fakeiaas, shared by every director process (default: a fake cloud of this process's own)")
	fs.DurationVar(&cfg.TaskLease, "task-lease", 30*time.Second, "with --database: how long a task whose worker stops renewing stays its own before another worker takes it over")
	fs.StringVar(&cfg.LockLog, "lock-log", "", "append one JSON line per lock acquisition and release to this file")
	var usersFile string
	fs.StringVar(&usersFile, "users", "", `JSON file of local users: [{"name": …, "password": …, "scopes": […]}] (default: "admin" with a random password, printed)`)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if cfg.DataDir == "" {
		cache, err := os.UserCacheDir()
		if err != nil {
			return err
		}
		cfg.DataDir = filepath.Join(cache, "cpilab", "director")
	}
	if cpiCommand != "" {
		cfg.CPICommand = []string{cpiCommand}
	}
	if usersFile != "" {
		users, err := loadUsers(usersFile)
		if err != nil {
			return err
		}
		cfg.Users = users
	}
	return launch.Run(ctx, cfg)
}

// loadUsers reads --users: a JSON list of users, each with a name, a
// password and at least one scope.
func loadUsers(path string) ([]director.User, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--users: %w", err)
	}
	var users []director.User
	if err := strictjson.Decode(b, &users, strictjson.Options{DisallowUnknownFields: true}); err != nil {
		return nil, fmt.Errorf("--users %s: want a JSON list of {\"name\", \"password\", \"scopes\"}: %w", path, err)
	}
	if len(users) == 0 {
		return nil, fmt.Errorf("--users %s: no users", path)
	}
	for i, u := range users {
		if u.Name == "" || u.Password == "" || len(u.Scopes) == 0 {
			return nil, fmt.Errorf("--users %s: user %d (%q) needs a name, a password and at least one scope", path, i+1, u.Name)
		}
	}
	return users, nil
}
