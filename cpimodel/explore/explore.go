// Package explore runs random or replayed lifecycles of CPI calls and checks
// the contract's model after every step. Random lifecycles are drawn with
// pgregory.net/rapid, replays come from a replay file, and the model
// (package cpimodel) is checked over the whole cloud after each call.
package explore

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/cpilab/cpilab/cpimodel"
)

// Step is one call of a lifecycle, written so that it can be replayed
// against any cloud: an argument "$vm:2" stands for the CID the second
// create_vm of the sequence returned ("$vm:missing" for a CID that never
// existed), and so on for stemcell, disk and snapshot.
type Step struct {
	Method string            `json:"method"`
	Args   []json.RawMessage `json:"arguments"`
	// Profile is the caller profile whose api_version the call carries:
	// "director-v1" sends none, "director-v2" and "cli" 2,
	// "director-current" 3 (capped at the CPI's).
	Profile string `json:"profile"`
	// With, when set, is a step run at the same time as this one, on
	// other objects (as the Director runs instances in parallel).
	With *Step `json:"with,omitempty"`
}

func (s Step) String() string {
	var parts []string
	for _, a := range s.Args {
		parts = append(parts, excerpt(a))
	}
	out := fmt.Sprintf("%s %s(%s)", s.Profile, s.Method, strings.Join(parts, ", "))
	if s.With != nil {
		out += " ‖ " + s.With.String()
	}
	return out
}

// Replay is a replay file: a lifecycle and what it showed.
type Replay struct {
	// Seed is the exploration seed that found it (0: written by hand).
	Seed  uint64 `json:"seed,omitempty"`
	Steps []Step `json:"steps"`
	// Violation is what the last step broke when the file was written.
	Violation string `json:"violation,omitempty"`
}

// Env is what the lifecycle's calls are made of, as the certify
// environment gives it.
type Env struct {
	// Stemcells are the stemcell images by api_version.
	Stemcells map[int]StemcellImage
	// VMCloudProperties, DiskCloudProperties and Networks are sent with
	// create_vm and create_disk.
	VMCloudProperties, DiskCloudProperties, Networks json.RawMessage
	// MaxAPIVersion is the CPI's api_version (its info; 1 when none).
	MaxAPIVersion int
	// RunID names what the lifecycle creates (agent ids, tags).
	RunID string
}

// StemcellImage is a stemcell create_stemcell uploads.
type StemcellImage struct {
	Path            string
	CloudProperties json.RawMessage
}

// Driver makes calls and reads the cloud.
type Driver interface {
	// Call runs one CPI request and returns its stdout; an error means
	// the call could not be made or answered (not a CPI error object).
	Call(ctx context.Context, request []byte) ([]byte, error)
	// State reads the whole cloud.
	State(ctx context.Context) (cpimodel.State, error)
}

// Done is one step as run.
type Done struct {
	Step       Step                 `json:"step"`
	Request    string               `json:"request"`
	Response   string               `json:"response"`
	Violations []cpimodel.Violation `json:"violations,omitempty"`
	NotChecked string               `json:"not_checked,omitempty"`
}

// Runner runs steps against a driver, resolving references and checking
// the model after every step.
type Runner struct {
	D   Driver
	Env Env
	// refs are the CIDs each create returned, by kind, in order.
	refs map[string][]string
	// stemcellOf is the stemcell api_version of each VM made, version of
	// each stemcell.
	stemcellOf, version map[string]int
	seq                 int
}

// NewRunner returns a runner with no references yet.
func NewRunner(d Driver, env Env) *Runner {
	return &Runner{D: d, Env: env, refs: map[string][]string{}, stemcellOf: map[string]int{}, version: map[string]int{}}
}

func apiVersionOf(profile string, cpiMax int) int {
	v := map[string]int{"director-v1": 0, "director-v2": 2, "cli": 2, "director-current": 3}[profile]
	if v > max(cpiMax, 1) {
		v = max(cpiMax, 1)
	}
	if v == 1 {
		v = 0 // a caller at version 1 sends none
	}
	return v
}

// resolve replaces "$kind:n" references by CIDs.
func (r *Runner) resolve(args []json.RawMessage) []json.RawMessage {
	out := make([]json.RawMessage, len(args))
	for i, a := range args {
		out[i] = a
		var s string
		if json.Unmarshal(a, &s) != nil || !strings.HasPrefix(s, "$") {
			if strings.Contains(string(a), "\"$") {
				var arr []string
				if json.Unmarshal(a, &arr) == nil {
					for j, x := range arr {
						arr[j] = r.cid(x)
					}
					out[i], _ = json.Marshal(arr)
				}
			}
			continue
		}
		out[i], _ = json.Marshal(r.cid(s))
	}
	return out
}

