package director_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/fakeiaas"
)

// The rows of docs/upstream.md where cpilab now answers as upstream does,
// whatever the profile.

// A disk created without metadata lists "metadata": {} and "cpi": "" (the
// cpi column defaults to the empty string, a null metadata_json reads as {}), and
// "metadata": {} on such a disk is no change: set_disk_metadata is not
// called (upstream's `{} != {}` is false).
func TestAPIListUnsetFieldsAsUpstream(t *testing.T) {
	a := newAPIWorld(t)
	inst := a.insts[0]
	a.done(a.d.CreateDynamicDisk("admin", director.CreateDiskRequest{DiskName: "bare", DiskPoolName: "small",
		Deployment: inst.Deployment, AZ: inst.AZ, DiskSize: 4}))
	status, b := a.call(t, a.token(t), route{method: "GET", path: "/dynamic_disks"})
	var raw []map[string]json.RawMessage
	if status != http.StatusOK || json.Unmarshal(b, &raw) != nil || len(raw) != 1 {
		t.Fatalf("GET /dynamic_disks = %d %s", status, b)
	}
	if string(raw[0]["metadata"]) != "{}" || string(raw[0]["cpi"]) != `""` {
		t.Errorf("a disk created without metadata lists metadata %s, cpi %s; want {} and \"\"", raw[0]["metadata"], raw[0]["cpi"])
	}
	for _, op := range []func() (int64, error){
		func() (int64, error) {
			return a.d.AttachDynamicDisk("admin", director.AttachRequest{DiskName: "bare", InstanceID: inst.ID, Metadata: map[string]any{}})
		},
		func() (int64, error) {
			return a.d.Provide("admin", director.ProvideRequest{DiskName: "bare", DiskPoolName: "small", DiskSize: 4,
				InstanceID: inst.ID, Metadata: map[string]any{}})
		},
	} {
		a.done(op())
	}
	if n := a.history(fakeiaas.OpSetDiskMetadata, ""); n != 0 {
		t.Errorf("metadata {} on a disk without metadata called set_disk_metadata %d times; want none", n)
	}
	a.done(a.d.Provide("admin", director.ProvideRequest{DiskName: "bare", DiskPoolName: "small", DiskSize: 4,
		InstanceID: inst.ID, Metadata: map[string]any{"k": "v"}}))
	if n := a.history(fakeiaas.OpSetDiskMetadata, ""); n != 1 {
		t.Errorf("new metadata called set_disk_metadata %d times; want 1", n)
	}
}

// scriptedCPI answers chosen disk calls with a chosen error (nil: the
// wrapped CPI answers) and can drop attach_disk's hint.
type scriptedCPI struct {
	director.CPI
	mu                             sync.Mutex
	hasDisk, deleteDisk, detachErr error
	noHint                         bool
}

func (c *scriptedCPI) get(p *error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *p
}

func (c *scriptedCPI) HasDisk(ctx context.Context, cid cpiv2.DiskCID) (bool, error) {
	if err := c.get(&c.hasDisk); err != nil {
		return false, err
	}
	return c.CPI.HasDisk(ctx, cid)
}

func (c *scriptedCPI) DeleteDisk(ctx context.Context, cid cpiv2.DiskCID) error {
	if err := c.get(&c.deleteDisk); err != nil {
		return err
	}
	return c.CPI.DeleteDisk(ctx, cid)
}

func (c *scriptedCPI) DetachDisk(ctx context.Context, vm cpiv2.VMCID, cid cpiv2.DiskCID) error {
	if err := c.get(&c.detachErr); err != nil {
		return err
	}
	return c.CPI.DetachDisk(ctx, vm, cid)
}

func (c *scriptedCPI) AttachDisk(ctx context.Context, vm cpiv2.VMCID, cid cpiv2.DiskCID) (cpiv2.DiskHint, error) {
	h, err := c.CPI.AttachDisk(ctx, vm, cid)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.noHint {
		h = cpiv2.DiskHint{}
	}
	return h, err
}

