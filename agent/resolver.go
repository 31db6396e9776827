package agent

import (
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/cpilab/cpilab/rt"
	"github.com/cpilab/cpilab/vmroot"
)

// Device path resolver types (agent.json
// Platform.Linux.DevicePathResolutionType). As in bosh-agent's
// platform/provider.go, any other value (and "") means identity.
const (
	ResolverIdentity = "identity"
	ResolverVirtio   = "virtio"
	ResolverSCSI     = "scsi"
	ResolverISCSI    = "iscsi"
	// ResolverMapped is a cpilab extension: the mapped resolver alone (in
	// bosh-agent it is only virtio's fallback).
	ResolverMapped = "mapped"
)

// Resolver time-outs, as bosh-agent's platform/provider.go sets them.
const (
	// DefaultMappedTimeout bounds the mapped resolver (30 s).
	DefaultMappedTimeout = 30 * time.Second
	// DefaultVirtioIDTimeout bounds virtio's /dev/disk/by-id look-up before
	// it falls back to mapped (500 ms).
	DefaultVirtioIDTimeout = 500 * time.Millisecond
	// DefaultSCSIIDTimeout bounds the scsi resolver's look-up by id (50 s).
	DefaultSCSIIDTimeout = 50 * time.Second
	// DefaultSCSIVolumeIDRetries and DefaultSCSIVolumeIDWait: the scsi
	// resolver's look-up by volume_id globs up to 30 times, 500 ms apart.
	DefaultSCSIVolumeIDRetries = 30
	DefaultSCSIVolumeIDWait    = 500 * time.Millisecond
	// DefaultSCSILunTimeout bounds the look-up by lun and host_device_id (50 s).
	DefaultSCSILunTimeout = 50 * time.Second
	// DefaultISCSITimeout bounds the wait for an iSCSI multipath device (50 s).
	DefaultISCSITimeout = 50 * time.Second
	// DefaultSymlinkLunTimeout bounds the wait for the LUN symlink under
	// LunDeviceSymlinkPath before the configured resolver is tried (50 s).
	DefaultSymlinkLunTimeout = 50 * time.Second
	// DefaultDevicePollInterval is the pause between polls (100 ms).
	DefaultDevicePollInterval = 100 * time.Millisecond

	// DefaultDeviceTimeout is DefaultMappedTimeout (older name).
	DefaultDeviceTimeout = DefaultMappedTimeout
	// DefaultVirtioIDWait is DefaultVirtioIDTimeout (older name).
	DefaultVirtioIDWait = DefaultVirtioIDTimeout
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
	// ErrNoDevice: the resolver found no device and, unlike a time-out,
	// waiting longer would not help (no root SCSI disk, no vmbus device
	// with the hint's host_device_id).
	ErrNoDevice = errors.New("no such device")
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

// ResolverConfig configures NewResolver. Durations are on Runtime's clock;
// zero fields take upstream's values.
type ResolverConfig struct {
	// Type is identity (default, and any unknown value), virtio, scsi,
	// iscsi or mapped.
	Type string
	// Root is the VM root directory on the host (required unless identity).
	Root string
	// FS, when set, is Root already opened (the agent shares its own);
	// otherwise every Resolve opens Root and closes it again.
	FS *vmroot.Root
	// Runtime supplies the polling clock (default rt.Real(0)).
	Runtime rt.Runtime
	// Timeout bounds the mapped resolver (default DefaultMappedTimeout, 30 s).
	Timeout time.Duration
	// PollInterval is the pause between polls (default 100 ms).
	PollInterval time.Duration
	// VirtioIDWait bounds virtio's by-id look-up before it falls back to
	// mapped (default DefaultVirtioIDTimeout, 500 ms).
	VirtioIDWait time.Duration
	// DiskIDTransformPattern and DiskIDTransformReplacement rewrite the disk
	// CID before virtio's by-id look-up (agent.json
	// Platform.Linux.DiskIDTransformPattern/Replacement, Go regexp syntax).
	// With a pattern the result is the whole glob under /dev/disk/by-id
	// (e.g. pattern "^(.{20}).*$", replacement "virtio-${1}" for OpenStack's
	// 20-character virtio serials); without one the glob is "*<CID>".
	DiskIDTransformPattern, DiskIDTransformReplacement string
	// SCSIIDTimeout bounds the scsi look-up by id (default 50 s).
	SCSIIDTimeout time.Duration
	// SCSIVolumeIDRetries and SCSIVolumeIDWait bound the scsi look-up by
	// volume_id: that many globs, that far apart (default 30 × 500 ms).
	SCSIVolumeIDRetries int
	SCSIVolumeIDWait    time.Duration
	// SCSILunTimeout bounds the scsi look-up by lun and host_device_id
	// (default 50 s).
	SCSILunTimeout time.Duration
	// ISCSITimeout bounds the wait for an iSCSI multipath device (default 50 s).
	ISCSITimeout time.Duration
	// LunDeviceSymlinkPath, when set, is a guest directory of symlinks named
	// by LUN (Azure's "/dev/disk/azure/data/by-lun"; agent.json
	// Platform.Linux.LunDeviceSymlinkPath). As bosh-agent's provider.go, the
	// resolver of Type then becomes the fallback of a symlink-LUN resolver:
	// <LunDeviceSymlinkPath>/<hint lun>, followed to an existing device,
	// polled for up to SymlinkLunTimeout; no lun, or the time-out, falls back
	// to Type's resolver.
	LunDeviceSymlinkPath string
	// SymlinkLunTimeout bounds the symlink-LUN look-up (default 50 s).
	SymlinkLunTimeout time.Duration
	// Stopped, when set, ends polling early with ErrStopped.
	Stopped *rt.Event
	// LaxNames uses hint paths and transformed IDs as bosh-agent does,
	// without refusing unclean paths or glob patterns (Knobs.LaxNames);
	// look-ups stay inside the VM root either way.
	LaxNames bool
}

// Resolver turns disk settings into the device path as the guest sees it
// ("/dev/sdc"), looking only inside the VM root.
type Resolver interface {
	Resolve(DiskSettings) (string, error)
}

// NewResolver returns the resolver of cfg.Type, built as bosh-agent's
// platform/provider.go builds it.
func NewResolver(cfg ResolverConfig) (Resolver, error) {
	if cfg.Runtime == nil {
		cfg.Runtime = rt.Real(0)
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Timeout, DefaultMappedTimeout)
	def(&cfg.PollInterval, DefaultDevicePollInterval)
	def(&cfg.VirtioIDWait, DefaultVirtioIDTimeout)
	def(&cfg.SCSIIDTimeout, DefaultSCSIIDTimeout)
	def(&cfg.SCSIVolumeIDWait, DefaultSCSIVolumeIDWait)
	def(&cfg.SCSILunTimeout, DefaultSCSILunTimeout)
	def(&cfg.ISCSITimeout, DefaultISCSITimeout)
	def(&cfg.SymlinkLunTimeout, DefaultSymlinkLunTimeout)
	if cfg.SCSIVolumeIDRetries <= 0 {
		cfg.SCSIVolumeIDRetries = DefaultSCSIVolumeIDRetries
	}
	base, err := newTypeResolver(cfg)
	if err != nil || cfg.LunDeviceSymlinkPath == "" {
		return base, err
	}
	if cfg.Root == "" && cfg.FS == nil {
		return nil, errors.New("agent: the symlink-LUN device path resolver (LunDeviceSymlinkPath) needs the VM root")
	}
	if !cfg.LaxNames {
		if err := CheckGuestPath("LunDeviceSymlinkPath", cfg.LunDeviceSymlinkPath); err != nil {
			return nil, err
		}
	}
	return fallbackResolver{primary: symlinkLunResolver{poller{cfg: cfg}}, secondary: base}, nil
}

// newTypeResolver builds the resolver of cfg.Type (defaults applied).
func newTypeResolver(cfg ResolverConfig) (Resolver, error) {
	switch cfg.Type {
	case ResolverVirtio, ResolverSCSI, ResolverISCSI, ResolverMapped:
	default:
		return identityResolver{lax: cfg.LaxNames}, nil
	}
	if cfg.Root == "" && cfg.FS == nil {
		return nil, fmt.Errorf("agent: the %s device path resolver needs the VM root", cfg.Type)
	}
	var transform *regexp.Regexp
	if cfg.DiskIDTransformPattern != "" {
		re, err := regexp.Compile(cfg.DiskIDTransformPattern)
		if err != nil {
			return nil, fmt.Errorf("agent: DiskIDTransformPattern %q: %w", cfg.DiskIDTransformPattern, err)
		}
		transform = re
	}
	p := poller{cfg: cfg}
	switch cfg.Type {
	case ResolverMapped:
		return mappedResolver{p}, nil
	case ResolverVirtio:
		return virtioResolver{p: p, transform: transform}, nil
	case ResolverSCSI:
		return scsiResolver{p}, nil
	}
	return iscsiResolver{p}, nil
}

// poller repeats a look-up on the runtime clock until it finds something,
// fails for good, or times out.
type poller struct {
	cfg ResolverConfig
}

// errNotYet is a look-up's "nothing yet, poll again".
var errNotYet = errors.New("not yet")

// withFS runs fn on the VM root, opening it for the call unless shared.
func (p poller) withFS(fn func(*vmroot.Root) (string, error)) (string, error) {
	if p.cfg.FS != nil {
		return fn(p.cfg.FS)
	}
	fs, err := vmroot.Open(p.cfg.Root)
	if err != nil {
		return "", fmt.Errorf("agent: VM root: %w", err)
	}
	defer fs.Close()
	return fn(fs)
}

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
		if err := p.sleep(min(p.cfg.PollInterval, deadline.Sub(r.Now())), what); err != nil {
			return "", err
		}
	}
}

