package realagent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/cpilab/cpilab/internal/checkout"

	"github.com/cpilab/cpilab/mbus"
)

// ErrUnavailable is wrapped by Start's error when the box cannot run here
// (no agent binary, no Docker daemon, no root filesystem): a test skips
// with that error's text, which says why.
var ErrUnavailable = errors.New("the real-agent box cannot run here")

// Options configures Start.
type Options struct {
	// Checkout is the root of the cpilab checkout, where scripts/ is
	// (default: found upwards from the working directory).
	Checkout string
	// Agent is the upstream bosh-agent binary (default: FindAgent).
	Agent string
	// AgentID is the agent's ID (default "agent-real").
	AgentID string
	// Resolver is agent.json's Platform.Linux.DevicePathResolutionType
	// ("" or "identity", "virtio", …).
	Resolver string
	// Settings are extra top-level keys of the settings file (for example
	// "disks"); agent_id, mbus, env.bosh.mbus.cert, vm and blobstore are
	// set by the box unless given.
	Settings map[string]any
	// Log, when set, receives the box's progress lines (the build and start
	// figures among them).
	Log func(format string, args ...any)
}

// Box is the upstream agent in a container on a private Docker daemon,
// answering on a NATS server with mutual TLS in this process.
type Box struct {
	opts      Options
	dir       string // host: dockerd's directory and the bound directory
	host      string // the daemon, unix://…
	image     string
	container string
	checkout  string

	certs   *MbusCerts
	nats    *mbus.Embedded
	fwd     net.Listener
	fwdWG   sync.WaitGroup
	conn    *mbus.NATS
	client  *mbus.Client
	stopped bool

	// StartFigures: how long the last Start or Restart took, by step.
	Figures map[string]time.Duration
}

// Checkout finds the cpilab checkout's root (package checkout: from the
// working directory upwards, else from the running executable's).
func Checkout() (string, error) {
	c, err := checkout.Root()
	if err != nil {
		return "", fmt.Errorf("realagent: %w: %w", err, ErrUnavailable)
	}
	return c, nil
}

// FindAgent is the upstream bosh-agent binary, looked for in this order:
// $CPILAB_BOSH_AGENT; bin/bosh-agent in the checkout; an interop/ directory
// beside the checkout (../*/interop/bosh-agent), where a workspace keeps
// upstream builds. Without one the error (wrapping ErrUnavailable) says how
// to build it.
func FindAgent(checkout string) (string, error) {
	if p := os.Getenv("CPILAB_BOSH_AGENT"); p != "" {
		if fi, err := os.Stat(p); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return "", fmt.Errorf("realagent: CPILAB_BOSH_AGENT=%s is not an executable file: %w", p, ErrUnavailable)
		}
		return p, nil
	}
	if p := filepath.Join(checkout, "bin", "bosh-agent"); isExec(p) {
		return p, nil
	}
	m, _ := filepath.Glob(filepath.Join(checkout, "..", "*", "interop", "bosh-agent"))
	for _, p := range m {
		if isExec(p) {
			return filepath.Abs(p)
		}
	}
	return "", fmt.Errorf("realagent: no upstream bosh-agent binary (set CPILAB_BOSH_AGENT, or put one at bin/bosh-agent; build it from cloudfoundry/bosh-agent with `CGO_ENABLED=0 go build -mod=vendor -o bosh-agent ./main`): %w", ErrUnavailable)
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// Start builds (or takes from the cache) the box's image, starts a private
// Docker daemon, the NATS server and the agent, and waits until the agent
// answers ping. Close releases everything.
func Start(o Options) (b *Box, err error) {
	if o.Checkout == "" {
		if o.Checkout, err = Checkout(); err != nil {
			return nil, err
		}
	}
	if o.Agent == "" {
		if o.Agent, err = FindAgent(o.Checkout); err != nil {
			return nil, err
		}
	}
	if o.AgentID == "" {
		o.AgentID = "agent-real"
	}
	if err := mbus.CheckToken("agent ID", o.AgentID); err != nil {
		return nil, err
	}
	if o.Log == nil {
		o.Log = func(string, ...any) {}
	}
	if os.Geteuid() != 0 {
		return nil, fmt.Errorf("realagent: the box needs root for its Docker daemon (running as uid %d): %w", os.Geteuid(), ErrUnavailable)
	}
	// Short: the daemon's socket path has to fit in 108 bytes, so a long
	// $TMPDIR (a test's) gives way to /tmp.
	base := ""
	if len(os.TempDir()) > 40 {
		base = "/tmp"
	}
	dir, err := os.MkdirTemp(base, "cpilab-agentbox.")
	if err != nil {
		return nil, err
	}
	b = &Box{opts: o, dir: dir, checkout: o.Checkout, Figures: map[string]time.Duration{}}
	defer func() {
		if err != nil {
			b.Close()
			b = nil
		}
	}()
	t0 := time.Now()
	out, err := b.script("dockerd.sh", "start", filepath.Join(dir, "d"))
	if err != nil {
		return b, fmt.Errorf("realagent: no private Docker daemon: %v: %w", err, ErrUnavailable)
	}
	b.host = strings.TrimSpace(out)
	b.Figures["dockerd"] = time.Since(t0)
	t1 := time.Now()
	out, err = b.script("agentbox.sh", "image", b.host)
	if err != nil {
		return b, fmt.Errorf("realagent: no box image: %v: %w", err, ErrUnavailable)
	}
	b.image = strings.TrimSpace(out)
	b.Figures["image"] = time.Since(t1)

	if b.certs, err = NewMbusCerts(); err != nil {
		return b, err
	}
	if b.nats, err = mbus.StartEmbedded(mbus.EmbeddedConfig{TLS: b.certs.ServerTLS()}); err != nil {
		return b, err
	}
	if err := os.MkdirAll(b.bound(), 0o755); err != nil {
		return b, err
	}
	if err := b.forward(); err != nil {
		return b, err
	}
	if err := b.writeConfig(); err != nil {
		return b, err
	}
	if b.conn, err = mbus.Connect(mbus.NATSConfig{URL: b.nats.URL(), Name: "cpilab-director", TLS: b.certs.ClientTLS()}); err != nil {
		return b, err
	}
	if b.client, err = mbus.NewClient(mbus.ClientConfig{Transport: b.conn, DirectorUUID: "cpilab-realagent", Timeout: 10 * time.Second, TaskPollInterval: 200 * time.Millisecond, TaskTimeout: 2 * time.Minute}); err != nil {
		return b, err
	}
	t2 := time.Now()
	b.container = "agentbox-" + filepath.Base(dir)[len("cpilab-agentbox."):]
	if _, err := b.docker("run", "-d", "--name", b.container, "--hostname", "agentbox",
		"--network", "none", "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN",
		"-v", b.bound()+":/var/vcap/agentbox",
		"-v", o.Agent+":/var/vcap/bosh/bin/bosh-agent:ro",
		b.image, "/usr/local/bin/agentbox-init"); err != nil {
		return b, err
	}
	b.Figures["run"] = time.Since(t2)
	if err := b.waitReady(); err != nil {
		return b, err
	}
	b.Figures["agent"] = time.Since(t2)
	b.Figures["start"] = time.Since(t0)
	o.Log("realagent: box up in %.1f s (dockerd %.1f s, image %.1f s, agent %.1f s)",
		b.Figures["start"].Seconds(), b.Figures["dockerd"].Seconds(), b.Figures["image"].Seconds(), b.Figures["agent"].Seconds())
	return b, nil
}

