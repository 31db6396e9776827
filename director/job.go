package director

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director/store"
)

// jobSpec is a job type: its queue and its body.
type jobSpec struct {
	queue string
	run   func(j *job, args json.RawMessage) (any, error)
}

// jobSpecs lists every job, by task type.
var jobSpecs map[string]jobSpec

func init() {
	jobSpecs = map[string]jobSpec{
		jobProvide:           {QueueDynamicDisks, decoded((*job).provideDynamicDisk)},
		jobCreate:            {QueueDynamicDisks, decoded((*job).createDynamicDisk)},
		jobAttach:            {QueueDynamicDisks, decoded((*job).attachDynamicDisk)},
		jobDetach:            {QueueDynamicDisks, decoded((*job).detachDynamicDisk)},
		jobDelete:            {QueueDynamicDisks, decoded((*job).deleteDynamicDisk)},
		jobResize:            {QueueDynamicDisks, decoded((*job).resizeDynamicDisk)},
		jobUploadStemcell:    {QueueNormal, decoded((*job).uploadStemcell)},
		jobUpdateCloudConfig: {QueueUrgent, decoded((*job).updateCloudConfig)},
		jobDeploy:            {QueueNormal, decoded((*job).deploy)},
		jobInstanceState:     {QueueNormal, decoded((*job).changeInstanceState)},
		jobDeleteVM:          {QueueNormal, decoded((*job).deleteVMJob)},
		jobDeleteDeployment:  {QueueNormal, decoded((*job).deleteDeployment)},
		jobDeleteOrphans:     {QueueNormal, decoded((*job).deleteOrphanedDisks)},
	}
}

// Task types.
const (
	jobProvide           = "provide_dynamic_disk"
	jobCreate            = "create_dynamic_disk"
	jobAttach            = "attach_dynamic_disk"
	jobDetach            = "detach_dynamic_disk"
	jobDelete            = "delete_dynamic_disk"
	jobResize            = "resize_dynamic_disk"
	jobUploadStemcell    = "upload_stemcell"
	jobUpdateCloudConfig = "update_cloud_config"
	jobDeploy            = "deploy"
	jobInstanceState     = "change_instance_state"
	jobDeleteVM          = "delete_vm"
	jobDeleteDeployment  = "delete_deployment"
	jobDeleteOrphans     = "delete_orphaned_disks"
)

func decoded[A any](fn func(*job, A) (any, error)) func(*job, json.RawMessage) (any, error) {
	return func(j *job, raw json.RawMessage) (any, error) {
		var a A
		if len(raw) > 0 {
			if err := json.Unmarshal(raw, &a); err != nil {
				return nil, fmt.Errorf("decode task arguments: %w", err)
			}
		}
		return fn(j, a)
	}
}

// job is one running task: its locks, its logs, its calls.
type job struct {
	d    *Director
	task *Task
	held []*heldLocks // released when the task ends
}

func (j *job) knobs() Knobs { return j.d.cfg.Knobs }

// debugf appends to the task's debug log.
func (j *job) debugf(format string, args ...any) {
	line := fmt.Sprintf("%s %s", j.d.r.Now().UTC().Format(time.RFC3339Nano), fmt.Sprintf(format, args...))
	j.task.Debug = append(j.task.Debug, line)
}

// step runs fn as one event-log step. It is a checkpoint: the job's leases
// are renewed first, and a lease lost (one a timer renewal found lost, or
// one expired and taken over) fails the step with ErrLockLost.
func (j *job) step(stage, what string, fn func() error) error {
	for _, h := range j.held {
		if err := h.renew(); err != nil {
			return err
		}
	}
	j.task.Events = append(j.task.Events, TaskEvent{Time: j.d.r.Now(), Stage: stage, Task: what, State: "started"})
	_ = j.d.saveTask(j.task)
	err := fn()
	ev := TaskEvent{Time: j.d.r.Now(), Stage: stage, Task: what, State: "finished"}
	if err != nil {
		ev.State, ev.Error = "failed", err.Error()
	}
	j.task.Events = append(j.task.Events, ev)
	_ = j.d.saveTask(j.task)
	return err
}

// lock acquires names for the rest of the job.
func (j *job) lock(timeout time.Duration, names ...string) error {
	_, err := j.acquire(timeout, names...)
	return err
}

// acquire takes names as one set, held until the job ends or release(h);
// no names gives a nil set.
func (j *job) acquire(timeout time.Duration, names ...string) (*heldLocks, error) {
	if len(names) == 0 {
		return nil, nil
	}
	h, err := j.d.locks.acquire(names, j.task.ID, timeout)
	if err != nil {
		return nil, err
	}
	j.debugf("acquired %v", h.names)
	j.held = append(j.held, h)
	return h, nil
}

