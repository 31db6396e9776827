package csisuite

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/cpilab/cpilab/flexvolume"
	"github.com/cpilab/cpilab/suites/flex"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Violation is a clause the driver broke.
type Violation struct {
	Clause string `json:"clause"`
	// Did says what the driver did instead.
	Did string `json:"did"`
	// Method, Request and Response detail the call that showed it.
	Method   string `json:"method,omitempty"`
	Request  string `json:"request,omitempty"`
	Response string `json:"response,omitempty"`
}

func (v *Violation) Error() string {
	s := fmt.Sprintf("%s: %s\n  the driver did instead: %s", v.Clause, ClauseTitles[v.Clause], v.Did)
	if v.Method != "" {
		s += fmt.Sprintf("\n  call: %s %s → %s", v.Method, v.Request, v.Response)
	}
	return s
}

// NotChecked is a check that was not made, and why.
type NotChecked struct{ Reason string }

func (n *NotChecked) Error() string { return "not checked: " + n.Reason }

func violation(clause, format string, a ...any) *Violation {
	return &Violation{Clause: clause, Did: fmt.Sprintf(format, a...)}
}

// callViolation is a violation shown by one call.
func callViolation(clause, method string, req any, resp any, err error, format string, a ...any) *Violation {
	v := violation(clause, format, a...)
	v.Method, v.Request = method, fmt.Sprintf("%v", req)
	if err != nil {
		v.Response = status.Convert(err).Code().String() + ": " + status.Convert(err).Message()
	} else {
		v.Response = fmt.Sprintf("%v", resp)
	}
	return v
}

// Config configures a Session.
type Config struct {
	// Backend is BackendBOSH (default) or BackendNone.
	Backend string
	// Launch says how the driver is started on the Env (Dir is set by
	// NewSession).
	Launch Launch
	// WorkDir holds the session's sockets and logs (short: sockets).
	WorkDir string
	// CallTimeout bounds each CSI call. Default 60 s.
	CallTimeout time.Duration
	// External, when set, is a driver someone else started on the Env
	// (its controller and one node endpoint per node): nothing is
	// started, and the Director cannot be cut in front of it (the outage
	// check is not made).
	External *Driver
}

// Session is one driver under test on an Env: the checks run on it in
// order. Sessions sharing an Env must run one after another (the token
// check reads the Director's recent tasks).
type Session struct {
	cfg    Config
	env    *flex.Env
	gate   *flex.Gate
	drv    *Driver
	conns  []*grpc.ClientConn
	ident  csi.IdentityClient
	ctrl   csi.ControllerClient
	nodes  []csi.NodeClient
	prefix string
	expand bool

	mu   sync.Mutex
	vols []string // volume ids created
	n    int
}

// NewSession opens a gate to the Director and starts the driver behind it.
func NewSession(ctx context.Context, cfg Config, env *flex.Env) (*Session, error) {
	if cfg.Backend == "" {
		cfg.Backend = BackendBOSH
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 60 * time.Second
	}
	if cfg.WorkDir == "" {
		return nil, errors.New("csisuite: Config.WorkDir is required")
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, err
	}
	s := &Session{cfg: cfg, env: env, prefix: fmt.Sprintf("cc%d", time.Now().UnixNano()%1e9)}
	if cfg.External != nil {
		if len(cfg.External.Nodes) != len(env.Nodes) {
			return nil, fmt.Errorf("csisuite: %d node endpoints for %d nodes", len(cfg.External.Nodes), len(env.Nodes))
		}
		s.drv = &Driver{Controller: cfg.External.Controller, Nodes: cfg.External.Nodes}
	} else {
		g, err := env.NewGate()
		if err != nil {
			return nil, err
		}
		s.gate = g
		l := cfg.Launch
		l.Dir, l.DirectorURL = cfg.WorkDir, g.URL
		if s.drv, err = StartDriver(ctx, env, l); err != nil {
			s.Close()
			return nil, err
		}
	}
	dial := func(ep string) (*grpc.ClientConn, error) {
		c, err := Dial(ep)
		if err == nil {
			s.conns = append(s.conns, c)
		}
		return c, err
	}
	cc, err := dial(s.drv.Controller)
	if err != nil {
		s.Close()
		return nil, err
	}
	s.ident, s.ctrl = csi.NewIdentityClient(cc), csi.NewControllerClient(cc)
	for _, ep := range s.drv.Nodes {
		nc, err := dial(ep)
		if err != nil {
			s.Close()
			return nil, err
		}
		s.nodes = append(s.nodes, csi.NewNodeClient(nc))
	}
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	caps, err := s.ctrl.ControllerGetCapabilities(cctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("ControllerGetCapabilities: %w", err)
	}
	for _, c := range caps.GetCapabilities() {
		if c.GetRpc().GetType() == csi.ControllerServiceCapability_RPC_EXPAND_VOLUME {
			s.expand = true
		}
	}
	return s, nil
}

