package flex

import (
	"context"
	"slices"
	"time"

	"github.com/cpilab/cpilab/flexvolume"
	"github.com/cpilab/cpilab/internal/flock"
)

// mountStall is how long the check lets mountdevice run into the held
// mount table before detaching.
const mountStall = 300 * time.Millisecond

// holdMountTable takes the vmroot mount table's lock of node n, as a mount
// that does not finish: a vmroot driver's mountdevice blocks on it.
func holdMountTable(n EnvNode) (func(), error) {
	return flock.Lock(hostPath(n, flexvolume.MountTableFile+".lock"))
}

// checkMountRacesDetach: mountdevice is held in its mount while the
// controller detaches the volume (kubelet's e2e "should not work when mount
// is in progress" from the driver's side). Either may win; the node must
// not end with a Success or a mount on a disk detached under it.
func checkMountRacesDetach(ctx context.Context, s *Session) error {
	vol := s.volume()
	n := s.node(0)
	k := s.kubelet[n.Name]
	a, err := s.attach(ctx, vol, 0)
	if err != nil {
		return err
	}
	cid, err := s.oracleOn(ClauseAttachDevice, &a, a.Result.Device, 0)
	if err != nil {
		return err
	}
	if _, err := s.must(ctx, ClauseAttachDevice, k, flexvolume.CmdWaitForAttach, a.Result.Device, s.options(vol, nil)); err != nil {
		return err
	}
	release, err := holdMountTable(n)
	if err != nil {
		return violation(ClauseSetup, nil, "holding node %s's mount table: %v", n.Name, err)
	}
	type result struct {
		call flexvolume.Call
		err  error
	}
	done := make(chan result, 1)
	dm := s.deviceMountPath(vol)
	go func() { // I/O edge: the kubelet's mountdevice runs while the controller detaches
		c, err := s.call(ctx, k, flexvolume.CmdMountDevice, dm, a.Result.Device, s.options(vol, nil))
		done <- result{c, err}
	}()
	t := time.NewTimer(mountStall)
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	d, derr := s.call(ctx, s.ctrl, flexvolume.CmdDetach, vol, n.Name)
	release()
	md := <-done
	if derr != nil {
		return derr
	}
	if md.err != nil {
		return md.err
	}
	detached := !slices.Contains(s.attachedTo(cid), n.Name)
	ms, err := s.mountsOn(n)
	if err != nil {
		return violation(ClauseSetup, nil, "reading node %s's mount table: %v", n.Name, err)
	}
	mounted := slices.ContainsFunc(ms, func(m flexvolume.MountRecord) bool { return m.Target == dm })
	switch {
	case detached && md.call.Result.Status == flexvolume.StatusSuccess:
		return violation(ClauseMountRacesDetach, &md.call, "mountdevice answered Success although detach (%s) took disk %s off the node during it", d.Result.Status, cid)
	case detached && mounted:
		return violation(ClauseMountRacesDetach, &md.call, "node %s has %s mounted from disk %s, detached during the mount", n.Name, dm, cid)
	}
	// Leave the node as kubelet would after either outcome.
	if _, err := s.must(ctx, ClauseMountIdempotent, k, flexvolume.CmdUnmountDevice, dm); err != nil {
		return err
	}
	_, err = s.must(ctx, ClauseDetach, s.ctrl, flexvolume.CmdDetach, vol, n.Name)
	return err
}
