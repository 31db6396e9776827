package csi

import (
	"context"
	"fmt"
	"io"
	"log"
	"sync"
	"sync/atomic"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/flexvolume"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	mount "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"
)

// Version is GetPluginInfo's vendor_version.
const Version = "0.1.0"

// Backend is what the controller needs of the Director's dynamic disks
// API (a *director.Client is one).
type Backend interface {
	CreateDynamicDisk(ctx context.Context, req director.CreateDiskRequest) (string, error)
	DeleteDynamicDisk(ctx context.Context, name string) error
	AttachDynamicDisk(ctx context.Context, name, instanceID string, metadata map[string]any) (string, error)
	DetachDynamicDisk(ctx context.Context, name string) error
	ResizeDynamicDisk(ctx context.Context, name string, sizeMiB int) (string, error)
	DynamicDisks(ctx context.Context) ([]director.DiskInfo, error)
}

// Deps are the driver's collaborators; nil fields are built from the
// config.
type Deps struct {
	Backend Backend
	// Mounter and Exec act on the node (the VM root's simulation with
	// mounter vmroot).
	Mounter mount.Interface
	Exec    utilexec.Interface
	// Log receives the driver's log lines. Default io.Discard.
	Log io.Writer
	// Variant changes the driver in a legal way (the catalog's variants);
	// zero in bosh-csi.
	Variant Variant
	// Bugs deliberately break the driver (the catalog of buggy drivers
	// cpilab certify-csi is tested against); zero in bosh-csi.
	Bugs Bugs
}

// Driver is bosh-csi: the identity, controller and node services.
type Driver struct {
	csi.UnimplementedIdentityServer
	csi.UnimplementedControllerServer
	csi.UnimplementedNodeServer

	cfg  Config
	deps Deps
	log  *log.Logger
	root *flexvolume.VMRoot // nil with the real mounter
	sfm  *mount.SafeFormatAndMount
	bugs Bugs

	createCount atomic.Int64 // Bugs.CreateLeaks
	serial      sync.Mutex   // Variant.SerialController

	// locks serialises calls on one volume id (the CSI spec lets a plugin
	// answer Aborted instead; serialising makes the sidecars' retries
	// unnecessary).
	locks struct {
		sync.Mutex
		held map[string]chan struct{}
	}
}

// NewDriver returns the driver for cfg (already defaulted and validated).
func NewDriver(cfg Config, deps Deps) (*Driver, error) {
	d := &Driver{cfg: cfg, deps: deps, bugs: deps.Bugs}
	if deps.Log == nil {
		deps.Log = io.Discard
	}
	d.log = log.New(deps.Log, "bosh-csi ", log.LstdFlags|log.Lmicroseconds)
	if cfg.Mounter == MounterVMRoot {
		d.root = flexvolume.NewVMRoot(cfg.Node.Root)
		if d.deps.Mounter == nil {
			d.deps.Mounter = d.root
		}
		if d.deps.Exec == nil {
			d.deps.Exec = d.root.Exec()
		}
	}
	if d.deps.Mounter == nil {
		d.deps.Mounter = mount.New("")
	}
	if d.deps.Exec == nil {
		d.deps.Exec = utilexec.New()
	}
	d.sfm = mount.NewSafeFormatAndMount(d.deps.Mounter, d.deps.Exec)
	if d.deps.Backend == nil && cfg.Director.URL != "" {
		c, err := director.NewClient(director.ClientConfig{URL: cfg.Director.URL, CACertPEM: []byte(cfg.Director.CACert),
			Username: cfg.Director.Client, Password: cfg.Director.ClientSecret})
		if err != nil {
			return nil, fmt.Errorf("%w: director: %v", ErrConfig, err)
		}
		d.deps.Backend = c
	}
	d.locks.held = map[string]chan struct{}{}
	return d, nil
}

// lock serialises operations on key until the returned func is called
// (or fails when ctx ends first).
func (d *Driver) lock(ctx context.Context, key string) (func(), error) {
	for {
		d.locks.Lock()
		ch, busy := d.locks.held[key]
		if !busy {
			ch = make(chan struct{})
			d.locks.held[key] = ch
			d.locks.Unlock()
			return func() {
				d.locks.Lock()
				delete(d.locks.held, key)
				d.locks.Unlock()
				close(ch)
			}, nil
		}
		d.locks.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (d *Driver) taskCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Duration(d.cfg.TaskTimeoutSeconds)*time.Second)
}

// GetPluginInfo names the driver.
func (d *Driver) GetPluginInfo(context.Context, *csi.GetPluginInfoRequest) (*csi.GetPluginInfoResponse, error) {
	return &csi.GetPluginInfoResponse{Name: DriverName, VendorVersion: Version}, nil
}

// GetPluginCapabilities declares the controller service (when served)
// and topology (volumes live in one AZ).
func (d *Driver) GetPluginCapabilities(context.Context, *csi.GetPluginCapabilitiesRequest) (*csi.GetPluginCapabilitiesResponse, error) {
	svc := func(t csi.PluginCapability_Service_Type) *csi.PluginCapability {
		return &csi.PluginCapability{Type: &csi.PluginCapability_Service_{Service: &csi.PluginCapability_Service{Type: t}}}
	}
	caps := []*csi.PluginCapability{svc(csi.PluginCapability_Service_CONTROLLER_SERVICE), svc(csi.PluginCapability_Service_VOLUME_ACCESSIBILITY_CONSTRAINTS)}
	if d.cfg.Resize {
		caps = append(caps, &csi.PluginCapability{Type: &csi.PluginCapability_VolumeExpansion_{
			VolumeExpansion: &csi.PluginCapability_VolumeExpansion{Type: csi.PluginCapability_VolumeExpansion_OFFLINE}}})
	}
	return &csi.GetPluginCapabilitiesResponse{Capabilities: caps}, nil
}

// Probe is ready once built.
func (d *Driver) Probe(context.Context, *csi.ProbeRequest) (*csi.ProbeResponse, error) {
	return &csi.ProbeResponse{}, nil
}

// directorError is the package's directorError, with Bugs.DirectorDownInternal.
func (d *Driver) directorError(what string, err error) error {
	e := directorError(what, err)
	if d.bugs.DirectorDownInternal && status.Code(e) == codes.Unavailable {
		return status.Error(codes.Internal, status.Convert(e).Message())
	}
	return e
}