func (p poller) sleep(d time.Duration, what string) error {
	if p.cfg.Stopped != nil && p.cfg.Stopped.IsSet() {
		return fmt.Errorf("agent: looking for %s: %w", what, ErrStopped)
	}
	p.cfg.Runtime.Sleep(d)
	return nil
}

// followExisting is bosh-utils' ReadAndFollowLink then FileExists: the
// guest path a link finally leads to, or errNotYet.
func followExisting(fs *vmroot.Root, p string) (string, error) {
	real, err := fs.Resolve(p)
	if err != nil {
		return "", errNotYet
	}
	return real, nil
}

// identityResolver returns the hint's path as given (upstream's default).
type identityResolver struct{ lax bool }

func (i identityResolver) Resolve(d DiskSettings) (string, error) {
	if d.Path == "" {
		return "", fmt.Errorf("agent: Getting real device path for disk %s: %w: path is missing", d.ID, ErrHintUnusable)
	}
	if !i.lax {
		if err := CheckGuestPath("hint path", d.Path); err != nil {
			return "", err
		}
	}
	return d.Path, nil
}

// mappedResolver maps /dev/sdX to the first existing of /dev/xvdX, /dev/vdX,
// /dev/sdX; any other path is used once it exists, a symlink followed
// (upstream mapped_device_path_resolver.go).
type mappedResolver struct{ p poller }

