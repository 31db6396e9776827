package flex

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cpilab/cpilab/flexvolume"
)

// Check is one certification check: the clause it is named after (others
// may break on the way: every call-out is held to the output protocol) and
// what it needs.
type Check struct {
	Clause string
	// NeedsAttach: only for drivers whose init says attach: true.
	NeedsAttach bool
	// NeedsBOSH: only for Backend BOSH (the oracle, Director faults).
	NeedsBOSH bool
	Run       func(ctx context.Context, s *Session) error
}

// Checks are the suite's checks, in run order.
func Checks() []Check {
	return []Check{
		{Clause: ClauseInstall, Run: checkInstall},
		{Clause: ClauseInitCapabilities, Run: checkInit},
		{Clause: ClauseOutputUnknown, Run: checkUnknown},
		{Clause: ClauseOutputExit, Run: checkFailureShape},
		{Clause: ClauseNotSupportedStable, Run: checkNotSupportedStable},
		{Clause: ClauseAttachDevice, NeedsAttach: true, Run: checkAttachDevice},
		{Clause: ClauseAttachNode, NeedsAttach: true, NeedsBOSH: true, Run: checkAttachNode},
		{Clause: ClauseAttachExclusive, NeedsAttach: true, NeedsBOSH: true, Run: checkExclusive},
		{Clause: ClauseDetach, NeedsAttach: true, Run: checkDetach},
		{Clause: ClauseMountIdempotent, Run: checkMountIdempotent},
		{Clause: ClauseLifecycle, Run: checkLifecycle},
		{Clause: ClauseFormatBlankOnly, NeedsAttach: true, NeedsBOSH: true, Run: checkFormatBlankOnly},
		{Clause: ClauseDataMoves, NeedsAttach: true, NeedsBOSH: true, Run: checkDataMoves},
		{Clause: ClauseFaultDirectorDown, NeedsAttach: true, NeedsBOSH: true, Run: checkDirectorDown},
		{Clause: ClauseFaultTaskFailed, NeedsAttach: true, NeedsBOSH: true, Run: checkTaskFailed},
		{Clause: ClauseMountRacesDetach, NeedsAttach: true, NeedsBOSH: true, Run: checkMountRacesDetach},
		{Clause: ClauseExpand, Run: checkExpand},
	}
}

// Prepare runs init once as the prober does and reads the capabilities
// every check depends on.
func (s *Session) Prepare(ctx context.Context) error {
	call, err := s.must(ctx, ClauseInitCapabilities, s.ctrl, flexvolume.CmdInit)
	if err != nil {
		return err
	}
	var raw struct {
		Capabilities map[string]json.RawMessage `json:"capabilities"`
	}
	_ = json.Unmarshal(call.Output, &raw)
	s.initRaw = raw.Capabilities
	// Keys left out keep kubelet's defaults (decoding over them).
	s.caps = flexvolume.DefaultCapabilities()
	if raw.Capabilities != nil {
		b, _ := json.Marshal(raw.Capabilities)
		if err := json.Unmarshal(b, &s.caps); err != nil {
			return violation(ClauseInitCapabilities, &call, "init's capabilities do not decode as kubelet reads them: %v", err)
		}
	}
	return nil
}

// Capabilities are the driver's capabilities as kubelet reads them.
func (s *Session) Capabilities() flexvolume.Capabilities { return s.caps }

// Skipped says why c cannot run on this driver ("" : it can).
func (s *Session) Skipped(c Check) string {
	switch {
	case c.NeedsAttach && !s.caps.Attach:
		return "the driver declares attach: false (attach, detach and their checks are the controller's, not called)"
	case c.NeedsBOSH && s.cfg.Backend != BackendBOSH:
		return "the driver has no BOSH backend (backend " + s.cfg.Backend + "): no cloud oracle, no Director faults"
	}
	return ""
}

func checkInstall(ctx context.Context, s *Session) error {
	for host, dir := range s.dirs {
		found, err := Probe(dir)
		if err != nil {
			return violation(ClauseInstall, nil, "probing %s's plugin directory: %v", host, err)
		}
		if len(found) != 1 || found[0].Name != s.driver {
			return violation(ClauseInstall, nil, "%s's plugin directory holds %+v after the atomic install, want the one driver %s", host, found, s.driver)
		}
	}
	// kubelet runs the driver from its own working directory, not the
	// plugin's.
	c := flexvolume.NewCaller(flexvolume.CallerConfig{Executable: filepath.Join(s.dirs["controller"], s.cfg.PluginName, s.exeName), Timeout: s.cfg.CallTimeout})
	if _, err := s.must(ctx, ClauseInstall, c, flexvolume.CmdInit); err != nil {
		return err
	}
	return nil
}

