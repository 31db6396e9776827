package csisuite

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/flexvolume"
	"google.golang.org/grpc/codes"
)

// Check is one BOSH check: Run returns nil, a *Violation, a *NotChecked
// or another error (the harness's).
type Check struct {
	Clause string
	Run    func(ctx context.Context, s *Session) error
}

// Checks are the BOSH checks, in the order they run.
func Checks() []Check {
	return []Check{
		{ClauseNodeID, checkNodeID},
		{ClauseTokenScopes, checkTokenScopes},
		{ClauseCreateIdempotent, checkCreateIdempotent},
		{ClauseCreateCapacity, checkCreateCapacity},
		{ClauseCreateConflict, checkCreateConflict},
		{ClauseErrorCodes, checkErrorCodes},
		{ClauseListPagination, checkListPagination},
		{ClausePublishNode, checkPublishNode},
		{ClausePublishIdem, checkPublishIdempotent},
		{ClauseUnpublish, checkUnpublish},
		{ClauseStageWaits, checkStageWaits},
		{ClauseNodeDevice, checkNodeDevice},
		{ClauseReadOnly, checkReadOnly},
		{ClauseFormatBlankOnly, checkFormatBlankOnly},
		{ClauseDataMoves, checkDataMoves},
		{ClauseLifecycle, checkLifecycle},
		{ClauseExpand, checkExpand},
		{ClauseDirectorDown, checkDirectorDown},
	}
}

// Outcome is one check's result.
type Outcome struct {
	Clause    string
	Violation *Violation
	Skip      *NotChecked
	Err       error
	Duration  time.Duration
}

// Passed reports whether the check was made and held.
func (o Outcome) Passed() bool { return o.Violation == nil && o.Skip == nil && o.Err == nil }

// RunCheck runs c on s and cleans up after it.
func (s *Session) RunCheck(ctx context.Context, c Check) Outcome {
	o := Outcome{Clause: c.Clause}
	if s.cfg.Backend != BackendBOSH {
		o.Skip = &NotChecked{Reason: "--backend none: the driver does not store volumes as the Director's dynamic disks"}
		return o
	}
	start := time.Now() // I/O edge: a check's wall time, for the report
	err := c.Run(ctx, s)
	o.Duration = time.Since(start)
	var v *Violation
	var sk *NotChecked
	switch {
	case errors.As(err, &v):
		o.Violation = v
	case errors.As(err, &sk):
		o.Skip = sk
	case err != nil:
		o.Err = err
	}
	if cerr := s.Cleanup(ctx); cerr != nil && o.Err == nil && o.Violation == nil {
		o.Err = cerr
	}
	return o
}

// RunAll runs every check in order.
func (s *Session) RunAll(ctx context.Context) []Outcome {
	var out []Outcome
	for _, c := range Checks() {
		out = append(out, s.RunCheck(ctx, c))
	}
	return out
}

func checkNodeID(ctx context.Context, s *Session) error {
	for i, n := range s.env.Nodes {
		cctx, cancel := s.callCtx(ctx)
		r, err := s.nodes[i].NodeGetInfo(cctx, &csi.NodeGetInfoRequest{})
		cancel()
		if err != nil {
			return callViolation(ClauseNodeID, "NodeGetInfo", "{}", nil, err, "NodeGetInfo failed on node %s", n.Name)
		}
		if r.GetNodeId() != n.InstanceID {
			return callViolation(ClauseNodeID, "NodeGetInfo", "{}", r, nil, "node %s (BOSH instance %s) answered node id %q: ControllerPublishVolume would attach to another instance or none", n.Name, n.InstanceID, r.GetNodeId())
		}
	}
	return nil
}