func scripted(k director.Knobs) (*scriptedCPI, worldOpts) {
	c := &scriptedCPI{}
	return c, worldOpts{knobs: k, configure: func(cfg *director.Config) { c.CPI = cfg.CPI; cfg.CPI = c }}
}

// Under DeleteChecksHasDisk, as upstream's delete job: has_disk's
// NotImplemented and delete_disk's DiskNotFound fail the task and the
// record stays; the reference deletes without has_disk and takes
// DiskNotFound as done.
func TestKnobDeleteChecksHasDiskTakesErrorsAtTheirWord(t *testing.T) {
	for _, tc := range []struct {
		name               string
		hasDisk, deleteErr error
	}{
		{"has_disk NotImplemented", cpiv2.NewError(cpiv2.TypeNotImplemented, "has_disk"), nil},
		{"delete_disk DiskNotFound", nil, cpiv2.NewError(cpiv2.TypeDiskNotFound, "gone")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bothWays(t, func(k *director.Knobs) { k.DeleteChecksHasDisk = true }, func(t *testing.T, upstream bool, k director.Knobs) {
				cpi, o := scripted(k)
				w := newWorld(t, o)
				w.done(w.provide("d", 0))
				w.done(w.d.DetachDynamicDisk("admin", "d"))
				cpi.mu.Lock()
				cpi.hasDisk, cpi.deleteDisk = tc.hasDisk, tc.deleteErr
				cpi.mu.Unlock()
				id, err := w.d.DeleteDynamicDisk("admin", "d")
				if upstream {
					task := w.failed(id, err)
					if _, recorded := w.disk("d"); !recorded {
						t.Fatalf("upstream: the delete failed (%s) but the record is gone", task.Error)
					}
					return
				}
				// The reference never calls has_disk, and takes DiskNotFound
				// as done.
				if w.done(id, err); func() bool { _, ok := w.disk("d"); return ok }() {
					t.Fatal("reference: the record survived its delete")
				}
			})
		})
	}
}

// Under DetachVMNotFoundFails a detach_disk answering VMNotFound fails the
// detach and the record keeps the attachment (upstream rescues only
// DiskNotAttached); the reference takes it as detached. DiskNotAttached is
// detached either way.
func TestKnobDetachVMNotFoundFails(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.DetachVMNotFoundFails = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		cpi, o := scripted(k)
		w := newWorld(t, o)
		w.done(w.provide("d", 0))
		cpi.mu.Lock()
		cpi.detachErr = cpiv2.NewError(cpiv2.TypeVMNotFound, "no such VM")
		cpi.mu.Unlock()
		id, err := w.d.DetachDynamicDisk("admin", "d")
		if upstream {
			task := w.failed(id, err)
			if dd, _ := w.disk("d"); !dd.Attached() || !strings.Contains(task.Error, "no such VM") {
				t.Fatalf("upstream: detach failed with %q, record attached %v; want VMNotFound's failure, still attached", task.Error, dd.Attached())
			}
		} else if w.done(id, err); func() bool { dd, _ := w.disk("d"); return dd.Attached() }() {
			t.Fatal("reference: VMNotFound left the disk recorded as attached")
		}
		if upstream {
			cpi.mu.Lock()
			cpi.detachErr = cpiv2.NewError(cpiv2.TypeDiskNotAttached, "not attached")
			cpi.mu.Unlock()
			w.done(w.d.DetachDynamicDisk("admin", "d"))
			if dd, _ := w.disk("d"); dd.Attached() {
				t.Fatal("upstream: DiskNotAttached left the disk recorded as attached")
			}
		}
	})
}