func checkInit(ctx context.Context, s *Session) error {
	first, err := s.must(ctx, ClauseInitCapabilities, s.ctrl, flexvolume.CmdInit)
	if err != nil {
		return err
	}
	if first.Result.Capabilities == nil {
		return violation(ClauseInitCapabilities, &first, "init answered no capabilities object")
	}
	if _, ok := s.initRaw["attach"]; !ok {
		return violation(ClauseInitCapabilities, &first, "init's capabilities leave attach implicit (kubelet then assumes true)")
	}
	for k := range s.initRaw {
		if !slices.Contains(flexvolume.KnownCapabilities, k) {
			return violation(ClauseInitCapabilities, &first, "init's capabilities hold %q, a key kubelet does not know (known: %v)", k, flexvolume.KnownCapabilities)
		}
	}
	for _, c := range s.kubelet {
		again, err := s.must(ctx, ClauseInitCapabilities, c, flexvolume.CmdInit)
		if err != nil {
			return err
		}
		if !jsonEqual(kubeletInit(again.Output), kubeletInit(first.Output)) {
			return violation(ClauseInitCapabilities, &again, "init answered differently on a node than on the controller: %s vs %s", again.Output, first.Output)
		}
	}
	return nil
}

// kubeletInit is what kubelet reads of an init answer: its status and its
// capabilities (driver-call.go's DriverStatus; the message is only logged).
// Other keys, which a driver may fill per call (a duration, a request id),
// are not compared.
func kubeletInit(out []byte) []byte {
	var v struct {
		Status       json.RawMessage `json:"status"`
		Capabilities json.RawMessage `json:"capabilities"`
	}
	if json.Unmarshal(out, &v) != nil {
		return out
	}
	b, _ := json.Marshal(v)
	return b
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

func checkUnknown(ctx context.Context, s *Session) error {
	for _, cmd := range []string{"cpilab-no-such-call", "provision"} {
		call, err := s.call(ctx, s.ctrl, cmd, s.options(s.volume(), nil))
		if err != nil {
			return err
		}
		if call.Result.Status != flexvolume.StatusNotSupported {
			return violation(ClauseOutputUnknown, &call, "the unknown call-out %s answered %s", cmd, call.Result.Status)
		}
	}
	return nil
}

// checkFailureShape makes the driver fail (options that are no JSON
// object) and holds the answer to the protocol.
func checkFailureShape(ctx context.Context, s *Session) error {
	n := s.node(0)
	cases := [][]string{{flexvolume.CmdMountDevice, s.deviceMountPath("bad-options"), "/dev/cpilab-none", "not json"}}
	if s.caps.Attach {
		cases = append(cases, []string{flexvolume.CmdAttach, "not json", n.Name})
	}
	for _, args := range cases {
		call, err := s.call(ctx, s.kubelet[n.Name], args...)
		if err != nil {
			return err
		}
		if call.Result.Status == flexvolume.StatusSuccess {
			return violation(ClauseOutputExit, &call, "%s with options that are not JSON answered Success", args[0])
		}
	}
	return nil
}

func checkNotSupportedStable(ctx context.Context, s *Session) error {
	vol := s.volume()
	calls := [][]string{
		{flexvolume.CmdGetVolumeName, s.options(vol, nil)},
		{flexvolume.CmdExpandVolume, s.options(vol, nil), s.deviceMountPath(vol), "33554432", "16777216"},
	}
	if s.caps.Attach {
		calls = append(calls, []string{flexvolume.CmdIsAttached, s.options(vol, nil), s.node(0).Name})
	}
	for range 3 {
		for _, args := range calls {
			if _, err := s.call(ctx, s.ctrl, args...); err != nil {
				return err
			}
		}
	}
	return nil
}

// attach attaches vol to node i and checks the answer's shape.
func (s *Session) attach(ctx context.Context, vol string, i int) (flexvolume.Call, error) {
	return s.must(ctx, ClauseAttachDevice, s.ctrl, flexvolume.CmdAttach, s.options(vol, nil), s.node(i).Name)
}

func (s *Session) isAttached(ctx context.Context, vol string, i int) (bool, *flexvolume.Call, error) {
	call, err := s.call(ctx, s.ctrl, flexvolume.CmdIsAttached, s.options(vol, nil), s.node(i).Name)
	if err != nil {
		return false, &call, err
	}
	switch call.Result.Status {
	case flexvolume.StatusNotSupported:
		return false, nil, nil // kubelet then has no information
	case flexvolume.StatusSuccess:
		return *call.Result.Attached, &call, nil
	}
	return false, &call, violation(ClauseAttachDevice, &call, "isattached answered %s: %s", call.Result.Status, call.Result.Message)
}

// oracleOn checks that device on node i is a cloud disk attached to node
// i's VM alone, and returns its CID.
func (s *Session) oracleOn(clause string, call *flexvolume.Call, device string, i int) (string, error) {
	n := s.node(i)
	cid, err := s.cloudDisk(n, device)
	if err != nil {
		return "", violation(clause, call, "%v", err)
	}
	if at := s.attachedTo(cid); !slices.Equal(at, []string{n.Name}) {
		return "", violation(clause, call, "disk %s (device %s) is attached to %v in the cloud, want only %s", cid, device, at, n.Name)
	}
	return cid, nil
}

func checkAttachDevice(ctx context.Context, s *Session) error {
	vol := s.volume()
	a, err := s.attach(ctx, vol, 0)
	if err != nil {
		return err
	}
	w, err := s.must(ctx, ClauseAttachDevice, s.kubelet[s.node(0).Name], flexvolume.CmdWaitForAttach, a.Result.Device, s.options(vol, nil))
	if err != nil {
		return err
	}
	if w.Result.Device != a.Result.Device {
		return violation(ClauseAttachDevice, &w, "waitforattach answered device %q, attach answered %q", w.Result.Device, a.Result.Device)
	}
	if att, c, err := s.isAttached(ctx, vol, 0); err != nil {
		return err
	} else if c != nil && !att {
		return violation(ClauseAttachDevice, c, "isattached on the node attach named answered attached: false")
	}
	if att, c, err := s.isAttached(ctx, vol, 1); err != nil {
		return err
	} else if c != nil && att {
		return violation(ClauseAttachDevice, c, "isattached on another node answered attached: true")
	}
	if s.cfg.Backend == BackendBOSH {
		if _, err := s.oracleOn(ClauseAttachDevice, &a, a.Result.Device, 0); err != nil {
			return err
		}
	}
	again, err := s.must(ctx, ClauseAttachIdempotent, s.ctrl, flexvolume.CmdAttach, s.options(vol, nil), s.node(0).Name)
	if err != nil {
		return err
	}
	if again.Result.Device != a.Result.Device {
		return violation(ClauseAttachIdempotent, &again, "attach again answered device %q, first %q", again.Result.Device, a.Result.Device)
	}
	_, err = s.must(ctx, ClauseDetach, s.ctrl, flexvolume.CmdDetach, vol, s.node(0).Name)
	return err
}

func checkAttachNode(ctx context.Context, s *Session) error {
	for _, i := range []int{1, 0} {
		vol := s.volume()
		a, err := s.must(ctx, ClauseAttachNode, s.ctrl, flexvolume.CmdAttach, s.options(vol, nil), s.node(i).Name)
		if err != nil {
			return err
		}
		if _, err := s.oracleOn(ClauseAttachNode, &a, a.Result.Device, i); err != nil {
			return err
		}
		if _, err := s.must(ctx, ClauseDetach, s.ctrl, flexvolume.CmdDetach, vol, s.node(i).Name); err != nil {
			return err
		}
	}
	return nil
}

func checkExclusive(ctx context.Context, s *Session) error {
	vol := s.volume()
	a, err := s.attach(ctx, vol, 0)
	if err != nil {
		return err
	}
	cid, err := s.oracleOn(ClauseAttachDevice, &a, a.Result.Device, 0)
	if err != nil {
		return err
	}
	b, err := s.call(ctx, s.ctrl, flexvolume.CmdAttach, s.options(vol, nil), s.node(1).Name)
	if err != nil {
		return err
	}
	if b.Result.Status != flexvolume.StatusFailure {
		return violation(ClauseAttachExclusive, &b, "attach to %s of a volume attached to %s answered %s", s.node(1).Name, s.node(0).Name, b.Result.Status)
	}
	if at := s.attachedTo(cid); !slices.Equal(at, []string{s.node(0).Name}) {
		return violation(ClauseAttachExclusive, &b, "after the refused attach, disk %s is attached to %v in the cloud, want %s", cid, at, s.node(0).Name)
	}
	_, err = s.must(ctx, ClauseDetach, s.ctrl, flexvolume.CmdDetach, vol, s.node(0).Name)
	return err
}

func checkDetach(ctx context.Context, s *Session) error {
	never := s.volume()
	if _, err := s.must(ctx, ClauseDetach, s.ctrl, flexvolume.CmdDetach, never, s.node(0).Name); err != nil {
		return err
	}
	vol := s.volume()
	a, err := s.attach(ctx, vol, 0)
	if err != nil {
		return err
	}
	var cid string
	if s.cfg.Backend == BackendBOSH {
		if cid, err = s.oracleOn(ClauseAttachDevice, &a, a.Result.Device, 0); err != nil {
			return err
		}
	}
	for range 2 {
		d, err := s.must(ctx, ClauseDetach, s.ctrl, flexvolume.CmdDetach, vol, s.node(0).Name)
		if err != nil {
			return err
		}
		if cid != "" {
			if at := s.attachedTo(cid); len(at) > 0 {
				return violation(ClauseDetach, &d, "after detach Success, disk %s is still attached to %v in the cloud", cid, at)
			}
		}
		if att, c, err := s.isAttached(ctx, vol, 0); err != nil {
			return err
		} else if c != nil && att {
			return violation(ClauseDetach, c, "after detach, isattached answered attached: true")
		}
	}
	return nil
}

// stage runs attach (when the driver attaches) → waitforattach →
// mountdevice → mount for vol on node i, and returns the pod directory.
func (s *Session) stage(ctx context.Context, clause, vol string, i int) (string, error) {
	n := s.node(i)
	k := s.kubelet[n.Name]
	pod := s.podDir(vol)
	if s.caps.Attach {
		a, err := s.attach(ctx, vol, i)
		if err != nil {
			return "", err
		}
		w, err := s.must(ctx, ClauseAttachDevice, k, flexvolume.CmdWaitForAttach, a.Result.Device, s.options(vol, nil))
		if err != nil {
			return "", err
		}
		if w.Result.Device != a.Result.Device {
			return "", violation(ClauseAttachDevice, &w, "waitforattach answered device %q, attach answered %q", w.Result.Device, a.Result.Device)
		}
		if _, err := s.must(ctx, clause, k, flexvolume.CmdMountDevice, s.deviceMountPath(vol), w.Result.Device, s.options(vol, nil)); err != nil {
			return "", err
		}
	}
	// kubelet makes the pod's volume directory before mount.
	if err := os.MkdirAll(hostPath(n, pod), 0o750); err != nil {
		return "", violation(ClauseSetup, nil, "%v", err)
	}
	if _, err := s.must(ctx, clause, k, flexvolume.CmdMount, pod, s.podOptions(vol)); err != nil {
		return "", err
	}
	return pod, nil
}

// unstage runs unmount → unmountdevice → detach, removing the
// directories as kubelet does.
func (s *Session) unstage(ctx context.Context, clause, vol string, i int) error {
	n := s.node(i)
	k := s.kubelet[n.Name]
	pod := s.podDir(vol)
	u, err := s.must(ctx, clause, k, flexvolume.CmdUnmount, pod)
	if err != nil {
		return err
	}
	if err := os.Remove(hostPath(n, pod)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return violation(ClauseLifecycle, &u, "after unmount, kubelet cannot remove the pod directory %s: %v", pod, err)
	}
	if !s.caps.Attach {
		return nil
	}
	dm := s.deviceMountPath(vol)
	ud, err := s.must(ctx, clause, k, flexvolume.CmdUnmountDevice, dm)
	if err != nil {
		return err
	}
	if err := os.Remove(hostPath(n, dm)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return violation(ClauseLifecycle, &ud, "after unmountdevice, kubelet cannot remove the device mount directory %s: %v", dm, err)
	}
	_, err = s.must(ctx, clause, s.ctrl, flexvolume.CmdDetach, vol, n.Name)
	return err
}

func checkMountIdempotent(ctx context.Context, s *Session) error {
	vol := s.volume()
	n := s.node(0)
	k := s.kubelet[n.Name]
	if _, err := s.must(ctx, ClauseMountIdempotent, k, flexvolume.CmdUnmount, s.podDir("never-mounted")); err != nil {
		return err
	}
	if s.caps.Attach {
		if _, err := s.must(ctx, ClauseMountIdempotent, k, flexvolume.CmdUnmountDevice, s.deviceMountPath("never-mounted")); err != nil {
			return err
		}
	}
	pod, err := s.stage(ctx, ClauseMountIdempotent, vol, 0)
	if err != nil {
		return err
	}
	if s.caps.Attach {
		a, err := s.attach(ctx, vol, 0)
		if err != nil {
			return err
		}
		if _, err := s.must(ctx, ClauseMountIdempotent, k, flexvolume.CmdMountDevice, s.deviceMountPath(vol), a.Result.Device, s.options(vol, nil)); err != nil {
			return err
		}
	}
	if _, err := s.must(ctx, ClauseMountIdempotent, k, flexvolume.CmdMount, pod, s.podOptions(vol)); err != nil {
		return err
	}
	if _, err := s.must(ctx, ClauseMountIdempotent, k, flexvolume.CmdUnmount, pod); err != nil {
		return err
	}
	if s.caps.Attach {
		if _, err := s.must(ctx, ClauseMountIdempotent, k, flexvolume.CmdUnmountDevice, s.deviceMountPath(vol)); err != nil {
			return err
		}
	}
	return s.unstage(ctx, ClauseMountIdempotent, vol, 0)
}

func checkLifecycle(ctx context.Context, s *Session) error {
	vol := s.volume()
	n := s.node(0)
	if _, err := s.stage(ctx, ClauseLifecycle, vol, 0); err != nil {
		return err
	}
	if err := s.unstage(ctx, ClauseLifecycle, vol, 0); err != nil {
		return err
	}
	ms, err := s.mountsOn(n)
	if err != nil {
		return violation(ClauseLifecycle, nil, "reading node %s's mount table: %v", n.Name, err)
	}
	for _, m := range ms {
		if m.Target == s.podDir(vol) || m.Target == s.deviceMountPath(vol) {
			return violation(ClauseLifecycle, nil, "after the whole lifecycle, node %s still has %s mounted on %s", n.Name, m.Source, m.Target)
		}
	}
	if s.caps.Attach {
		if att, c, err := s.isAttached(ctx, vol, 0); err != nil {
			return err
		} else if c != nil && att {
			return violation(ClauseLifecycle, c, "after the whole lifecycle, isattached answered attached: true")
		}
	}
	return nil
}

const dataFile = "cpilab-flex-data.txt"

// writeData writes a file into the pod directory of vol on node i.
func (s *Session) writeData(vol string, i int, data string) error {
	p := filepath.Join(hostPath(s.node(i), s.podDir(vol)), dataFile)
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		return violation(ClauseLifecycle, nil, "writing %s into the mounted pod directory on %s: %v", dataFile, s.node(i).Name, err)
	}
	return nil
}

