package cpisuite

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/mbus"
	"github.com/pkg/sftp"
	"go.yaml.in/yaml/v3"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// CloudFile is the YAML description of a real cloud (`cpilab certify
// --config FILE`, read with go.yaml.in/yaml/v3):
//
//	cpi:
//	  command: [/var/vcap/packages/my_cpi/bin/cpi]  # argv of the CPI
//	  config: /etc/my_cpi/cpi.json                  # appended as -configPath FILE (optional)
//	  honours_api_version_cap: false                # see --expect-version-switch
//	stemcells:                                      # by stemcell api_version; a missing one skips its rows
//	  2: {image: /tmp/stemcell/image, cloud_properties: {architecture: x86_64}}
//	vm_cloud_properties: {instance_type: t3.small}
//	disk_cloud_properties: {type: gp3}
//	networks:
//	  default: {type: dynamic, default: [dns, gateway], cloud_properties: {subnet: subnet-1}}
//	disk_size_mib: 1024                             # default 1024
//	mbus_url: nats://user:pass@10.0.0.6:4222        # optional: where the agents' mbus is
//	ssh:                                            # optional: SFTP to the VMs (their first IP)
//	  user: root                                    # must be able to read and write the disk devices
//	  private_key_file: ~/.ssh/cpilab
//	  port: 22                                      # default 22
//	  known_hosts_file: ~/.ssh/known_hosts          # default: host keys are not checked
//	timeouts: {call: 10m, agent: 10m}
//
// Only the one CPI config is given, so the rows that need another setup
// (another debug.cpi.api_version, no registry) are skipped with the reason.
type CloudFile struct {
	CPI struct {
		Command              []string `yaml:"command"`
		Config               string   `yaml:"config"`
		HonoursAPIVersionCap bool     `yaml:"honours_api_version_cap"`
	} `yaml:"cpi"`
	Stemcells map[int]struct {
		Image           string         `yaml:"image"`
		CloudProperties map[string]any `yaml:"cloud_properties"`
	} `yaml:"stemcells"`
	VMCloudProperties   map[string]any `yaml:"vm_cloud_properties"`
	DiskCloudProperties map[string]any `yaml:"disk_cloud_properties"`
	Networks            map[string]any `yaml:"networks"`
	DiskSizeMiB         int            `yaml:"disk_size_mib"`
	MbusURL             string         `yaml:"mbus_url"`
	SSH                 *struct {
		User           string `yaml:"user"`
		PrivateKeyFile string `yaml:"private_key_file"`
		Port           int    `yaml:"port"`
		KnownHostsFile string `yaml:"known_hosts_file"`
	} `yaml:"ssh"`
	Timeouts struct {
		Call  time.Duration `yaml:"call"`
		Agent time.Duration `yaml:"agent"`
	} `yaml:"timeouts"`
}

// LoadCloudFile reads and checks a CloudFile; unknown keys are errors.
func LoadCloudFile(path string) (*CloudFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cloud file: %w", err)
	}
	var rc CloudFile
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&rc); err != nil {
		return nil, fmt.Errorf("cloud file %s: %w", path, err)
	}
	if len(rc.CPI.Command) == 0 {
		return nil, fmt.Errorf("cloud file %s: cpi.command is required", path)
	}
	if len(rc.Stemcells) == 0 {
		return nil, fmt.Errorf("cloud file %s: at least one stemcell (stemcells: {2: {image: …}}) is required", path)
	}
	return &rc, nil
}

// Config returns the suites Config the file describes: no oracle and no
// faults (a real cloud), the agents over MbusURL and the VMs over SSH when
// given.
func (rc *CloudFile) Config() (Config, error) {
	var cfg Config
	cfg.CPI.Command = rc.CPI.Command
	if rc.CPI.Config != "" {
		cfg.CPI.Command = append(append([]string(nil), rc.CPI.Command...), "-configPath", rc.CPI.Config)
	}
	cfg.CPI.HonoursAPIVersionCap = rc.CPI.HonoursAPIVersionCap
	cfg.Env.Stemcells = map[int]Stemcell{}
	for v, s := range rc.Stemcells {
		cp, err := cpiv2.NewCloudProps(orEmpty(s.CloudProperties))
		if err != nil {
			return cfg, fmt.Errorf("stemcells.%d: %w", v, err)
		}
		cfg.Env.Stemcells[v] = Stemcell{ImagePath: s.Image, CloudProperties: cp}
	}
	var err error
	if cfg.Env.VMCloudProperties, err = cpiv2.NewCloudProps(orEmpty(rc.VMCloudProperties)); err != nil {
		return cfg, fmt.Errorf("vm_cloud_properties: %w", err)
	}
	if cfg.Env.DiskCloudProperties, err = cpiv2.NewCloudProps(orEmpty(rc.DiskCloudProperties)); err != nil {
		return cfg, fmt.Errorf("disk_cloud_properties: %w", err)
	}
	if rc.Networks != nil {
		b, err := json.Marshal(rc.Networks)
		if err != nil {
			return cfg, fmt.Errorf("networks: %w", err)
		}
		if err := json.Unmarshal(b, &cfg.Env.Networks); err != nil {
			return cfg, fmt.Errorf("networks: %w", err)
		}
	}
	cfg.Env.DiskSizeMiB = rc.DiskSizeMiB
	cfg.Timeouts = Timeouts{Call: rc.Timeouts.Call, Agent: rc.Timeouts.Agent}
	if rc.MbusURL != "" {
		a, err := dialAgents(rc.MbusURL)
		if err != nil {
			return cfg, err
		}
		cfg.Agents = a
	}
	if rc.SSH != nil {
		f, err := newSSHFiles(rc.SSH.User, rc.SSH.PrivateKeyFile, rc.SSH.KnownHostsFile, rc.SSH.Port)
		if err != nil {
			return cfg, err
		}
		cfg.Files = f
	}
	return cfg, nil
}