// Under AttachWithoutHintUnrecorded an attach_disk without a hint fails the
// task before the attachment is recorded (upstream's "No disk_hint"); the
// reference records it, then fails at the link. Either way no agent link
// is made.
func TestKnobAttachWithoutHintUnrecorded(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.AttachWithoutHintUnrecorded, k.NoDiskNameLock = true, true }, func(t *testing.T, upstream bool, k director.Knobs) {
		cpi, o := scripted(k)
		w := newWorld(t, o)
		w.done(w.provide("d", 0))
		dd, _ := w.disk("d")
		w.done(w.d.DetachDynamicDisk("admin", "d"))
		cpi.mu.Lock()
		cpi.noHint = true
		cpi.mu.Unlock()
		task := w.failed(w.d.AttachDynamicDisk("admin", director.AttachRequest{DiskName: "d", InstanceID: w.insts[0].ID}))
		if !strings.Contains(task.Error, "No disk_hint") {
			t.Errorf("attach without a hint failed with %q; want No disk_hint", task.Error)
		}
		got, _ := w.disk("d")
		if upstream == got.Attached() {
			t.Errorf("record attached = %v; want %v", got.Attached(), !upstream)
		}
		if w.linked(w.instance(0).VMCID, dd.CID) {
			t.Error("the agent linked a disk attached without a hint")
		}
	})
}

// Attach refuses a disk on another VM before it looks at AZs (upstream's
// order), so a disk attached elsewhere in another AZ is refused as
// attached elsewhere.
func TestAttachChecksOtherVMFirst(t *testing.T) {
	w := newWorld(t, worldOpts{})
	w.done(w.provide("d", 0))
	task := w.failed(w.d.AttachDynamicDisk("admin", director.AttachRequest{DiskName: "d", InstanceID: w.insts[1].ID}))
	if want := "disk `d` is already attached to a different vm `" + w.instance(0).VMCID + "`"; !strings.HasPrefix(task.Error, want) {
		t.Fatalf("attach to a VM in another AZ of a disk attached elsewhere: %q; want %q", task.Error, want)
	}
}

// Unknown routes answer as upstream's: under a mounted controller's prefix
// the credentials are checked first (401), then 404 "Endpoint '…' not
// found." for an unknown path or method; elsewhere Rack's "Not Found".
func TestAPIUnknownRoutesAsUpstream(t *testing.T) {
	a := newAPIWorld(t, worldOpts{noDeploy: true})
	tok := a.token(t)
	for _, c := range []struct {
		tok, method, path string
		status            int
		body              string
	}{
		{"", "GET", "/dynamic_disks/x/bogus", 401, "Not authorized: '/dynamic_disks/x/bogus'\n"},
		{tok, "GET", "/dynamic_disks/x/bogus", 404, "Endpoint '/dynamic_disks/x/bogus' not found."},
		{"", "PUT", "/dynamic_disks", 401, "Not authorized: '/dynamic_disks'\n"},
		{tok, "PUT", "/dynamic_disks", 404, "Endpoint '/dynamic_disks' not found."},
		{tok, "DELETE", "/tasks/1", 404, "Endpoint '/tasks/1' not found."},
		{"", "GET", "/nowhere", 404, "Not Found: /nowhere"},
	} {
		status, b := a.call(t, c.tok, route{method: c.method, path: c.path})
		if status != c.status || string(b) != c.body {
			t.Errorf("%s %s (token %v) = %d %q; want %d %q", c.method, c.path, c.tok != "", status, b, c.status, c.body)
		}
	}
}