func (s *Session) readData(clause, vol string, i int, want string) error {
	p := filepath.Join(hostPath(s.node(i), s.podDir(vol)), dataFile)
	got, err := os.ReadFile(p)
	if err != nil {
		return violation(clause, nil, "the file written before is gone from volume %s on %s: %v", vol, s.node(i).Name, err)
	}
	if string(got) != want {
		return violation(clause, nil, "volume %s on %s holds %q in %s, %q was written", vol, s.node(i).Name, got, dataFile, want)
	}
	return nil
}

func checkFormatBlankOnly(ctx context.Context, s *Session) error {
	vol := s.volume()
	if _, err := s.stage(ctx, ClauseFormatBlankOnly, vol, 0); err != nil {
		return err
	}
	want := "written before unmountdevice on " + s.node(0).Name
	if err := s.writeData(vol, 0, want); err != nil {
		return err
	}
	if err := s.unstage(ctx, ClauseFormatBlankOnly, vol, 0); err != nil {
		return err
	}
	if _, err := s.stage(ctx, ClauseFormatBlankOnly, vol, 0); err != nil {
		return err
	}
	if err := s.readData(ClauseFormatBlankOnly, vol, 0, want); err != nil {
		return err
	}
	return s.unstage(ctx, ClauseFormatBlankOnly, vol, 0)
}

