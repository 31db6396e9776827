package cpisuite

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cpilab/cpilab/cpimodel"
)

// observer is the contract model's view of a cloud cpilab cannot inspect
// (a real cloud, certified with --config): what the CPI's own read
// methods show of the VMs and disks the run knows of. has_vm says which
// VMs exist, has_disk which disks, get_disks which disks each VM holds.
// The model judges every call against that view, as it does against an
// oracle's; what no read method shows (stemcells, snapshots, metadata,
// sizes, cloud_properties, the registry) is named in State.Unseen, and a
// read method the CPI does not implement (NotImplemented) leaves what it
// would show unseen too, never judged.
type observer struct {
	w *wire // the CPI, without a framer: the observer's reads are not the run's calls

	mu         sync.Mutex
	vms, disks map[string]bool // the CIDs the run knows of and has not seen gone
	unseen     map[string]string
	// gen counts the calls that began or ended and the CIDs learned:
	// a view read at one gen holds until the next.
	gen    uint64
	cached *cpimodel.State
	cgen   uint64
	reads  atomic.Int64
}

var (
	observersMu sync.Mutex
	observers   = map[string]*observer{}
)

// observerFor returns the process's observer of the cloud the CPI command
// argv reaches.
func observerFor(argv []string, timeouts Timeouts) *observer {
	key := strings.Join(argv, "\x00")
	observersMu.Lock()
	defer observersMu.Unlock()
	o := observers[key]
	if o == nil {
		o = &observer{
			w:   &wire{command: argv, timeout: timeouts.Call, directorUUID: "cpilab-model-reads", seq: new(atomic.Int64)},
			vms: map[string]bool{}, disks: map[string]bool{},
			unseen: map[string]string{
				cpimodel.SeenStemcells: "no read method of the CPI lists stemcells",
				cpimodel.SeenSnapshots: "no read method of the CPI lists snapshots",
				cpimodel.SeenDetails:   "no read method of the CPI shows metadata, sizes or cloud_properties",
			},
		}
		observers[key] = o
	}
	return o
}

// The moments of a call an observer hears of (observer.calling).
const (
	callNamed   = iota // the request is known: its CIDs are learned
	callRunning        // the CPI runs it: a view read before is stale
	callEnded          // it answered: the CIDs of its result are learned, the view is stale
)

// calling tells the observer of a moment of a call of the run.
func (o *observer) calling(x *Exchange, moment int) {
	c, err := cpimodel.ParseRequest(x.Request)
	o.mu.Lock()
	defer o.mu.Unlock()
	if moment != callNamed {
		o.gen++
	}
	if err != nil {
		return
	}
	learn := func(m map[string]bool, cid string) {
		if cid != "" && !m[cid] {
			m[cid] = true
			o.gen++
		}
	}
	switch {
	case moment == callNamed:
		for _, a := range cidArgs(c) {
			if a.vm {
				learn(o.vms, a.cid)
			} else {
				learn(o.disks, a.cid)
			}
		}
		return
	case moment == callRunning || x.Response.Error != nil || len(x.Violations) > 0:
		return
	}
	switch c.Method {
	case "create_vm":
		learn(o.vms, cpimodel.ResultCID(x.Response.Result))
	case "create_disk", "update_disk":
		learn(o.disks, cpimodel.ResultCID(x.Response.Result))
	case "get_disks":
		var ds []string
		_ = json.Unmarshal(x.Response.Result, &ds)
		for _, d := range ds {
			learn(o.disks, d)
		}
	}
}

type cidArg struct {
	cid string
	vm  bool
}

// cidArgs are the VM and disk CIDs a request names.
func cidArgs(c cpimodel.Call) []cidArg {
	vm := func(i int) cidArg { return cidArg{cid: c.StringArg(i), vm: true} }
	disk := func(i int) cidArg { return cidArg{cid: c.StringArg(i)} }
	switch c.Method {
	case "delete_vm", "has_vm", "reboot_vm", "set_vm_metadata", "get_disks":
		return []cidArg{vm(0)}
	case "attach_disk", "detach_disk":
		return []cidArg{vm(0), disk(1)}
	case "delete_disk", "has_disk", "set_disk_metadata", "resize_disk", "update_disk", "snapshot_disk":
		return []cidArg{disk(0)}
	case "create_disk":
		return []cidArg{vm(2)}
	case "create_vm":
		var ds []string
		if len(c.Args) > 5 && json.Unmarshal(c.Args[5], &ds) == nil {
			out := make([]cidArg, len(ds))
			for i, d := range ds {
				out[i] = cidArg{cid: d}
			}
			return out
		}
	}
	return nil
}