// checkTokenScopes drives a create and a delete and reads who made the
// Director's tasks on that disk (by its name and CID in their results, so
// that sessions sharing the Director never see each other's).
func checkTokenScopes(ctx context.Context, s *Session) error {
	v, err := s.create(ctx, ClauseTokenScopes, "token", 16<<20)
	if err != nil {
		return err
	}
	id := v.GetVolumeId()
	name, cid, _, err := s.diskOf(ctx, id)
	if err != nil {
		return err
	}
	if cid == "" {
		return violation(ClauseTokenScopes, "CreateVolume answered volume %s but the Director has no dynamic disk for it", id)
	}
	if err := s.deleteVol(ctx, ClauseTokenScopes, id); err != nil {
		return err
	}
	var tasks []director.TaskView
	if err := s.env.Admin.GetJSON(ctx, "/tasks?limit=200", &tasks); err != nil {
		return err
	}
	n := 0
	for _, t := range tasks {
		if !strings.Contains(t.Result, "`"+name+"`") && !strings.Contains(t.Result, "`"+cid+"`") {
			continue
		}
		n++
		if t.User != s.env.Client {
			return violation(ClauseTokenScopes, "task %d (%s: %s) was made as %q, not as the client holding only %s (%q): the driver holds more than disk management",
				t.ID, t.Description, t.Result, t.User, strings.Join(director.DiskScopes, ", "), s.env.Client)
		}
	}
	if n == 0 {
		return violation(ClauseTokenScopes, "the Director ran no task naming disk %s (%s) for CreateVolume and DeleteVolume", name, cid)
	}
	return nil
}

func checkCreateIdempotent(ctx context.Context, s *Session) error {
	name := s.name("idem")
	req := s.createReq(name, 16<<20, 0)
	var ids []string
	for range 2 {
		cctx, cancel := s.callCtx(ctx)
		r, err := s.ctrl.CreateVolume(cctx, req)
		cancel()
		if err != nil {
			return callViolation(ClauseCreateIdempotent, "CreateVolume", req, nil, err, "CreateVolume of name %s failed", name)
		}
		s.remember(r.GetVolume().GetVolumeId())
		ids = append(ids, r.GetVolume().GetVolumeId())
	}
	if ids[0] != ids[1] {
		return violation(ClauseCreateIdempotent, "CreateVolume of name %s twice returned volumes %s and %s", name, ids[0], ids[1])
	}
	disks, err := s.env.Admin.DynamicDisks(ctx)
	if err != nil {
		return err
	}
	var mine []string
	for _, d := range disks {
		if strings.Contains(d.Name, name) {
			mine = append(mine, d.Name)
		}
	}
	if len(mine) != 1 {
		return violation(ClauseCreateIdempotent, "CreateVolume of name %s twice left %d disks on the Director (%s): a retried create leaks volumes", name, len(mine), strings.Join(mine, ", "))
	}
	return nil
}

func (s *Session) cloudSize(cid string) (int64, error) {
	fi, err := os.Stat(filepath.Join(s.env.CloudDir, "disks", cid+".img"))
	if err != nil {
		return 0, fmt.Errorf("the cloud has no disk %s: %w", cid, err)
	}
	return fi.Size(), nil
}

func checkCreateCapacity(ctx context.Context, s *Session) error {
	const asked = 10<<20 + 1
	v, err := s.create(ctx, ClauseCreateCapacity, "cap", asked)
	if err != nil {
		return err
	}
	_, cid, _, err := s.diskOf(ctx, v.GetVolumeId())
	if err != nil {
		return err
	}
	if cid == "" {
		return violation(ClauseCreateCapacity, "volume %s has no dynamic disk on the Director", v.GetVolumeId())
	}
	size, err := s.cloudSize(cid)
	if err != nil {
		return err
	}
	if v.GetCapacityBytes() != size || size < asked {
		return violation(ClauseCreateCapacity, "CreateVolume asked %d bytes answered capacity_bytes %d; the cloud's disk %s is %d bytes", int64(asked), v.GetCapacityBytes(), cid, size)
	}
	return nil
}