// bound is the host directory bound at /var/vcap/agentbox.
func (b *Box) bound() string { return filepath.Join(b.dir, "box") }

// SettingsPath is the settings file the agent reads (agent.json's File
// source), in the container.
const SettingsPath = "/var/vcap/agentbox/settings.json"

// writeConfig writes agent.json and the settings file into the bound
// directory.
func (b *Box) writeConfig() error {
	linux := map[string]any{
		"SkipDiskSetup":                 true,
		"UseDefaultTmpDir":              true,
		"UsePreformattedPersistentDisk": true,
		"BindMountPersistentDisk":       true,
	}
	if b.opts.Resolver != "" {
		linux["DevicePathResolutionType"] = b.opts.Resolver
	}
	cfg := map[string]any{
		"Platform": map[string]any{"Linux": linux},
		"Infrastructure": map[string]any{"Settings": map[string]any{
			"Sources":     []any{map[string]any{"Type": "File", "SettingsPath": SettingsPath}},
			"UseRegistry": false,
		}},
	}
	if err := writeJSON(filepath.Join(b.bound(), "agent.json"), cfg); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(b.bound(), "settings.json")); err == nil {
		return nil
	}
	return b.WriteSettings(b.opts.Settings)
}

// WriteSettings rewrites the settings file with extra's keys over the
// box's own (agent_id, mbus, env.bosh.mbus.cert, vm, blobstore, disks).
func (b *Box) WriteSettings(extra map[string]any) error {
	s := map[string]any{
		"agent_id":  b.opts.AgentID,
		"vm":        map[string]any{"name": "vm-" + b.opts.AgentID},
		"mbus":      "nats://127.0.0.1:4222",
		"ntp":       []string{},
		"blobstore": map[string]any{"provider": "local", "options": map[string]any{"blobstore_path": "/var/vcap/data/blobs"}},
		"networks":  map[string]any{},
		"disks":     map[string]any{"system": "/dev/sda", "persistent": map[string]any{}},
		"env":       map[string]any{"bosh": map[string]any{"mbus": map[string]any{"cert": b.certs.AgentEnvCert()}}},
	}
	for k, v := range extra {
		s[k] = v
	}
	return writeJSON(filepath.Join(b.bound(), "settings.json"), s)
}

// Settings is the settings the agent was given (as WriteSettings wrote it).
func (b *Box) Settings() (map[string]any, error) {
	raw, err := os.ReadFile(filepath.Join(b.bound(), "settings.json"))
	if err != nil {
		return nil, err
	}
	var s map[string]any
	return s, json.Unmarshal(raw, &s)
}

