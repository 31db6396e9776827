package flex

import (
	"context"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cpilab/cpilab/flexvolume"
	mount "k8s.io/mount-utils"
)

// Expansion sizes: volumes are provided at 16 MiB (diskSizeMiB) and grown
// to 32 MiB.
const (
	expandOldBytes = 16 << 20
	expandNewBytes = 32 << 20
)

// checkExpand plays Kubernetes' expansion of a volume in use, as the
// expand controller and kubelet call it (pkg/volume/flexvolume/expander.go):
// expandvolume on the controller, then, when init declared
// requiresFSResize, expandfs on the node the volume is mounted on ("Not
// supported" there: kubelet's generic resize runs instead). The cloud disk
// must have the new size after expandvolume, the filesystem on the node
// after the node step, with the data written before; both calls again
// change nothing; a remount keeps size and data.
func checkExpand(ctx context.Context, s *Session) error {
	vol := s.volume()
	probe, err := s.call(ctx, s.ctrl, flexvolume.CmdExpandVolume, s.options(vol, nil), s.deviceMountPath(vol),
		strconv.Itoa(expandNewBytes), strconv.Itoa(expandOldBytes))
	if err != nil {
		return err
	}
	if probe.Result.Status == flexvolume.StatusNotSupported {
		return &NotChecked{Reason: "the driver does not declare expansion (expandvolume: Not supported; kubelet then takes the new size as done without growing anything)"}
	}
	if reason := s.Skipped(Check{NeedsAttach: true, NeedsBOSH: true}); reason != "" {
		return &NotChecked{Reason: "expansion is checked on the cloud disk and the node's filesystem: " + reason}
	}
	n := s.node(0)
	k := s.kubelet[n.Name]
	if _, err := s.stage(ctx, ClauseExpand, vol, 0); err != nil {
		return err
	}
	a, err := s.attach(ctx, vol, 0)
	if err != nil {
		return err
	}
	device, dm := a.Result.Device, s.deviceMountPath(vol)
	want := "written before the expansion on " + n.Name
	if err := s.writeData(vol, 0, want); err != nil {
		return err
	}
	for round := range 2 {
		ev, err := s.must(ctx, ClauseExpand, s.ctrl, flexvolume.CmdExpandVolume, s.options(vol, nil), dm,
			strconv.Itoa(expandNewBytes), strconv.Itoa(expandOldBytes))
		if err != nil {
			return err
		}
		if err := s.cloudSize(&ev, device, round); err != nil {
			return err
		}
		if err := s.readData(ClauseExpand, vol, 0, want); err != nil {
			return err
		}
		if s.caps.RequiresFSResize {
			fs, err := s.call(ctx, k, flexvolume.CmdExpandFS, s.options(vol, nil), device, dm,
				strconv.Itoa(expandNewBytes), strconv.Itoa(expandOldBytes))
			if err != nil {
				return err
			}
			switch fs.Result.Status {
			case flexvolume.StatusNotSupported:
				// kubelet's default: its generic resize on the node.
				v := flexvolume.NewVMRoot(n.Root)
				if _, err := mount.NewResizeFs(v.Exec()).Resize(device, dm); err != nil {
					return violation(ClauseExpand, &fs, "expandfs is Not supported and kubelet's generic resize of %s fails: %v", device, err)
				}
			case flexvolume.StatusSuccess:
			default:
				return violation(ClauseExpand, &fs, "expandfs answered %s: %s", fs.Result.Status, fs.Result.Message)
			}
			if err := s.fsSize(&fs, vol, 0); err != nil {
				return err
			}
		} else if err := s.fsSize(&ev, vol, 0); err != nil {
			return err
		}
		if err := s.readData(ClauseExpand, vol, 0, want); err != nil {
			return err
		}
	}
	if err := s.unstage(ctx, ClauseExpand, vol, 0); err != nil {
		return err
	}
	if _, err := s.stage(ctx, ClauseExpand, vol, 0); err != nil {
		return err
	}
	if err := s.readData(ClauseExpand, vol, 0, want); err != nil {
		return err
	}
	if err := s.fsSize(nil, vol, 0); err != nil {
		return err
	}
	return s.unstage(ctx, ClauseExpand, vol, 0)
}

// cloudSize checks that the cloud disk device names on node 0 is at least
// the new size (the oracle: its backing file).
func (s *Session) cloudSize(call *flexvolume.Call, device string, round int) error {
	cid, err := s.oracleOn(ClauseExpand, call, device, 0)
	if err != nil {
		return violation(ClauseExpand, call, "after expandvolume (call %d), the volume's device: %v", round+1, err)
	}
	fi, err := os.Stat(s.diskFile(cid))
	if err != nil {
		return violation(ClauseExpand, call, "after expandvolume, cloud disk %s: %v", cid, err)
	}
	if fi.Size() < expandNewBytes {
		return violation(ClauseExpand, call, "expandvolume (call %d) answered Success but cloud disk %s is %d bytes, %d were asked", round+1, cid, fi.Size(), expandNewBytes)
	}
	return nil
}

// fsSize checks that the filesystem mounted for vol on node i is at least
// the new size, as df on the node shows it.
func (s *Session) fsSize(call *flexvolume.Call, vol string, i int) error {
	n := s.node(i)
	size, err := flexvolume.NewVMRoot(n.Root).FSSize(s.podDir(vol))
	if err != nil {
		return violation(ClauseExpand, call, "df on node %s: %v", n.Name, err)
	}
	if size < expandNewBytes {
		what := "after the node's expansion step"
		if !s.caps.RequiresFSResize {
			what = "with requiresFSResize false (kubelet calls no expandfs)"
		}
		return violation(ClauseExpand, call, "%s, the filesystem of volume %s on %s is %d bytes, %d were asked", what, vol, n.Name, size, expandNewBytes)
	}
	return nil
}

// diskFile is the backing file of cloud disk cid.
func (s *Session) diskFile(cid string) string {
	return filepath.Join(s.env.CloudDir, "disks", cid+".img")
}
