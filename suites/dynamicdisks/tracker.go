package dynamicdisks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"

	"github.com/cpilab/cpilab/director"
)

// resource is one thing the suite made: a dynamic disk (by name) or a
// deployment.
type resource struct {
	kind string // "disk" or "deployment"
	name string
}

func (r resource) String() string { return fmt.Sprintf("%s %q", r.kind, r.name) }

// tracker records every disk name and deployment the suite creates, before
// it asks for it, and deletes them in reverse order at the end (csi-test
// resources.go). A name the director does not know counts as deleted.
type tracker struct {
	s   *session
	mu  sync.Mutex
	res []resource // guarded by mu; oldest first
}

func (t *tracker) add(kind, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := resource{kind: kind, name: name}
	if !slices.Contains(t.res, r) {
		t.res = append(t.res, r)
	}
}

// forget stops tracking kind name (it is gone).
func (t *tracker) forget(kind, name string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.res = slices.DeleteFunc(t.res, func(r resource) bool { return r == resource{kind: kind, name: name} })
}

// cleanup deletes everything tracked, newest first. When the dynamic_disks
// queue is found not to run tasks it stops deleting disks (each would wait
// forever) and lists what it left.
func (t *tracker) cleanup(ctx context.Context) error {
	t.mu.Lock()
	res := slices.Clone(t.res)
	t.res = nil
	t.mu.Unlock()
	var errs []error
	var left []string
	dead := false
	for i := len(res) - 1; i >= 0; i-- {
		r := res[i]
		if r.kind == "disk" && dead {
			left = append(left, r.name)
			continue
		}
		err := t.delete(ctx, r)
		var st *errStuck
		if errors.As(err, &st) {
			dead = true
			left = append(left, r.name)
			errs = append(errs, fmt.Errorf("cleaning up %s: %w", r, err))
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("cleaning up %s: %w", r, err))
		}
	}
	if len(left) > 0 {
		errs = append(errs, fmt.Errorf("the dynamic_disks queue runs no task: %d disks not deleted: %q", len(left), left))
	}
	return errors.Join(errs...)
}

func (t *tracker) delete(ctx context.Context, r resource) error {
	s := t.s
	var x *Exchange
	who, limit := s.disks, s.cfg.Timeouts.Task
	switch r.kind {
	case "disk":
		// Detach first: a director with race (e) deletes attached disks
		// without detaching them. An unknown name fails the detach; the
		// DELETE then says whether the disk is gone.
		if err := t.detach(ctx, r.name); err != nil {
			return err
		}
		x = s.send(ctx, who, http.MethodDelete, diskPath(r.name, ""), nil, "")
	case "deployment":
		who, limit = s.admin, s.cfg.Timeouts.Deploy
		x = s.send(ctx, who, http.MethodDelete, "/deployments/"+r.name, nil, "")
	default:
		return fmt.Errorf("unknown resource kind %q", r.kind)
	}
	if x.Err == nil && x.Status == http.StatusNotFound {
		return nil // unknown: done
	}
	id := x.taskID()
	if id == 0 {
		return fmt.Errorf("%s → %s", x.RequestString(), x.ResponseString())
	}
	tv, err := s.waitTask(ctx, id, limit)
	if err != nil {
		return err
	}
	if tv.State != director.TaskDone {
		return fmt.Errorf("%s: %s", x.RequestString(), taskString(tv))
	}
	return nil
}

// detach detaches disk name, ignoring a refusal or a failed task (an
// unknown name), but not a queue that runs no task.
func (t *tracker) detach(ctx context.Context, name string) error {
	x := t.s.send(ctx, t.s.disks, http.MethodPost, diskPath(name, "/detach"), nil, "")
	id := x.taskID()
	if id == 0 {
		return nil
	}
	_, err := t.s.waitTask(ctx, id, t.s.cfg.Timeouts.Task)
	var st *errStuck
	if errors.As(err, &st) {
		return err
	}
	return nil
}

// has reports whether kind name is tracked.
func (t *tracker) has(kind, name string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Contains(t.res, resource{kind: kind, name: name})
}
