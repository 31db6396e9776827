package director

import "net/http"

// resizeDisk is POST /dynamic_disks/:disk_name/resize {"disk_size": MiB},
// a cpilab extension (upstream has no resize). It needs the create scope
// (bosh.dynamic-disks.create) or admin: upstream removed
// bosh.dynamic_disks.update, and growing a disk makes storage as create does.
func (a *API) resizeDisk(w http.ResponseWriter, r *http.Request, p Principal) error {
	b, err := readJSONObject(r, a.d.cfg.Knobs)
	if err != nil {
		return err
	}
	req := ResizeRequest{DiskName: r.PathValue("name")}
	if err := fields(b.intTo(&req.DiskSize, "disk_size", 1)); err != nil {
		return err
	}
	id, err := a.d.ResizeDynamicDisk(p.Name, req)
	return a.redirectTask(w, id, err)
}
