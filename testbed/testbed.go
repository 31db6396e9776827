package testbed

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/agent/boothook"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/dockerapi"
	"github.com/cpilab/cpilab/fakeiaas/refcpi"
	"github.com/cpilab/cpilab/fakeiaas/vmssh"
	"github.com/cpilab/cpilab/mbus"
	"golang.org/x/crypto/ssh"
)

// Config configures Start. Every field has a default.
type Config struct {
	// Dir holds the fakeiaas data (VM roots, disk files), the cpi.json files
	// and the stemcell images. Default: a new temporary directory that Close
	// removes. A given Dir is kept.
	Dir string
	// Store is the fakeiaas store: "memory" (default: fastest; CPI
	// processes reach the state over HTTP all the same) or "sqlite"
	// (durable in Dir).
	Store string
	// NoAgents leaves VMs without agents (default: each VM boots the
	// reference agent in-process on its root).
	NoAgents bool
	// NoSSH leaves out the SSH/SFTP server (default: one on 127.0.0.1 with
	// a generated ed25519 client key).
	NoSSH bool
	// AgentBootTimeout bounds how long a booting VM's agent keeps trying to
	// read its settings (the CPI may write the registry after create_vm
	// returns; default 30 s).
	AgentBootTimeout time.Duration
	// AgentDeviceTimeout bounds the agent's device path resolution (default
	// 10 s).
	AgentDeviceTimeout time.Duration
	// RegistryUser and RegistryPassword protect the registry (default
	// "cpilab" and a random password).
	RegistryUser, RegistryPassword string
	// Listen is fakeiaas's loopback address (default "127.0.0.1:0", a free
	// port).
	Listen string
	// Docker also serves fakeiaas's Docker Engine API face on a unix
	// socket in Dir (Testbed.Docker), for the BOSH Docker CPI
	// (DockerSuiteConfig), and boots every VM's agent as a docker
	// stemcell's: settings from the file the Docker CPI writes into the VM,
	// persistent disks as bind-mounted directories. Default false.
	Docker bool
	// DockerDefect breaks the Docker face on purpose (tests that show a
	// certification catches a lying cloud). Default none.
	DockerDefect dockerapi.Defect
	// DockerMaxAPIVersion, when set, makes the Docker face serve API
	// versions up to it, as a daemon of that version does (Docker 20.10:
	// "1.41"), and the Docker CPI config ask for it when it is below
	// DockerAPIVersion. Default: the face's own range.
	DockerMaxAPIVersion string
	// PollInterval is how often the testbed's waits look again: the agents'
	// boot retries and device polls, and the mbus client's get_task polls
	// (default 5 ms: everything is local, and a certify run makes hundreds
	// of such waits). PingTimeout bounds one ping of a booting agent
	// (default 20 ms; the wait goes on until the agent timeout).
	PollInterval, PingTimeout time.Duration
}

// Testbed is an embedded fake cloud on loopback: fakeiaas (HTTP API,
// registry, metadata service, oracle, faults), an embedded NATS mbus, one
// reference agent per VM, and an SSH/SFTP server onto the VM roots.
type Testbed struct {
	cfg    Config
	ownDir bool
	IaaS   *fakeiaas.Server
	NATS   *mbus.Embedded
	SSH    *vmssh.Server
	// Docker is the Docker face (nil unless Config.Docker).
	Docker *dockerapi.Server
	// dockerProxy is the proxy to a real Docker daemon
	// (RealDockerSuiteConfig), nil when none.
	dockerProxy *DockerProxy
	signer      ssh.Signer
	keys        *vmssh.AuthorizedKeys
	agents      *agent.Fleet // nil with NoAgents
	mbusTr      *mbus.NATS
	mbusCli     *mbus.Client

	mu      sync.Mutex
	configs map[CPISetup]string // guarded by mu
}