func writeJSON(p string, v any) error {
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

// forward accepts the container's mbus connections on the bound unix
// socket and carries each to the NATS server on this machine's loopback.
func (b *Box) forward() error {
	l, err := net.Listen("unix", filepath.Join(b.bound(), "nats.sock"))
	if err != nil {
		return fmt.Errorf("realagent: mbus socket: %w", err)
	}
	b.fwd = l
	addr := strings.TrimPrefix(b.nats.URL(), "tls://")
	addr = strings.TrimPrefix(addr, "nats://")
	b.fwdWG.Add(1)
	go func() {
		defer b.fwdWG.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			b.fwdWG.Add(1)
			go func() {
				defer b.fwdWG.Done()
				defer c.Close()
				s, err := net.Dial("tcp", addr)
				if err != nil {
					return
				}
				defer s.Close()
				done := make(chan struct{}, 2)
				cp := func(dst, src net.Conn) {
					_, _ = io.Copy(dst, src)
					if cw, ok := dst.(interface{ CloseWrite() error }); ok {
						_ = cw.CloseWrite()
					}
					done <- struct{}{}
				}
				go cp(s, c)
				go cp(c, s)
				<-done
				<-done
			}()
		}
	}()
	return nil
}

// waitReady pings the agent until it answers (60 s at most).
func (b *Box) waitReady() error {
	if err := b.client.WaitUntilReady(b.opts.AgentID, 60*time.Second); err != nil {
		return fmt.Errorf("realagent: the upstream agent did not answer ping: %w; its last log lines:\n%s", err, b.Logs(30))
	}
	return nil
}

// AgentID is the agent's ID.
func (b *Box) AgentID() string { return b.opts.AgentID }

// Client is the Director's side of the mbus to the agent.
func (b *Box) Client() *mbus.Client { return b.client }

// MbusTLS is a client's TLS for the box's NATS server, and MbusURL its
// address on this machine: a reference agent can answer on the same bus.
func (b *Box) MbusTLS() *MbusCerts { return b.certs }

// MbusURL is the NATS server's address on this machine.
func (b *Box) MbusURL() string { return b.nats.URL() }

// Exec runs a command in the container and returns its standard output;
// a non-zero exit is an error holding its standard error.
func (b *Box) Exec(args ...string) (string, error) {
	return b.docker(append([]string{"exec", b.container}, args...)...)
}

// Sh runs a shell command line in the container.
func (b *Box) Sh(script string) (string, error) { return b.Exec("/bin/sh", "-c", script) }

// Restart restarts the container (a VM reboot: the agent starts again on
// the same files) and waits until the agent answers.
func (b *Box) Restart() error {
	t0 := time.Now()
	if _, err := b.docker("restart", "-t", "5", b.container); err != nil {
		return err
	}
	if err := b.waitReady(); err != nil {
		return err
	}
	b.Figures["restart"] = time.Since(t0)
	return nil
}

// SetResolver rewrites agent.json with another device path resolver and
// restarts the agent on it (the links and files stay).
func (b *Box) SetResolver(resolver string) error {
	b.opts.Resolver = resolver
	if err := b.writeConfig(); err != nil {
		return err
	}
	return b.Restart()
}

// Logs is the agent's log (the container's output), the last n lines.
func (b *Box) Logs(n int) string {
	cmd := exec.Command("docker", "-H", b.host, "logs", "--tail", fmt.Sprint(n), b.container)
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// Close stops the agent, the daemon and the NATS server and removes the
// box's files. It is safe to call more than once.
func (b *Box) Close() {
	if b == nil || b.stopped {
		return
	}
	b.stopped = true
	if b.client != nil {
		_ = b.client.Close()
	}
	if b.conn != nil {
		_ = b.conn.Close()
	}
	if b.container != "" && b.host != "" {
		_, _ = b.docker("rm", "-f", b.container)
	}
	if b.host != "" {
		_, _ = b.script("dockerd.sh", "stop", filepath.Join(b.dir, "d"))
	}
	if b.fwd != nil {
		_ = b.fwd.Close()
	}
	if b.nats != nil {
		b.nats.Shutdown()
	}
	b.fwdWG.Wait()
	_ = os.RemoveAll(b.dir)
}

func (b *Box) docker(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", append([]string{"-H", b.host}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("realagent: docker %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

func (b *Box) script(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(b.checkout, "scripts", name), args...)
	// Each box's container would otherwise be a full copy of the image.
	cmd.Env = append(os.Environ(), "CPILAB_DOCKERD_STORAGE=auto")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	for _, l := range strings.Split(strings.TrimSpace(stderr.String()), "\n") {
		if strings.HasPrefix(l, "agentbox.sh: ") && strings.Contains(l, " in ") {
			b.opts.Log("%s", l)
		}
	}
	if err != nil {
		return stdout.String(), fmt.Errorf("scripts/%s %s: %v: %s", name, args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}
