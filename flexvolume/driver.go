package flexvolume

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/internal/redact"
	"github.com/cpilab/cpilab/internal/strictjson"
	mount "k8s.io/mount-utils"
	utilexec "k8s.io/utils/exec"
)

// Backend is what the driver needs of the Director's dynamic disks API.
type Backend interface {
	Provide(ctx context.Context, req director.ProvideRequest) (string, error)
	DetachDynamicDisk(ctx context.Context, name string) error
	DynamicDisks(ctx context.Context) ([]director.DiskInfo, error)
	// ResizeDynamicDisk grows the disk (Config.Resize only) and returns
	// its CID afterwards.
	ResizeDynamicDisk(ctx context.Context, name string, sizeMiB int) (string, error)
}

// Deps are the driver's collaborators; nil fields are built from the
// config (a director.Client, the config's mounter).
type Deps struct {
	Backend Backend
	// Mounter and Exec act on the driver's own node.
	Mounter mount.Interface
	Exec    utilexec.Interface
	// Log receives the driver's log lines. Default: Config.LogFile.
	Log io.Writer
}

// Driver is the BOSH dynamic disks FlexVolume driver: one call-out per
// process, as kubelet runs it.
type Driver struct {
	cfg     Config
	deps    Deps
	log     *log.Logger
	root    *VMRoot // nil with the real mounter
	sfm     *mount.SafeFormatAndMount
	driverN string // vendor/driver, for the device mount paths
}

// DynamicDisksDir is where the agent links attached dynamic disks, on the
// node.
const DynamicDisksDir = "/var/vcap/data/dynamic_disks"