func checkCreateConflict(ctx context.Context, s *Session) error {
	name := s.name("conflict")
	req := s.createReq(name, 16<<20, 16<<20)
	cctx, cancel := s.callCtx(ctx)
	r, err := s.ctrl.CreateVolume(cctx, req)
	cancel()
	if err != nil {
		return callViolation(ClauseCreateConflict, "CreateVolume", req, nil, err, "CreateVolume failed")
	}
	s.remember(r.GetVolume().GetVolumeId())
	req2 := s.createReq(name, 32<<20, 32<<20)
	cctx, cancel = s.callCtx(ctx)
	r2, err := s.ctrl.CreateVolume(cctx, req2)
	cancel()
	if codeOf(err) != codes.AlreadyExists {
		return callViolation(ClauseCreateConflict, "CreateVolume", req2, r2, err, "CreateVolume of existing name %s (16 MiB) with exactly 32 MiB answered %s, not ALREADY_EXISTS", name, codeOf(err))
	}
	_, _, mib, err := s.diskOf(ctx, r.GetVolume().GetVolumeId())
	if err != nil {
		return err
	}
	if mib != 16 {
		return violation(ClauseCreateConflict, "the conflicting CreateVolume changed disk %s to %d MiB", r.GetVolume().GetVolumeId(), mib)
	}
	return nil
}

func checkErrorCodes(ctx context.Context, s *Session) error {
	missing := "csi-" + s.name("missing")
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	dreq := &csi.DeleteVolumeRequest{VolumeId: missing}
	if _, err := s.ctrl.DeleteVolume(cctx, dreq); err != nil {
		return callViolation(ClauseErrorCodes, "DeleteVolume", dreq, nil, err, "DeleteVolume of a volume that does not exist answered %s, not OK (the CSI spec: it is deleted already)", codeOf(err))
	}
	node, err := s.nodeID(ctx, 0)
	if err != nil {
		return err
	}
	preq := &csi.ControllerPublishVolumeRequest{VolumeId: missing, NodeId: node, VolumeCapability: mountCap(false)}
	if r, err := s.ctrl.ControllerPublishVolume(cctx, preq); codeOf(err) != codes.NotFound {
		return callViolation(ClauseErrorCodes, "ControllerPublishVolume", preq, r, err, "publishing a volume that does not exist answered %s, not NOT_FOUND", codeOf(err))
	}
	v, err := s.create(ctx, ClauseErrorCodes, "codes", 16<<20)
	if err != nil {
		return err
	}
	preq = &csi.ControllerPublishVolumeRequest{VolumeId: v.GetVolumeId(), NodeId: "no-such-instance-" + s.prefix, VolumeCapability: mountCap(false)}
	if r, err := s.ctrl.ControllerPublishVolume(cctx, preq); codeOf(err) != codes.NotFound {
		return callViolation(ClauseErrorCodes, "ControllerPublishVolume", preq, r, err, "publishing to a node that does not exist answered %s, not NOT_FOUND", codeOf(err))
	}
	return nil
}

func (s *Session) hasCap(ctx context.Context, t csi.ControllerServiceCapability_RPC_Type) (bool, error) {
	cctx, cancel := s.callCtx(ctx)
	defer cancel()
	caps, err := s.ctrl.ControllerGetCapabilities(cctx, &csi.ControllerGetCapabilitiesRequest{})
	if err != nil {
		return false, err
	}
	return slices.ContainsFunc(caps.GetCapabilities(), func(c *csi.ControllerServiceCapability) bool { return c.GetRpc().GetType() == t }), nil
}

func checkListPagination(ctx context.Context, s *Session) error {
	if ok, err := s.hasCap(ctx, csi.ControllerServiceCapability_RPC_LIST_VOLUMES); err != nil {
		return err
	} else if !ok {
		return &NotChecked{Reason: "the controller does not declare LIST_VOLUMES"}
	}
	var want []string
	for range 3 {
		v, err := s.create(ctx, ClauseListPagination, "list", 16<<20)
		if err != nil {
			return err
		}
		want = append(want, v.GetVolumeId())
	}
	seen := map[string]int{}
	token := ""
	for page := 0; ; page++ {
		if page > 1000 {
			return violation(ClauseListPagination, "ListVolumes with max_entries 1 gave more than 1000 pages")
		}
		cctx, cancel := s.callCtx(ctx)
		req := &csi.ListVolumesRequest{MaxEntries: 1, StartingToken: token}
		r, err := s.ctrl.ListVolumes(cctx, req)
		cancel()
		if err != nil {
			return callViolation(ClauseListPagination, "ListVolumes", req, nil, err, "ListVolumes failed on page %d", page)
		}
		if len(r.GetEntries()) > 1 {
			return callViolation(ClauseListPagination, "ListVolumes", req, fmt.Sprintf("%d entries", len(r.GetEntries())), nil, "ListVolumes with max_entries 1 answered %d entries", len(r.GetEntries()))
		}
		for _, e := range r.GetEntries() {
			seen[e.GetVolume().GetVolumeId()]++
		}
		if token = r.GetNextToken(); token == "" {
			break
		}
	}
	for _, id := range want {
		if seen[id] != 1 {
			return violation(ClauseListPagination, "paging ListVolumes by 1 listed volume %s %d times, not once", id, seen[id])
		}
	}
	return nil
}

