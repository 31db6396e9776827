package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/suites/dynamicdisks"
)

// Helpers that run several real `cpilab` processes: a fake cloud, an API
// process and worker processes sharing one database.

var (
	cpilabBuildOnce sync.Once
	cpilabBuilt     string
	cpilabBuildErr  error
)

// cpilabBinary builds bin/cpilab's command once per test binary and returns
// its path.
func cpilabBinary(t testing.TB) string {
	t.Helper()
	cpilabBuildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "cpilab-bin-")
		if err != nil {
			cpilabBuildErr = err
			return
		}
		cpilabBuilt = filepath.Join(dir, "cpilab")
		out, err := exec.Command("go", "build", "-o", cpilabBuilt, ".").CombinedOutput()
		if err != nil {
			cpilabBuildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if cpilabBuildErr != nil {
		t.Fatal(cpilabBuildErr)
	}
	return cpilabBuilt
}

// proc is one running cpilab process and its output.
type proc struct {
	name string
	cmd  *exec.Cmd
	mu   sync.Mutex
	out  bytes.Buffer // guarded by mu
	done chan struct{}
}

type lockedWriter struct{ p *proc }

func (w lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}

func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// startProc starts bin with args; the process is killed when t ends, and
// its output logged if t failed.
func startProc(t testing.TB, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = lockedWriter{p}, lockedWriter{p}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("--- output of %s:\n%s", name, p.output())
		}
	})
	return p
}

// kill9 sends SIGKILL and waits for the process to go.
func (p *proc) kill9(t testing.TB) time.Time {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatalf("kill -9 %s: %v", p.name, err)
	}
	<-p.done
	return time.Now()
}

