package boshdirector

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/storage"
)

// API is the part of *director.Client the adapters call.
type API interface {
	GetJSON(ctx context.Context, path string, out any) error
	Provide(ctx context.Context, req director.ProvideRequest) (string, error)
	Start(ctx context.Context, method, path string, body any) (int64, error)
	Task(ctx context.Context, id int64) (director.TaskView, error)
	Instances(ctx context.Context, deployment string) ([]director.Instance, error)
}

var _ API = (*director.Client)(nil)

// Director is storage.Director over a Director's dynamic disks API.
type Director struct{ api API }

var _ storage.Director = (*Director)(nil)

// NewDirector returns the adapter.
func NewDirector(api API) *Director { return &Director{api: api} }

// Disk is GET /dynamic_disks/:name; a 404 is ok false. InstanceID is the
// instance the disk is attached to ("" when detached).
func (d *Director) Disk(ctx context.Context, name string) (storage.Disk, bool, error) {
	var info director.DiskInfo
	err := d.api.GetJSON(ctx, "/dynamic_disks/"+url.PathEscape(name), &info)
	var ae *director.APIError
	if errors.As(err, &ae) && ae.Status == http.StatusNotFound {
		return storage.Disk{}, false, nil
	}
	if err != nil {
		return storage.Disk{}, false, err
	}
	inst := info.InstanceName() // group/id
	if i := strings.LastIndex(inst, "/"); i >= 0 {
		inst = inst[i+1:]
	}
	return storage.Disk{CID: info.CID, SizeMiB: int64(info.SizeMiB), InstanceID: inst}, true, nil
}

// Provide is POST /dynamic_disks/provide, waiting for its task.
func (d *Director) Provide(ctx context.Context, name string, sizeMiB int64, pool, instance string) error {
	_, err := d.api.Provide(ctx, director.ProvideRequest{DiskName: name, DiskSize: int(sizeMiB), DiskPoolName: pool, InstanceID: instance})
	return err
}

// StartResize is POST /dynamic_disks/:name/resize; the task ID is returned
// at once (the controller polls it with Task).
func (d *Director) StartResize(ctx context.Context, name string, sizeMiB int64) (string, error) {
	id, err := d.api.Start(ctx, http.MethodPost, "/dynamic_disks/"+url.PathEscape(name)+"/resize", map[string]int64{"disk_size": sizeMiB})
	if err != nil {
		return "", err
	}
	return strconv.FormatInt(id, 10), nil
}

// Task is GET /tasks/:id: queued and processing are running, done is done,
// error and cancelled are failed (with the task's result as the reason).
func (d *Director) Task(ctx context.Context, id string) (storage.TaskState, string, error) {
	n, err := strconv.ParseInt(id, 10, 64)
	if err != nil {
		return storage.TaskFailed, "", errors.New("boshdirector: task id " + strconv.Quote(id) + " is not a Director task ID")
	}
	tv, err := d.api.Task(ctx, n)
	if err != nil {
		return storage.TaskRunning, "", err
	}
	switch tv.State {
	case director.TaskDone:
		return storage.TaskDone, "", nil
	case director.TaskError, director.TaskCancelled:
		return storage.TaskFailed, tv.Result, nil
	}
	return storage.TaskRunning, "", nil
}