func checkPublishNode(ctx context.Context, s *Session) error {
	v, err := s.create(ctx, ClausePublishNode, "pub", 16<<20)
	if err != nil {
		return err
	}
	for _, node := range []int{1, 0} {
		pc, err := s.publish(ctx, ClausePublishNode, v.GetVolumeId(), node)
		if err != nil {
			return err
		}
		on, cid, err := s.attachedTo(ctx, v.GetVolumeId())
		if err != nil {
			return err
		}
		want := s.env.Nodes[node].Name
		if len(on) != 1 || on[0] != want {
			return violation(ClausePublishNode, "after publishing volume %s to node %s the cloud has its disk %s attached to %v", v.GetVolumeId(), want, cid, on)
		}
		if dev := pc[flexPublishDevice]; dev != "" {
			got, err := s.env.CloudDisk(s.env.Nodes[node], dev)
			if err != nil || got != cid {
				return violation(ClausePublishNode, "the publish context's device %s on node %s is disk %q (%v), not the volume's disk %s", dev, want, got, err, cid)
			}
		}
		if err := s.unpublish(ctx, ClausePublishNode, v.GetVolumeId(), node); err != nil {
			return err
		}
	}
	return nil
}

// flexPublishDevice is the publish context key bosh-csi names the device
// with (other drivers' are not read).
const flexPublishDevice = "devicePath"

func checkPublishIdempotent(ctx context.Context, s *Session) error {
	v, err := s.create(ctx, ClausePublishIdem, "pubidem", 16<<20)
	if err != nil {
		return err
	}
	pc1, err := s.publish(ctx, ClausePublishIdem, v.GetVolumeId(), 0)
	if err != nil {
		return err
	}
	pc2, err := s.publish(ctx, ClausePublishIdem, v.GetVolumeId(), 0)
	if err != nil {
		return err
	}
	if fmt.Sprint(pc1) != fmt.Sprint(pc2) {
		return violation(ClausePublishIdem, "publishing volume %s to the same node twice gave publish contexts %v and %v", v.GetVolumeId(), pc1, pc2)
	}
	return nil
}

func checkUnpublish(ctx context.Context, s *Session) error {
	v, err := s.create(ctx, ClauseUnpublish, "unpub", 16<<20)
	if err != nil {
		return err
	}
	if _, err := s.publish(ctx, ClauseUnpublish, v.GetVolumeId(), 0); err != nil {
		return err
	}
	for range 2 {
		if err := s.unpublish(ctx, ClauseUnpublish, v.GetVolumeId(), 0); err != nil {
			return err
		}
		if on, cid, err := s.attachedTo(ctx, v.GetVolumeId()); err != nil {
			return err
		} else if len(on) > 0 {
			return violation(ClauseUnpublish, "after ControllerUnpublishVolume of volume %s the cloud still has its disk %s attached to %v", v.GetVolumeId(), cid, on)
		}
	}
	return nil
}

