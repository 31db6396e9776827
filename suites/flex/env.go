package flex

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/launch"
	directorfixtures "github.com/cpilab/cpilab/fixtures/director"
	"github.com/cpilab/cpilab/suites/dynamicdisks"
)

// Env is the BOSH world drivers are certified against: one Director, a
// deployment whose instances are the Kubernetes nodes, and the fake
// cloud's data dir (the oracle). Each Session reaches the Director through
// a gate of its own (NewGate), so that one session's Director-down fault
// is no other's and sessions can run at the same time.
type Env struct {
	// DirectorURL is the Director itself; drivers reach it through a gate.
	DirectorURL string
	CACertPEM   []byte
	// Client and Secret hold the dynamic disk scopes only.
	Client, Secret string
	// DiskPool is the disk_pool_name volumes are provided from.
	DiskPool string
	// Nodes are the nodes, in order; each is an instance with a VM root.
	Nodes []EnvNode
	// CloudDir is the fake cloud's data dir: disks/<cid>.img are the
	// disks' backing files, vms/<cid>/root the VMs' roots.
	CloudDir string
	// Admin talks to the Director directly with bosh.admin.
	Admin *director.Client
	// Resize says the Director grows dynamic disks (POST
	// /dynamic_disks/:name/resize); the embedded one does.
	Resize bool

	stop func()
}

// EnvNode is one node: its name, instance and VM root.
type EnvNode struct {
	Name       string
	InstanceID string
	VMCID      string
	Root       string
}

// NewGate opens a gate of its own in front of the Director: while it is
// down, the Director is down for whoever reaches it through the gate, and
// for no one else. Close it when done.
func (e *Env) NewGate() (*Gate, error) { return newGate(e.DirectorURL) }

// Close stops everything StartEnv started.
func (e *Env) Close() {
	if e.stop != nil {
		e.stop()
	}
}

// EnvConfig configures StartEnv.
type EnvConfig struct {
	// Dir is where the Director, the cloud and the stemcell live
	// (required; left for the caller to remove).
	Dir string
	// Nodes is the number of instances deployed. Default 2.
	Nodes int
	// Out receives progress lines. Default io.Discard.
	Out io.Writer
}

const (
	deploymentName = "flex"
)

// envAZ is the one AZ of the environment: every node can take every
// volume (a disk is bound to its AZ), as FlexVolume and CSI certification
// expect of one cluster's nodes.
const envAZ = "z1"

// StartEnv starts an embedded reference Director with agents and the fake
// cloud, deploys the nodes and opens the gate.
func StartEnv(ctx context.Context, cfg EnvConfig) (*Env, error) {
	if cfg.Dir == "" {
		return nil, errors.New("flex: EnvConfig.Dir is required")
	}
	if cfg.Nodes <= 0 {
		cfg.Nodes = 2
	}
	if cfg.Out == nil {
		cfg.Out = io.Discard
	}
	stemcell := filepath.Join(cfg.Dir, "stemcell")
	if err := directorfixtures.WriteStemcell(stemcell); err != nil {
		return nil, fmt.Errorf("flex: %w", err)
	}
	dataDir := filepath.Join(cfg.Dir, "director")
	lctx, cancel := context.WithCancel(context.Background())
	ready := make(chan launch.Info, 1)
	done := make(chan error, 1)
	go func() { // I/O edge: the embedded Director serves until Close
		done <- launch.Run(lctx, launch.Config{DataDir: dataDir, Listen: "127.0.0.1:0", Out: io.Discard,
			Ready: func(i launch.Info) { ready <- i },
			Users: []director.User{
				{Name: "admin", Password: "admin", Scopes: []string{director.ScopeAdmin}},
				{Name: "flex", Password: "flex", Scopes: director.DiskScopes},
			}})
	}()
	e := &Env{Client: "flex", Secret: "flex", DiskPool: "dynamic", CloudDir: filepath.Join(dataDir, "fakeiaas"), Resize: true}
	var info launch.Info
	select {
	case info = <-ready:
	case err := <-done:
		cancel()
		return nil, fmt.Errorf("flex: embedded director: %w", err)
	case <-ctx.Done():
		cancel()
		<-done
		return nil, ctx.Err()
	}
	e.stop = func() { cancel(); <-done }
	e.DirectorURL, e.CACertPEM = info.URL, info.CACertPEM
	fmt.Fprintf(cfg.Out, "embedded reference director at %s (each driver session reaches it through a gate of its own)\n", info.URL)
	if err := e.deploy(ctx, info, stemcell, cfg.Nodes); err != nil {
		e.Close()
		return nil, err
	}
	return e, nil
}