// NewDriver returns the driver for cfg. driverName is "vendor/driver"
// (the plugin directory's name with ~ as /).
func NewDriver(cfg Config, driverName string, deps Deps) (*Driver, error) {
	d := &Driver{cfg: cfg, deps: deps, driverN: driverName}
	if deps.Log == nil {
		deps.Log = io.Discard
	}
	d.log = log.New(deps.Log, "", log.LstdFlags|log.Lmicroseconds)
	if cfg.Mounter == MounterVMRoot {
		d.root = NewVMRoot(cfg.Nodes[cfg.Node].Root)
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
	if d.deps.Backend == nil {
		c, err := director.NewClient(director.ClientConfig{URL: cfg.Director.URL, CACertPEM: []byte(cfg.Director.CACert),
			Username: cfg.Director.Client, Password: cfg.Director.ClientSecret})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		d.deps.Backend = c
	}
	return d, nil
}

// Config is the driver's config.
func (d *Driver) Config() Config { return d.cfg }

// Backend is the Director the driver talks to.
func (d *Driver) Backend() Backend { return d.deps.Backend }

// Mounter is the driver's mounter on its node.
func (d *Driver) Mounter() mount.Interface { return d.deps.Mounter }

// Exec runs the node's commands (blkid, mkfs.*, resize2fs …).
func (d *Driver) Exec() utilexec.Interface { return d.deps.Exec }

// HostPath maps a node path to the path the driver's process uses.
func (d *Driver) HostPath(p string) string { return d.hostPath(p) }

// Failure is a Failure answer with a message.
func Failure(format string, a ...any) Result { return failure(format, a...) }

// failure is a Failure answer.
func failure(format string, a ...any) Result {
	return Result{Status: StatusFailure, Message: fmt.Sprintf(format, a...)}
}

func success() Result { return Result{Status: StatusSuccess} }

// ExitCode is the exit status that goes with r: 0 for Success and "Not
// supported", 1 for anything else.
func ExitCode(r Result) int {
	if r.Status == StatusSuccess || r.Status == StatusNotSupported {
		return 0
	}
	return 1
}

// Run performs one call-out; args[0] is its name.
func (d *Driver) Run(ctx context.Context, args []string) Result {
	if len(args) == 0 {
		return failure("no call-out given: usage: <driver> init|attach|waitforattach|isattached|detach|mountdevice|unmountdevice|mount|unmount …")
	}
	d.log.Printf("call %q", logArgs(args))
	r := d.run(ctx, args[0], args[1:])
	d.log.Printf("→ %+v", r)
	return r
}

// logArgs is a call-out's arguments for the log: in an options argument
// (a JSON object), the values of kubelet's secrets
// ("kubernetes.io/secret/<key>", base64 of the Secret's data) and of
// keys that name a password or token are masked.
func logArgs(args []string) []string {
	out := slices.Clone(args)
	for i, a := range out {
		if !strings.HasPrefix(strings.TrimSpace(a), "{") {
			continue
		}
		var m map[string]any
		if json.Unmarshal([]byte(a), &m) != nil {
			continue
		}
		masked := false
		for k := range m {
			if strings.HasPrefix(k, "kubernetes.io/secret/") || redact.IsSecretKey(k) {
				m[k], masked = redact.Mask, true
			}
		}
		if masked {
			b, _ := json.Marshal(m)
			out[i] = string(b)
		}
	}
	return out
}

// argsFor checks a call-out's argument count.
func argsFor(cmd string, args []string, names ...string) error {
	if len(args) < len(names) {
		return fmt.Errorf("%s needs %d arguments (%s), got %d", cmd, len(names), strings.Join(names, " "), len(args))
	}
	return nil
}

func (d *Driver) run(ctx context.Context, cmd string, args []string) Result {
	need := map[string][]string{
		CmdAttach: {"<json options>", "<node name>"}, CmdIsAttached: {"<json options>", "<node name>"},
		CmdDetach: {"<volume name>", "<node name>"}, CmdWaitForAttach: {"<device>", "<json options>"},
		CmdMountDevice: {"<mount dir>", "<device>", "<json options>"}, CmdUnmountDevice: {"<mount dir>"},
		CmdMount: {"<mount dir>", "<json options>"}, CmdUnmount: {"<mount dir>"},
	}
	if d.cfg.Resize {
		need[CmdExpandVolume] = []string{"<json options>", "<device mount path>", "<new size bytes>", "<old size bytes>"}
		need[CmdExpandFS] = []string{"<json options>", "<device>", "<device mount path>", "<new size bytes>", "<old size bytes>"}
	}
	if names, ok := need[cmd]; ok {
		if err := argsFor(cmd, args, names...); err != nil {
			return failure("%v", err)
		}
	}
	switch cmd {
	case CmdInit:
		return initResult(d.cfg)
	case CmdAttach:
		return d.attach(ctx, args[0], args[1])
	case CmdIsAttached:
		return d.isAttached(ctx, args[0], args[1])
	case CmdDetach:
		return d.detach(ctx, args[0], args[1])
	case CmdWaitForAttach:
		return d.waitForAttach(ctx, args[0], args[1])
	case CmdMountDevice:
		return d.mountDevice(args[0], args[1], args[2])
	case CmdUnmountDevice:
		return d.unmount(args[0])
	case CmdMount:
		return d.mount(args[0], args[1])
	case CmdUnmount:
		return d.unmount(args[0])
	}
	if d.cfg.Resize {
		switch cmd {
		case CmdExpandVolume:
			return d.expandVolume(ctx, args[0], args[2])
		case CmdExpandFS:
			return d.expandFS(ctx, args[0], args[1], args[2], args[3])
		}
	}
	// getvolumename (kubelet ignores its answer), expandvolume and expandfs
	// without Config.Resize (upstream's dynamic disks API has no resize),
	// and anything unknown.
	return Result{Status: StatusNotSupported, Message: fmt.Sprintf("%s is not supported by the BOSH dynamic disks driver", cmd)}
}

// Options are a call-out's JSON options.
type Options map[string]string

func parseOptions(raw string) (Options, error) {
	var m map[string]any
	if err := strictjson.Decode([]byte(raw), &m, strictjson.Options{FoldKeys: true}); err != nil {
		return nil, fmt.Errorf("options are not a JSON object: %v (got %q)", err, raw)
	}
	o := Options{}
	for k, v := range m {
		switch v := v.(type) {
		case string:
			o[k] = v
		case nil:
		default:
			b, _ := json.Marshal(v)
			o[k] = string(b)
		}
	}
	return o, nil
}

var diskNameBad = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)

