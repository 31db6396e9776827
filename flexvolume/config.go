package flexvolume

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/cpilab/cpilab/internal/strictjson"
)

// ConfigFileName is the driver's config file, beside the executable.
const ConfigFileName = "bosh-disk.json"

// ConfigEnv, when set, names the config file instead.
const ConfigEnv = "BOSH_FLEXVOLUME_CONFIG"

// Mounter modes.
const (
	// MounterReal runs mount, umount, blkid and mkfs on the node.
	MounterReal = "real"
	// MounterVMRoot treats the node's filesystem as a cpilab VM root: paths
	// are joined under Node.Root, mkfs and mount are simulated on the
	// disk's backing file, and mounts are recorded in MountTableFile inside
	// the root (docs/flexvolume.md).
	MounterVMRoot = "vmroot"
)

// Config is the driver's config file (JSON).
type Config struct {
	// Director says how to reach the BOSH Director.
	Director DirectorConfig `json:"director"`
	// Nodes maps Kubernetes node names to BOSH instances (required for
	// attach, isattached, detach).
	Nodes map[string]Node `json:"nodes"`
	// Node is the node this copy of the driver is installed on: the one
	// waitforattach, mountdevice, mount and unmount act on. Required in
	// vmroot mode (to find the root); optional with the real mounter.
	Node string `json:"node,omitempty"`
	// DiskPool is the disk_pool_name provide uses unless the volume's
	// options say "diskPool" (required unless every volume says it).
	DiskPool string `json:"disk_pool,omitempty"`
	// DiskSizeMiB is the disk_size provide uses unless the options say
	// "diskSizeMiB". Default 1024.
	DiskSizeMiB int `json:"disk_size_mib,omitempty"`
	// Mounter is MounterReal (default) or MounterVMRoot.
	Mounter string `json:"mounter,omitempty"`
	// KubeletDir is the kubelet's root directory, under which the device
	// mount paths live. Default /var/lib/kubelet.
	KubeletDir string `json:"kubelet_dir,omitempty"`
	// LogFile receives the driver's log. Default bosh-disk.log beside the
	// config file.
	LogFile string `json:"log_file,omitempty"`
	// TaskTimeoutSeconds bounds each Director task. Default 300.
	TaskTimeoutSeconds int `json:"task_timeout_seconds,omitempty"`
	// AttachWaitSeconds bounds waitforattach's wait for the device link.
	// Default 30.
	AttachWaitSeconds int `json:"attach_wait_seconds,omitempty"`
	// Resize says the Director grows dynamic disks (POST
	// /dynamic_disks/:name/resize, a cpilab extension upstream's Director
	// does not have): init then declares requiresFSResize and expandvolume
	// and expandfs grow the volume. Default false: both answer "Not
	// supported", as they must against an upstream Director.
	Resize bool `json:"resize,omitempty"`
}

// DirectorConfig is the Director's address and the driver's credentials
// (a user or UAA client holding the dynamic disk scopes).
type DirectorConfig struct {
	URL          string `json:"url"`
	CACert       string `json:"ca_cert,omitempty"` // PEM
	Client       string `json:"client"`
	ClientSecret string `json:"client_secret"`
}

// Node is one Kubernetes node: the BOSH instance it runs on.
type Node struct {
	// InstanceID is the BOSH instance's ID (what provide's instance_id
	// names).
	InstanceID string `json:"instance_id"`
	// Root is the node's filesystem root: "/" on a real node, the VM's
	// root directory in vmroot mode.
	Root string `json:"root,omitempty"`
}

// ErrConfig is wrapped by every config error.
var ErrConfig = errors.New("flexvolume: config")

// LoadConfig reads and checks the config file at path.
func LoadConfig(path string) (Config, error) {
	var c Config
	raw, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	if err := strictjson.Decode(raw, &c, strictjson.Options{DisallowUnknownFields: true}); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	c = c.withDefaults(path)
	if err := c.validate(); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	return c, nil
}

// ConfigPath is where the driver at executable reads its config.
func ConfigPath(executable string) string {
	if p := os.Getenv(ConfigEnv); p != "" {
		return p
	}
	return filepath.Join(filepath.Dir(executable), ConfigFileName)
}

func (c Config) withDefaults(path string) Config {
	if c.DiskSizeMiB == 0 {
		c.DiskSizeMiB = 1024
	}
	if c.Mounter == "" {
		c.Mounter = MounterReal
	}
	if c.KubeletDir == "" {
		c.KubeletDir = "/var/lib/kubelet"
	}
	if c.LogFile == "" {
		c.LogFile = filepath.Join(filepath.Dir(path), "bosh-disk.log")
	}
	if c.TaskTimeoutSeconds == 0 {
		c.TaskTimeoutSeconds = 300
	}
	if c.AttachWaitSeconds == 0 {
		c.AttachWaitSeconds = 30
	}
	for name, n := range c.Nodes {
		if n.Root == "" && c.Mounter == MounterReal {
			n.Root = "/"
			c.Nodes[name] = n
		}
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.Director.URL == "" {
		errs = append(errs, errors.New("director.url is required"))
	}
	switch c.Mounter {
	case MounterReal:
	case MounterVMRoot:
		if c.Node == "" {
			errs = append(errs, errors.New(`"node" is required with mounter "vmroot"`))
		}
		for _, name := range c.NodeNames() {
			switch root := c.Nodes[name].Root; {
			case !filepath.IsAbs(root):
				errs = append(errs, fmt.Errorf("nodes.%s.root must be an absolute path with mounter \"vmroot\", not %q", name, root))
			case filepath.Clean(root) == "/":
				errs = append(errs, fmt.Errorf("nodes.%s.root is %q, the host's own root: mounter \"vmroot\" needs a VM's root directory", name, root))
			}
		}
	default:
		errs = append(errs, fmt.Errorf("mounter must be %q or %q, not %q", MounterReal, MounterVMRoot, c.Mounter))
	}
	if _, ok := c.Nodes[c.Node]; c.Node != "" && !ok {
		errs = append(errs, fmt.Errorf("node %q is not in nodes", c.Node))
	}
	for _, name := range c.NodeNames() {
		if c.Nodes[name].InstanceID == "" {
			errs = append(errs, fmt.Errorf("nodes.%s.instance_id is required", name))
		}
	}
	if c.TaskTimeoutSeconds < 1 {
		errs = append(errs, fmt.Errorf("task_timeout_seconds must be ≥ 1, not %d", c.TaskTimeoutSeconds))
	}
	if c.AttachWaitSeconds < 1 {
		errs = append(errs, fmt.Errorf("attach_wait_seconds must be ≥ 1, not %d", c.AttachWaitSeconds))
	}
	if c.DiskSizeMiB < 1 {
		errs = append(errs, fmt.Errorf("disk_size_mib must be ≥ 1, not %d", c.DiskSizeMiB))
	}
	return errors.Join(errs...)
}

// NodeNames lists the configured nodes, sorted.
func (c Config) NodeNames() []string {
	out := make([]string, 0, len(c.Nodes))
	for n := range c.Nodes {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