// Driver is the driver under test.
func (s *Session) Driver() *Driver { return s.drv }

// Close stops the driver and the gate.
func (s *Session) Close() {
	for _, c := range s.conns {
		_ = c.Close()
	}
	if s.drv != nil {
		s.drv.Close()
	}
	if s.gate != nil {
		s.gate.Close()
	}
}

func (s *Session) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.CallTimeout)
}

// name returns a fresh volume name of the session.
func (s *Session) name(what string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return fmt.Sprintf("%s-%s-%d", s.prefix, what, s.n)
}

func (s *Session) remember(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.vols = append(s.vols, id)
}

// owns reports whether a Director disk is the session's.
func (s *Session) owns(diskName string) bool { return strings.Contains(diskName, s.prefix) }

func mountCap(ro bool) *csi.VolumeCapability {
	mode := csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER
	if ro {
		mode = csi.VolumeCapability_AccessMode_SINGLE_NODE_READER_ONLY
	}
	return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: mode}}
}

func (s *Session) createReq(name string, required, limit int64) *csi.CreateVolumeRequest {
	return &csi.CreateVolumeRequest{Name: name, CapacityRange: &csi.CapacityRange{RequiredBytes: required, LimitBytes: limit},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap(false)}, Parameters: map[string]string{"diskPool": s.env.DiskPool}}
}

// create creates a volume; a failure is a violation of clause.
func (s *Session) create(ctx context.Context, clause, what string, required int64) (*csi.Volume, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	req := s.createReq(s.name(what), required, 0)
	resp, err := s.ctrl.CreateVolume(ctx, req)
	if err != nil {
		return nil, callViolation(clause, "CreateVolume", req, nil, err, "CreateVolume failed")
	}
	s.remember(resp.GetVolume().GetVolumeId())
	return resp.GetVolume(), nil
}

// nodeIndex is the Env node whose node plugin is i.
func (s *Session) nodeID(ctx context.Context, i int) (string, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	r, err := s.nodes[i].NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil {
		return "", callViolation(ClauseNodeID, "NodeGetInfo", "{}", nil, err, "NodeGetInfo failed on node %s", s.env.Nodes[i].Name)
	}
	return r.GetNodeId(), nil
}

