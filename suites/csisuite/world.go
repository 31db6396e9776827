package csisuite

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	boshcsi "github.com/cpilab/cpilab/csi"
	"github.com/cpilab/cpilab/suites/flex"
	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
)

// Backends of certified drivers.
const (
	// BackendBOSH: the driver stores volumes as the Director's dynamic
	// disks (the BOSH checks are made).
	BackendBOSH = "bosh"
	// BackendNone: it does not (csi-sanity only).
	BackendNone = "none"
)

// Node paths, inside a node's VM root, where the suite stages and
// publishes (kubelet's layout).
const (
	StagingPath = "/var/lib/kubelet/plugins/kubernetes.io/csi/" + boshcsi.DriverName + "/staging"
	TargetPath  = "/var/lib/kubelet/pods/csi-sanity/volumes/kubernetes.io~csi/target"
)

// Driver is a driver under test: its controller endpoint and, per node,
// its node endpoint.
type Driver struct {
	Controller string   // unix:///…
	Nodes      []string // node endpoints, in the Env's node order
	// DirectorClient is the user the driver's controller authenticates as
	// (BOSH backend: the token check).
	DirectorClient string

	stop []func()
}

// Close stops what StartDriver started.
func (d *Driver) Close() {
	for i := len(d.stop) - 1; i >= 0; i-- {
		d.stop[i]()
	}
}

// Launch says how StartDriver runs a driver.
type Launch struct {
	// Executable runs the driver as a process (flags --mode, --endpoint,
	// --config, --log-file as bosh-csi's). Empty: bosh-csi in this process
	// with Bugs.
	Executable string
	Bugs       boshcsi.Bugs
	Variant    boshcsi.Variant
	// Edit may change each generated config (the catalog's variants).
	Edit func(c *boshcsi.Config)
	// Dir holds the sockets, configs and logs (required; keep it short: a
	// socket path is at most 108 bytes).
	Dir string
	// DirectorURL is the Director the controller talks to (the session's
	// gate); default env.DirectorURL.
	DirectorURL string
	// Log receives in-process drivers' logs. Default: a file in Dir.
	Log io.Writer
}

// Configs are the configs StartDriver gives the controller and the nodes.
func Configs(env *flex.Env, l Launch) (boshcsi.Config, []boshcsi.Config) {
	url := l.DirectorURL
	if url == "" {
		url = env.DirectorURL
	}
	ctrl := boshcsi.Config{Director: boshcsi.DirectorConfig{URL: url, CACert: string(env.CACertPEM), Client: env.Client, ClientSecret: env.Secret},
		Deployment: "flex", DiskPool: env.DiskPool, DefaultAZ: "z1", DefaultSizeMiB: 16, Resize: env.Resize, TaskTimeoutSeconds: 60}
	var nodes []boshcsi.Config
	for _, n := range env.Nodes {
		nodes = append(nodes, boshcsi.Config{Node: boshcsi.NodeConfig{InstanceID: n.InstanceID, AZ: "z1", Root: n.Root},
			Mounter: boshcsi.MounterVMRoot, AttachWaitSeconds: 20})
	}
	if l.Edit != nil {
		l.Edit(&ctrl)
		for i := range nodes {
			l.Edit(&nodes[i])
		}
	}
	return ctrl.WithDefaults(), nodes
}

// StartDriver starts a controller and a node plugin per node of env.
func StartDriver(ctx context.Context, env *flex.Env, l Launch) (*Driver, error) {
	if l.Dir == "" {
		return nil, errors.New("csisuite: Launch.Dir is required")
	}
	ctrl, nodes := Configs(env, l)
	d := &Driver{Controller: "unix://" + filepath.Join(l.Dir, "c.sock"), DirectorClient: ctrl.Director.Client}
	if err := d.start(ctx, l, boshcsi.ModeController, "c", ctrl); err != nil {
		d.Close()
		return nil, err
	}
	for i, nc := range nodes {
		name := fmt.Sprintf("n%d", i)
		if err := d.start(ctx, l, boshcsi.ModeNode, name, nc.WithDefaults()); err != nil {
			d.Close()
			return nil, err
		}
		d.Nodes = append(d.Nodes, "unix://"+filepath.Join(l.Dir, name+".sock"))
	}
	return d, nil
}