func (m mappedResolver) Resolve(d DiskSettings) (string, error) {
	if d.Path == "" {
		return "", fmt.Errorf("agent: Getting real device path for disk %s: %w: path is missing", d.ID, ErrHintUnusable)
	}
	if !m.p.cfg.LaxNames {
		if err := CheckGuestPath("hint path", d.Path); err != nil {
			return "", err
		}
	}
	candidates := []string{d.Path}
	if x, ok := strings.CutPrefix(d.Path, "/dev/sd"); ok {
		candidates = []string{"/dev/xvd" + x, "/dev/vd" + x, d.Path}
	}
	return m.p.withFS(func(fs *vmroot.Root) (string, error) {
		return m.p.poll(d.Path, m.p.cfg.Timeout, func() (string, error) {
			for _, c := range candidates {
				if !fs.Exists(c) {
					continue
				}
				if len(candidates) > 1 {
					return c, nil
				}
				return fs.Resolve(c)
			}
			return "", errNotYet
		})
	})
}

// virtioResolver looks for /dev/disk/by-id/*<disk CID> (or the CID's
// transform) for 500 ms and, on any failure, falls back to the mapped
// resolver (upstream virtio_device_path_resolver.go, id_device_path_resolver.go).
type virtioResolver struct {
	p         poller
	transform *regexp.Regexp
}

