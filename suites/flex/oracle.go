package flex

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/cpilab/cpilab/flexvolume"
)

// The oracle reads the fake cloud's physical layout, never the driver's or
// the Director's word: a VM's attached disk is a hard link, in the VM
// root's dev/, to the disk's backing file <cloud>/disks/<cid>.img.

// cloudDisk returns the CID of the cloud disk whose backing file device
// names on node n ("" with an error when it names none).
func (s *Session) cloudDisk(n EnvNode, device string) (string, error) {
	return s.env.CloudDisk(n, device)
}

// attachedTo lists the nodes whose VM has disk cid attached.
func (s *Session) attachedTo(cid string) []string { return s.env.AttachedTo(cid) }

// CloudDisk returns the CID of the cloud disk whose backing file device
// (a node path) names on node n ("" with an error when it names none).
func (e *Env) CloudDisk(n EnvNode, device string) (string, error) {
	host, err := flexvolume.NewVMRoot(n.Root).Resolve(device)
	if err != nil {
		return "", fmt.Errorf("device %s does not exist on node %s: %v", device, n.Name, err)
	}
	cid, err := e.CloudDiskOfFile(n, host)
	if err != nil {
		return "", fmt.Errorf("device %s on node %s is no disk of the cloud", device, n.Name)
	}
	return cid, nil
}

// CloudDiskOfFile returns the CID of the cloud disk whose backing file is
// host (a path on this host, inside node n's root).
func (e *Env) CloudDiskOfFile(n EnvNode, host string) (string, error) {
	fi, err := os.Stat(host)
	if err != nil {
		return "", err
	}
	imgs, _ := filepath.Glob(filepath.Join(e.CloudDir, "disks", "*.img"))
	for _, img := range imgs {
		if gi, err := os.Stat(img); err == nil && os.SameFile(fi, gi) {
			return strings.TrimSuffix(filepath.Base(img), ".img"), nil
		}
	}
	return "", fmt.Errorf("a file of node %s is no disk of the cloud", n.Name)
}

// AttachedTo lists the nodes whose VM has disk cid attached: the disk's
// backing file hard-linked into the VM root's dev/.
func (e *Env) AttachedTo(cid string) []string {
	img, err := os.Stat(filepath.Join(e.CloudDir, "disks", cid+".img"))
	if err != nil {
		return nil
	}
	var out []string
	for _, n := range e.Nodes {
		ents, _ := os.ReadDir(filepath.Join(n.Root, "dev"))
		for _, e := range ents {
			if fi, err := os.Stat(filepath.Join(n.Root, "dev", e.Name())); err == nil && fi.Mode().IsRegular() && os.SameFile(fi, img) {
				out = append(out, n.Name)
				break
			}
		}
	}
	return out
}

// mountsOn lists node n's recorded mounts under the kubelet directory.
func (s *Session) mountsOn(n EnvNode) ([]flexvolume.MountRecord, error) {
	ms, err := flexvolume.NewVMRoot(n.Root).Mounts()
	if err != nil {
		return nil, err
	}
	var out []flexvolume.MountRecord
	for _, m := range ms {
		if strings.HasPrefix(m.Target, "/var/lib/kubelet/") {
			out = append(out, m)
		}
	}
	return out, nil
}

// hostPath is node path p on node n.
func hostPath(n EnvNode, p string) string { return flexvolume.NewVMRoot(n.Root).Host(p) }

// owns reports whether the dynamic disk named name is this session's: any
// disk when the session has the Env to itself, else a disk named as the
// project's driver names one of the session's volumes.
func (s *Session) owns(name string) bool {
	if !s.cfg.SharedEnv {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.ContainsFunc(s.vols, func(v string) bool { return flexvolume.DiskName(v) == name })
}

// Cleanup detaches the session's dynamic disks the Director has attached
// (every one unless Config.SharedEnv), as admin, so that one check's
// leftovers (a buggy driver's) do not decide the next.
func (s *Session) Cleanup(ctx context.Context) error {
	if s.cfg.Backend != BackendBOSH {
		return nil
	}
	disks, err := s.env.Admin.DynamicDisks(ctx)
	if err != nil {
		return err
	}
	for _, d := range disks {
		if d.InstanceName() != "" && s.owns(d.Name) {
			if err := s.env.Admin.DetachDynamicDisk(ctx, d.Name); err != nil {
				return fmt.Errorf("clean-up: detach %s: %w", d.Name, err)
			}
		}
	}
	return nil
}