func (d *Driver) start(ctx context.Context, l Launch, mode, name string, cfg boshcsi.Config) error {
	ep := "unix://" + filepath.Join(l.Dir, name+".sock")
	logPath := filepath.Join(l.Dir, name+".log")
	if l.Executable == "" {
		logw := l.Log
		if logw == nil {
			f, err := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			d.stop = append(d.stop, func() { _ = f.Close() })
			logw = f
		}
		quietKlog()
		drv, err := boshcsi.NewDriver(cfg, boshcsi.Deps{Log: logw, Bugs: l.Bugs, Variant: l.Variant})
		if err != nil {
			return err
		}
		s, err := boshcsi.Listen(drv, mode, ep)
		if err != nil {
			return err
		}
		done := make(chan struct{})
		go func() { defer close(done); _ = s.Serve() }() // I/O edge: the driver's gRPC server
		d.stop = append(d.stop, func() { s.Stop(); <-done })
		return nil
	}
	raw, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(l.Dir, name+".json")
	if err := os.WriteFile(cfgPath, raw, 0o600); err != nil {
		return err
	}
	cmd := exec.Command(l.Executable, "--mode", mode, "--endpoint", ep, "--config", cfgPath, "--log-file", logPath)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := os.OpenFile(logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		_ = out.Close()
		return fmt.Errorf("csisuite: start %s: %w", l.Executable, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }() // I/O edge: reap the driver process
	d.stop = append(d.stop, func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-exited
		}
		_ = out.Close()
	})
	return waitSocket(ctx, ep, exited, logPath)
}

// waitSocket waits until the endpoint answers Probe.
func waitSocket(ctx context.Context, ep string, exited <-chan struct{}, logPath string) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	for {
		select {
		case <-exited:
			out, _ := os.ReadFile(logPath)
			return fmt.Errorf("csisuite: the driver exited before serving %s: %s", ep, out)
		default:
		}
		if conn, err := Dial(ep); err == nil {
			_, perr := csi.NewIdentityClient(conn).Probe(ctx, &csi.ProbeRequest{})
			_ = conn.Close()
			if perr == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("csisuite: %s did not answer Probe: %w", ep, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Dial connects to a unix:// endpoint.
func Dial(ep string) (*grpc.ClientConn, error) {
	p, err := boshcsi.ParseEndpoint(ep)
	if err != nil {
		return nil, err
	}
	return grpc.NewClient("unix://"+p, grpc.WithTransportCredentials(insecure.NewCredentials()))
}

// SanityConfig is csi-sanity's config for a driver whose node plugin runs
// on a node with VM root root (""; paths on this host): staging and target
// paths inside the root, small volumes, the pool as a StorageClass
// parameter.
func SanityConfig(controller, node, root string, params map[string]string) sanity.TestConfig {
	c := sanity.NewTestConfig()
	c.Address, c.ControllerAddress = node, controller
	c.StagingPath, c.TargetPath = StagingPath, TargetPath
	c.TestVolumeSize, c.TestVolumeExpandSize = 16<<20, 32<<20
	c.TestVolumeParameters = params
	c.IdempotentCount = 2
	host := func(p string) string { return filepath.Join(root, filepath.FromSlash(p)) }
	if root == "" {
		host = func(p string) string { return p }
	}
	mk := func(p string) (string, error) { return p, os.MkdirAll(host(p), 0o755) }
	c.CreateTargetDir, c.CreateStagingDir = mk, mk
	rm := func(p string) error { return os.RemoveAll(host(p)) }
	c.RemoveTargetPath, c.RemoveStagingPath = rm, rm
	c.CheckPath = func(p string) (sanity.PathKind, error) {
		fi, err := os.Lstat(host(p))
		switch {
		case errors.Is(err, os.ErrNotExist):
			return sanity.PathIsNotFound, nil
		case err != nil:
			return "", err
		case fi.IsDir():
			return sanity.PathIsDir, nil
		case fi.Mode().IsRegular():
			return sanity.PathIsFile, nil
		}
		return sanity.PathIsOther, nil
	}
	return c
}

var klogOnce sync.Once

// quietKlog keeps mount-utils' klog lines (in-process drivers) off
// stderr: they would interleave with the report.
func quietKlog() {
	klogOnce.Do(func() {
		fs := flag.NewFlagSet("klog", flag.ContinueOnError)
		klog.InitFlags(fs)
		_ = fs.Set("logtostderr", "false")
		_ = fs.Set("alsologtostderr", "false")
		_ = fs.Set("stderrthreshold", "FATAL")
		klog.SetOutput(io.Discard)
	})
}