// Start starts everything. Close it when done.
func Start(cfg Config) (tb *Testbed, err error) {
	if cfg.Store == "" {
		cfg.Store = "memory"
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 5 * time.Millisecond
	}
	if cfg.PingTimeout <= 0 {
		cfg.PingTimeout = 20 * time.Millisecond
	}
	if cfg.AgentBootTimeout == 0 {
		cfg.AgentBootTimeout = 30 * time.Second
	}
	if cfg.AgentDeviceTimeout == 0 {
		cfg.AgentDeviceTimeout = 10 * time.Second
	}
	if cfg.RegistryUser == "" {
		cfg.RegistryUser = "cpilab"
	}
	if cfg.RegistryPassword == "" {
		cfg.RegistryPassword = randomHex(12)
	}
	t := &Testbed{cfg: cfg, configs: map[CPISetup]string{}}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	if t.cfg.Dir == "" {
		d, err := os.MkdirTemp("", "cpilab-testbed-")
		if err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
		t.cfg.Dir, t.ownDir = d, true
	}
	for _, d := range []string{"fakeiaas", "config", "stemcells"} {
		if err := os.MkdirAll(filepath.Join(t.cfg.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("testbed: %w", err)
		}
	}
	if t.NATS, err = mbus.StartEmbedded(mbus.EmbeddedConfig{}); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	var hooks fakeiaas.VMHooks
	if !cfg.NoAgents {
		// Each agent fetches its settings over HTTP and joins the NATS URL
		// they name, as an agent on a real VM does.
		t.agents = agent.NewFleet(nil)
		base := agent.Config{DeviceTimeout: cfg.AgentDeviceTimeout, DevicePollInterval: cfg.PollInterval}
		if cfg.Docker {
			base = dockerAgentBase(base)
		}
		hooks = boothook.New(boothook.Config{Fleet: t.agents, Base: base,
			Boot: agent.BootOptions{Retry: cfg.PollInterval, Timeout: cfg.AgentBootTimeout}})
	}
	t.IaaS, err = fakeiaas.Serve(fakeiaas.ServeConfig{
		DataDir: filepath.Join(t.cfg.Dir, "fakeiaas"), Store: cfg.Store, Hooks: hooks,
		RegistryUser: cfg.RegistryUser, RegistryPassword: cfg.RegistryPassword, Listen: cfg.Listen,
	})
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	// A cloud reopened from Dir holds running VMs: their agents come up too.
	if err := t.IaaS.Cloud().BootAll(); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	if cfg.Docker {
		if err := t.startDocker(); err != nil {
			return nil, err
		}
	}
	if t.mbusTr, err = mbus.Connect(mbus.NATSConfig{URL: t.NATS.URL(), Name: "cpilab-director"}); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	if t.mbusCli, err = mbus.NewClient(mbus.ClientConfig{Transport: t.mbusTr, DirectorUUID: "cpilab-" + randomHex(4),
		TaskPollInterval: cfg.PollInterval, Timeout: 30 * time.Second, PingTimeout: cfg.PingTimeout}); err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	if !cfg.NoSSH {
		if err := t.startSSH(); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func (t *Testbed) startSSH() error {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return fmt.Errorf("testbed: ssh key: %w", err)
	}
	if t.signer, err = ssh.NewSignerFromKey(priv); err != nil {
		return fmt.Errorf("testbed: ssh key: %w", err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "cpilab testbed")
	if err != nil {
		return fmt.Errorf("testbed: ssh key: %w", err)
	}
	if err := os.WriteFile(t.SSHKeyPath(), pem.EncodeToMemory(block), 0o600); err != nil {
		return fmt.Errorf("testbed: ssh key: %w", err)
	}
	pub := t.signer.PublicKey()
	dataDir := filepath.Join(t.cfg.Dir, "fakeiaas")
	t.SSH, err = vmssh.Start(vmssh.Config{
		Authorize: func(vmCID string, key ssh.PublicKey) bool {
			return string(key.Marshal()) == string(pub.Marshal())
		},
		RootFor: func(vmCID string) (string, bool) {
			if t.Docker != nil {
				// On the Docker face a VM CID is a container name.
				if vm, ok := t.Docker.Face().ContainerVM(vmCID); ok {
					vmCID = vm.String()
				}
			}
			root := filepath.Join(dataDir, "vms", vmCID, "root")
			if filepath.Base(vmCID) != vmCID {
				return "", false
			}
			fi, err := os.Stat(root)
			return root, err == nil && fi.IsDir()
		},
	})
	if err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	return nil
}

// SSHKeyPath is the client private key (OpenSSH PEM) that logs in to any
// VM over SFTP: `sftp -i KEY -P PORT <vm cid>@127.0.0.1` with the port of
// SSH.Addr().
func (t *Testbed) SSHKeyPath() string { return filepath.Join(t.cfg.Dir, "ssh_client_key") }

// URL is the fakeiaas base URL.
func (t *Testbed) URL() string { return t.IaaS.URL() }

// MbusURL is the embedded NATS URL the agents use.
func (t *Testbed) MbusURL() string { return t.NATS.URL() }

// Dir is the testbed's directory.
func (t *Testbed) Dir() string { return t.cfg.Dir }

// Close stops everything, halting agents first, and removes Dir when Start
// made it.
func (t *Testbed) Close() error {
	var errs []error
	if t.agents != nil {
		t.agents.StopAll()
	}
	if t.SSH != nil {
		errs = append(errs, t.SSH.Close())
	}
	if t.Docker != nil {
		errs = append(errs, t.Docker.Close())
	}
	if t.dockerProxy != nil {
		errs = append(errs, t.dockerProxy.Close())
	}
	if t.mbusCli != nil {
		errs = append(errs, t.mbusCli.Close())
	}
	if t.mbusTr != nil {
		errs = append(errs, t.mbusTr.Close())
	}
	if t.IaaS != nil {
		errs = append(errs, t.IaaS.Close())
	}
	if t.NATS != nil {
		t.NATS.Shutdown()
	}
	if t.ownDir {
		errs = append(errs, os.RemoveAll(t.cfg.Dir))
	}
	return errors.Join(errs...)
}

// CPISetup selects one cpi.json.
type CPISetup struct {
	// APIVersionCap is debug.cpi.api_version (0: none, the CPI's own max).
	APIVersionCap int
	// NoRegistry leaves the registry block out (the current Director).
	NoRegistry bool
}

// CPIConfig writes (once per setup) the cpi.json for the reference CPI on
// this testbed (docs/seams.md) and returns its path.
func (t *Testbed) CPIConfig(s CPISetup) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if p, ok := t.configs[s]; ok {
		return p, nil
	}
	spec := refcpi.FileSpec{URL: t.IaaS.URL(), MBus: t.NATS.URL(), APIVersionCap: s.APIVersionCap}
	if !s.NoRegistry {
		spec.RegistryEndpoint, spec.RegistryUser, spec.RegistryPassword = t.IaaS.RegistryURL(), t.cfg.RegistryUser, t.cfg.RegistryPassword
	}
	name := fmt.Sprintf("cpi-api%d", s.APIVersionCap)
	if s.NoRegistry {
		name += "-noregistry"
	}
	p := filepath.Join(t.cfg.Dir, "config", name+".json")
	if err := refcpi.WriteFileConfig(p, spec); err != nil {
		return "", fmt.Errorf("testbed: %w", err)
	}
	t.configs[s] = p
	return p, nil
}

// StemcellImage writes (once) a stemcell image of the given api_version
// (the small JSON image of docs/seams.md) whose agent uses the virtio
// device resolver, and returns its path. An api_version 1 image carries no
// api_version at all, as stemcell.MF files from before api_version 2 do.
func (t *Testbed) StemcellImage(apiVersion int) (string, error) {
	return t.StemcellImageFor(apiVersion, agent.ResolverVirtio)
}

// StemcellImageFor is StemcellImage with the agent's device resolver
// ("identity", "mapped", "virtio" or "scsi") chosen.
func (t *Testbed) StemcellImageFor(apiVersion int, resolver string) (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	p := filepath.Join(t.cfg.Dir, "stemcells", fmt.Sprintf("stemcell-api%d-%s.json", apiVersion, resolver))
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	img := map[string]any{"name": "bosh-fakeiaas-ubuntu-jammy", "version": "1.0",
		"agent": map[string]any{"device_path_resolution_type": resolver}}
	if apiVersion > 1 {
		img["api_version"] = apiVersion
	}
	b, err := json.Marshal(img)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		return "", fmt.Errorf("testbed: %w", err)
	}
	return p, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
