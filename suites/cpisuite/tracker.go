package cpisuite

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/cpilab/cpilab/cpiv2"
)

// Kind is a kind of resource the suites create.
type Kind string

// The kinds of tracked resource. An attachment is a (VM, disk) pair whose
// clean-up is detach_disk.
const (
	KindStemcell   Kind = "stemcell"
	KindVM         Kind = "vm"
	KindDisk       Kind = "disk"
	KindSnapshot   Kind = "snapshot"
	KindAttachment Kind = "attachment"
)

// Resource is one tracked resource.
type Resource struct {
	Kind Kind
	CID  string
	VM   string // attachments: the VM CID (CID is the disk)
}

// String names the resource, e.g. "disk disk-1".
func (r Resource) String() string {
	if r.Kind == KindAttachment {
		return fmt.Sprintf("attachment of %s to %s", r.CID, r.VM)
	}
	return fmt.Sprintf("%s %s", r.Kind, r.CID)
}

// Tracker records every resource a spec creates and deletes them in reverse
// order (csi-test resources.go): attachments are detached before their disk
// and VM are deleted. NotFound (and DiskNotAttached for a detach) counts as
// done. It is safe for concurrent use.
type Tracker struct {
	client *Client
	mu     sync.Mutex
	res    []Resource
	failed []Resource // what Cleanup could not delete; guarded by mu
	// why says why each of failed could not be deleted; guarded by mu.
	why map[Resource]error
}

// NewTracker returns a tracker that cleans up through c.
func NewTracker(c *Client) *Tracker { return &Tracker{client: c} }

// Add records r.
func (t *Tracker) Add(r Resource) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.res = append(t.res, r)
}

// Forget drops r (a spec deleted it itself).
func (t *Tracker) Forget(r Resource) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.res = slices.DeleteFunc(t.res, func(x Resource) bool { return x == r })
}

// Failed returns what Cleanup could not delete (to try again later, when
// what held it is gone).
func (t *Tracker) Failed() []Resource {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.failed)
}

// Why returns why Cleanup could not delete r (nil when it could).
func (t *Tracker) Why(r Resource) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.why[r]
}

// Resources returns what is tracked, oldest first.
func (t *Tracker) Resources() []Resource {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.res)
}

// Cleanup deletes every tracked resource and returns the resources it
// could not delete with the reason. It works in reverse order of
// dependency: attachments are detached, then snapshots, VMs, disks and
// stemcells are deleted, each kind newest first; the deletions of one kind
// run in parallel (they are independent resources, as the Director deletes
// instances in parallel), except the detaches from one VM, which run one
// after the other (the Director holds the VM's lock for each).
func (t *Tracker) Cleanup(ctx context.Context) error {
	t.mu.Lock()
	res := slices.Clone(t.res)
	t.res = nil
	t.mu.Unlock()
	slices.Reverse(res)
	var errs []error
	var mu sync.Mutex
	for _, kind := range []Kind{KindAttachment, KindSnapshot, KindVM, KindDisk, KindStemcell} {
		// Detaches from one VM run one after the other, as the Director's
		// VM lock has them; everything else in parallel.
		lanes := map[string][]Resource{}
		var order []string
		for i, r := range res {
			if r.Kind != kind {
				continue
			}
			lane := fmt.Sprint(i)
			if kind == KindAttachment {
				lane = "vm " + r.VM
			}
			if _, ok := lanes[lane]; !ok {
				order = append(order, lane)
			}
			lanes[lane] = append(lanes[lane], r)
		}
		var wg sync.WaitGroup
		for _, lane := range order {
			wg.Go(func() {
				for _, r := range lanes[lane] {
					if err := t.delete(ctx, r); err != nil {
						mu.Lock()
						errs = append(errs, fmt.Errorf("cleaning up %s: %w", r, err))
						mu.Unlock()
						t.mu.Lock()
						t.failed = append(t.failed, r)
						if t.why == nil {
							t.why = map[Resource]error{}
						}
						t.why[r] = fmt.Errorf("cleaning up %s: %w", r, err)
						t.mu.Unlock()
					}
				}
			})
		}
		wg.Wait()
	}
	for _, r := range res {
		if !slices.Contains([]Kind{KindAttachment, KindSnapshot, KindVM, KindDisk, KindStemcell}, r.Kind) {
			errs = append(errs, fmt.Errorf("cleaning up %s: unknown resource kind", r))
		}
	}
	return errors.Join(errs...)
}

func (t *Tracker) delete(ctx context.Context, r Resource) error {
	var x *Exchange
	var done []error
	switch r.Kind {
	case KindAttachment:
		x = t.client.Call(ctx, cpiv2.MethodDetachDisk, r.VM, r.VM, r.CID)
		done = []error{cpiv2.ErrDiskNotAttached, cpiv2.ErrDiskNotFound, cpiv2.ErrVMNotFound}
	case KindVM:
		x = t.client.Call(ctx, cpiv2.MethodDeleteVM, r.CID, r.CID)
		done = []error{cpiv2.ErrVMNotFound}
	case KindDisk:
		x = t.client.Call(ctx, cpiv2.MethodDeleteDisk, "", r.CID)
		done = []error{cpiv2.ErrDiskNotFound}
	case KindSnapshot:
		x = t.client.Call(ctx, cpiv2.MethodDeleteSnapshot, "", r.CID)
		done = []error{cpiv2.ErrDiskNotFound}
	case KindStemcell:
		x = t.client.Call(ctx, cpiv2.MethodDeleteStemcell, "", r.CID)
	default:
		return fmt.Errorf("unknown resource kind %q", r.Kind)
	}
	err := x.Err()
	if err == nil {
		return nil
	}
	for _, d := range done {
		if errors.Is(err, d) {
			return nil
		}
	}
	return fmt.Errorf("%w (request %s)", err, x.Request)
}