// checkStageWaits stages a volume whose disk is still being attached:
// NodeStageVolume is called first, ControllerPublishVolume 300 ms later
// (the publish context is the one an earlier publish gave).
func checkStageWaits(ctx context.Context, s *Session) error {
	v, err := s.create(ctx, ClauseStageWaits, "wait", 16<<20)
	if err != nil {
		return err
	}
	id := v.GetVolumeId()
	pc, err := s.publish(ctx, ClauseStageWaits, id, 0)
	if err != nil {
		return err
	}
	if err := s.unpublish(ctx, ClauseStageWaits, id, 0); err != nil {
		return err
	}
	staged := make(chan error, 1)
	go func() { staged <- s.stage(ctx, ClauseStageWaits, id, 0, pc) }() // I/O edge: the node's call runs while the controller attaches
	t := time.NewTimer(300 * time.Millisecond)
	select {
	case err := <-staged:
		t.Stop()
		if err != nil {
			return fmt.Errorf("%w (NodeStageVolume was called while the disk was not yet attached)", err)
		}
		return violation(ClauseStageWaits, "NodeStageVolume of volume %s answered OK before its disk was attached", id)
	case <-t.C:
	}
	if _, err := s.publish(ctx, ClauseStageWaits, id, 0); err != nil {
		<-staged
		return err
	}
	if err := <-staged; err != nil {
		return fmt.Errorf("%w (NodeStageVolume was called while the disk was not yet attached, and the disk was attached 300 ms later)", err)
	}
	return s.checkStagedDevice(ctx, ClauseStageWaits, id, 0)
}

// checkStagedDevice checks that the staging mount of vol on node is its
// disk (the cloud's word).
func (s *Session) checkStagedDevice(ctx context.Context, clause, vol string, node int) error {
	_, cid, _, err := s.diskOf(ctx, vol)
	if err != nil {
		return err
	}
	n := s.env.Nodes[node]
	ms, err := flexvolume.NewVMRoot(n.Root).Mounts()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ms, func(m flexvolume.MountRecord) bool { return m.Target == stagingOf(vol) && !m.Bind })
	if i < 0 {
		return violation(clause, "after NodeStageVolume of volume %s nothing is mounted at %s on node %s", vol, stagingOf(vol), n.Name)
	}
	got, err := s.env.CloudDisk(n, ms[i].Source)
	if err != nil || got != cid {
		return violation(clause, "node %s mounted %s at %s: disk %q (%v), not volume %s's disk %s", n.Name, ms[i].Source, stagingOf(vol), got, err, vol, cid)
	}
	return nil
}

func checkNodeDevice(ctx context.Context, s *Session) error {
	var vols []string
	pcs := map[string]map[string]string{}
	for range 2 {
		v, err := s.create(ctx, ClauseNodeDevice, "dev", 16<<20)
		if err != nil {
			return err
		}
		pc, err := s.publish(ctx, ClauseNodeDevice, v.GetVolumeId(), 0)
		if err != nil {
			return err
		}
		vols, pcs[v.GetVolumeId()] = append(vols, v.GetVolumeId()), pc
	}
	// Stage in both orders of the disks' links: a driver picking "the"
	// device of the node gets one of them wrong.
	for i := len(vols) - 1; i >= 0; i-- {
		if err := s.stage(ctx, ClauseNodeDevice, vols[i], 0, pcs[vols[i]]); err != nil {
			return err
		}
	}
	for _, vol := range vols {
		if err := s.checkStagedDevice(ctx, ClauseNodeDevice, vol, 0); err != nil {
			return err
		}
	}
	return nil
}

func checkReadOnly(ctx context.Context, s *Session) error {
	v, err := s.create(ctx, ClauseReadOnly, "ro", 16<<20)
	if err != nil {
		return err
	}
	id := v.GetVolumeId()
	pc, err := s.publish(ctx, ClauseReadOnly, id, 0)
	if err != nil {
		return err
	}
	if err := s.stage(ctx, ClauseReadOnly, id, 0, pc); err != nil {
		return err
	}
	if err := s.nodePublish(ctx, ClauseReadOnly, id, 0, pc, true); err != nil {
		return err
	}
	ms, err := flexvolume.NewVMRoot(s.env.Nodes[0].Root).Mounts()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(ms, func(m flexvolume.MountRecord) bool { return m.Target == targetOf(id) })
	if i < 0 {
		return violation(ClauseReadOnly, "after NodePublishVolume nothing is mounted at %s", targetOf(id))
	}
	if !slices.Contains(ms[i].Opts, "ro") {
		return violation(ClauseReadOnly, "NodePublishVolume with readonly mounted %s at %s with options %v: writable", ms[i].Source, targetOf(id), ms[i].Opts)
	}
	return nil
}