func (v virtioResolver) Resolve(d DiskSettings) (string, error) {
	dev, err := v.byID(d)
	if err == nil || errors.Is(err, ErrUnsafe) || errors.Is(err, ErrStopped) {
		return dev, err
	}
	dev, err = mappedResolver{v.p}.Resolve(d)
	if err != nil {
		return "", fmt.Errorf("Resolving mapped device path: %w", err)
	}
	return dev, nil
}

func (v virtioResolver) byID(d DiskSettings) (string, error) {
	if d.ID == "" {
		return "", fmt.Errorf("%w: Disk ID is not set", ErrHintUnusable)
	}
	if len(d.ID) < 20 {
		return "", fmt.Errorf("%w: Disk ID is not the correct format", ErrHintUnusable)
	}
	pattern := "*" + d.ID
	if v.transform != nil {
		pattern = d.ID
		if v.transform.MatchString(d.ID) {
			pattern = v.transform.ReplaceAllString(d.ID, v.p.cfg.DiskIDTransformReplacement)
		}
	}
	if !v.p.cfg.LaxNames {
		if err := CheckName("by-id glob", pattern); err != nil {
			return "", err
		}
	}
	glob := "/dev/disk/by-id/" + pattern
	return v.p.withFS(func(fs *vmroot.Root) (string, error) {
		return v.p.poll(d.ID, v.p.cfg.VirtioIDWait, func() (string, error) {
			m, err := fs.Glob(glob)
			if err != nil {
				return "", fmt.Errorf("agent: glob %s: %w", glob, err)
			}
			switch len(m) {
			case 0:
				return "", errNotYet
			case 1:
				return followExisting(fs, m[0])
			}
			return "", fmt.Errorf("agent: %w glob %q while getting real device path for %q: %s", ErrAmbiguousDevice, glob, d.ID, strings.Join(m, ", "))
		})
	})
}

// scsiResolver follows upstream's scsi_device_path_resolver.go: the hint's
// id (scsi_id), else volume_id (scsi_volume_id), else lun and
// host_device_id (scsi_lun, Hyper-V).
type scsiResolver struct{ p poller }

func (s scsiResolver) Resolve(d DiskSettings) (string, error) {
	return s.p.withFS(func(fs *vmroot.Root) (string, error) {
		switch {
		case d.DeviceID != "":
			return s.byID(fs, d)
		case d.VolumeID != "":
			return s.byVolumeID(fs, d)
		case d.Lun != "" && d.HostDeviceID != "":
			return s.byLun(fs, d)
		}
		return "", fmt.Errorf("agent: scsi resolver for disk %s: %w: Neither ID, VolumeID nor (Lun, HostDeviceID) provided in disk settings", d.ID, ErrHintUnusable)
	})
}

// rescanAll writes "- - -" to every /sys/class/scsi_host/host*/scan.
func rescanAll(fs *vmroot.Root) error {
	hosts, err := fs.Glob("/sys/class/scsi_host/host*/scan")
	if err != nil {
		return err
	}
	for _, h := range hosts {
		if err := rescan(fs, h); err != nil {
			return err
		}
	}
	return nil
}

// rescan asks a SCSI host to rescan: on a fake VM, writing the scan file
// (creating it, as upstream's WriteFileString would) changes nothing else.
func rescan(fs *vmroot.Root, scan string) error {
	real, err := fs.Resolve(path.Dir(scan))
	if err != nil {
		if err := fs.MkdirAll(path.Dir(scan), 0o755); err != nil {
			return fmt.Errorf("Starting SCSI rescan: %w", err)
		}
		real = path.Dir(scan)
	}
	if err := fs.WriteFileAtomic(path.Join(real, "scan"), []byte("- - -"), 0o200); err != nil {
		return fmt.Errorf("Starting SCSI rescan: %w", err)
	}
	return nil
}

