package agent

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cpilab/cpilab/rt"
)

// Device path resolver types (agent.json
// Platform.Linux.DevicePathResolutionType).
const (
	ResolverIdentity = "identity"
	ResolverVirtio   = "virtio"
	ResolverMapped   = "mapped"
	ResolverSCSI     = "scsi"
)

// Resolver defaults, as upstream has them.
const (
	// DefaultDeviceTimeout bounds a resolver's polling (upstream 30 s).
	DefaultDeviceTimeout = 30 * time.Second
	// DefaultDevicePollInterval is the pause between polls (upstream 100 ms).
	DefaultDevicePollInterval = 100 * time.Millisecond
	// DefaultVirtioIDWait is how long the virtio resolver looks in
	// /dev/disk/by-id before trying the mapped resolver (upstream 500 ms).
	DefaultVirtioIDWait = 500 * time.Millisecond
)

// Resolver errors, matched with errors.Is.
var (
	// ErrDeviceTimeout: the device did not appear in time ("Timed out
	// getting real device path for …").
	ErrDeviceTimeout = errors.New("timed out getting real device path")
	// ErrAmbiguousDevice: more than one device matched the hint.
	ErrAmbiguousDevice = errors.New("more than one disk matched")
	// ErrHintUnusable: the hint lacks what the resolver needs.
	ErrHintUnusable = errors.New("hint unusable by device path resolver")
	// ErrStopped: the agent stopped while the resolver was polling.
	ErrStopped = errors.New("agent stopped")
)

// DeviceTimeoutError is a resolver that gave up; it matches ErrDeviceTimeout.
type DeviceTimeoutError struct {
	// What names the disk as upstream does (the path or ID looked for).
	What string
}

// Error is upstream's message: "Timed out getting real device path for '…'".
func (e *DeviceTimeoutError) Error() string {
	return fmt.Sprintf("Timed out getting real device path for '%s'", e.What)
}

// Is makes a DeviceTimeoutError match ErrDeviceTimeout.
func (e *DeviceTimeoutError) Is(target error) bool { return target == ErrDeviceTimeout }

// ResolverConfig configures NewResolver.
type ResolverConfig struct {
	// Type is identity (default), virtio, mapped or scsi.
	Type string
	// Root is the VM root directory on the host (required unless identity).
	Root string
	// Runtime supplies the polling clock (default rt.Real(0)).
	Runtime rt.Runtime
	// Timeout bounds polling (default DefaultDeviceTimeout, 30 s).
	Timeout time.Duration
	// PollInterval is the pause between polls (default 100 ms).
	PollInterval time.Duration
	// VirtioIDWait bounds virtio's by-id look-up before it falls back to
	// mapped (default 500 ms).
	VirtioIDWait time.Duration
	// Stopped, when set, ends polling early with ErrStopped.
	Stopped *rt.Event
}

// Resolver turns disk settings into the device path as the guest sees it
// ("/dev/sdc"), looking only inside the VM root.
type Resolver interface {
	Resolve(DiskSettings) (string, error)
}

// NewResolver returns the resolver of cfg.Type.
func NewResolver(cfg ResolverConfig) (Resolver, error) {
	if cfg.Runtime == nil {
		cfg.Runtime = rt.Real(0)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultDeviceTimeout
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultDevicePollInterval
	}
	if cfg.VirtioIDWait <= 0 {
		cfg.VirtioIDWait = DefaultVirtioIDWait
	}
	if cfg.Type == "" {
		cfg.Type = ResolverIdentity
	}
	if cfg.Type != ResolverIdentity && cfg.Root == "" {
		return nil, fmt.Errorf("agent: the %s device path resolver needs the VM root", cfg.Type)
	}
	p := poller{cfg: cfg, fs: rootFS{dir: cfg.Root}}
	switch cfg.Type {
	case ResolverIdentity:
		return identityResolver{}, nil
	case ResolverMapped:
		return mappedResolver{p}, nil
	case ResolverVirtio:
		return virtioResolver{p}, nil
	case ResolverSCSI:
		return scsiResolver{p}, nil
	}
	return nil, fmt.Errorf("agent: unknown device path resolver %q (want identity, virtio, mapped or scsi)", cfg.Type)
}

// poller repeats a look-up on the runtime clock until it finds something,
// fails for good, or times out.
type poller struct {
	cfg ResolverConfig
	fs  rootFS
}

// errNotYet is a look-up's "nothing yet, poll again".
var errNotYet = errors.New("not yet")

func (p poller) poll(what string, timeout time.Duration, try func() (string, error)) (string, error) {
	r := p.cfg.Runtime
	deadline := r.Now().Add(timeout)
	for {
		dev, err := try()
		if !errors.Is(err, errNotYet) {
			return dev, err
		}
		if !r.Now().Before(deadline) {
			return "", &DeviceTimeoutError{What: what}
		}
		if p.cfg.Stopped != nil && p.cfg.Stopped.IsSet() {
			return "", fmt.Errorf("agent: looking for %s: %w", what, ErrStopped)
		}
		r.Sleep(min(p.cfg.PollInterval, deadline.Sub(r.Now())))
	}
}

// glob matches a guest pattern inside the root, returning guest paths.
func (p poller) glob(pattern string) ([]string, error) {
	m, err := filepath.Glob(p.fs.host(pattern))
	if err != nil {
		return nil, fmt.Errorf("agent: glob %s: %w", pattern, err)
	}
	out := make([]string, 0, len(m))
	for _, h := range m {
		rel, err := filepath.Rel(p.cfg.Root, h)
		if err != nil || strings.HasPrefix(rel, "..") {
			return nil, fmt.Errorf("%w: glob %s matched %s outside the root", ErrUnsafe, pattern, h)
		}
		out = append(out, "/"+filepath.ToSlash(rel))
	}
	sort.Strings(out)
	return out, nil
}

