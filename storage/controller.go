package storage

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Volume is one logical volume the controller sizes: a dynamic disk of the
// Director, named by the volume's logical identity so that its budget and
// history survive the disk being replaced.
type Volume struct {
	// ID is the logical identity (e.g. "pg-main/data"); status is keyed by it.
	ID string
	// DiskName is the dynamic disk's name at the Director.
	DiskName string
	// InstanceID and DiskPool are where the disk is provided.
	InstanceID, DiskPool string
	Policy               Policy
}

// Disk is the Director's view of a dynamic disk.
type Disk struct {
	CID        string
	SizeMiB    int64
	InstanceID string
}

// TaskState is the state of a Director task the controller started.
type TaskState int

// Task states.
const (
	TaskRunning TaskState = iota
	TaskDone
	TaskFailed
	// TaskRefused: the provider refused the modification at once (a quota,
	// a minimum interval, a maximum size): no budget is used.
	TaskRefused
)

// Director is what the controller needs of the Director's dynamic disks API
// (with cpilab's resize extension).
type Director interface {
	// Disk reports the dynamic disk named name; ok is false when absent.
	Disk(ctx context.Context, name string) (d Disk, ok bool, err error)
	// Provide makes sure the disk exists at sizeMiB, attached to instance.
	Provide(ctx context.Context, name string, sizeMiB int64, pool, instance string) error
	// StartResize starts resizing the disk and returns the task's id.
	StartResize(ctx context.Context, name string, sizeMiB int64) (task string, err error)
	// Task reports a started task's state and, when it ended badly, why.
	Task(ctx context.Context, id string) (TaskState, string, error)
}

// UsageSource reports a disk's size and used space as the VM sees them
// (the agent's dynamic_disk_usage).
type UsageSource interface {
	Usage(ctx context.Context, instanceID, diskCID string) (sizeMiB, usedMiB int64, err error)
}

// StatusStore keeps each volume's Status durably, keyed by Volume.ID.
type StatusStore interface {
	Load(ctx context.Context, id string) (Status, bool, error)
	Save(ctx context.Context, id string, st Status) error
}

// Config configures a Controller. Director, Usage and Store are required.
type Config struct {
	Director Director
	Usage    UsageSource
	Store    StatusStore
	// Profile selects reference or fork behaviour (default Reference).
	Profile Profile
	// ProviderMaxMiB is the cloud's largest disk (0: unknown).
	ProviderMaxMiB int64
}

// Controller reconciles volumes one observation at a time. It keeps no state
// of its own between calls: everything is in the StatusStore, so a restarted
// controller resumes where the last one stopped.
type Controller struct{ cfg Config }

// New returns a Controller.
func New(cfg Config) (*Controller, error) {
	if cfg.Director == nil || cfg.Usage == nil || cfg.Store == nil {
		return nil, errors.New("storage: Config needs Director, Usage and Store")
	}
	return &Controller{cfg: cfg}, nil
}

// ErrDirector wraps failures to reach the Director: nothing was done.
var ErrDirector = errors.New("director unavailable")

// Reconcile observes v at now, decides, acts through the Director and saves
// the status. It returns the decision it made. v.Policy must be validated.
func (c *Controller) Reconcile(ctx context.Context, v Volume, now time.Time) (Decision, error) {
	st, _, err := c.cfg.Store.Load(ctx, v.ID)
	if err != nil {
		return Decision{}, fmt.Errorf("loading status of %s: %w", v.ID, err)
	}
	prof := c.cfg.Profile
	o := Observation{At: now, ProviderMaxMiB: c.cfg.ProviderMaxMiB}

	if st.PendingTask != "" {
		state, why, err := c.cfg.Director.Task(ctx, st.PendingTask)
		if err != nil {
			return Decision{}, fmt.Errorf("%w: task %s of %s: %v", ErrDirector, st.PendingTask, v.ID, err)
		}
		switch state {
		case TaskRunning:
			o.InFlight = true
		case TaskDone:
			st.complete(Succeeded, "")
		case TaskFailed:
			st.complete(Failed, why)
		case TaskRefused:
			st.complete(Refused, why)
		}
	}

	disk, ok, err := c.cfg.Director.Disk(ctx, v.DiskName)
	if err != nil {
		return Decision{}, fmt.Errorf("%w: disk %s: %v", ErrDirector, v.DiskName, err)
	}
	if !ok {
		// A new (or replaced) disk starts at the effective size, clamped to
		// the policy in force: new replicas match the operational size.
		size := min(max(st.EffectiveSizeMiB, v.Policy.RequestMiB), v.Policy.LimitMiB)
		if err := c.cfg.Director.Provide(ctx, v.DiskName, size, v.DiskPool, v.InstanceID); err != nil {
			return Decision{}, fmt.Errorf("%w: providing %s: %v", ErrDirector, v.DiskName, err)
		}
		st.EffectiveSizeMiB = size
		d := Decision{Kind: None, FromMiB: size, State: StateWaitingForDiskStatus,
			Blocked: []Condition{{Gate: GateNoStatus, Message: "disk provided; waiting for its first usage report"}}}
		Record(&st, d, now, Issued, "", prof)
		return d, c.save(ctx, v, st)
	}
	if !o.InFlight {
		size, used, err := c.cfg.Usage.Usage(ctx, disk.InstanceID, disk.CID)
		if err == nil {
			o.Known, o.SizeMiB, o.UsedMiB = true, size, used
		}
	}
	if o.SizeMiB == 0 {
		o.SizeMiB = disk.SizeMiB
	}
	d := Decide(v.Policy, st, o, prof)
	if d.Kind == None {
		Record(&st, d, now, Issued, "", prof)
		return d, c.save(ctx, v, st)
	}
	task, err := c.cfg.Director.StartResize(ctx, v.DiskName, d.TargetMiB)
	if err != nil {
		// Not issued: no budget used, the block is visible.
		st.Conditions = append(d.Blocked, Condition{Gate: GateProvider, Message: fmt.Sprintf("resize to %d MiB not started: %v", d.TargetMiB, err)})
		if serr := c.save(ctx, v, st); serr != nil {
			return d, serr
		}
		return d, fmt.Errorf("%w: resizing %s: %v", ErrDirector, v.DiskName, err)
	}
	Record(&st, d, now, Issued, "", prof)
	st.PendingTask = task
	return d, c.save(ctx, v, st)
}

func (c *Controller) save(ctx context.Context, v Volume, st Status) error {
	if err := c.cfg.Store.Save(ctx, v.ID, st); err != nil {
		return fmt.Errorf("saving status of %s: %w", v.ID, err)
	}
	return nil
}

// complete records the outcome of the pending action.
func (st *Status) complete(r Result, why string) {
	st.PendingTask = ""
	if n := len(st.History); n > 0 {
		a := &st.History[n-1]
		if r == Refused && a.CountsAgainstBudget() && st.Counter > 0 {
			st.Counter--
		}
		a.Result, a.Message = r, why
		if r == Succeeded {
			st.EffectiveSizeMiB = a.ToMiB
		}
		st.setLastAction(a)
	}
}