const dataFile = "cpilab-csi-data"

func (s *Session) write(node int, vol string) ([]byte, error) {
	data := []byte(fmt.Sprintf("written by cpilab on node %s into volume %s\n", s.env.Nodes[node].Name, vol))
	return data, os.WriteFile(filepath.Join(s.host(node, targetOf(vol)), dataFile), data, 0o644)
}

func (s *Session) readBack(clause string, node int, vol string, want []byte, after string) error {
	got, err := os.ReadFile(filepath.Join(s.host(node, targetOf(vol)), dataFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		return violation(clause, "the file written into volume %s (%s) is gone on node %s after %s", vol, targetOf(vol)+"/"+dataFile, s.env.Nodes[node].Name, after)
	case err != nil:
		return err
	case !bytes.Equal(got, want):
		return violation(clause, "the file written into volume %s (%s) reads %q on node %s after %s, not %q", vol, targetOf(vol)+"/"+dataFile, got, s.env.Nodes[node].Name, after, want)
	}
	return nil
}

func checkFormatBlankOnly(ctx context.Context, s *Session) error {
	v, err := s.create(ctx, ClauseFormatBlankOnly, "fmt", 16<<20)
	if err != nil {
		return err
	}
	id := v.GetVolumeId()
	if err := s.up(ctx, ClauseFormatBlankOnly, id, 0); err != nil {
		return err
	}
	data, err := s.write(0, id)
	if err != nil {
		return err
	}
	if err := s.down(ctx, ClauseFormatBlankOnly, id, 0); err != nil {
		return err
	}
	if err := s.up(ctx, ClauseFormatBlankOnly, id, 0); err != nil {
		return err
	}
	return s.readBack(ClauseFormatBlankOnly, 0, id, data, "unpublish, unstage, unpublish, publish, stage and publish again")
}

func checkDataMoves(ctx context.Context, s *Session) error {
	v, err := s.create(ctx, ClauseDataMoves, "move", 16<<20)
	if err != nil {
		return err
	}
	id := v.GetVolumeId()
	if err := s.up(ctx, ClauseDataMoves, id, 0); err != nil {
		return err
	}
	data, err := s.write(0, id)
	if err != nil {
		return err
	}
	if err := s.down(ctx, ClauseDataMoves, id, 0); err != nil {
		return err
	}
	if err := s.up(ctx, ClauseDataMoves, id, 1); err != nil {
		return err
	}
	return s.readBack(ClauseDataMoves, 1, id, data, "moving from node "+s.env.Nodes[0].Name)
}

func checkLifecycle(ctx context.Context, s *Session) error {
	v, err := s.create(ctx, ClauseLifecycle, "life", 16<<20)
	if err != nil {
		return err
	}
	id := v.GetVolumeId()
	_, cid, _, err := s.diskOf(ctx, id)
	if err != nil {
		return err
	}
	if err := s.up(ctx, ClauseLifecycle, id, 0); err != nil {
		return err
	}
	if err := s.down(ctx, ClauseLifecycle, id, 0); err != nil {
		return err
	}
	for _, n := range s.env.Nodes {
		ms, err := flexvolume.NewVMRoot(n.Root).Mounts()
		if err != nil {
			return err
		}
		for _, m := range ms {
			if strings.Contains(m.Target, id) {
				return violation(ClauseLifecycle, "after NodeUnpublishVolume and NodeUnstageVolume, %s is still mounted at %s on node %s", m.Source, m.Target, n.Name)
			}
		}
	}
	if err := s.deleteVol(ctx, ClauseLifecycle, id); err != nil {
		return err
	}
	if name, _, _, err := s.diskOf(ctx, id); err != nil {
		return err
	} else if name != "" {
		return violation(ClauseLifecycle, "after DeleteVolume the Director still has disk %s", name)
	}
	if _, err := os.Stat(filepath.Join(s.env.CloudDir, "disks", cid+".img")); err == nil {
		return violation(ClauseLifecycle, "after DeleteVolume the cloud still has disk %s", cid)
	}
	return nil
}

func checkExpand(ctx context.Context, s *Session) error {
	if !s.expand {
		return &NotChecked{Reason: "the controller does not declare EXPAND_VOLUME"}
	}
	v, err := s.create(ctx, ClauseExpand, "grow", 16<<20)
	if err != nil {
		return err
	}
	id := v.GetVolumeId()
	if err := s.up(ctx, ClauseExpand, id, 0); err != nil {
		return err
	}
	data, err := s.write(0, id)
	if err != nil {
		return err
	}
	if err := s.down(ctx, ClauseExpand, id, 0); err != nil {
		return err
	}
	const grown = 32 << 20
	cctx, cancel := s.callCtx(ctx)
	req := &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: grown}, VolumeCapability: mountCap(false)}
	r, err := s.ctrl.ControllerExpandVolume(cctx, req)
	cancel()
	if err != nil {
		return callViolation(ClauseExpand, "ControllerExpandVolume", req, nil, err, "ControllerExpandVolume to 32 MiB failed")
	}
	_, cid, _, err := s.diskOf(ctx, id)
	if err != nil {
		return err
	}
	if size, err := s.cloudSize(cid); err != nil || size != grown || r.GetCapacityBytes() != grown {
		return violation(ClauseExpand, "ControllerExpandVolume to %d bytes answered capacity %d; the cloud's disk %s is %d bytes (%v)", grown, r.GetCapacityBytes(), cid, size, err)
	}
	if err := s.up(ctx, ClauseExpand, id, 0); err != nil {
		return err
	}
	cctx, cancel = s.callCtx(ctx)
	nreq := &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: targetOf(id), StagingTargetPath: stagingOf(id),
		CapacityRange: &csi.CapacityRange{RequiredBytes: grown}, VolumeCapability: mountCap(false)}
	_, err = s.nodes[0].NodeExpandVolume(cctx, nreq)
	cancel()
	if err != nil {
		return callViolation(ClauseExpand, "NodeExpandVolume", nreq, nil, err, "NodeExpandVolume failed")
	}
	if fs, err := flexvolume.NewVMRoot(s.env.Nodes[0].Root).FSSize(targetOf(id)); err != nil || fs != grown {
		return violation(ClauseExpand, "after NodeExpandVolume the filesystem at %s is %d bytes (%v), not %d", targetOf(id), fs, err, grown)
	}
	return s.readBack(ClauseExpand, 0, id, data, "expansion")
}