// byID: rescan every host, then the first /dev/disk/by-id/*<id without
// dashes> that leads to an existing device, for up to 50 s.
func (s scsiResolver) byID(fs *vmroot.Root, d DiskSettings) (string, error) {
	if err := rescanAll(fs); err != nil {
		return "", err
	}
	uuid := strings.ReplaceAll(d.DeviceID, "-", "")
	return s.p.poll(d.DeviceID, s.p.cfg.SCSIIDTimeout, func() (string, error) {
		disks, err := fs.Glob("/dev/disk/by-id/*" + uuid)
		if err != nil {
			return "", fmt.Errorf("Could not list disks by id: %w", err)
		}
		for _, p := range disks {
			if real, err := followExisting(fs, p); err == nil {
				return real, nil
			}
		}
		return "", errNotYet
	})
}

// byVolumeID: the SCSI host of the root disk (an sd* device at <h>:0:0:0),
// a rescan of that host, then /sys/bus/scsi/devices/<h>:0:<volume_id>:0/block/*
// up to 30 times, 500 ms apart.
func (s scsiResolver) byVolumeID(fs *vmroot.Root, d DiskSettings) (string, error) {
	roots, err := fs.Glob("/sys/bus/scsi/devices/*:0:0:0/block/*")
	if err != nil {
		return "", err
	}
	host := ""
	for _, r := range roots {
		if strings.HasPrefix(path.Base(r), "sd") {
			if parts := strings.Split(r, "/"); len(parts) > 5 {
				host, _, _ = strings.Cut(parts[5], ":")
			}
		}
	}
	if host == "" {
		return "", fmt.Errorf("agent: scsi volume_id %s for disk %s: %w: Zero length hostID (no sd* root disk at <h>:0:0:0)", d.VolumeID, d.ID, ErrNoDevice)
	}
	if err := rescan(fs, "/sys/class/scsi_host/host"+host+"/scan"); err != nil {
		return "", err
	}
	glob := "/sys/bus/scsi/devices/" + host + ":0:" + d.VolumeID + ":0/block/*"
	for i := 0; i < s.p.cfg.SCSIVolumeIDRetries; i++ {
		if i > 0 {
			if err := s.p.sleep(s.p.cfg.SCSIVolumeIDWait, d.VolumeID); err != nil {
				return "", err
			}
		}
		m, err := fs.Glob(glob)
		if err == nil && len(m) > 0 {
			return "/dev/" + path.Base(m[0]), nil
		}
	}
	return "", &DeviceTimeoutError{What: d.VolumeID}
}

// byLun: the vmbus device whose device_id is host_device_id, then a device
// at LUN lun (any host) whose /sys/class/block entry lies under that vmbus
// device, for up to 50 s (Hyper-V, Azure).
func (s scsiResolver) byLun(fs *vmroot.Root, d DiskSettings) (string, error) {
	if err := rescanAll(fs); err != nil {
		return "", err
	}
	ids, err := fs.Glob("/sys/bus/vmbus/devices/*/device_id")
	if err != nil {
		return "", fmt.Errorf("Could not list vmbus devices: %w", err)
	}
	vmbus := ""
	for _, p := range ids {
		b, err := fs.ReadFileIn(p)
		if err != nil {
			continue
		}
		if strings.TrimSpace(string(b)) == d.HostDeviceID {
			vmbus = strings.Split(p, "/")[5]
			break
		}
	}
	if vmbus == "" {
		return "", fmt.Errorf("agent: %w: Cannot find the vmbus device by host_device_id '%s'", ErrNoDevice, d.HostDeviceID)
	}
	glob := "/sys/bus/scsi/devices/*:*:*:" + d.Lun + "/block/*"
	what := fmt.Sprintf("lun '%s' and host_device_id '%s'", d.Lun, d.HostDeviceID)
	return s.p.poll(what, s.p.cfg.SCSILunTimeout, func() (string, error) {
		devs, err := fs.Glob(glob)
		if err != nil {
			return "", fmt.Errorf("Could not list disks by lun '%s': %w", d.Lun, err)
		}
		for _, p := range devs {
			base := path.Base(p)
			real, err := fs.Resolve("/sys/class/block/" + base)
			if err != nil || !strings.Contains(real, "/"+vmbus+"/") {
				continue
			}
			if dev := "/dev/" + base; fs.Exists(dev) {
				return dev, nil
			}
		}
		return "", errNotYet
	})
}