// sshFiles opens real VMs' file systems over SSH + SFTP at their first IP.
type sshFiles struct {
	user     string
	port     int
	signer   ssh.Signer
	hostKeys ssh.HostKeyCallback
}

func newSSHFiles(user, keyFile, knownHosts string, port int) (*sshFiles, error) {
	if user == "" || keyFile == "" {
		return nil, errors.New("ssh: user and private_key_file are required")
	}
	keyFile, err := expandHome(keyFile)
	if err != nil {
		return nil, err
	}
	pem, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("ssh.private_key_file: %w", err)
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		return nil, fmt.Errorf("ssh.private_key_file %s: %w", keyFile, err)
	}
	hk := ssh.InsecureIgnoreHostKey()
	if knownHosts != "" {
		p, err := expandHome(knownHosts)
		if err != nil {
			return nil, err
		}
		if hk, err = knownhosts.New(p); err != nil {
			return nil, fmt.Errorf("ssh.known_hosts_file: %w", err)
		}
	}
	if port == 0 {
		port = 22
	}
	return &sshFiles{user: user, port: port, signer: signer, hostKeys: hk}, nil
}

func expandHome(p string) (string, error) {
	rest, ok := strings.CutPrefix(p, "~/")
	if !ok {
		return p, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(home, rest), nil
}

func (f *sshFiles) Open(ctx context.Context, vm VMAccess) (VMFS, error) {
	if vm.IP == "" {
		return nil, fmt.Errorf("VM %s: no IP address known (give the network a static ip, or use a CPI at api_version 2+)", vm.VMCID)
	}
	addr := net.JoinHostPort(vm.IP, strconv.Itoa(f.port))
	conn, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{User: f.user, Auth: []ssh.AuthMethod{ssh.PublicKeys(f.signer)},
		HostKeyCallback: f.hostKeys, Timeout: 30 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("ssh %s@%s: %w", f.user, addr, err)
	}
	c, err := sftp.NewClient(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("sftp on %s: %w", addr, err)
	}
	return SFTPFS(c, closers{c, conn}), nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

// mbusAgents reaches agents on an external mbus.
type mbusAgents struct{ c *mbus.Client }

func dialAgents(url string) (mbusAgents, error) {
	tr, err := mbus.Connect(mbus.NATSConfig{URL: url, Name: "cpilab-certify"})
	if err != nil {
		return mbusAgents{}, fmt.Errorf("mbus_url: %w", err)
	}
	c, err := mbus.NewClient(mbus.ClientConfig{Transport: tr, DirectorUUID: "cpilab-certify", PingTimeout: 2 * time.Second})
	if err != nil {
		tr.Close()
		return mbusAgents{}, fmt.Errorf("mbus_url: %w", err)
	}
	return mbusAgents{c}, nil
}

func (a mbusAgents) Ping(ctx context.Context, agentID string) error {
	timeout := 10 * time.Minute
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	return a.c.WaitUntilReady(agentID, timeout)
}

func (a mbusAgents) Run(ctx context.Context, agentID, method string, args ...any) (json.RawMessage, error) {
	return a.c.Run(agentID, method, args...)
}

type closers []io.Closer

func (cs closers) Close() error {
	var errs []error
	for _, c := range cs {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// SFTPFS is a VMFS over an SFTP session. Close closes closer (which must
// end the session, e.g. the SSH connection and the SFTP client), or the
// client itself when closer is nil.
func SFTPFS(c *sftp.Client, closer io.Closer) VMFS {
	if closer == nil {
		closer = c
	}
	return sftpFS{c: c, closer: closer}
}

type sftpFS struct {
	c      *sftp.Client
	closer io.Closer
}

func (s sftpFS) Readlink(p string) (string, error) { return s.c.ReadLink(p) }

// WriteAt writes into a file (a device, or a file on a directory disk,
// created when absent) without truncating it.
func (s sftpFS) WriteAt(p string, data []byte, off int64) error {
	f, err := s.c.OpenFile(p, os.O_WRONLY|os.O_CREATE)
	if err != nil {
		return err
	}
	if _, err := f.WriteAt(data, off); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (s sftpFS) ReadAt(p string, n int, off int64) ([]byte, error) {
	f, err := s.c.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := make([]byte, n)
	m, err := f.ReadAt(buf, off)
	if m == n {
		return buf, nil
	}
	return buf[:m], err
}

func (s sftpFS) Close() error { return s.closer.Close() }