func checkDirectorDown(ctx context.Context, s *Session) error {
	if s.gate == nil {
		return &NotChecked{Reason: "the driver was started by someone else and reaches the Director directly: certify-csi cannot cut it"}
	}
	req := s.createReq(s.name("down"), 16<<20, 0)
	s.gate.SetDown(true)
	cctx, cancel := s.callCtx(ctx)
	r, err := s.ctrl.CreateVolume(cctx, req)
	cancel()
	s.gate.SetDown(false)
	if err == nil {
		s.remember(r.GetVolume().GetVolumeId())
		return callViolation(ClauseDirectorDown, "CreateVolume", req, r, nil, "CreateVolume answered OK with the Director unreachable")
	}
	if codeOf(err) != codes.Unavailable {
		return callViolation(ClauseDirectorDown, "CreateVolume", req, nil, err, "CreateVolume with the Director unreachable answered %s, not UNAVAILABLE: the external-provisioner treats it as final", codeOf(err))
	}
	cctx, cancel = s.callCtx(ctx)
	r, err = s.ctrl.CreateVolume(cctx, req)
	cancel()
	if err != nil {
		return callViolation(ClauseDirectorDown, "CreateVolume", req, nil, err, "CreateVolume retried once the Director was back failed")
	}
	s.remember(r.GetVolume().GetVolumeId())
	if name, _, _, err := s.diskOf(ctx, r.GetVolume().GetVolumeId()); err != nil {
		return err
	} else if name == "" {
		return violation(ClauseDirectorDown, "the retried CreateVolume answered volume %s, which the Director does not have", r.GetVolume().GetVolumeId())
	}
	return nil
}