// ModelState reads what the CPI's read methods show of the VMs and disks
// the run knows of. CIDs seen gone are forgotten (until a call names them
// again).
func (o *observer) ModelState(ctx context.Context) (cpimodel.State, error) {
	o.mu.Lock()
	gen := o.gen
	if o.cached != nil && o.cgen == gen {
		s := o.cached.Clone()
		o.mu.Unlock()
		return s, nil
	}
	vms, disks := slices.Sorted(maps.Keys(o.vms)), slices.Sorted(maps.Keys(o.disks))
	unseen := maps.Clone(o.unseen)
	o.mu.Unlock()

	s := cpimodel.Empty()
	s.Registry = nil
	var goneVMs, goneDisks []string
	if _, no := unseen[cpimodel.SeenVMs]; no {
		vms = nil // the CPI cannot say: not asked again
	}
	if _, no := unseen[cpimodel.SeenDisks]; no {
		disks = nil
	}
	for _, cid := range vms {
		has, why, err := o.ask(ctx, "has_vm", cid)
		if err != nil {
			return s, err
		}
		if why != "" {
			unseen[cpimodel.SeenVMs] = why
			break
		}
		if has {
			s.VMs[cid] = cpimodel.VM{CID: cid, Disks: map[string]cpimodel.Attachment{}}
		} else {
			goneVMs = append(goneVMs, cid)
		}
	}
	for _, cid := range disks {
		has, why, err := o.ask(ctx, "has_disk", cid)
		if err != nil {
			return s, err
		}
		if why != "" {
			unseen[cpimodel.SeenDisks] = why
			break
		}
		if has {
			s.Disks[cid] = cpimodel.Disk{CID: cid}
		} else {
			goneDisks = append(goneDisks, cid)
		}
	}
	if err := o.attachments(ctx, &s, unseen); err != nil {
		return s, err
	}
	if _, no := unseen[cpimodel.SeenVMs]; no {
		// get_disks is asked of the VMs has_vm shows: none.
		s.VMs = map[string]cpimodel.VM{}
		unseen[cpimodel.SeenAttachments] = unseen[cpimodel.SeenVMs]
	}
	if _, no := unseen[cpimodel.SeenDisks]; no {
		s.Disks = map[string]cpimodel.Disk{}
		unseen[cpimodel.SeenAttachments] = unseen[cpimodel.SeenDisks]
	}
	s.Unseen = unseen

	o.mu.Lock()
	defer o.mu.Unlock()
	for k, v := range unseen {
		if k == cpimodel.SeenVMs || k == cpimodel.SeenDisks || k == cpimodel.SeenAttachments {
			o.unseen[k] = v
		}
	}
	if o.gen == gen {
		for _, cid := range goneVMs {
			delete(o.vms, cid)
		}
		for _, cid := range goneDisks {
			delete(o.disks, cid)
		}
		c := s.Clone()
		o.cached, o.cgen = &c, gen
	}
	return s, nil
}

// attachments reads get_disks of every VM seen.
func (o *observer) attachments(ctx context.Context, s *cpimodel.State, unseen map[string]string) error {
	if _, no := unseen[cpimodel.SeenAttachments]; no {
		return nil
	}
	for _, vm := range slices.Sorted(maps.Keys(s.VMs)) {
		x := o.read(ctx, "get_disks", vm)
		why, err := readFailure(x)
		if err != nil {
			return err
		}
		if why != "" {
			unseen[cpimodel.SeenAttachments] = why
			return nil
		}
		var ds []string
		if json.Unmarshal(x.Response.Result, &ds) != nil {
			unseen[cpimodel.SeenAttachments] = "get_disks answers no array of disk CIDs (disk.get-disks)"
			return nil
		}
		for _, d := range ds {
			s.VMs[vm].Disks[d] = cpimodel.Attachment{}
			if dk, ok := s.Disks[d]; ok {
				dk.AttachedTo = vm
				s.Disks[d] = dk
			}
		}
	}
	return nil
}

// ask runs has_vm or has_disk: has, or why the CPI cannot say (it does
// not implement the method).
func (o *observer) ask(ctx context.Context, method, cid string) (has bool, why string, err error) {
	x := o.read(ctx, method, cid)
	if why, err := readFailure(x); why != "" || err != nil {
		if err != nil && x.Response.Error != nil {
			// A CID the CPI cannot even look up (one a spec made up):
			// forgotten, so that it does not blind the views after.
			o.forget(cid)
		}
		return false, why, err
	}
	switch string(x.Response.Result) {
	case "true":
		return true, "", nil
	case "false":
		return false, "", nil
	}
	return false, method + " answers no boolean (" + excerpt(x.Response.Result) + ")", nil
}

func (o *observer) forget(cid string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	delete(o.vms, cid)
	delete(o.disks, cid)
}

func (o *observer) read(ctx context.Context, method, cid string) *Exchange {
	o.reads.Add(1)
	return o.w.call(ctx, method, []any{cid}, 0, 0)
}

// readFailure says why a read cannot show its part of the cloud (the CPI
// does not implement the method), or the error that makes the view
// unreadable now.
func readFailure(x *Exchange) (why string, err error) {
	switch {
	case x.RunErr != nil:
		return "", x.RunErr
	case x.TimedOut || len(x.Violations) > 0:
		return "", fmt.Errorf("%s: %s", x.Method, strings.Join(x.Violations, "; "))
	case x.Response.Error == nil:
		return "", nil
	case x.Response.Error.Type == cpimodel.TypeNotImplemented:
		return "the CPI does not implement " + x.Method, nil
	}
	return "", fmt.Errorf("%s: %s: %s", x.Method, x.Response.Error.Type, x.Response.Error.Message)
}