func (r *Runner) cid(ref string) string {
	kind, n, ok := strings.Cut(strings.TrimPrefix(ref, "$"), ":")
	if !ok || !strings.HasPrefix(ref, "$") {
		return ref
	}
	if kind == "agent" {
		// "$agent:3": the run's third agent id (run IDs differ between
		// runs; the steps do not).
		return r.Env.RunID + "-agent-" + n
	}
	if kind == "image" {
		// "$image:2": the stemcell image of api_version 2 here.
		v, _ := strconv.Atoi(n)
		if img, ok := r.Env.Stemcells[v]; ok {
			return img.Path
		}
		return "cpilab-missing-image-" + n
	}
	if i, err := strconv.Atoi(n); err == nil && i >= 1 && i <= len(r.refs[kind]) && r.refs[kind][i-1] != "" {
		return r.refs[kind][i-1]
	}
	return "cpilab-missing-" + kind + "-" + n
}

// request builds the request of a step.
func (r *Runner) request(s Step) (body []byte, vm string) {
	args := r.resolve(s.Args)
	r.seq++
	ctx := map[string]any{"director_uuid": "cpilab-explore"}
	if s.Profile != "cli" {
		ctx["request_id"] = fmt.Sprintf("explore-%06d", r.seq)
	}
	sv := 0
	switch s.Method {
	case "create_vm":
		var sc string
		if len(args) > 1 && json.Unmarshal(args[1], &sc) == nil {
			sv = r.stemcellVersion(sc)
		}
	case "delete_vm", "reboot_vm", "set_vm_metadata", "attach_disk", "detach_disk", "get_disks", "has_vm":
		if len(args) > 0 {
			_ = json.Unmarshal(args[0], &vm)
			sv = r.stemcellOf[vm]
		}
	}
	req := map[string]any{"method": s.Method, "arguments": args, "context": ctx}
	if v := apiVersionOf(s.Profile, r.Env.MaxAPIVersion); v > 0 {
		req["api_version"] = v
		if sv > 0 && s.Profile != "director-v1" {
			ctx["vm"] = map[string]any{"stemcell": map[string]any{"api_version": sv}}
		}
	}
	body, _ = json.Marshal(req)
	return body, vm
}

func (r *Runner) stemcellVersion(cid string) int { return r.version[cid] }

// record notes what a create returned.
func (r *Runner) record(s Step, c cpimodel.Call, res cpimodel.Result) {
	kind := map[string]string{"create_stemcell": "stemcell", "create_vm": "vm", "create_disk": "disk", "snapshot_disk": "snapshot"}[s.Method]
	if kind == "" {
		if s.Method == "update_disk" && res.OK() {
			if cid := cpimodel.ResultCID(res.Value); cid != "" {
				// The disk now goes by its new CID: every reference to it
				// follows.
				old := c.StringArg(0)
				for i, x := range r.refs["disk"] {
					if x == old {
						r.refs["disk"][i] = cid
					}
				}
			}
		}
		return
	}
	cid := ""
	if res.OK() {
		cid = cpimodel.ResultCID(res.Value)
	}
	r.refs[kind] = append(r.refs[kind], cid)
	if kind == "stemcell" && cid != "" {
		r.version[cid] = imageVersion(s, r.Env)
	}
	if kind == "vm" && cid != "" {
		var sc string
		if len(c.Args) > 1 && json.Unmarshal(c.Args[1], &sc) == nil {
			r.stemcellOf[cid] = r.stemcellVersion(sc)
		}
	}
}

func imageVersion(s Step, env Env) int {
	var path string
	if len(s.Args) > 0 && json.Unmarshal(s.Args[0], &path) == nil {
		if n, ok := strings.CutPrefix(path, "$image:"); ok {
			v, _ := strconv.Atoi(n)
			return max(v, 1)
		}
		for v, img := range env.Stemcells {
			if img.Path == path {
				return v
			}
		}
	}
	return 1
}

// Run runs steps, checking the model after each, and stops at the first
// step that breaks it. It returns what ran; failed is the index of the
// step that broke the model (-1 when none did).
func (r *Runner) Run(ctx context.Context, steps []Step) (done []Done, failed int, err error) {
	for i, s := range steps {
		d, err := r.Step(ctx, s)
		done = append(done, d...)
		if err != nil {
			return done, -1, fmt.Errorf("step %d (%s): %w", i+1, s, err)
		}
		for _, x := range d {
			if len(x.Violations) > 0 {
				return done, i, nil
			}
		}
	}
	return done, -1, nil
}

