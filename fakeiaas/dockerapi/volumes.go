package dockerapi

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/api/types/volume"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/rt"
)

// maxSmallBody bounds the JSON bodies of volume, network and exec calls.
const maxSmallBody = 64 << 10

func (f *Face) volumeView(v *vol) volume.Volume {
	mp := f.volumeDir(v.Disk)
	if c := f.containers[v.BoundTo]; c != nil {
		for _, b := range c.Bound {
			if b.Volume == v.Name {
				mp = filepath.Join(f.cloud.VMRoot(c.VM), filepath.FromSlash(b.Target))
			}
		}
	}
	// Labels and Options are null when none were given, as Docker has them.
	return volume.Volume{Name: v.Name, Driver: "local", Mountpoint: mp, Scope: "local", CreatedAt: v.Created,
		Labels: v.Labels}
}

// createVolumeLocked creates a fakeiaas disk and the volume's directory,
// with the face's lock held (a container create binding a volume that does
// not exist yet).
func (f *Face) createVolumeLocked(r *http.Request, name string, labels map[string]string) (*vol, error) {
	d, err := f.createDisk(r, name, labels)
	if err != nil {
		return nil, err
	}
	v := &vol{Name: name, Disk: d.CID, Labels: labels, Created: d.Created.UTC().Format(timeLayout)}
	f.volumes[name] = v
	return v, nil
}

// createDisk makes the fakeiaas disk and the directory of volume name; it
// touches no table of the face.
func (f *Face) createDisk(r *http.Request, name string, labels map[string]string) (fakeiaas.Disk, error) {
	props, err := json.Marshal(map[string]any{volumeKey: map[string]any{"name": name, "labels": labels}})
	if err != nil {
		return fakeiaas.Disk{}, errorf(http.StatusBadRequest, "volume %s: labels: %v", name, err)
	}
	d, err := f.cloud.CreateDisk(reqCtx(r, "volume_create"), fakeiaas.DiskSpec{SizeMiB: f.cfg.VolumeSizeMiB, CloudProperties: props})
	if err != nil {
		return fakeiaas.Disk{}, engineErr("create volume "+name, err)
	}
	if err := os.MkdirAll(f.volumeDir(d.CID), 0o755); err != nil {
		_ = f.cloud.DeleteDisk(reqCtx(r, "volume_create"), d.CID)
		return fakeiaas.Disk{}, errorf(http.StatusInternalServerError, "create volume %s: %v", name, err)
	}
	return d, nil
}

// volumeCreate serves POST /volumes/create. Creating an existing volume
// returns it, as Docker does.
func (f *Face) volumeCreate(w http.ResponseWriter, r *http.Request) error {
	var req volume.CreateRequest
	if err := decodeBody(r, maxSmallBody, &req); err != nil {
		return err
	}
	if req.Driver != "" && req.Driver != "local" {
		return errorf(http.StatusNotFound, "plugin %q not found: cpilab's Docker face has the local volume driver only", req.Driver)
	}
	if req.Name == "" {
		return errorf(http.StatusBadRequest, "create volume: Name is required (cpilab's Docker face does not name anonymous volumes)")
	}
	if !volumeName.MatchString(req.Name) {
		return errorf(http.StatusBadRequest, "create %s: %q includes invalid characters for a local volume name, only \"[a-zA-Z0-9][a-zA-Z0-9_.-]\" are allowed. If you intended to pass a host directory, use absolute path", req.Name, req.Name)
	}
	v, err := f.createVolume(r, req.Name, req.Labels)
	if err != nil {
		return err
	}
	f.mu.Lock()
	view := f.volumeView(v)
	f.mu.Unlock()
	writeJSON(w, http.StatusCreated, view)
	return nil
}

// createVolume returns the volume called name, creating it when absent.
// The engine's create_disk runs without the face's lock, so that creates
// of different volumes proceed in parallel as they do on a Docker daemon
// (and as a CPI's parallel create_disk calls reach the cloud); a create of
// a name already being created waits for that one and returns its volume.
func (f *Face) createVolume(r *http.Request, name string, labels map[string]string) (*vol, error) {
	f.mu.Lock()
	for {
		if v := f.volumes[name]; v != nil {
			f.mu.Unlock()
			return v, nil
		}
		ev := f.creating[name]
		if ev == nil {
			break
		}
		f.mu.Unlock()
		ev.Wait(0)
		f.mu.Lock()
	}
	ev := rt.NewEvent(f.cfg.Runtime)
	f.creating[name] = ev
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.creating, name)
		f.mu.Unlock()
		ev.Set()
	}()
	d, err := f.createDisk(r, name, labels)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	v := &vol{Name: name, Disk: d.CID, Labels: labels, Created: d.Created.UTC().Format(timeLayout)}
	f.volumes[name] = v
	return v, nil
}

func (f *Face) volumeInspect(w http.ResponseWriter, r *http.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.volumes[r.PathValue("name")]
	if v == nil {
		return errorf(http.StatusNotFound, "get %s: no such volume", r.PathValue("name"))
	}
	writeJSON(w, http.StatusOK, f.volumeView(v))
	return nil
}

