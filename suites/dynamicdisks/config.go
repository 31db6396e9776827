package dynamicdisks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Config is everything the suite needs to certify the dynamic disks API of
// one running director. URL, Admin and Disks are required; every optional
// piece that is missing turns the specs that need it into skips that say
// why (never passes).
type Config struct {
	// URL is the director's base URL, e.g. "https://127.0.0.1:25555".
	URL string
	// CACertPEM is the CA certificate (PEM) the director's TLS certificate
	// is checked against. Empty: the system roots, unless Insecure.
	CACertPEM []byte
	// Insecure skips TLS certificate verification. Default false.
	Insecure bool

	// Admin are credentials with bosh.admin: the suite uses them to set up
	// (stemcell, cloud config, deployments), to read instances and to
	// clean up.
	Admin Credentials
	// Disks are credentials holding only the dynamic-disk scopes
	// (bosh.dynamic-disks.create, .attach, .detach, .list and .delete).
	// Every dynamic disk call of the suite is made with them, and the scope
	// specs check they allow nothing else (401). Tasks are read as Admin:
	// upstream lets disk-only tokens read none.
	Disks Credentials
	// ScopeCredentials are credentials holding exactly one scope set, by
	// its ScopeSets name (each bosh.dynamic-disks.* scope alone,
	// "create+attach", bosh.read, bosh.admin): the scope matrix checks
	// every route with each. A set without credentials is not checked, and
	// the matrix says so.
	ScopeCredentials map[string]Credentials

	// Deployment names an existing deployment whose instances the suite
	// provides disks to. Empty: the suite deploys its own (see Setup) and
	// deletes it at the end.
	Deployment string
	// Instances are the IDs of two instances (with VMs) of Deployment to
	// use. Empty: the first two instances of Deployment that have a VM.
	Instances []string
	// Setup is how the suite deploys its own deployment when Deployment is
	// empty, and how the queue spec deploys a slow one.
	Setup Setup
	// SecondDeployment names another deployment with instances (with VMs)
	// that the model specs provide and attach across deployments to. Empty
	// with Deployment empty: the suite deploys a second one of its own
	// (see Setup.SecondInstances); empty with Deployment set: the
	// cross-deployment spec is not checked.
	SecondDeployment string
	// Explore bounds the explore spec's random lifecycles (default: one
	// seeded lifecycle of about 8 requests).
	Explore Explore
	// ManyDisks is how many disks the model's list spec makes at once, to
	// pass any page size of GET /dynamic_disks. Default 105.
	ManyDisks int

	// DiskPool is the disk_pool_name the suite provides disks from (a
	// disk_type of the cloud config). Default "dynamic" when the suite
	// uploads DefaultCloudConfig, else required.
	DiskPool string
	// DiskSizeMiB is the disk_size (MiB, ≥ 1, as upstream requires) of
	// provide and create requests. Default 16.
	DiskSizeMiB int
	// Concurrency is the number of concurrent provides in the race (a)
	// spec. Default 4.
	Concurrency int

	// Oracle inspects the IaaS behind the director. nil: the specs that
	// check IaaS state are skipped and say so, and the race (a) spec judges
	// by the API alone.
	Oracle Oracle
	// Links checks the agent's dynamic disk symlinks on the VMs (over SFTP,
	// or the VM's file system). nil: the symlink spec is skipped.
	Links Links
	// Gates hold IaaS operations to widen race windows and make a deploy
	// slow. nil: the race (a) spec relies on concurrency alone, and the
	// dedicated-queue spec is skipped.
	Gates Gates

	// Timeouts bound every wait. Zero fields take their defaults.
	Timeouts Timeouts
	// RunID prefixes every name the suite creates (disk names, deployment
	// names, metadata), so that runs never collide. Default: a random
	// "cpilab-dd-xxxxxxxx".
	RunID string
}