// Step runs one step (and the step run with it) and checks the model.
func (r *Runner) Step(ctx context.Context, s Step) ([]Done, error) {
	before, err := r.D.State(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the cloud: %w", err)
	}
	steps := []Step{s}
	if s.With != nil {
		w := *s.With
		steps = append(steps, w)
	}
	type out struct {
		body, resp []byte
		err        error
	}
	outs := make([]out, len(steps))
	for i, st := range steps {
		outs[i].body, _ = r.request(st)
	}
	if len(steps) == 1 {
		outs[0].resp, outs[0].err = r.D.Call(ctx, outs[0].body)
	} else {
		// Concurrent: both calls run at once; the model judges them as
		// one step whose footprint is the union of theirs.
		ch := make(chan int, len(steps))
		for i := range steps {
			go func() {
				outs[i].resp, outs[i].err = r.D.Call(ctx, outs[i].body)
				ch <- i
			}()
		}
		for range steps {
			<-ch
		}
	}
	after, err := r.D.State(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the cloud: %w", err)
	}
	var done []Done
	var calls []cpimodel.Call
	var results []cpimodel.Result
	for i, st := range steps {
		if outs[i].err != nil {
			return done, outs[i].err
		}
		c, _ := cpimodel.ParseRequest(outs[i].body)
		c.Profile = st.Profile
		res, perr := cpimodel.ParseResponse(outs[i].resp)
		d := Done{Step: st, Request: string(outs[i].body), Response: strings.TrimSpace(string(outs[i].resp))}
		if perr != nil {
			d.NotChecked = perr.Error()
		}
		calls, results = append(calls, c), append(results, res)
		r.record(st, c, res)
		done = append(done, d)
	}
	if len(steps) == 1 {
		if done[0].NotChecked == "" {
			done[0].Violations, done[0].NotChecked = cpimodel.Check(before, calls[0], results[0], after)
		}
		return done, nil
	}
	vs, why := CheckTogether(before, calls, results, after)
	done[0].Violations, done[0].NotChecked = vs, why
	return done, nil
}

// CheckTogether judges calls that ran at the same time on distinct
// objects: each call's effect is checked, and nothing outside the union of
// their footprints may change.
func CheckTogether(before cpimodel.State, calls []cpimodel.Call, results []cpimodel.Result, after cpimodel.State) ([]cpimodel.Violation, string) {
	var all []cpimodel.Violation
	for i, c := range calls {
		vs, why := cpimodel.Check(before, c, results[i], after)
		if why != "" {
			return nil, why
		}
		others := footprintOf(before, calls, results, after, i)
		for _, v := range vs {
			if !others[v.Object] {
				all = append(all, v)
			}
		}
	}
	return all, ""
}

// footprintOf lists the objects the calls other than skip may touch.
func footprintOf(before cpimodel.State, calls []cpimodel.Call, results []cpimodel.Result, after cpimodel.State, skip int) map[string]bool {
	m := map[string]bool{}
	for i, c := range calls {
		if i == skip {
			continue
		}
		p := cpimodel.Legal(before, c)
		for _, t := range p.Touches {
			m[t] = true
		}
		if cid := cpimodel.ResultCID(results[i].Value); cid != "" {
			for _, kind := range []string{"stemcell", "vm", "disk", "snapshot", "registry"} {
				m[kind+" "+cid] = true
			}
		}
	}
	return m
}

// Cleanup deletes what the steps created and is still there, as the
// Director would: detaches, then snapshots, VMs, disks and stemcells.
func (r *Runner) Cleanup(ctx context.Context) {
	st, err := r.D.State(ctx)
	if err != nil {
		return
	}
	mine := func(kind, cid string) bool { return slices.Contains(r.refs[kind], cid) }
	call := func(method string, args ...string) {
		var raw []json.RawMessage
		for _, a := range args {
			b, _ := json.Marshal(a)
			raw = append(raw, b)
		}
		body, _ := r.request(Step{Method: method, Args: raw, Profile: "director-current"})
		_, _ = r.D.Call(ctx, body)
	}
	for _, cid := range slices.Sorted(maps.Keys(st.Disks)) {
		if d := st.Disks[cid]; d.AttachedTo != "" && (mine("disk", cid) || mine("vm", d.AttachedTo)) {
			call("detach_disk", d.AttachedTo, cid)
		}
	}
	for _, cid := range slices.Sorted(maps.Keys(st.Snapshots)) {
		if mine("snapshot", cid) {
			call("delete_snapshot", cid)
		}
	}
	for _, cid := range slices.Sorted(maps.Keys(st.VMs)) {
		if mine("vm", cid) {
			call("delete_vm", cid)
		}
	}
	for _, cid := range slices.Sorted(maps.Keys(st.Disks)) {
		if mine("disk", cid) {
			call("delete_disk", cid)
		}
	}
	for _, cid := range slices.Sorted(maps.Keys(st.Stemcells)) {
		if mine("stemcell", cid) {
			call("delete_stemcell", cid)
		}
	}
}

func excerpt(b []byte) string {
	s := string(b)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