func checkDataMoves(ctx context.Context, s *Session) error {
	vol := s.volume()
	if _, err := s.stage(ctx, ClauseDataMoves, vol, 0); err != nil {
		return err
	}
	want := "written on " + s.node(0).Name
	if err := s.writeData(vol, 0, want); err != nil {
		return err
	}
	if err := s.unstage(ctx, ClauseDataMoves, vol, 0); err != nil {
		return err
	}
	if _, err := s.stage(ctx, ClauseDataMoves, vol, 1); err != nil {
		return err
	}
	if err := s.readData(ClauseDataMoves, vol, 1, want); err != nil {
		return err
	}
	return s.unstage(ctx, ClauseDataMoves, vol, 1)
}

func checkDirectorDown(ctx context.Context, s *Session) error {
	vol := s.volume()
	s.SetDirectorDown(true)
	defer s.SetDirectorDown(false)
	down, err := s.call(ctx, s.ctrl, flexvolume.CmdAttach, s.options(vol, nil), s.node(0).Name)
	if err != nil {
		return err
	}
	if down.Result.Status != flexvolume.StatusFailure {
		return violation(ClauseFaultDirectorDown, &down, "attach with the Director down answered %s", down.Result.Status)
	}
	s.SetDirectorDown(false)
	a, err := s.must(ctx, ClauseFaultDirectorDown, s.ctrl, flexvolume.CmdAttach, s.options(vol, nil), s.node(0).Name)
	if err != nil {
		return err
	}
	cid, err := s.oracleOn(ClauseFaultDirectorDown, &a, a.Result.Device, 0)
	if err != nil {
		return err
	}
	s.SetDirectorDown(true)
	dd, err := s.call(ctx, s.ctrl, flexvolume.CmdDetach, vol, s.node(0).Name)
	if err != nil {
		return err
	}
	if dd.Result.Status != flexvolume.StatusFailure {
		return violation(ClauseFaultDirectorDown, &dd, "detach with the Director down answered %s (the disk is still attached)", dd.Result.Status)
	}
	s.SetDirectorDown(false)
	d, err := s.must(ctx, ClauseFaultDirectorDown, s.ctrl, flexvolume.CmdDetach, vol, s.node(0).Name)
	if err != nil {
		return err
	}
	if at := s.attachedTo(cid); len(at) > 0 {
		return violation(ClauseFaultDirectorDown, &d, "after the retried detach, disk %s is still attached to %v", cid, at)
	}
	return nil
}