// DiskName is the BOSH disk name of a PV or volume name: detach gets only
// the volume name, so the name is derived from it alone.
func DiskName(volume string) string {
	return "flex-" + diskNameBad.ReplaceAllString(strings.ReplaceAll(volume, "~", "/"), "-")
}

// volumeName is the volume the options name.
func volumeName(o Options) (string, error) {
	if v := o[OptionPVOrVolName]; v != "" {
		return v, nil
	}
	if v := o["volumeName"]; v != "" {
		return v, nil
	}
	return "", fmt.Errorf("options name no volume (%q or \"volumeName\")", OptionPVOrVolName)
}

func (d *Driver) node(name string) (Node, error) {
	n, ok := d.cfg.Nodes[name]
	if !ok {
		return n, fmt.Errorf("node %q is not in the driver's config (nodes: %s)", name, strings.Join(d.cfg.NodeNames(), ", "))
	}
	return n, nil
}

// DeviceOf is the device path of a dynamic disk on its node.
func DeviceOf(diskCID string) string { return path.Join(DynamicDisksDir, diskCID) }

func (d *Driver) taskCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, time.Duration(d.cfg.TaskTimeoutSeconds)*time.Second)
}

func (d *Driver) attach(ctx context.Context, rawOpts, nodeName string) Result {
	o, err := parseOptions(rawOpts)
	if err != nil {
		return failure("attach: %v", err)
	}
	vol, err := volumeName(o)
	if err != nil {
		return failure("attach: %v", err)
	}
	n, err := d.node(nodeName)
	if err != nil {
		return failure("attach %s: %v", vol, err)
	}
	req := director.ProvideRequest{InstanceID: n.InstanceID, DiskName: DiskName(vol), DiskPoolName: d.cfg.DiskPool, DiskSize: d.cfg.DiskSizeMiB,
		Metadata: map[string]any{"kubernetes_volume": vol}}
	if p := o["diskPool"]; p != "" {
		req.DiskPoolName = p
	}
	if s := o["diskSizeMiB"]; s != "" {
		if req.DiskSize, err = strconv.Atoi(s); err != nil || req.DiskSize < 1 {
			return failure("attach %s: option diskSizeMiB must be a positive integer (MiB), not %q", vol, s)
		}
	}
	if req.DiskPoolName == "" {
		return failure("attach %s: no disk pool: set \"disk_pool\" in the driver's config or \"diskPool\" in the volume's options", vol)
	}
	ctx, cancel := d.taskCtx(ctx)
	defer cancel()
	cid, err := d.deps.Backend.Provide(ctx, req)
	if err != nil {
		return failure("attach %s to node %s (instance %s): provide disk %s: %v", vol, nodeName, n.InstanceID, req.DiskName, err)
	}
	return Result{Status: StatusSuccess, Device: DeviceOf(cid)}
}

// find returns the dynamic disk named name (nil: none).
func (d *Driver) find(ctx context.Context, name string) (*director.DiskInfo, error) {
	disks, err := d.deps.Backend.DynamicDisks(ctx)
	if err != nil {
		return nil, fmt.Errorf("GET /dynamic_disks: %w", err)
	}
	for i := range disks {
		if disks[i].Name == name {
			return &disks[i], nil
		}
	}
	return nil, nil
}