// Task JSON has upstream's keys: context_id, and started_at and deployment
// null when unset.
func TestAPITaskJSONAsUpstream(t *testing.T) {
	a := newAPIWorld(t, worldOpts{knobs: director.Knobs{ZeroDynamicDiskWorkers: true}})
	id, err := a.provide("queued", 0) // no dynamic_disks worker: stays queued
	if err != nil {
		t.Fatal(err)
	}
	status, b := a.call(t, a.token(t), route{method: "GET", path: "/tasks/" + itoa(int(id))})
	var raw map[string]json.RawMessage
	if status != http.StatusOK || json.Unmarshal(b, &raw) != nil {
		t.Fatalf("GET /tasks/%d = %d %s", id, status, b)
	}
	for k, want := range map[string]string{"started_at": "null", "context_id": `""`, "state": `"queued"`} {
		if string(raw[k]) != want {
			t.Errorf("queued task: %s = %s; want %s (%s)", k, raw[k], want, b)
		}
	}
	status, b = a.call(t, a.token(t), route{method: "GET", path: "/tasks"})
	var all []map[string]json.RawMessage
	if status != http.StatusOK || json.Unmarshal(b, &all) != nil {
		t.Fatalf("GET /tasks = %d %s", status, b)
	}
	nullDep, namedDep := false, false
	for _, task := range all {
		nullDep = nullDep || string(task["deployment"]) == "null"
		namedDep = namedDep || strings.HasPrefix(string(task["deployment"]), `"`)
		if _, ok := task["started_at"]; !ok {
			t.Errorf("task without started_at: %s", task["id"])
		}
	}
	if !nullDep || !namedDep {
		t.Errorf("GET /tasks: want tasks with a null and with a named deployment: %s", b)
	}
	// The client reads the shape back.
	tv, err := a.client(t, "admin", director.ScopeAdmin).Task(context.Background(), id)
	if err != nil || tv.ID != id || tv.StartedAt != 0 || tv.State != director.TaskQueued {
		t.Fatalf("client Task(%d) = %+v, %v", id, tv, err)
	}
}

// Task output: the type defaults to debug, none and cpi answer 204; under
// TaskDebugNeedsAdmin a reader may not read debug but may read events.
// TruncateTaskResult cuts a long result as upstream.
func TestAPITaskOutputAsUpstream(t *testing.T) {
	for _, upstream := range []bool{false, true} {
		a := newAPIWorld(t, worldOpts{knobs: director.Knobs{TaskDebugNeedsAdmin: upstream, TruncateTaskResult: upstream}})
		long := strings.Repeat("n", 200)
		task := a.failed(a.d.AttachDynamicDisk("admin", director.AttachRequest{DiskName: long, InstanceID: a.insts[0].ID}))
		id := itoa(int(task.ID))
		admin := a.token(t)
		reader, _, _ := a.auth.Issue(director.Principal{Name: "reader", Scopes: []string{director.ScopeRead}})
		for _, c := range []struct {
			tok, query string
			status     int
		}{
			{admin, "", 200}, {admin, "?type=none", 204}, {admin, "?type=cpi", 204}, {admin, "?type=event", 200},
			{reader, "?type=event", 200}, {reader, "", map[bool]int{false: 200, true: 401}[upstream]},
			{reader, "?type=debug", map[bool]int{false: 200, true: 401}[upstream]},
		} {
			status, b := a.call(t, c.tok, route{method: "GET", path: "/tasks/" + id + "/output" + c.query})
			if status != c.status || c.status == 204 && len(b) != 0 {
				t.Errorf("upstream %v: output%s as %s = %d %q; want %d", upstream, c.query, map[bool]string{true: "admin", false: "reader"}[c.tok == admin], status, b, c.status)
			}
			if c.query == "" && c.tok == admin && !strings.Contains(string(b), "attach_dynamic_disk") && !strings.Contains(string(b), long) {
				t.Errorf("upstream %v: the default output is not the debug log: %q", upstream, b)
			}
		}
		tv, err := a.client(t, "admin", director.ScopeAdmin).Task(context.Background(), task.ID)
		switch {
		case err != nil:
			t.Fatal(err)
		case upstream && (len([]rune(tv.Result)) > 131 || !strings.HasSuffix(tv.Result, "...")):
			t.Errorf("upstream: result %q not truncated to 128 characters and ...", tv.Result)
		case !upstream && !strings.Contains(tv.Result, long):
			t.Errorf("reference: result %q lost the message", tv.Result)
		}
	}
}

