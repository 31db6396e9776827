package dockerapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
)

// Docker's own name rules (daemon/names).
var (
	containerName = regexp.MustCompile(`^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)
	volumeName    = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)
)

// maxCreateBody bounds a container create request.
const maxCreateBody = fakeiaas.MaxDocumentBytes / 2

func (f *Face) lookupContainerLocked(name string) *ctr {
	name = strings.TrimPrefix(name, "/")
	if c := f.containers[name]; c != nil {
		return c
	}
	for _, c := range f.containers {
		if c.VM.String() == name {
			return c
		}
	}
	return nil
}

func (f *Face) containerLocked(name string) (*ctr, error) {
	c := f.lookupContainerLocked(name)
	if c == nil {
		return nil, errorf(http.StatusNotFound, "No such container: %s", name)
	}
	return c, nil
}

// bind is one parsed entry of HostConfig.Binds.
type bind struct {
	Source, Target, Mode string
	Volume               bool // Source names a volume (else it is a host path)
}

func parseBind(s string) (bind, error) {
	parts := strings.Split(s, ":")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" || parts[1] == "" {
		return bind{}, errorf(http.StatusBadRequest, "invalid volume specification: %q: want SOURCE:TARGET[:MODE]", s)
	}
	b := bind{Source: parts[0], Target: parts[1]}
	if len(parts) == 3 {
		b.Mode = parts[2]
	}
	if !path.IsAbs(b.Target) {
		return bind{}, errorf(http.StatusBadRequest, "invalid volume specification: %q: mount path %q must be absolute", s, b.Target)
	}
	if strings.Contains("/"+b.Target+"/", "/../") {
		return bind{}, errorf(http.StatusBadRequest, "invalid volume specification: %q: mount path %q contains '..'", s, b.Target)
	}
	b.Target = path.Clean(b.Target)
	if b.Target == "/" {
		return bind{}, errorf(http.StatusBadRequest, "invalid volume specification: %q: destination can't be '/'", s)
	}
	if !path.IsAbs(b.Source) {
		if !volumeName.MatchString(b.Source) {
			return bind{}, errorf(http.StatusBadRequest, "invalid volume specification: %q: %q includes invalid characters for a local volume name, only \"[a-zA-Z0-9][a-zA-Z0-9_.-]\" are allowed", s, b.Source)
		}
		b.Volume = true
	}
	return b, nil
}

// containerCreate serves POST /containers/create?name=N: a fakeiaas
// create_vm from the image's stemcell, then each named volume in
// HostConfig.Binds attached (attach_disk) and its directory moved to its
// target in the VM root. Missing named volumes are created, as Docker
// does. Host-path binds are recorded but not mounted: a VM root never
// points outside itself.
func (f *Face) containerCreate(w http.ResponseWriter, r *http.Request) error {
	name := strings.TrimPrefix(r.URL.Query().Get("name"), "/")
	if name != "" && !containerName.MatchString(name) {
		return errorf(http.StatusBadRequest, "Invalid container name (%s), only [a-zA-Z0-9][a-zA-Z0-9_.-] are allowed", name)
	}
	var req container.CreateRequest
	if err := decodeBody(r, maxCreateBody, &req); err != nil {
		return err
	}
	if req.Config == nil || req.Config.Image == "" {
		return errorf(http.StatusBadRequest, "No command specified: config.Image is empty")
	}
	if req.HostConfig == nil {
		req.HostConfig = &container.HostConfig{}
	}
	var binds []bind
	for _, s := range req.HostConfig.Binds {
		b, err := parseBind(s)
		if err != nil {
			return err
		}
		binds = append(binds, b)
	}
	ctx := reqCtx(r, "container_create")

	f.mu.Lock()
	defer f.mu.Unlock()
	if name != "" {
		if old := f.lookupContainerLocked(name); old != nil {
			return errorf(http.StatusConflict, "Conflict. The container name \"/%s\" is already in use by container %q. You have to remove (or rename) that container to be able to reuse that name.", name, old.VM)
		}
	}
	im := f.lookupImageLocked(req.Config.Image)
	if im == nil {
		return errorf(http.StatusNotFound, "No such image: %s", req.Config.Image)
	}
	// Networks are looked up at start, as Docker does; what the request
	// says of an endpoint's live state (a recreate copies an inspect's) is
	// not kept: start assigns it.
	endpoints := map[string]*network.EndpointSettings{}
	if req.NetworkingConfig != nil {
		for n, ep := range req.NetworkingConfig.EndpointsConfig {
			endpoints[n] = configuredEndpoint(ep)
		}
	}
	if len(endpoints) == 0 {
		endpoints["bridge"] = &network.EndpointSettings{}
	}
	for _, b := range binds {
		if v := f.volumes[b.Source]; b.Volume && v != nil && v.BoundTo != "" {
			return errorf(http.StatusConflict, "volume %s is in use by container %s: cpilab's Docker face binds a volume (a fakeiaas disk) into one container at a time", b.Source, v.BoundTo)
		}
	}
	bindVolumes := !(f.cfg.Defect == DefectUnboundOnRecreate && f.removed[name])
	// Named volumes Docker would create on the fly.
	for _, b := range binds {
		if b.Volume && f.volumes[b.Source] == nil && f.creating[b.Source] != nil {
			return errorf(http.StatusConflict, "volume %s is being created by another request; try again", b.Source)
		}
	}
	// As Docker: the binds are taken in order, each named volume created
	// as its bind is reached, so a duplicate mount point is found after
	// the volumes of the binds before it exist (and they stay).
	targets := map[string]bool{}
	for _, b := range binds {
		if targets[b.Target] {
			return errorf(http.StatusBadRequest, "Duplicate mount point: %s", b.Target)
		}
		targets[b.Target] = true
		if b.Volume && f.volumes[b.Source] == nil {
			if _, err := f.createVolumeLocked(r, b.Source, nil); err != nil {
				return err
			}
		}
	}
	c := &ctr{Name: name, Config: req.Config, HostConfig: req.HostConfig, Endpoints: endpoints} // created, not running
	if bindVolumes {
		for _, b := range binds {
			if b.Volume {
				c.Bound = append(c.Bound, binding{Volume: b.Source, Target: b.Target})
			}
		}
	}
	props, err := json.Marshal(map[string]containerProps{containerKey: {Name: name, Config: c.Config, HostConfig: c.HostConfig, Endpoints: endpoints, Bound: c.Bound}})
	if err != nil {
		return errorf(http.StatusBadRequest, "container %s: encoding its configuration: %v", name, err)
	}
	nets, _ := json.Marshal(endpoints)
	agentID := name
	if agentID == "" {
		agentID = "docker-container"
	}
	vm, err := f.cloud.CreateVM(ctx, fakeiaas.VMSpec{AgentID: agentID, StemcellCID: im.Stemcell, CloudProperties: props, Networks: nets, NoBoot: true})
	if err != nil {
		return engineErr("create container "+name, err)
	}
	c.VM = vm.CID
	c.Created = vm.Created.UTC().Format(timeLayout)
	if name == "" {
		c.Name = vm.CID.String()
	}
	for i, b := range c.Bound {
		if err := f.bindLocked(r, c, b); err != nil {
			for _, done := range c.Bound[:i] {
				_ = f.unbindLocked(c, done)
			}
			_ = f.cloud.DeleteVM(ctx, vm.CID)
			return err
		}
	}
	f.containers[c.Name] = c
	delete(f.removed, c.Name)
	writeJSON(w, http.StatusCreated, container.CreateResponse{ID: vm.CID.String(), Warnings: []string{}})
	return nil
}

// bindLocked attaches b's volume's disk to c's VM and moves the volume's
// directory to b.Target in the VM root.
func (f *Face) bindLocked(r *http.Request, c *ctr, b binding) error {
	v := f.volumes[b.Volume]
	if v == nil {
		return errorf(http.StatusNotFound, "get %s: no such volume", b.Volume)
	}
	if _, err := f.cloud.AttachDisk(reqCtx(r, "container_create"), c.VM, v.Disk); err != nil {
		return engineErr(fmt.Sprintf("bind volume %s into container %s", b.Volume, c.Name), err)
	}
	root := f.cloud.VMRoot(c.VM)
	if err := moveIntoRoot(root, b.Target, f.volumeDir(v.Disk)); err != nil {
		_ = f.cloud.DetachDisk(reqCtx(r, "container_create"), c.VM, v.Disk)
		status := http.StatusInternalServerError
		if errors.Is(err, errBadMountPoint) {
			status = http.StatusBadRequest // the client's bind, not the face, is wrong
		}
		return errorf(status, "bind volume %s at %s in container %s: %v", b.Volume, b.Target, c.Name, err)
	}
	v.BoundTo = c.Name
	return nil
}

// unbindLocked moves b's volume's directory back out of c's VM root. The
// disk is detached by the delete_vm that follows.
func (f *Face) unbindLocked(c *ctr, b binding) error {
	v := f.volumes[b.Volume]
	if v == nil {
		return nil
	}
	v.BoundTo = ""
	root := f.cloud.VMRoot(c.VM)
	src := filepath.Join(root, filepath.FromSlash(b.Target))
	// Through os.Root: a mount point reached by a symlink the guest
	// planted (out of the root) is not the volume.
	var fi fs.FileInfo
	rt, err := os.OpenRoot(root)
	if err == nil {
		fi, err = rt.Lstat(strings.TrimPrefix(b.Target, "/"))
		_ = rt.Close()
	}
	if err != nil || !fi.IsDir() {
		// The guest removed or replaced the mount point: the volume's files
		// are gone with it, as they would be if a guest wiped a mount.
		return os.MkdirAll(f.volumeDir(v.Disk), 0o755)
	}
	return os.Rename(src, f.volumeDir(v.Disk))
}

// errBadMountPoint wraps a bind target the container's tree cannot take
// (an existing file, a non-empty directory, a file where a parent
// directory should be): bad input, answered 400.
var errBadMountPoint = errors.New("bad mount point")

// moveIntoRoot moves dir to target (absolute, clean) inside root: parents
// are created inside the root (os.Root: no symlink leads out of it), and
// the target itself must be absent, or an empty directory.
func moveIntoRoot(root, target, dir string) error {
	rel := strings.TrimPrefix(target, "/")
	rt, err := os.OpenRoot(root)
	if err != nil {
		return err
	}
	defer rt.Close()
	if parent := path.Dir(rel); parent != "." {
		if err := rt.MkdirAll(parent, 0o755); err != nil {
			if errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("%w: a parent of %s is not a directory: %v", errBadMountPoint, target, err)
			}
			return err
		}
	}
	fi, err := rt.Lstat(rel)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%w: %s exists and is not a directory", errBadMountPoint, target)
	default:
		if err := rt.Remove(rel); err != nil {
			return fmt.Errorf("%w: %s is not empty: %w", errBadMountPoint, target, err)
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.Rename(dir, filepath.Join(root, filepath.FromSlash(rel)))
}

func (f *Face) containerInspect(w http.ResponseWriter, r *http.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.containerLocked(r.PathValue("name"))
	if err != nil {
		return err
	}
	status := container.StateExited
	if !c.Started {
		status = container.StateCreated
	}
	pid := 0
	if c.Running {
		status, pid = container.StateRunning, 1
	}
	var mounts []container.MountPoint
	for _, b := range c.Bound {
		mounts = append(mounts, container.MountPoint{Type: mount.TypeVolume, Name: b.Volume, Destination: b.Target, Driver: "local", RW: true,
			Source: filepath.Join(f.cloud.VMRoot(c.VM), filepath.FromSlash(b.Target))})
	}
	for _, s := range c.HostConfig.Binds { // host paths: shown, not mounted
		if b, err := parseBind(s); err == nil && !b.Volume {
			mounts = append(mounts, container.MountPoint{Type: mount.TypeBind, Source: b.Source, Destination: b.Target,
				Mode: b.Mode, RW: !strings.Contains(","+b.Mode+",", ",ro,"), Propagation: mount.PropagationRPrivate})
		}
	}
	var img string
	if im := f.lookupImageLocked(c.Config.Image); im != nil {
		img = im.Stemcell.String()
	}
	writeJSON(w, http.StatusOK, container.InspectResponse{
		ID: c.VM.String(), Created: c.Created, Name: "/" + c.Name, Image: img, Driver: "cpilab", Platform: "linux",
		Path: firstArg(c.Config.Cmd), Args: restArgs(c.Config.Cmd),
		State:           &container.State{Status: status, Running: c.Running, Pid: pid},
		Config:          c.Config,
		HostConfig:      c.HostConfig,
		NetworkSettings: &container.NetworkSettings{Networks: c.Endpoints},
		Mounts:          mounts,
	})
	return nil
}

// containerList serves GET /containers/json (all=1: stopped ones too;
// filters {"volume": [NAME]}: those mounting that volume): each with its
// Id, Names, State and volume Mounts, the fields an oracle reads.
func (f *Face) containerList(w http.ResponseWriter, r *http.Request) error {
	var filters map[string][]string
	if s := r.URL.Query().Get("filters"); s != "" {
		if err := json.Unmarshal([]byte(s), &filters); err != nil {
			return errorf(http.StatusBadRequest, "GET /containers/json: filters %q is not JSON: %v", s, err)
		}
	}
	for k := range filters {
		if k != "volume" {
			return errorf(http.StatusBadRequest, "invalid filter '%s': cpilab's Docker face filters containers by volume only", k)
		}
	}
	all := boolParam(r, "all")
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []container.Summary{}
	for _, name := range sortedKeys(f.containers) {
		c := f.containers[name]
		if !all && !c.Running {
			continue
		}
		var mounts []container.MountPoint
		match := len(filters["volume"]) == 0
		for _, b := range c.Bound {
			mounts = append(mounts, container.MountPoint{Type: mount.TypeVolume, Name: b.Volume, Destination: b.Target, Driver: "local", RW: true})
			for _, v := range filters["volume"] {
				match = match || v == b.Volume
			}
		}
		if !match {
			continue
		}
		state := container.StateExited
		if !c.Started {
			state = container.StateCreated
		}
		if c.Running {
			state = container.StateRunning
		}
		out = append(out, container.Summary{ID: c.VM.String(), Names: []string{"/" + c.Name}, Image: c.Config.Image, State: state, Mounts: mounts})
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func firstArg(a []string) string {
	if len(a) == 0 {
		return ""
	}
	return a[0]
}

func restArgs(a []string) []string {
	if len(a) < 2 {
		return []string{}
	}
	return a[1:]
}

// containerStart serves POST /containers/{name}/start: the VM boots
// (fakeiaas reboot_vm: the boot hook runs, Boots counts it), its volumes
// already bound. 304 when it is running. A container stopped or killed
// and started again boots again.
func (f *Face) containerStart(w http.ResponseWriter, r *http.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.containerLocked(r.PathValue("name"))
	if err != nil {
		return err
	}
	if c.Running {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	eps, err := f.connectLocked(c)
	if err != nil {
		return err
	}
	if err := f.cloud.RebootVM(reqCtx(r, "container_start"), c.VM); err != nil {
		return engineErr("start container "+c.Name, err)
	}
	c.Running, c.Started = true, true
	c.Endpoints = eps
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (f *Face) containerKill(w http.ResponseWriter, r *http.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.lookupContainerLocked(r.PathValue("name"))
	if c == nil {
		return errorf(http.StatusNotFound, "Cannot kill container: %s: No such container: %s", r.PathValue("name"), r.PathValue("name"))
	}
	if !c.Running {
		return errorf(http.StatusConflict, "Cannot kill container: %s: Container %s is not running", r.PathValue("name"), c.VM)
	}
	c.Running = false
	f.disconnectLocked(c)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (f *Face) containerStop(w http.ResponseWriter, r *http.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.containerLocked(r.PathValue("name"))
	if err != nil {
		return err
	}
	if !c.Running {
		w.WriteHeader(http.StatusNotModified)
		return nil
	}
	c.Running = false
	f.disconnectLocked(c)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// containerRemove serves DELETE /containers/{name}: the volumes' directories
// move back out of the root, then fakeiaas deletes the VM (detaching its
// disks). A running container needs force=1.
func (f *Face) containerRemove(w http.ResponseWriter, r *http.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, err := f.containerLocked(r.PathValue("name"))
	if err != nil {
		return err
	}
	if c.Running && !boolParam(r, "force") {
		return errorf(http.StatusConflict, "You cannot remove a running container %s. Stop the container before attempting removal or force remove", c.VM)
	}
	var unbindErr error
	for _, b := range c.Bound {
		if err := f.unbindLocked(c, b); err != nil && unbindErr == nil {
			unbindErr = err
		}
	}
	if err := f.cloud.DeleteVM(reqCtx(r, "container_remove"), c.VM); err != nil && !errors.Is(err, cpiv2.ErrVMNotFound) {
		// The container stays: its volumes go back to their mount points.
		root := f.cloud.VMRoot(c.VM)
		for _, b := range c.Bound {
			if v := f.volumes[b.Volume]; v != nil {
				if merr := moveIntoRoot(root, b.Target, f.volumeDir(v.Disk)); merr == nil {
					v.BoundTo = c.Name
				}
			}
		}
		return engineErr("remove container "+c.Name, err)
	}
	delete(f.containers, c.Name)
	if f.cfg.Defect != DefectNone {
		f.removed[c.Name] = true
	}
	if unbindErr != nil {
		return errorf(http.StatusInternalServerError, "container %s removed, but a volume's files could not be moved back: %v", c.Name, unbindErr)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