// onInstance reports whether the disk is attached to instance id (the
// list names instances "group/id").
func onInstance(di *director.DiskInfo, id string) bool {
	in := di.InstanceName()
	return in != "" && (in == id || strings.HasSuffix(in, "/"+id))
}

func (d *Driver) isAttached(ctx context.Context, rawOpts, nodeName string) Result {
	o, err := parseOptions(rawOpts)
	if err != nil {
		return failure("isattached: %v", err)
	}
	vol, err := volumeName(o)
	if err != nil {
		return failure("isattached: %v", err)
	}
	n, err := d.node(nodeName)
	if err != nil {
		return failure("isattached %s: %v", vol, err)
	}
	ctx, cancel := d.taskCtx(ctx)
	defer cancel()
	di, err := d.find(ctx, DiskName(vol))
	if err != nil {
		return failure("isattached %s: %v", vol, err)
	}
	att := di != nil && onInstance(di, n.InstanceID)
	return Result{Status: StatusSuccess, Attached: &att}
}

func (d *Driver) detach(ctx context.Context, vol, nodeName string) Result {
	n, err := d.node(nodeName)
	if err != nil {
		return failure("detach %s: %v", vol, err)
	}
	ctx, cancel := d.taskCtx(ctx)
	defer cancel()
	name := DiskName(vol)
	di, err := d.find(ctx, name)
	if err != nil {
		return failure("detach %s from node %s: %v", vol, nodeName, err)
	}
	if di == nil || !onInstance(di, n.InstanceID) {
		d.log.Printf("detach %s: disk %s is not attached to node %s (instance %s): nothing to do", vol, name, nodeName, n.InstanceID)
		return success()
	}
	if err := d.deps.Backend.DetachDynamicDisk(ctx, name); err != nil {
		return failure("detach %s from node %s: POST /dynamic_disks/%s/detach: %v", vol, nodeName, name, err)
	}
	return success()
}

// hostPath is a node path as the driver's process sees it.
func (d *Driver) hostPath(p string) string {
	if d.root != nil {
		return d.root.Host(p)
	}
	return p
}

func (d *Driver) resolve(p string) (string, error) {
	if d.root != nil {
		return d.root.Resolve(p)
	}
	return filepath.EvalSymlinks(p)
}