// GET /tasks under TaskListAsUpstream hides disk tasks unless verbose=2,
// has no default limit, and takes limit=0 (or a word) as 1; the reference
// lists every task and refuses limit=0.
func TestAPITaskListAsUpstream(t *testing.T) {
	for _, upstream := range []bool{false, true} {
		a := newAPIWorld(t, worldOpts{knobs: director.Knobs{TaskListAsUpstream: upstream}})
		a.done(a.provide("d1", 0))
		a.done(a.provide("d2", 1))
		count := func(query string) (int, bool) {
			status, b := a.call(t, a.token(t), route{method: "GET", path: "/tasks" + query})
			var all []map[string]any
			if status != http.StatusOK || json.Unmarshal(b, &all) != nil {
				return status, false
			}
			disks := false
			for _, task := range all {
				disks = disks || task["type"] == "provide_dynamic_disk"
			}
			return len(all), disks
		}
		n2, disks2 := count("?verbose=2")
		n1, disks1 := count("")
		if !disks2 || upstream == disks1 || upstream && n1 >= n2 || !upstream && n1 != n2 {
			t.Errorf("upstream %v: default %d tasks (disk tasks %v), verbose=2 %d (disk tasks %v)", upstream, n1, disks1, n2, disks2)
		}
		for _, q := range []string{"?verbose=2&limit=0", "?verbose=2&limit=abc"} {
			n, _ := count(q)
			if upstream && n != 1 || !upstream && n != http.StatusBadRequest {
				t.Errorf("upstream %v: GET /tasks%s = %d; want %v", upstream, q, n, map[bool]string{true: "1 task", false: "400"}[upstream])
			}
		}
	}
}

// GET /locks lists upstream's {type, resource, timeout, task_id}; the VM
// lock of a single attach_disk under VMLockPerCPICallOnly is named by the
// VM CID as upstream's with_vm_lock, the reference's job-long one by the
// instance.
func TestAPILocksAsUpstream(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.VMLockPerCPICallOnly = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		a := newAPIWorld(t, worldOpts{knobs: k})
		rule := a.pauseRule(fakeiaas.OpAttachDisk, "")
		id, err := a.provide("locked", 0)
		waitFor(t, "attach_disk paused", func() bool { return a.ruleStatus(rule.ID).Paused == 1 })
		status, b := a.call(t, a.token(t), route{method: "GET", path: "/locks"})
		a.release(rule.ID)
		a.done(id, err)
		var locks []map[string]any
		if status != http.StatusOK || json.Unmarshal(b, &locks) != nil {
			t.Fatalf("GET /locks = %d %s", status, b)
		}
		want := a.insts[0].ID
		if upstream {
			want = a.instance(0).VMCID
		}
		found := false
		for _, l := range locks {
			res, _ := l["resource"].([]any)
			timeout, _ := l["timeout"].(string)
			if l["type"] == "vm" && len(res) == 1 && res[0] == want && l["task_id"] == itoa(int(id)) && strings.Contains(timeout, ".") {
				found = true
			}
		}
		if !found {
			t.Errorf("GET /locks during attach_disk = %s; want a vm lock on %s held by task %d", b, want, id)
		}
	})
}

// Under DiskTasksWithoutDeployment a provide task's deployment is null,
// as upstream's controller enqueues it; the reference records the
// instance's deployment.
func TestKnobDiskTasksWithoutDeployment(t *testing.T) {
	bothWays(t, func(k *director.Knobs) { k.DiskTasksWithoutDeployment = true }, func(t *testing.T, upstream bool, k director.Knobs) {
		a := newAPIWorld(t, worldOpts{knobs: k})
		task := a.done(a.provide("d", 0))
		status, b := a.call(t, a.token(t), route{method: "GET", path: "/tasks/" + itoa(int(task.ID))})
		var raw map[string]json.RawMessage
		if status != http.StatusOK || json.Unmarshal(b, &raw) != nil {
			t.Fatalf("GET /tasks/%d = %d %s", task.ID, status, b)
		}
		want := `"` + a.insts[0].Deployment + `"`
		if upstream {
			want = "null"
		}
		if string(raw["deployment"]) != want {
			t.Errorf("provide task's deployment = %s; want %s", raw["deployment"], want)
		}
	})
}