func (f *Face) volumeList(w http.ResponseWriter, r *http.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := volume.ListResponse{Volumes: []volume.Volume{}, Warnings: []string{}}
	for _, n := range sortedKeys(f.volumes) {
		out.Volumes = append(out.Volumes, f.volumeView(f.volumes[n]))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// volumeRemove serves DELETE /volumes/{name}: fakeiaas delete_disk and the
// directory. A volume bound into a container is in use (409), even with
// force, as in Docker. A volume that does not exist is 404, or 204 with
// force (moby's volume router: force purges, and a missing volume is
// nothing to purge).
func (f *Face) volumeRemove(w http.ResponseWriter, r *http.Request) error {
	name := r.PathValue("name")
	f.mu.Lock()
	defer f.mu.Unlock()
	v := f.volumes[name]
	if v == nil {
		if boolParam(r, "force") {
			w.WriteHeader(http.StatusNoContent)
			return nil
		}
		return errorf(http.StatusNotFound, "get %s: no such volume", name)
	}
	if c := f.containers[v.BoundTo]; c != nil {
		return errorf(http.StatusConflict, "remove %s: volume is in use - [%s]", name, c.VM)
	}
	if err := f.cloud.DeleteDisk(reqCtx(r, "volume_remove"), v.Disk); err != nil && !errors.Is(err, cpiv2.ErrDiskNotFound) {
		return engineErr("remove volume "+name, err)
	}
	delete(f.volumes, name)
	if err := os.RemoveAll(f.volumeDir(v.Disk)); err != nil {
		return errorf(http.StatusInternalServerError, "remove %s: the disk is deleted but its directory is not: %v", name, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ---- networks (the face's own; fakeiaas has no networks) ----

func netID(name string) string {
	s := sha256.Sum256([]byte("cpilab-network:" + name))
	return hex.EncodeToString(s[:])
}

func (f *Face) networkCreate(w http.ResponseWriter, r *http.Request) error {
	var req network.CreateRequest
	if err := decodeBody(r, maxSmallBody, &req); err != nil {
		return err
	}
	if req.Name == "" {
		return errorf(http.StatusBadRequest, "create network: Name is required")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.networks[req.Name] != nil {
		return errorf(http.StatusConflict, "network with name %s already exists", req.Name)
	}
	if len(f.networks) >= MaxNetworks {
		return errorf(http.StatusBadRequest, "create network %s: the face holds %d networks, its limit (dockerapi.MaxNetworks)", req.Name, MaxNetworks)
	}
	n := &netw{ID: netID(req.Name), Name: req.Name, Driver: req.Driver}
	if n.Driver == "" {
		n.Driver = "bridge"
	}
	if req.IPAM == nil || len(req.IPAM.Config) == 0 {
		// Docker gives a network created without a subnet one from its
		// default address pools.
		if n.Subnet = f.defaultPoolLocked(); n.Subnet == "" {
			return errorf(http.StatusForbidden, "could not find an available, non-overlapping IPv4 address pool among the defaults to assign to the network")
		}
		n.Gateway = netip.MustParsePrefix(n.Subnet).Addr().Next().String()
	} else {
		n.Subnet = req.IPAM.Config[0].Subnet.String()
		if gw := req.IPAM.Config[0].Gateway; gw.IsValid() {
			n.Gateway = gw.String()
		}
		for _, o := range f.networks {
			if o.Subnet != "" && o.Subnet == n.Subnet && versionLess(f.cfg.MaxAPIVersion, "1.42") {
				// Docker 20.10 (API 1.41): the IPAM refuses the pool.
				return errorf(http.StatusForbidden, "Pool overlaps with other one on this address space")
			}
			if o.Subnet != "" && o.Subnet == n.Subnet {
				return errorf(http.StatusForbidden, "cannot create network %s (br-%s): conflicts with network %s (br-%s): networks have overlapping IPv4", n.ID, n.ID[:12], o.ID, o.ID[:12])
			}
		}
	}
	f.networks[req.Name] = n
	writeJSON(w, http.StatusCreated, network.CreateResponse{ID: n.ID})
	return nil
}

func (f *Face) lookupNetworkLocked(name string) *netw {
	if n := f.networks[name]; n != nil {
		return n
	}
	for _, n := range f.networks {
		if n.ID == name {
			return n
		}
	}
	return nil
}

func (f *Face) networkInspect(w http.ResponseWriter, r *http.Request) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.lookupNetworkLocked(r.PathValue("name"))
	if n == nil {
		return errorf(http.StatusNotFound, "network %s not found", r.PathValue("name"))
	}
	ipam := map[string]any{"Driver": "default", "Options": nil, "Config": []any{}}
	if pfx, err := netip.ParsePrefix(n.Subnet); err == nil {
		c := map[string]string{"Subnet": pfx.Masked().String()}
		if n.Gateway != "" {
			c["Gateway"] = n.Gateway
		}
		ipam["Config"] = []any{c}
	}
	writeJSON(w, http.StatusOK, map[string]any{"Name": n.Name, "Id": n.ID, "Driver": n.Driver, "Scope": "local", "IPAM": ipam})
	return nil
}

// networkConnect serves POST /networks/{name}/connect: the endpoint is
// recorded on the container (inspect shows it; a recreate copies it).
func (f *Face) networkConnect(w http.ResponseWriter, r *http.Request) error {
	var req network.ConnectRequest
	if err := decodeBody(r, maxSmallBody, &req); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := f.lookupNetworkLocked(r.PathValue("name"))
	if n == nil {
		return errorf(http.StatusNotFound, "network %s not found", r.PathValue("name"))
	}
	c, err := f.containerLocked(req.Container)
	if err != nil {
		return err
	}
	if c.Endpoints[n.Name] != nil {
		return errorf(http.StatusForbidden, "endpoint with name %s already exists in network %s", c.Name, n.Name)
	}
	ep := req.EndpointConfig
	if ep == nil {
		ep = &network.EndpointSettings{}
	}
	c.Endpoints[n.Name] = ep
	w.WriteHeader(http.StatusOK)
	return nil
}