// iscsiResolver is upstream's multipath resolver: the identity resolver
// when the hint has a path, else the iSCSI resolver, which needs complete
// iscsi_settings and waits for the one multipath device under /dev/mapper
// that has no first partition yet (a new disk), for up to 50 s. cpilab's
// fake VMs run no iscsiadm: the CPI's attach lays out /dev/mapper.
type iscsiResolver struct{ p poller }

func (i iscsiResolver) Resolve(d DiskSettings) (string, error) {
	if d.Path != "" {
		return identityResolver{lax: i.p.cfg.LaxNames}.Resolve(d)
	}
	s := d.ISCSISettings
	switch {
	case s == nil || s.InitiatorName == "":
		return "", fmt.Errorf("agent: Checking disk settings of %s: %w: iSCSI InitiatorName is not set", d.ID, ErrHintUnusable)
	case s.Username == "":
		return "", fmt.Errorf("agent: Checking disk settings of %s: %w: iSCSI Username is not set", d.ID, ErrHintUnusable)
	case s.Password == "":
		return "", fmt.Errorf("agent: Checking disk settings of %s: %w: iSCSI Password is not set", d.ID, ErrHintUnusable)
	case s.Target == "":
		return "", fmt.Errorf("agent: Checking disk settings of %s: %w: iSCSI Target is not set", d.ID, ErrHintUnusable)
	}
	return i.p.withFS(func(fs *vmroot.Root) (string, error) {
		return i.p.poll("iSCSI device of "+d.ID, i.p.cfg.ISCSITimeout, func() (string, error) {
			ents, err := fs.ReadDir("/dev/mapper")
			if err != nil {
				return "", errNotYet
			}
			names := map[string]bool{}
			for _, e := range ents {
				names[e.Name()] = true
			}
			var fresh []string
			for _, e := range ents {
				n := e.Name()
				if n == "control" || strings.Contains(n, "-part") || names[n+"-part1"] {
					continue
				}
				fresh = append(fresh, "/dev/mapper/"+n)
			}
			switch len(fresh) {
			case 0:
				return "", errNotYet
			case 1:
				return fresh[0], nil
			}
			return "", fmt.Errorf("agent: iSCSI disk %s: %w: %s", d.ID, ErrAmbiguousDevice, strings.Join(fresh, ", "))
		})
	})
}

// symlinkLunResolver is bosh-agent's symlink_lun_device_path_resolver.go
// (bosh-agent #402, for Azure's NVMe data disks): the hint's lun joined to
// LunDeviceSymlinkPath, the link followed to an existing device, polled
// every PollInterval for up to SymlinkLunTimeout.
type symlinkLunResolver struct{ p poller }

func (s symlinkLunResolver) Resolve(d DiskSettings) (string, error) {
	if d.Lun == "" {
		return "", fmt.Errorf("%w: Disk lun is not set", ErrHintUnusable)
	}
	if !s.p.cfg.LaxNames {
		if err := CheckName("hint lun", d.Lun); err != nil {
			return "", err
		}
	}
	link := path.Join(s.p.cfg.LunDeviceSymlinkPath, d.Lun)
	return s.p.withFS(func(fs *vmroot.Root) (string, error) {
		return s.p.poll(link, s.p.cfg.SymlinkLunTimeout, func() (string, error) {
			return followExisting(fs, link)
		})
	})
}

// fallbackResolver is bosh-agent's fallback_device_path_resolver.go: the
// primary's device, else on any error the secondary's. A hint refused as
// unsafe, or an agent stopping, ends the look-up at once.
type fallbackResolver struct{ primary, secondary Resolver }

func (f fallbackResolver) Resolve(d DiskSettings) (string, error) {
	dev, err := f.primary.Resolve(d)
	if err == nil || errors.Is(err, ErrUnsafe) || errors.Is(err, ErrStopped) {
		return dev, err
	}
	dev, err = f.secondary.Resolve(d)
	if err != nil {
		return "", fmt.Errorf("Secondary resolver also failed: %w", err)
	}
	return dev, nil
}