func checkTaskFailed(ctx context.Context, s *Session) error {
	vol := s.volume()
	before, err := s.attachedCount(ctx)
	if err != nil {
		return err
	}
	call, err := s.call(ctx, s.ctrl, flexvolume.CmdAttach, s.options(vol, map[string]string{"diskPool": "cpilab-no-such-pool"}), s.node(0).Name)
	if err != nil {
		return err
	}
	if call.Result.Status != flexvolume.StatusFailure {
		return violation(ClauseFaultTaskFailed, &call, "attach from an unknown disk pool answered %s", call.Result.Status)
	}
	after, err := s.attachedCount(ctx)
	if err != nil {
		return err
	}
	if after != before {
		return violation(ClauseFaultTaskFailed, &call, "the failed attach left %d disks attached in the cloud, %d before", after, before)
	}
	return nil
}

// attachedCount counts disks attached to the nodes' VMs: every disk of
// the cloud, or with Config.SharedEnv the session's (as the Director
// names them).
func (s *Session) attachedCount(ctx context.Context) (int, error) {
	var cids []string
	if s.cfg.SharedEnv {
		disks, err := s.env.Admin.DynamicDisks(ctx)
		if err != nil {
			return 0, violation(ClauseSetup, nil, "listing the Director's dynamic disks: %v", err)
		}
		for _, d := range disks {
			if s.owns(d.Name) && d.CID != "" {
				cids = append(cids, d.CID)
			}
		}
	} else {
		imgs, _ := filepath.Glob(filepath.Join(s.env.CloudDir, "disks", "*.img"))
		for _, img := range imgs {
			cids = append(cids, strings.TrimSuffix(filepath.Base(img), ".img"))
		}
	}
	n := 0
	for _, cid := range cids {
		n += len(s.attachedTo(cid))
	}
	return n, nil
}