// Credentials authenticate one client: a bearer Token, or Username and
// Password traded for a token at POST /oauth/token.
type Credentials struct {
	Token              string
	Username, Password string
}

func (c Credentials) empty() bool { return c.Token == "" && c.Username == "" }

// Setup describes how the suite deploys: a stemcell to upload, a cloud
// config and a manifest.
type Setup struct {
	// StemcellLocation is a stemcell directory or .tgz on the director's
	// host (POST /stemcells {"location"}). Either it or StemcellManifest
	// is needed for the suite to deploy its own deployment; neither:
	// stemcells already uploaded are used.
	StemcellLocation string
	// StemcellManifest (stemcell.MF text) and StemcellImagePath (an image
	// path on the director's host) upload a stemcell without a tarball.
	StemcellManifest  []byte
	StemcellImagePath string
	// CloudConfig replaces the director's cloud config before the suite
	// deploys. Default DefaultCloudConfig. Set KeepCloudConfig to use the
	// director's own.
	CloudConfig     []byte
	KeepCloudConfig bool
	// Manifest returns the manifest of a deployment named name with n
	// instances, on the stemcell of operating system os. Default
	// DefaultManifest (it matches DefaultCloudConfig). The suite's own
	// deployment has three instances (two in one AZ, one in another when
	// the manifest spreads them over two AZs).
	Manifest func(name, os string, n int) []byte
	// SecondInstances is the size of the second deployment the suite
	// deploys (default 1); below 0 the suite deploys none.
	SecondInstances int
}

// Timeouts bound the suite's waits.
type Timeouts struct {
	// Task bounds waiting for one task to end (default 60 s). A disk task
	// still queued after it fails the spec: the dynamic_disks queue did
	// not start it.
	Task time.Duration
	// Deploy bounds waiting for a deploy or deployment delete (default
	// 5 min).
	Deploy time.Duration
	// Request bounds one HTTP request (default 30 s).
	Request time.Duration
	// Settle is how long the race (a) spec waits for a second held
	// create_disk before releasing the gate (default 300 ms).
	Settle time.Duration
}

// Oracle reads the IaaS behind the director (the embedded fakeiaas, or a
// cloud's own API): what really happened, never what the director says.
type Oracle interface {
	// Disk returns the IaaS disk diskCID; ok is false when there is none.
	Disk(ctx context.Context, diskCID string) (disk OracleDisk, ok bool, err error)
	// Disks lists the CIDs of every disk in the IaaS.
	Disks(ctx context.Context) ([]string, error)
}

// OracleDisk is a disk as the IaaS holds it.
type OracleDisk struct {
	// AttachedTo is the CID of the VM the disk is attached to; "" when
	// detached.
	AttachedTo string
	// Metadata is the disk's metadata (tags).
	Metadata map[string]string
}

// Links checks the agent's dynamic disk symlinks (the agent
// links /var/vcap/data/dynamic_disks/<disk_cid>).
type Links interface {
	// DynamicDiskLink returns where the VM's link for diskCID points;
	// exists is false when there is no link.
	DynamicDiskLink(ctx context.Context, vm VM, diskCID string) (target string, exists bool, err error)
}

// VM names an instance's VM for Links.
type VM struct {
	InstanceID, VMCID, AgentID string
}

// Gates hold IaaS operations until released.
type Gates interface {
	// Hold makes every later call of op (OpCreateDisk, OpCreateVM) wait
	// until the gate is released.
	Hold(ctx context.Context, op string) (Gate, error)
}

// Gate is one held operation.
type Gate interface {
	// Held is the number of calls waiting at the gate now.
	Held(ctx context.Context) (int, error)
	// Release lets every held and later call through.
	Release(ctx context.Context) error
}

// The operations Gates.Hold is asked for (CPI method names).
const (
	OpCreateDisk = "create_disk"
	OpCreateVM   = "create_vm"
)

