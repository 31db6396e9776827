package csi

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Modes of the driver: which services one process serves.
const (
	ModeController = "controller"
	ModeNode       = "node"
	ModeAll        = "all"
)

// Mounter modes (as the FlexVolume driver's).
const (
	MounterReal   = "real"
	MounterVMRoot = "vmroot"
)

// DriverName is the CSI driver's name (GetPluginInfo, the StorageClass's
// provisioner).
const DriverName = "bosh.csi.cpilab.io"

// TopologyKeyAZ is the topology segment naming a BOSH availability zone.
const TopologyKeyAZ = "topology.bosh.io/az"

// StorageClass parameters CreateVolume understands.
const (
	// ParamDiskPool names the disk pool (a disk_types entry of the cloud
	// config) the disk is created from.
	ParamDiskPool = "diskPool"
	// ParamDeployment names the deployment the disk is created in (default
	// Config.Deployment).
	ParamDeployment = "deployment"
	// ParamFSType is the filesystem the node makes on a blank disk
	// (csi.storage.k8s.io/fstype is the sidecar's name for it).
	ParamFSType = "fsType"
)

// Publish context keys ControllerPublishVolume returns.
const (
	PublishDevice  = "devicePath"
	PublishDiskCID = "diskCID"
)

// Config is bosh-csi's config file (JSON).
type Config struct {
	// Director says how the controller reaches the Director (controller
	// and all modes only; the node never calls it).
	Director DirectorConfig `json:"director"`
	// Deployment is the deployment CreateVolume creates disks in, unless a
	// StorageClass says ParamDeployment.
	Deployment string `json:"deployment,omitempty"`
	// DiskPool is the disk pool used when a StorageClass names none.
	DiskPool string `json:"disk_pool,omitempty"`
	// DefaultAZ is the AZ of a volume whose request names no topology.
	DefaultAZ string `json:"default_az,omitempty"`
	// DefaultSizeMiB is the size of a volume whose request gives no
	// capacity. Default 1024.
	DefaultSizeMiB int `json:"default_size_mib,omitempty"`
	// Resize says the Director grows dynamic disks (POST
	// /dynamic_disks/:name/resize, a cpilab extension): the controller
	// then declares EXPAND_VOLUME. Default false, as upstream's Director
	// has no resize.
	Resize bool `json:"resize,omitempty"`
	// TaskTimeoutSeconds bounds each Director call. Default 300.
	TaskTimeoutSeconds int `json:"task_timeout_seconds,omitempty"`

	// Node is the BOSH instance this node plugin runs on (node and all
	// modes).
	Node NodeConfig `json:"node"`
	// Mounter is MounterReal (default) or MounterVMRoot.
	Mounter string `json:"mounter,omitempty"`
	// AttachWaitSeconds bounds NodeStageVolume's wait for the agent's link.
	// Default 30.
	AttachWaitSeconds int `json:"attach_wait_seconds,omitempty"`
	// MaxVolumesPerNode is NodeGetInfo's max_volumes_per_node (0: no
	// limit said).
	MaxVolumesPerNode int64 `json:"max_volumes_per_node,omitempty"`
}

// DirectorConfig is the Director's address and the driver's credentials:
// a UAA client (or user) holding only the bosh.dynamic-disks.* scopes.
type DirectorConfig struct {
	URL          string `json:"url"`
	CACert       string `json:"ca_cert,omitempty"` // PEM
	Client       string `json:"client"`
	ClientSecret string `json:"client_secret"`
}

// NodeConfig is the node's BOSH identity.
type NodeConfig struct {
	// InstanceID is the BOSH instance's id: the CSI node id.
	InstanceID string `json:"instance_id"`
	// AZ is the instance's availability zone: its topology.
	AZ string `json:"az,omitempty"`
	// Root is the node's filesystem root: "/" (default) on a real node,
	// the VM's root directory with mounter vmroot.
	Root string `json:"root,omitempty"`
}

// ErrConfig is wrapped by every config error.
var ErrConfig = errors.New("bosh-csi: config")

// LoadConfig reads the config file at path and checks it for mode.
func LoadConfig(path, mode string) (Config, error) {
	var c Config
	raw, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	c = c.WithDefaults()
	if err := c.Validate(mode); err != nil {
		return c, fmt.Errorf("%w: %s: %v", ErrConfig, path, err)
	}
	return c, nil
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.DefaultSizeMiB == 0 {
		c.DefaultSizeMiB = 1024
	}
	if c.TaskTimeoutSeconds == 0 {
		c.TaskTimeoutSeconds = 300
	}
	if c.AttachWaitSeconds == 0 {
		c.AttachWaitSeconds = 30
	}
	if c.Mounter == "" {
		c.Mounter = MounterReal
	}
	if c.Node.Root == "" && c.Mounter == MounterReal {
		c.Node.Root = "/"
	}
	return c
}

// Validate checks the fields mode needs, naming each one wrong.
func (c Config) Validate(mode string) error {
	var errs []error
	ctrl, node := mode == ModeController || mode == ModeAll, mode == ModeNode || mode == ModeAll
	if !ctrl && !node {
		errs = append(errs, fmt.Errorf("mode must be %s, %s or %s, not %q", ModeController, ModeNode, ModeAll, mode))
	}
	if ctrl {
		if c.Director.URL == "" {
			errs = append(errs, errors.New("director.url is required in controller mode"))
		}
		if c.Director.Client == "" {
			errs = append(errs, errors.New("director.client is required in controller mode"))
		}
		if c.Deployment == "" {
			errs = append(errs, errors.New("deployment is required in controller mode (the deployment disks are created in)"))
		}
		if c.DefaultAZ == "" {
			errs = append(errs, errors.New("default_az is required in controller mode (the AZ of a volume whose request names no topology)"))
		}
	}
	if node {
		if c.Node.InstanceID == "" {
			errs = append(errs, errors.New("node.instance_id is required in node mode (it is the CSI node id)"))
		}
		switch c.Mounter {
		case MounterReal:
		case MounterVMRoot:
			if !filepath.IsAbs(c.Node.Root) {
				errs = append(errs, fmt.Errorf("node.root must be an absolute path with mounter %q, not %q", MounterVMRoot, c.Node.Root))
			}
		default:
			errs = append(errs, fmt.Errorf("mounter must be %q or %q, not %q", MounterReal, MounterVMRoot, c.Mounter))
		}
	}
	if c.DefaultSizeMiB < 1 {
		errs = append(errs, fmt.Errorf("default_size_mib must be ≥ 1, not %d", c.DefaultSizeMiB))
	}
	if c.MaxVolumesPerNode < 0 {
		errs = append(errs, fmt.Errorf("max_volumes_per_node must be ≥ 0, not %d", c.MaxVolumesPerNode))
	}
	return errors.Join(errs...)
}