// identityResolver returns the hint's path as given (upstream default).
type identityResolver struct{}

func (identityResolver) Resolve(d DiskSettings) (string, error) {
	if d.Path == "" {
		return "", fmt.Errorf("agent: identity resolver for disk %s: %w: no path", d.ID, ErrHintUnusable)
	}
	if err := CheckGuestPath("hint path", d.Path); err != nil {
		return "", err
	}
	return d.Path, nil
}

// mappedResolver maps /dev/sdX to the first existing of /dev/xvdX, /dev/vdX,
// /dev/sdX; any other path is used as is once it exists, following links.
type mappedResolver struct{ p poller }

func (m mappedResolver) Resolve(d DiskSettings) (string, error) {
	return m.resolve(d, m.p.cfg.Timeout)
}

func (m mappedResolver) resolve(d DiskSettings, timeout time.Duration) (string, error) {
	if d.Path == "" {
		return "", fmt.Errorf("agent: mapped resolver for disk %s: %w: no path", d.ID, ErrHintUnusable)
	}
	if err := CheckGuestPath("hint path", d.Path); err != nil {
		return "", err
	}
	candidates := []string{d.Path}
	if strings.HasPrefix(d.Path, "/dev/sd") {
		x := strings.TrimPrefix(d.Path, "/dev/sd")
		candidates = []string{"/dev/xvd" + x, "/dev/vd" + x, d.Path}
	}
	return m.p.poll(d.Path, timeout, func() (string, error) {
		for _, c := range candidates {
			if real, err := m.p.fs.resolve(c); err == nil {
				return real, nil
			}
		}
		return "", errNotYet
	})
}

// virtioResolver looks for /dev/disk/by-id/*<first 20 chars of the CID>
// (virtio serials are at most 20 characters), then falls back to mapped.
type virtioResolver struct{ p poller }

func (v virtioResolver) Resolve(d DiskSettings) (string, error) {
	if len(d.ID) >= 20 {
		dev, err := byIDResolve(v.p, d.ID[:20], v.p.cfg.VirtioIDWait)
		if err == nil || errors.Is(err, ErrAmbiguousDevice) || errors.Is(err, ErrUnsafe) || errors.Is(err, ErrStopped) {
			return dev, err
		}
	}
	return mappedResolver(v).resolve(d, v.p.cfg.Timeout)
}

// byIDResolve finds the one /dev/disk/by-id/*<id> link and follows it.
func byIDResolve(p poller, id string, timeout time.Duration) (string, error) {
	if err := checkGlobToken("disk ID", id); err != nil {
		return "", err
	}
	return p.poll(id, timeout, func() (string, error) {
		m, err := p.glob("/dev/disk/by-id/*" + id)
		if err != nil {
			return "", err
		}
		switch len(m) {
		case 0:
			return "", errNotYet
		case 1:
		default:
			return "", fmt.Errorf("agent: disk id %s: %w: %s", id, ErrAmbiguousDevice, strings.Join(m, ", "))
		}
		real, err := p.fs.resolve(m[0])
		if err != nil {
			return "", errNotYet
		}
		return real, nil
	})
}

// scsiResolver follows upstream's SCSI resolver: the hint's id (a device
// serial, found in /dev/disk/by-id as scsi_id would), else volume_id (the
// SCSI target: /sys/bus/scsi/devices/*:0:<volume_id>:0/block/*), else lun
// and host_device_id (/sys/bus/scsi/devices/<host>:0:<lun>:0/block/*).
type scsiResolver struct{ p poller }

func (s scsiResolver) Resolve(d DiskSettings) (string, error) {
	switch {
	case d.DeviceID != "":
		id := d.DeviceID
		if len(id) > 20 {
			id = id[:20]
		}
		return byIDResolve(s.p, id, s.p.cfg.Timeout)
	case d.VolumeID != "":
		if err := checkGlobToken("hint volume_id", d.VolumeID); err != nil {
			return "", err
		}
		return s.sysBlock(d.VolumeID, "/sys/bus/scsi/devices/*:0:"+d.VolumeID+":0/block/*")
	case d.Lun != "" && d.HostDeviceID != "":
		if err := checkGlobToken("hint lun", d.Lun); err != nil {
			return "", err
		}
		if err := checkGlobToken("hint host_device_id", d.HostDeviceID); err != nil {
			return "", err
		}
		return s.sysBlock(d.Lun, "/sys/bus/scsi/devices/"+d.HostDeviceID+":0:"+d.Lun+":0/block/*")
	}
	return "", fmt.Errorf("agent: scsi resolver for disk %s: %w: needs id, volume_id, or lun and host_device_id", d.ID, ErrHintUnusable)
}

func (s scsiResolver) sysBlock(what, pattern string) (string, error) {
	return s.p.poll(what, s.p.cfg.Timeout, func() (string, error) {
		m, err := s.p.glob(pattern)
		if err != nil {
			return "", err
		}
		switch len(m) {
		case 0:
			return "", errNotYet
		case 1:
		default:
			return "", fmt.Errorf("agent: scsi %s: %w: %s", what, ErrAmbiguousDevice, strings.Join(m, ", "))
		}
		dev := "/dev/" + path.Base(m[0])
		if _, err := os.Lstat(s.p.fs.host(dev)); err != nil {
			return "", errNotYet
		}
		return dev, nil
	})
}