func (s *Session) publish(ctx context.Context, clause, vol string, node int) (map[string]string, error) {
	id, err := s.nodeID(ctx, node)
	if err != nil {
		return nil, err
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	req := &csi.ControllerPublishVolumeRequest{VolumeId: vol, NodeId: id, VolumeCapability: mountCap(false)}
	resp, err := s.ctrl.ControllerPublishVolume(ctx, req)
	if err != nil {
		return nil, callViolation(clause, "ControllerPublishVolume", req, nil, err, "publishing volume %s to node %s failed", vol, s.env.Nodes[node].Name)
	}
	return resp.GetPublishContext(), nil
}

func (s *Session) unpublish(ctx context.Context, clause, vol string, node int) error {
	id, err := s.nodeID(ctx, node)
	if err != nil {
		return err
	}
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	req := &csi.ControllerUnpublishVolumeRequest{VolumeId: vol, NodeId: id}
	if _, err := s.ctrl.ControllerUnpublishVolume(ctx, req); err != nil {
		return callViolation(clause, "ControllerUnpublishVolume", req, nil, err, "unpublishing volume %s from node %s failed", vol, s.env.Nodes[node].Name)
	}
	return nil
}

// stagingOf and targetOf are the node paths the suite uses for a volume.
func stagingOf(vol string) string { return StagingPath + "/" + vol }
func targetOf(vol string) string  { return TargetPath + "/" + vol + "/mount" }

func (s *Session) stage(ctx context.Context, clause, vol string, node int, pc map[string]string) error {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	req := &csi.NodeStageVolumeRequest{VolumeId: vol, PublishContext: pc, StagingTargetPath: stagingOf(vol), VolumeCapability: mountCap(false)}
	if err := os.MkdirAll(s.host(node, req.StagingTargetPath), 0o750); err != nil {
		return err
	}
	if _, err := s.nodes[node].NodeStageVolume(ctx, req); err != nil {
		return callViolation(clause, "NodeStageVolume", req, nil, err, "staging volume %s on node %s failed", vol, s.env.Nodes[node].Name)
	}
	return nil
}

func (s *Session) unstage(ctx context.Context, clause, vol string, node int) error {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	req := &csi.NodeUnstageVolumeRequest{VolumeId: vol, StagingTargetPath: stagingOf(vol)}
	if _, err := s.nodes[node].NodeUnstageVolume(ctx, req); err != nil {
		return callViolation(clause, "NodeUnstageVolume", req, nil, err, "unstaging volume %s on node %s failed", vol, s.env.Nodes[node].Name)
	}
	return nil
}

func (s *Session) nodePublish(ctx context.Context, clause, vol string, node int, pc map[string]string, ro bool) error {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	req := &csi.NodePublishVolumeRequest{VolumeId: vol, PublishContext: pc, StagingTargetPath: stagingOf(vol), TargetPath: targetOf(vol),
		VolumeCapability: mountCap(false), Readonly: ro}
	if err := os.MkdirAll(s.host(node, filepath.Dir(req.TargetPath)), 0o750); err != nil {
		return err
	}
	if _, err := s.nodes[node].NodePublishVolume(ctx, req); err != nil {
		return callViolation(clause, "NodePublishVolume", req, nil, err, "publishing volume %s on node %s at %s failed", vol, s.env.Nodes[node].Name, req.TargetPath)
	}
	return nil
}

func (s *Session) nodeUnpublish(ctx context.Context, clause, vol string, node int) error {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	req := &csi.NodeUnpublishVolumeRequest{VolumeId: vol, TargetPath: targetOf(vol)}
	if _, err := s.nodes[node].NodeUnpublishVolume(ctx, req); err != nil {
		return callViolation(clause, "NodeUnpublishVolume", req, nil, err, "unpublishing volume %s on node %s failed", vol, s.env.Nodes[node].Name)
	}
	return nil
}

func (s *Session) deleteVol(ctx context.Context, clause, vol string) error {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	req := &csi.DeleteVolumeRequest{VolumeId: vol}
	if _, err := s.ctrl.DeleteVolume(ctx, req); err != nil {
		return callViolation(clause, "DeleteVolume", req, nil, err, "deleting volume %s failed", vol)
	}
	return nil
}

// up stages and publishes vol on node: ControllerPublish, NodeStage,
// NodePublish.
func (s *Session) up(ctx context.Context, clause, vol string, node int) error {
	pc, err := s.publish(ctx, clause, vol, node)
	if err != nil {
		return err
	}
	if err := s.stage(ctx, clause, vol, node, pc); err != nil {
		return err
	}
	return s.nodePublish(ctx, clause, vol, node, pc, false)
}

// down is up undone: NodeUnpublish, NodeUnstage, ControllerUnpublish.
func (s *Session) down(ctx context.Context, clause, vol string, node int) error {
	if err := s.nodeUnpublish(ctx, clause, vol, node); err != nil {
		return err
	}
	if err := s.unstage(ctx, clause, vol, node); err != nil {
		return err
	}
	return s.unpublish(ctx, clause, vol, node)
}

// host is node path p on node i, on this host.
func (s *Session) host(i int, p string) string {
	return flexvolume.NewVMRoot(s.env.Nodes[i].Root).Host(p)
}

// diskOf is the Director's disk of volume id (bosh-csi names disks by
// volume id; a disk whose CID is the id counts too).
func (s *Session) diskOf(ctx context.Context, vol string) (name, cid string, sizeMiB int, err error) {
	disks, err := s.env.Admin.DynamicDisks(ctx)
	if err != nil {
		return "", "", 0, err
	}
	for _, d := range disks {
		if d.Name == vol || d.CID == vol {
			return d.Name, d.CID, d.SizeMiB, nil
		}
	}
	return "", "", 0, nil
}

// attachedTo names the nodes whose VM has volume vol's disk attached (the
// cloud's word).
func (s *Session) attachedTo(ctx context.Context, vol string) ([]string, string, error) {
	_, cid, _, err := s.diskOf(ctx, vol)
	if err != nil || cid == "" {
		return nil, "", err
	}
	return s.env.AttachedTo(cid), cid, nil
}

// Cleanup undoes what a check left (a buggy driver's leftovers): the
// session's node mounts are unmounted, its disks detached and deleted, as
// admin, so that one check's leftovers do not decide the next.
func (s *Session) Cleanup(ctx context.Context) error {
	if s.gate != nil {
		s.gate.SetDown(false)
	}
	var errs []error
	for _, n := range s.env.Nodes {
		root := flexvolume.NewVMRoot(n.Root)
		ms, err := root.Mounts()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Bind mounts first, then device mounts.
		for _, bind := range []bool{true, false} {
			for _, m := range ms {
				if m.Bind == bind && strings.Contains(m.Target, s.prefix) {
					if err := root.Unmount(m.Target); err != nil {
						errs = append(errs, fmt.Errorf("clean-up: unmount %s on %s: %w", m.Target, n.Name, err))
					}
				}
			}
		}
	}
	disks, err := s.env.Admin.DynamicDisks(ctx)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	for _, d := range disks {
		if !s.owns(d.Name) {
			continue
		}
		if d.InstanceName() != "" {
			if err := s.env.Admin.DetachDynamicDisk(ctx, d.Name); err != nil {
				errs = append(errs, fmt.Errorf("clean-up: detach %s: %w", d.Name, err))
				continue
			}
		}
		if err := s.env.Admin.DeleteDynamicDisk(ctx, d.Name); err != nil {
			errs = append(errs, fmt.Errorf("clean-up: delete %s: %w", d.Name, err))
		}
	}
	return errors.Join(errs...)
}

func codeOf(err error) codes.Code { return status.Code(err) }