// DefaultCloudConfig is the cloud config the suite uploads when it deploys
// its own deployment: two AZs, a vm_type, a network and the disk_type
// "dynamic" (16 MiB).
var DefaultCloudConfig = CloudConfig("z1", "z2")

// CloudConfig is a cloud config with the given AZs, one VM type
// ("default"), the disk type "dynamic" and a dynamic network spanning the
// AZs.
func CloudConfig(azs ...string) []byte {
	var b strings.Builder
	b.WriteString("azs:\n")
	for _, az := range azs {
		fmt.Fprintf(&b, "- name: %s\n  cloud_properties: {}\n", az)
	}
	fmt.Fprintf(&b, `vm_types:
- name: default
  cloud_properties: {}
disk_types:
- name: dynamic
  disk_size: 16
  cloud_properties: {}
networks:
- name: default
  type: dynamic
  subnets:
  - azs: [%s]
    cloud_properties: {}
`, strings.Join(azs, ", "))
	return []byte(b.String())
}

// DefaultManifest is a deployment named name of n instances in instance
// group "dd", spread over AZs z1 and z2, on the newest stemcell of os,
// matching DefaultCloudConfig.
func DefaultManifest(name, os string, n int) []byte { return Manifest(name, os, n, "z1", "z2") }

// Manifest is a deployment named name of n instances in instance group
// "dd", spread over azs, on the newest stemcell of os.
func Manifest(name, os string, n int, azs ...string) []byte {
	return fmt.Appendf(nil, `name: %s
stemcells:
- alias: default
  os: %q
  version: latest
instance_groups:
- name: dd
  instances: %d
  azs: [%s]
  vm_type: default
  stemcell: default
  networks:
  - name: default
  jobs: []
update:
  canaries: 1
  max_in_flight: 1
`, name, os, n, strings.Join(azs, ", "))
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	d := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	d(&c.Timeouts.Task, 60*time.Second)
	d(&c.Timeouts.Deploy, 5*time.Minute)
	d(&c.Timeouts.Request, 30*time.Second)
	d(&c.Timeouts.Settle, 300*time.Millisecond)
	if c.Concurrency <= 0 {
		c.Concurrency = 4
	}
	c.Explore = c.Explore.withDefaults()
	if c.ManyDisks <= 0 {
		c.ManyDisks = 105
	}
	if c.DiskSizeMiB <= 0 {
		c.DiskSizeMiB = 16
	}
	if c.Setup.Manifest == nil {
		c.Setup.Manifest = DefaultManifest
	}
	if c.DiskPool == "" && c.Deployment == "" && !c.Setup.KeepCloudConfig && c.Setup.CloudConfig == nil {
		c.DiskPool = "dynamic"
	}
	if c.Setup.CloudConfig == nil {
		c.Setup.CloudConfig = DefaultCloudConfig
	}
	if c.RunID == "" {
		c.RunID = randomRunID()
	}
	return c
}

// validate reports what is missing for the suite to run at all.
func (c Config) validate() error {
	var errs []error
	if c.URL == "" {
		errs = append(errs, errors.New("Config.URL is required"))
	}
	if c.Admin.empty() {
		errs = append(errs, errors.New("Config.Admin credentials are required"))
	}
	if c.Disks.empty() {
		errs = append(errs, errors.New("Config.Disks credentials (dynamic-disk scopes only) are required"))
	}
	if c.DiskPool == "" {
		errs = append(errs, errors.New("Config.DiskPool is required unless the suite uploads DefaultCloudConfig"))
	}
	if len(c.Instances) == 1 {
		errs = append(errs, errors.New("Config.Instances needs two instance IDs"))
	}
	if len(c.Instances) > 0 && c.Deployment == "" {
		errs = append(errs, errors.New("Config.Instances needs Config.Deployment"))
	}
	return errors.Join(errs...)
}

func randomRunID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return "cpilab-dd-" + hex.EncodeToString(b)
}
