// Package storageworld runs the storage controller end to end in the
// deterministic world. The world is the reference Director (its HTTP API
// served in process, resize extension included), the reference agents on
// every VM (their dynamic_disk_usage reports) and the fake cloud with the
// reference CPI, all on one runtime (simrt in tests, so the same seed gives
// the same run), with the controller on top through package boshdirector, as
// `cpilab storage run` wires it over the network.
//
//	simrt.Run(simrt.Config{Seed: 1}, func(s *simrt.Sim) {
//		w, err := storageworld.New(storageworld.Config{Runtime: s, DataDir: dir, Fixtures: "fixtures/director"})
//		…
//		ctl, _ := storage.New(storage.Config{Director: boshdirector.NewDirector(w.Client),
//			Usage: boshdirector.NewUsage(w.Client, w.Lab.Agents), Store: st})
//	})
package storageworld

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/rt"
)

// Config configures New.
type Config struct {
	// Runtime runs every piece (required; simrt for a deterministic run).
	Runtime rt.Runtime
	// DataDir holds the fake cloud's VM roots and disk files (required).
	DataDir string
	// Fixtures is the directory of the director fixtures: stemcell-v2/,
	// cloud-config.yml, manifest.yml (required).
	Fixtures string
	// Instances is how many instances the deployment has (default 1).
	Instances int
	// Knobs are the Director's (default: the reference behaviour).
	Knobs director.Knobs
}

// The credentials the controller's client uses.
const (
	User     = "storage"
	Password = "storage-pw"
)

// ErrDirectorDown is what the controller's calls fail with while the
// Director's API is down (SetDirectorDown).
var ErrDirectorDown = errors.New("storageworld: the Director's API is down (simulated outage)")

// World is a Director with its cloud and agents, deployed.
type World struct {
	// Lab is the fake cloud (Lab.Cloud is the oracle), the CPI and the agents.
	Lab *Lab
	// Director is the reference Director.
	Director *director.Director
	// Client calls the Director's HTTP API in process, with a user that
	// holds the dynamic-disk create and attach scopes.
	Client *director.Client
	// Instances are the deployment's instances, by index.
	Instances []director.Instance

	mu   sync.Mutex // guards down
	down bool
}

// Lab is director/lab's fake world.
type Lab = lab.Lab

// New builds the world and deploys Config.Instances instances (deployment
// "workers", disk pool "small").
func New(cfg Config) (*World, error) {
	if cfg.Runtime == nil || cfg.DataDir == "" || cfg.Fixtures == "" {
		return nil, errors.New("storageworld: Config needs Runtime, DataDir and Fixtures")
	}
	if cfg.Instances == 0 {
		cfg.Instances = 1
	}
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(cfg.Fixtures, name)) }
	mf, err := read("stemcell-v2/stemcell.MF")
	if err != nil {
		return nil, fmt.Errorf("storageworld: %w", err)
	}
	cc, err := read("cloud-config.yml")
	if err != nil {
		return nil, fmt.Errorf("storageworld: %w", err)
	}
	manifest, err := read("manifest.yml")
	if err != nil {
		return nil, fmt.Errorf("storageworld: %w", err)
	}
	manifest = []byte(strings.Replace(string(manifest), "instances: 2", fmt.Sprintf("instances: %d", cfg.Instances), 1))
	img, err := filepath.Abs(filepath.Join(cfg.Fixtures, "stemcell-v2", "image"))
	if err != nil {
		return nil, err
	}
	l, err := lab.New(lab.Config{Runtime: cfg.Runtime, DataDir: cfg.DataDir})
	if err != nil {
		return nil, err
	}
	d, err := director.New(director.Config{Runtime: cfg.Runtime, CPI: l.CPI, Agents: l.Agents,
		Inventory: l, Knobs: cfg.Knobs, AgentTimeout: 30 * time.Second, AgentPingTimeout: 2 * time.Second, InDoubtBackoff: time.Second})
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	w := &World{Lab: l, Director: d}
	fail := func(err error) (*World, error) {
		w.Close()
		return nil, err
	}
	for _, step := range []struct {
		what  string
		queue func() (int64, error)
	}{
		{"upload stemcell", func() (int64, error) { return d.UploadStemcell("admin", mf, img) }},
		{"cloud config", func() (int64, error) { return d.UpdateCloudConfig("admin", cc) }},
		{"deploy", func() (int64, error) { return d.Deploy("admin", manifest) }},
	} {
		if err := w.run(step.what, step.queue); err != nil {
			return fail(err)
		}
	}
	insts, err := d.Instances("workers")
	if err != nil {
		return fail(err)
	}
	sort.Slice(insts, func(i, j int) bool { return insts[i].Index < insts[j].Index })
	w.Instances = insts
	auth, err := director.NewAuth(director.AuthConfig{Users: []director.User{{Name: User, Password: Password,
		Scopes: []string{director.ScopeDisksCreate, director.ScopeDisksAttach, director.ScopeDisksList, director.ScopeRead}}}})
	if err != nil {
		return fail(err)
	}
	api, err := director.NewAPI(director.APIConfig{Director: d, Auth: auth, DataDir: filepath.Join(cfg.DataDir, "api")})
	if err != nil {
		return fail(err)
	}
	hc := &http.Client{Transport: &inProcess{h: api.Handler(), down: w.isDown}}
	w.Client, err = director.NewClient(director.ClientConfig{URL: "https://director.invalid", Username: User, Password: Password,
		HTTPClient: hc, Runtime: cfg.Runtime, PollInterval: time.Second})
	if err != nil {
		return fail(err)
	}
	return w, nil
}

func (w *World) run(what string, queue func() (int64, error)) error {
	id, err := queue()
	if err != nil {
		return fmt.Errorf("storageworld: %s: %w", what, err)
	}
	t, err := w.Director.WaitTask(id, time.Hour)
	if err != nil {
		return fmt.Errorf("storageworld: %s: %w", what, err)
	}
	if t.State != director.TaskDone {
		return fmt.Errorf("storageworld: %s: task %d %s: %s", what, t.ID, t.State, t.Error)
	}
	return nil
}

// SetDirectorDown makes every API call fail with ErrDirectorDown (true) or
// work again (false). The Director's tasks keep running.
func (w *World) SetDirectorDown(down bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.down = down
}

func (w *World) isDown() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.down
}

// Close stops the Director and the lab.
func (w *World) Close() {
	if w.Director != nil {
		_ = w.Director.Close()
	}
	_ = w.Lab.Close()
}

// inProcess serves HTTP requests by calling the API's handler in the
// caller's goroutine: no socket, no goroutine of its own, so a simulated
// run stays deterministic.
type inProcess struct {
	h    http.Handler
	down func() bool
}

func (t *inProcess) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer req.Body.Close()
	}
	if t.down() {
		return nil, ErrDirectorDown
	}
	rec := httptest.NewRecorder()
	t.h.ServeHTTP(rec, req)
	resp := rec.Result()
	resp.Request = req
	return resp, nil
}