// release frees one set taken by acquire.
func (j *job) release(h *heldLocks) {
	if h == nil {
		return
	}
	h.release()
	j.held = slices.DeleteFunc(j.held, func(x *heldLocks) bool { return x == h })
}

// vmLockNames names the VM locks of instances, to hold for the whole job;
// none under VMLockPerCPICallOnly (then vmCall takes them per call).
func (j *job) vmLockNames(instanceIDs ...string) []string {
	if j.knobs().VMLockPerCPICallOnly {
		return nil
	}
	var out []string
	for _, id := range instanceIDs {
		if id != "" {
			out = append(out, vmLock(id))
		}
	}
	return out
}

// diskLockNames names the disk-name locks, unless NoDiskNameLock.
func (j *job) diskLockNames(names ...string) []string {
	if j.knobs().NoDiskNameLock {
		return nil
	}
	var out []string
	for _, n := range names {
		out = append(out, diskLock(n))
	}
	return out
}

// vmCall runs one CPI call on VM vmCID. Under VMLockPerCPICallOnly it
// holds the VM lock for that call alone, named by the VM CID as
// upstream's with_vm_lock (lock_helper.rb:19, "lock:vm:<vm_cid>");
// otherwise the job already holds the instance's VM lock.
func (j *job) vmCall(vmCID string, fn func() error) error {
	if !j.knobs().VMLockPerCPICallOnly {
		return fn()
	}
	h, err := j.d.locks.acquire([]string{vmLock(vmCID)}, j.task.ID, j.d.cfg.VMLockTimeout)
	if err != nil {
		return err
	}
	defer h.release()
	return fn()
}

// cpiCtx is the context of a CPI call about something on a stemcell of
// api_version n (0: none).
func (j *job) cpiCtx(n int) context.Context {
	ctx := context.Background()
	if n > 0 {
		ctx = cpiv2.WithStemcellAPIVersion(ctx, n)
	}
	return ctx
}

// load reads one record; ok is false when absent.
func (j *job) load(kind store.Kind, key string, v any) (bool, error) {
	var ok bool
	err := j.d.st.View(func(tx store.Tx) error {
		var err error
		ok, err = tx.Get(kind, key, v)
		return err
	})
	return ok, err
}

// update runs fn in one store transaction.
func (j *job) update(fn func(tx store.Tx) error) error { return j.d.st.Update(fn) }

// cloudConfig returns the latest cloud config (empty when none was set).
func (d *Director) cloudConfig() (*CloudConfig, error) {
	var cc CloudConfig
	err := d.st.View(func(tx store.Tx) error {
		_, err := tx.Get(store.CloudConfigs, "latest", &cc)
		return err
	})
	return &cc, err
}

// instance reads an instance, failing with a 404 error when absent.
func (d *Director) instance(id string) (Instance, error) {
	var in Instance
	var ok bool
	err := d.st.View(func(tx store.Tx) error {
		var err error
		ok, err = tx.Get(store.Instances, id, &in)
		return err
	})
	if err != nil {
		return in, err
	}
	if !ok {
		return in, notFound("instance %q not found", id)
	}
	return in, nil
}

// vm reads a VM record.
func (d *Director) vm(cid string) (VM, bool, error) {
	var v VM
	var ok bool
	err := d.st.View(func(tx store.Tx) error {
		var err error
		ok, err = tx.Get(store.VMs, cid, &v)
		return err
	})
	return v, ok, err
}

// dynamicDisk reads a dynamic disk record.
func (d *Director) dynamicDisk(name string) (DynamicDisk, bool, error) {
	var dd DynamicDisk
	var ok bool
	err := d.st.View(func(tx store.Tx) error {
		var err error
		ok, err = tx.Get(store.DynamicDisks, name, &dd)
		return err
	})
	return dd, ok, err
}

// listDynamicDisks returns the records for which keep is true (nil: all).
func (d *Director) listDynamicDisks(keep func(*DynamicDisk) bool) ([]DynamicDisk, error) {
	var out []DynamicDisk
	err := d.st.View(func(tx store.Tx) error {
		return tx.List(store.DynamicDisks, func(_ string, raw []byte) error {
			var dd DynamicDisk
			if err := json.Unmarshal(raw, &dd); err != nil {
				return err
			}
			if keep == nil || keep(&dd) {
				out = append(out, dd)
			}
			return nil
		})
	})
	return out, err
}

// listAll lists the records of kind for which keep is true (nil: all);
// never nil, so an empty list encodes as [].
func listAll[T any](st store.Store, kind store.Kind, keep func(*T) bool) ([]T, error) {
	out := []T{}
	err := st.View(func(tx store.Tx) error {
		return tx.List(kind, func(_ string, raw []byte) error {
			var v T
			if err := json.Unmarshal(raw, &v); err != nil {
				return err
			}
			if keep == nil || keep(&v) {
				out = append(out, v)
			}
			return nil
		})
	})
	return out, err
}