func (e *Env) deploy(ctx context.Context, info launch.Info, stemcell string, n int) error {
	admin, err := director.NewClient(director.ClientConfig{URL: info.URL, CACertPEM: info.CACertPEM, Username: "admin", Password: "admin"})
	if err != nil {
		return err
	}
	if err := admin.Login(ctx); err != nil {
		return fmt.Errorf("flex: login as admin: %w", err)
	}
	e.Admin = admin
	if err := admin.UploadStemcell(ctx, stemcell); err != nil {
		return fmt.Errorf("flex: upload stemcell: %w", err)
	}
	if err := admin.UpdateCloudConfig(ctx, dynamicdisks.CloudConfig(envAZ)); err != nil {
		return fmt.Errorf("flex: cloud config: %w", err)
	}
	if err := admin.Deploy(ctx, dynamicdisks.Manifest(deploymentName, "ubuntu-jammy", n, envAZ)); err != nil {
		return fmt.Errorf("flex: deploy %s: %w", deploymentName, err)
	}
	insts, err := admin.Instances(ctx, deploymentName)
	if err != nil {
		return fmt.Errorf("flex: instances of %s: %w", deploymentName, err)
	}
	for _, in := range insts {
		if in.VMCID == "" {
			continue
		}
		e.Nodes = append(e.Nodes, EnvNode{Name: fmt.Sprintf("node-%d", len(e.Nodes)), InstanceID: in.ID, VMCID: in.VMCID,
			Root: filepath.Join(e.CloudDir, "vms", in.VMCID, "root")})
	}
	if len(e.Nodes) < n {
		return fmt.Errorf("flex: deployment %s has %d instances with VMs, want %d: %+v", deploymentName, len(e.Nodes), n, insts)
	}
	return nil
}

// Gate is a TCP proxy in front of the Director; while down it accepts and
// at once closes every new connection, as a Director that is not there
// (each call-out is a process of its own, with connections of its own).
type Gate struct {
	URL  string
	ln   net.Listener
	to   string
	down atomic.Bool
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]bool // open client connections, closed by SetDown(true)
}

func newGate(target string) (*Gate, error) {
	host, scheme := target, "https"
	for _, p := range []string{"https://", "http://"} {
		if len(target) > len(p) && target[:len(p)] == p {
			host, scheme = target[len(p):], p[:len(p)-3]
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("flex: gate: %w", err)
	}
	g := &Gate{URL: scheme + "://" + ln.Addr().String(), ln: ln, to: host, conns: map[net.Conn]bool{}}
	g.wg.Add(1)
	go g.serve() // I/O edge: a TCP proxy
	return g, nil
}

func (g *Gate) serve() {
	defer g.wg.Done()
	for {
		c, err := g.ln.Accept()
		if err != nil {
			return
		}
		if g.down.Load() {
			_ = c.Close()
			continue
		}
		g.mu.Lock()
		g.conns[c] = true
		g.mu.Unlock()
		g.wg.Add(1)
		go func() { // I/O edge: one proxied connection
			defer g.wg.Done()
			defer func() {
				g.mu.Lock()
				delete(g.conns, c)
				g.mu.Unlock()
				_ = c.Close()
			}()
			u, err := net.DialTimeout("tcp", g.to, 5*time.Second)
			if err != nil {
				return
			}
			defer u.Close()
			var cp sync.WaitGroup
			cp.Add(2)
			go func() { defer cp.Done(); _, _ = io.Copy(u, c); closeWrite(u) }()
			go func() { defer cp.Done(); _, _ = io.Copy(c, u); closeWrite(c) }()
			cp.Wait()
		}()
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// SetDown closes (true) or opens (false) the gate. Closing it also cuts
// the connections open through it, so that a long-lived driver's kept-alive
// connection sees the outage as a new one would.
func (g *Gate) SetDown(down bool) {
	g.down.Store(down)
	if !down {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for c := range g.conns {
		_ = c.Close()
	}
}

// Close stops the gate and cuts the connections open through it (a
// kept-alive idle one would otherwise hold Close until its peer's idle
// time-out).
func (g *Gate) Close() {
	_ = g.ln.Close()
	g.mu.Lock()
	for c := range g.conns {
		_ = c.Close()
	}
	g.mu.Unlock()
	g.wg.Wait()
}