// waitFor waits for re to match the output and returns its submatches.
func (p *proc) waitFor(t testing.TB, re *regexp.Regexp, timeout time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if m := re.FindStringSubmatch(p.output()); m != nil {
			return m
		}
		select {
		case <-p.done:
			t.Fatalf("%s exited before printing %v:\n%s", p.name, re, p.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not print %v within %s:\n%s", p.name, re, timeout, p.output())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// clusterConfig selects a cluster's shape.
type clusterConfig struct {
	database  string // "" : one process on SQLite (role all)
	workers   int    // worker processes (with database)
	taskLease time.Duration
	// workerArgs are extra flags for every worker process.
	workerArgs []string
}

// cluster is a fake cloud and director processes on it.
type cluster struct {
	dir       string
	fakeURL   string
	cpiConfig string
	common    []string // the flags every director process gets
	cfg       clusterConfig
	api       *proc
	workers   []*proc
	owners    []string // worker owners, as in lock records
	apiURL    string
	ca        []byte
	admin     *director.Client
	disks     *director.Client
}

var (
	reFakeURL   = regexp.MustCompile(`fakeiaas listening on (\S+)`)
	reCPIConfig = regexp.MustCompile(`-configPath (\S+)`)
	reAPIURL    = regexp.MustCompile(`url: (\S+)\n(?s:.*)ca_cert: (\S+)`)
	reWorker    = regexp.MustCompile(`worker (\S+) \(`)
)

const clusterUsers = `[{"name": "admin", "password": "admin", "scopes": ["bosh.admin"]},
 {"name": "disks", "password": "disks", "scopes": ["bosh.dynamic-disks.create", "bosh.dynamic-disks.attach",
  "bosh.dynamic-disks.detach", "bosh.dynamic-disks.list", "bosh.dynamic-disks.delete"]}]`

// startCluster starts `cpilab fakeiaas` and the director processes of cfg.
func startCluster(t testing.TB, cfg clusterConfig) *cluster {
	t.Helper()
	bin := cpilabBinary(t)
	c := &cluster{dir: t.TempDir()}
	f := startProc(t, "fakeiaas", bin, "fakeiaas", "--data-dir", filepath.Join(c.dir, "fakeiaas"), "--memory")
	c.fakeURL = f.waitFor(t, reFakeURL, time.Minute)[1]
	c.cpiConfig = f.waitFor(t, reCPIConfig, time.Minute)[1]
	users := filepath.Join(c.dir, "users.json")
	if err := os.WriteFile(users, []byte(clusterUsers), 0o600); err != nil {
		t.Fatal(err)
	}
	common := []string{"--cpi-config", c.cpiConfig}
	if cfg.taskLease > 0 {
		common = append(common, "--task-lease", cfg.taskLease.String())
	}
	role := "all"
	if cfg.database != "" {
		role = "api"
		common = append(common, "--database", cfg.database)
	}
	c.api = startProc(t, "api", bin, append([]string{"director", "--role", role, "--data-dir", filepath.Join(c.dir, "api"),
		"--listen", "127.0.0.1:0", "--users", users, "--lock-log", filepath.Join(c.dir, "locks-api.jsonl")}, common...)...)
	c.common, c.cfg = common, cfg
	for i := 1; i <= cfg.workers && cfg.database != ""; i++ {
		w, owner := c.startWorker(t, i)
		c.workers = append(c.workers, w)
		c.owners = append(c.owners, owner)
	}
	m := c.api.waitFor(t, reAPIURL, time.Minute)
	c.apiURL = m[1]
	ca, err := os.ReadFile(m[2])
	if err != nil {
		t.Fatal(err)
	}
	c.ca = ca
	if c.admin, err = director.NewClient(director.ClientConfig{URL: c.apiURL, CACertPEM: ca, Username: "admin", Password: "admin"}); err != nil {
		t.Fatal(err)
	}
	if c.disks, err = director.NewClient(director.ClientConfig{URL: c.apiURL, CACertPEM: ca, Username: "disks", Password: "disks"}); err != nil {
		t.Fatal(err)
	}
	return c
}

// startWorker starts worker process number i (its data dir and lock log
// named after i) and returns it and its owner, as in lock records.
func (c *cluster) startWorker(t testing.TB, i int) (*proc, string) {
	t.Helper()
	args := append([]string{"director", "--role", "worker",
		"--data-dir", filepath.Join(c.dir, fmt.Sprintf("worker%d", i)),
		"--lock-log", filepath.Join(c.dir, fmt.Sprintf("locks-worker%d.jsonl", i))}, c.common...)
	w := startProc(t, fmt.Sprintf("worker%d", i), cpilabBinary(t), append(args, c.cfg.workerArgs...)...)
	return w, w.waitFor(t, reWorker, time.Minute)[1]
}

// deploy uploads the cloud config and the fixture stemcell and deploys n
// instances as deployment name.
func (c *cluster) deploy(t testing.TB, name string, n int) []director.Instance {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	stemcell, err := filepath.Abs("../../fixtures/director/stemcell-v2")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.admin.UpdateCloudConfig(ctx, dynamicdisks.DefaultCloudConfig); err != nil {
		t.Fatal(err)
	}
	if err := c.admin.UploadStemcell(ctx, stemcell); err != nil {
		t.Fatal(err)
	}
	if err := c.admin.Deploy(ctx, dynamicdisks.DefaultManifest(name, "ubuntu-jammy", n)); err != nil {
		t.Fatal(err)
	}
	insts, err := c.admin.Instances(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != n {
		t.Fatalf("deployed %d instances, want %d", len(insts), n)
	}
	return insts
}

// lockEvents reads every process's lock log.
func (c *cluster) lockEvents(t reporter) []director.LockEvent {
	if h, ok := t.(interface{ Helper() }); ok {
		h.Helper()
	}
	files, _ := filepath.Glob(filepath.Join(c.dir, "locks-*.jsonl"))
	var out []director.LockEvent
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if line == "" {
				continue
			}
			var ev director.LockEvent
			if err := json.Unmarshal([]byte(line), &ev); err != nil {
				// kill -9 can cut the last line of the killed worker's log.
				continue
			}
			out = append(out, ev)
		}
	}
	return out
}