func (d *Driver) waitForAttach(ctx context.Context, device, rawOpts string) Result {
	o, err := parseOptions(rawOpts)
	if err != nil {
		return failure("waitforattach: %v", err)
	}
	if device == "" {
		vol, err := volumeName(o)
		if err != nil {
			return failure("waitforattach: no device given and %v", err)
		}
		tctx, cancel := d.taskCtx(ctx)
		di, err := d.find(tctx, DiskName(vol))
		cancel()
		if err != nil {
			return failure("waitforattach %s: %v", vol, err)
		}
		if di == nil || di.CID == "" {
			return failure("waitforattach %s: the Director has no disk %s", vol, DiskName(vol))
		}
		device = DeviceOf(di.CID)
	}
	if !strings.HasPrefix(device, DynamicDisksDir+"/") {
		return failure("waitforattach: device %q is not a dynamic disk link under %s", device, DynamicDisksDir)
	}
	// I/O edge: the driver is a process on a node, polling the node's
	// filesystem for the agent's link.
	deadline := time.Now().Add(time.Duration(d.cfg.AttachWaitSeconds) * time.Second)
	for {
		_, err := d.resolve(device)
		if err == nil {
			return Result{Status: StatusSuccess, Device: device}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return failure("waitforattach: device %s did not appear on node %s within %ds: %v", device, d.cfg.Node, d.cfg.AttachWaitSeconds, err)
		}
		t := time.NewTimer(50 * time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
	}
}

func (d *Driver) mountDevice(dir, device, rawOpts string) Result {
	o, err := parseOptions(rawOpts)
	if err != nil {
		return failure("mountdevice: %v", err)
	}
	if _, err := d.resolve(device); err != nil {
		return failure("mountdevice %s on %s: device not found on node %s: %v", device, dir, d.cfg.Node, err)
	}
	if mounted, err := d.isMountPoint(dir); err != nil {
		return failure("mountdevice %s on %s: %v", device, dir, err)
	} else if mounted {
		return success()
	}
	if err := os.MkdirAll(d.hostPath(dir), 0o750); err != nil {
		return failure("mountdevice %s on %s: %v", device, dir, err)
	}
	var opts []string
	if o[OptionReadWrite] == "ro" {
		opts = append(opts, "ro")
	}
	if err := d.sfm.FormatAndMount(device, dir, o[OptionFSType], opts); err != nil {
		return failure("mountdevice %s on %s: %v", device, dir, err)
	}
	return success()
}

// isMountPoint: a missing dir is not a mount point.
func (d *Driver) isMountPoint(dir string) (bool, error) {
	not, err := d.deps.Mounter.IsLikelyNotMountPoint(dir)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	return !not, err
}

// DeviceMountPath is kubelet's global mount path of a volume of driver
// ("vendor/driver") under kubeletDir.
func DeviceMountPath(kubeletDir, driver, volume string) string {
	return path.Join(kubeletDir, "plugins/kubernetes.io/flexvolume", driver, "mounts", volume)
}

func (d *Driver) mount(dir, rawOpts string) Result {
	o, err := parseOptions(rawOpts)
	if err != nil {
		return failure("mount: %v", err)
	}
	vol, err := volumeName(o)
	if err != nil {
		return failure("mount %s: %v", dir, err)
	}
	if mounted, err := d.isMountPoint(dir); err != nil {
		return failure("mount %s: %v", dir, err)
	} else if mounted {
		return success()
	}
	src := DeviceMountPath(d.cfg.KubeletDir, d.driverN, vol)
	if mounted, err := d.isMountPoint(src); err != nil || !mounted {
		return failure("mount %s: volume %s's device is not mounted at %s (mountdevice first): %v", dir, vol, src, err)
	}
	if err := os.MkdirAll(d.hostPath(dir), 0o750); err != nil {
		return failure("mount %s: %v", dir, err)
	}
	opts := []string{"bind"}
	if o[OptionReadWrite] == "ro" {
		opts = append(opts, "ro")
	}
	if err := d.deps.Mounter.Mount(src, dir, "", opts); err != nil {
		return failure("mount %s: bind %s: %v", dir, src, err)
	}
	return success()
}

// unmount serves unmount and unmountdevice: not mounted or missing is
// success.
func (d *Driver) unmount(dir string) Result {
	mounted, err := d.isMountPoint(dir)
	if err != nil {
		return failure("unmount %s: %v", dir, err)
	}
	if !mounted {
		return success()
	}
	if err := d.deps.Mounter.Unmount(dir); err != nil {
		return failure("unmount %s: %v", dir, err)
	}
	return success()
}

// Write prints r as the one JSON object of the call-out.
func Write(w io.Writer, r Result) {
	b, err := json.Marshal(r)
	if err != nil {
		b = []byte(`{"status":"Failure","message":"encoding the answer failed"}`)
	}
	_, _ = w.Write(append(b, '\n'))
}

// DriverName is "vendor/driver" for an executable installed at
// <plugindir>/<vendor~driver>/<driver>.
func DriverName(executable string) string {
	return strings.ReplaceAll(filepath.Base(filepath.Dir(executable)), "~", "/")
}

// initResult is init's answer: attachable, no metrics, requiresFSResize
// when the Director grows disks (cfg.Resize: kubelet then calls expandfs
// on the node after the controller's expandvolume).
func initResult(cfg Config) Result {
	caps := Capabilities{Attach: true, SELinuxRelabel: true, FSGroup: true, RequiresFSResize: cfg.Resize}
	return Result{Status: StatusSuccess, Capabilities: &caps}
}
