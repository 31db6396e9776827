// Package upstreamfixture serves the dynamic disks API exactly as upstream's
// Director answers it. It answers from an in-memory model of upstream's
// controller and jobs (cloudfoundry/bosh @96f9135: api/controllers/
// dynamic_disks_controller.rb, jobs/dynamic_disks/*.rb,
// permission_authorizer.rb, validation_helper.rb, tasks_controller.rb). It
// exists to check that cpilab's director client and the dynamic disks suite
// work against a real Director, not only against cpilab's own:
//
//   - bearer tokens map to scopes; no or an unknown token answers 401
//     "Not authorized: '<path>'\n"; a missing scope answers 401
//     {"code": 600000, "description": "Require one of the scopes: …"};
//   - request properties are checked as safe_property does (400 with codes
//     40000–40002); a body that is not JSON answers 500 with no body; a
//     POST without Content-Type application/json matches no route (404);
//   - every job is queued and answered with 302, an empty body and
//     Location /tasks/<id>; one worker runs the dynamic_disks queue;
//   - the jobs raise upstream's messages, only provide and create write a
//     {"disk_cid"} result, and the task's result field holds the job's
//     message or error;
//   - GET /dynamic_disks lists {name, disk_cid, deployment, instance,
//     availability_zone, size, disk_pool_name, cpi, metadata}, metadata {}
//     when the disk has none;
//   - tasks are {id, state, description, timestamp, started_at, result,
//     user, deployment, context_id}, result cut to 128 characters; GET
//     /tasks hides disk tasks unless verbose=2; /tasks/:id/output defaults
//     to debug (admin only), and none answers 204;
//   - an unknown route under a mounted prefix authenticates (401), then
//     answers 404 "Endpoint '<path>' not found."; elsewhere 404
//     "Not Found: <path>"; GET /info needs no credentials.
//
// The IaaS behind it is a counter of disks and attachments, recorded as
// calls (Calls) so tests can see what a job asked of the CPI.
package upstreamfixture

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config configures a fixture Director. Zero fields take the defaults.
type Config struct {
	// UUID is the director's UUID (scope bosh.<uuid>.admin). Default
	// "upstream-fixture".
	UUID string
	// Name is the director's name (the "director" disk metadata tag).
	// Default "fixture".
	Name string
	// Tokens maps each bearer token to its scopes (required).
	Tokens map[string][]string
	// Deployment is the one deployment. Default "fixture".
	Deployment string
	// Group and Instances: the deployment's instance group and its size,
	// every instance with a VM in AZ. Defaults "worker", 2, "z1".
	Group     string
	Instances int
	AZ        string
	// DiskPools are the cloud config's disk_types: name → cloud_properties.
	// Default {"dynamic": {}}.
	DiskPools map[string]map[string]any
}

// Instance is one instance of the deployment, with its VM.
type Instance struct {
	ID, Group, AZ, VMCID, AgentID string
	Index                         int
}

// Call is one CPI call a job made.
type Call struct {
	Method string
	Args   []any
}

type disk struct {
	name, cid, deployment, pool, az, cpi string
	size                                 int
	vm                                   string // VM CID; "" detached
	hint                                 string
	metadata                             map[string]any
}

type task struct {
	ID          int64   `json:"id"`
	State       string  `json:"state"`
	Description string  `json:"description"`
	Timestamp   int64   `json:"timestamp"`
	StartedAt   *int64  `json:"started_at"`
	Result      *string `json:"result"`
	User        string  `json:"user"`
	Deployment  *string `json:"deployment"`
	ContextID   string  `json:"context_id"`
	output      string  // the result file
	run         func() (message, result string, err error)
}

// Server is a fixture Director.
type Server struct {
	cfg   Config
	insts []Instance

	mu    sync.Mutex
	disks map[string]*disk // guarded by mu
	tasks []*task          // guarded by mu; ID i at index i-1
	calls []Call           // guarded by mu
	seq   int              // guarded by mu: disk CIDs
	queue chan *task
	done  chan struct{}
}

// New starts a fixture Director (its one worker); Close stops it.
func New(cfg Config) *Server {
	def := func(p *string, v string) {
		if *p == "" {
			*p = v
		}
	}
	def(&cfg.UUID, "upstream-fixture")
	def(&cfg.Name, "fixture")
	def(&cfg.Deployment, "fixture")
	def(&cfg.Group, "worker")
	def(&cfg.AZ, "z1")
	if cfg.Instances <= 0 {
		cfg.Instances = 2
	}
	if cfg.DiskPools == nil {
		cfg.DiskPools = map[string]map[string]any{"dynamic": {}}
	}
	s := &Server{cfg: cfg, disks: map[string]*disk{}, queue: make(chan *task, 1024), done: make(chan struct{})}
	for i := range cfg.Instances {
		s.insts = append(s.insts, Instance{ID: fmt.Sprintf("%08d-0000-4000-8000-%012d", i+1, i+1), Group: cfg.Group, AZ: cfg.AZ,
			VMCID: fmt.Sprintf("vm-%d", i+1), AgentID: fmt.Sprintf("agent-%d", i+1), Index: i})
	}
	go s.work()
	return s
}

// Instances are the deployment's instances.
func (s *Server) Instances() []Instance { return append([]Instance(nil), s.insts...) }

// Calls returns the CPI calls made so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Call(nil), s.calls...)
}

// Close stops the worker.
func (s *Server) Close() { close(s.done) }

func (s *Server) work() {
	for {
		select {
		case <-s.done:
			return
		case t := <-s.queue:
			s.mu.Lock()
			now := time.Now().Unix()
			t.State, t.StartedAt = "processing", &now
			s.mu.Unlock()
			msg, out, err := t.run()
			s.mu.Lock()
			if err != nil {
				t.State, msg = "error", err.Error()
			} else {
				t.State, t.output = "done", out
			}
			msg = truncate(msg)
			t.Result, t.Timestamp = &msg, time.Now().Unix()
			s.mu.Unlock()
		}
	}
}

// director error: status, code and message (upstream's DirectorError).
type dirError struct {
	status, code int
	msg          string
}

func (e *dirError) Error() string { return e.msg }

func unauthorized(msg string) *dirError { return &dirError{http.StatusUnauthorized, 600000, msg} }

// truncate is JobRunner#truncate (job_runner.rb:134): the task's result
// field holds at most 128 characters, cut at a word, "..." appended.
func truncate(s string) string {
	r := []rune(strings.TrimSpace(s))
	if len(r) <= 128 {
		return string(r)
	}
	return lastWord.ReplaceAllString(string(r[:129]), "") + "..."
}

var lastWord = regexp.MustCompile(`\s+?(\S+)?$`)

// mounts are the path prefixes upstream mounts a controller at
// (api/route_configuration.rb); under any other, Rack's URLMap answers
// 404 "Not Found: <path>" without authenticating.
var mounts = map[string]bool{}

func init() {
	for _, p := range strings.Fields(`cleanup cloud_configs runtime_configs cpi_configs configs deployments
		deployment_configs disks director dynamic_disks networks orphan_disks orphaned_vms info locks packages
		releases resources resurrection stemcells stemcell_uploads task tasks events vms jobs link_providers
		link_consumers link_address links deployed_variables`) {
		mounts[p] = true
	}
}

// Handler serves the API.
func (s *Server) Handler() http.Handler { return http.HandlerFunc(s.serve) }

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	// Route on the escaped path: a disk name may hold any character.
	var segs []string
	for _, p := range strings.Split(strings.Trim(r.URL.EscapedPath(), "/"), "/") {
		u, err := url.PathUnescape(p)
		if err != nil {
			u = p
		}
		segs = append(segs, u)
	}
	if len(segs) == 0 || !mounts[segs[0]] {
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusNotFound)
		_, _ = fmt.Fprintf(w, "Not Found: %s", r.URL.Path)
		return
	}
	if r.Method == "GET" && len(segs) == 1 && segs[0] == "info" { // InfoController: no authentication
		_ = writeJSON(w, map[string]any{"name": s.cfg.Name, "uuid": s.cfg.UUID, "version": "fixture"})
		return
	}
	scopes, ok := s.cfg.Tokens[strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")]
	if !ok || !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		w.Header().Set("WWW-Authenticate", `Basic realm="BOSH Director"`)
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = fmt.Fprintf(w, "Not authorized: '%s'\n", r.URL.Path)
		return
	}
	err := s.route(w, r, segs, scopes)
	switch e := err.(type) {
	case nil:
	case *dirError:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(e.status)
		_ = json.NewEncoder(w).Encode(map[string]any{"code": e.code, "description": e.msg})
	case notFoundError:
		w.WriteHeader(http.StatusNotFound)
		_, _ = fmt.Fprintf(w, "Endpoint '%s' not found.", r.URL.Path)
	default: // an exception outside DirectorError: 500, no body
		w.WriteHeader(http.StatusInternalServerError)
	}
}

type notFoundError struct{}

func (notFoundError) Error() string { return "not found" }

// permissions as permission_authorizer.rb's director_permissions.
func (s *Server) expected(perm string) [][]string {
	out := [][]string{{"bosh.admin"}, {"bosh." + s.cfg.UUID + ".admin"}}
	switch perm {
	case "read":
		out = append(out, []string{"bosh.read"}, []string{"bosh." + s.cfg.UUID + ".read"})
	case "provide":
		out = append(out, []string{"bosh.dynamic-disks.create", "bosh.dynamic-disks.attach"})
	case "create", "attach", "detach", "list", "delete":
		out = append(out, []string{"bosh.dynamic-disks." + perm})
	}
	return out
}

func (s *Server) check(perm string, scopes []string) error {
	sets := s.expected(perm)
	var parts []string
	for _, set := range sets {
		all := true
		for _, x := range set {
			found := false
			for _, y := range scopes {
				found = found || x == y
			}
			all = all && found
		}
		if all {
			return nil
		}
		if len(set) > 1 {
			parts = append(parts, "("+strings.Join(set, " AND ")+")")
		} else {
			parts = append(parts, set[0])
		}
	}
	return unauthorized("Require one of the scopes: " + strings.Join(parts, ", "))
}

func (s *Server) route(w http.ResponseWriter, r *http.Request, segs []string, scopes []string) error {
	m := r.Method
	isJSON := func() bool {
		ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
		return ct == "application/json"
	}
	switch {
	case m == "GET" && len(segs) == 1 && segs[0] == "dynamic_disks":
		if err := s.check("list", scopes); err != nil {
			return err
		}
		return s.list(w)
	case m == "POST" && len(segs) == 1 && segs[0] == "dynamic_disks":
		if err := s.check("create", scopes); err != nil {
			return err
		}
		if !isJSON() {
			return notFoundError{}
		}
		return s.create(w, r)
	case m == "POST" && len(segs) == 2 && segs[0] == "dynamic_disks" && segs[1] == "provide":
		if err := s.check("provide", scopes); err != nil {
			return err
		}
		if !isJSON() {
			return notFoundError{}
		}
		return s.provide(w, r)
	case m == "POST" && len(segs) == 3 && segs[0] == "dynamic_disks" && segs[2] == "attach":
		if err := s.check("attach", scopes); err != nil {
			return err
		}
		if !isJSON() {
			return notFoundError{}
		}
		return s.attach(w, r, segs[1])
	case m == "POST" && len(segs) == 3 && segs[0] == "dynamic_disks" && segs[2] == "detach":
		if err := s.check("detach", scopes); err != nil {
			return err
		}
		name := segs[1]
		return s.enqueue(w, "detach dynamic disk", func() (string, string, error) { return s.detachJob(name) })
	case m == "DELETE" && len(segs) == 2 && segs[0] == "dynamic_disks":
		if err := s.check("delete", scopes); err != nil {
			return err
		}
		name := segs[1]
		return s.enqueue(w, "delete dynamic disk", func() (string, string, error) { return s.deleteJob(name) })
	case m == "GET" && (len(segs) == 2 || len(segs) == 3 && segs[2] == "output") && segs[0] == "tasks":
		perm := "read"
		if typ := r.URL.Query().Get("type"); len(segs) == 3 && (typ == "" || typ == "debug" || typ == "cpi") {
			perm = "admin" // tasks_controller.rb:18
		}
		if err := s.check(perm, scopes); err != nil {
			return err
		}
		return s.task(w, r, segs[1:])
	case m == "GET" && len(segs) == 1 && segs[0] == "tasks":
		if err := s.check("read", scopes); err != nil {
			return err
		}
		return s.listTasks(w, r)
	case m == "GET" && len(segs) == 1 && segs[0] == "deployments":
		if err := s.check("read", scopes); err != nil {
			return err
		}
		return writeJSON(w, []map[string]any{{"name": s.cfg.Deployment}})
	case m == "GET" && len(segs) == 3 && segs[0] == "deployments" && segs[2] == "instances":
		if err := s.check("read", scopes); err != nil {
			return err
		}
		return s.instances(w, segs[1])
	case m == "POST" && len(segs) == 1 && (segs[0] == "deployments" || segs[0] == "stemcells" || segs[0] == "cloud_configs"),
		m == "DELETE" && len(segs) == 2 && (segs[0] == "deployments" || segs[0] == "vms"),
		m == "PUT" && len(segs) == 4 && segs[0] == "deployments" && segs[2] == "instances":
		// Admin routes the fixture does not model: the scope is checked
		// (as upstream's route conditions do), then the fixture refuses.
		if err := s.check("admin", scopes); err != nil {
			return err
		}
		return &dirError{http.StatusBadRequest, 100001, "the upstream fixture does not model " + m + " " + r.URL.Path}
	}
	return notFoundError{}
}

func writeJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	return json.NewEncoder(w).Encode(v)
}

// body parses a JSON body (JSON.parse: any error is a 500).
func body(r *http.Request) (map[string]any, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("JSON::ParserError: %w", err)
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, &dirError{400, 40000, fmt.Sprintf("Object (%v) did not match the required type 'Hash'", v)}
	}
	return m, nil
}

// prop is safe_property: kind "String" (min_length 1; a number is taken as
// its text), "Integer" (min), or "Hash" (optional).
func prop(h map[string]any, name, kind string, min int, optional bool) (any, error) {
	v, ok := h[name]
	if !ok {
		if optional {
			return nil, nil
		}
		return nil, &dirError{400, 40001, fmt.Sprintf("Required property '%s' was not specified in object (%v)", name, h)}
	}
	bad := &dirError{400, 40000, fmt.Sprintf("Property '%s' value (%v) did not match the required type '%s'", name, v, kind)}
	switch kind {
	case "String":
		var s string
		switch x := v.(type) {
		case string:
			s = x
		case json.Number:
			s = x.String()
		default:
			return nil, bad
		}
		if len(s) < 1 {
			return nil, &dirError{400, 40002, fmt.Sprintf("'%s' length (0) should be greater than 1", name)}
		}
		return s, nil
	case "Integer":
		n, isNum := v.(json.Number)
		i, err := n.Int64()
		if !isNum || err != nil || strings.ContainsAny(n.String(), ".eE") {
			return nil, bad
		}
		if int(i) < min {
			return nil, &dirError{400, 40002, fmt.Sprintf("'%s' value (%d) should be greater than %d", name, i, min)}
		}
		return int(i), nil
	case "Hash":
		m, isMap := v.(map[string]any)
		if !isMap {
			return nil, bad
		}
		return m, nil
	}
	return nil, bad
}

type spec struct {
	name, kind string
	min        int
	optional   bool
}

func props(h map[string]any, specs ...spec) ([]any, error) {
	out := make([]any, len(specs))
	for i, sp := range specs {
		v, err := prop(h, sp.name, sp.kind, sp.min, sp.optional)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

func hashOf(v any) map[string]any {
	m, _ := v.(map[string]any)
	return m
}

func (s *Server) provide(w http.ResponseWriter, r *http.Request) error {
	h, err := body(r)
	if err != nil {
		return err
	}
	p, err := props(h, spec{"instance_id", "String", 0, false}, spec{"disk_name", "String", 0, false},
		spec{"disk_pool_name", "String", 0, false}, spec{"disk_size", "Integer", 1, false}, spec{"metadata", "Hash", 0, true})
	if err != nil {
		return err
	}
	return s.enqueue(w, "provide dynamic disk", func() (string, string, error) {
		return s.provideJob(p[0].(string), p[1].(string), p[2].(string), p[3].(int), hashOf(p[4]))
	})
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) error {
	h, err := body(r)
	if err != nil {
		return err
	}
	p, err := props(h, spec{"deployment_name", "String", 0, false}, spec{"az", "String", 0, false},
		spec{"disk_name", "String", 0, false}, spec{"disk_pool_name", "String", 0, false},
		spec{"disk_size", "Integer", 1, false}, spec{"metadata", "Hash", 0, true})
	if err != nil {
		return err
	}
	return s.enqueue(w, "create dynamic disk", func() (string, string, error) {
		return s.createJob(p[0].(string), p[1].(string), p[2].(string), p[3].(string), p[4].(int), hashOf(p[5]))
	})
}

func (s *Server) attach(w http.ResponseWriter, r *http.Request, name string) error {
	h, err := body(r)
	if err != nil {
		return err
	}
	p, err := props(h, spec{"instance_id", "String", 0, false}, spec{"metadata", "Hash", 0, true})
	if err != nil {
		return err
	}
	return s.enqueue(w, "attach dynamic disk", func() (string, string, error) {
		return s.attachJob(name, p[0].(string), hashOf(p[1]))
	})
}

// enqueue queues a task and answers 302, empty body, Location /tasks/<id>.
func (s *Server) enqueue(w http.ResponseWriter, desc string, run func() (string, string, error)) error {
	s.mu.Lock()
	t := &task{ID: int64(len(s.tasks) + 1), State: "queued", Description: desc, Timestamp: time.Now().Unix(),
		User: "fixture", run: run}
	s.tasks = append(s.tasks, t)
	s.mu.Unlock()
	s.queue <- t
	w.Header().Set("Location", fmt.Sprintf("/tasks/%d", t.ID))
	w.WriteHeader(http.StatusFound)
	return nil
}

func (s *Server) task(w http.ResponseWriter, r *http.Request, rest []string) error {
	id, err := strconv.ParseInt(rest[0], 10, 64)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || id < 1 || int(id) > len(s.tasks) {
		return &dirError{http.StatusNotFound, 10000, fmt.Sprintf("Task %s not found", rest[0])}
	}
	t := s.tasks[id-1]
	if len(rest) == 2 {
		// tasks_controller.rb:123: the type defaults to debug; none, and a
		// log the fixture does not keep (debug, cpi, event), answer 204.
		if r.URL.Query().Get("type") == "result" {
			_, err := io.WriteString(w, t.output)
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return writeJSON(w, t)
}

// listTasks is tasks_controller.rb's GET /: verbose 1 (the default) shows
// only types none of the fixture's disk tasks has; no default limit; a
// limit below 1 (to_i) is 1; newest first.
func (s *Server) listTasks(w http.ResponseWriter, r *http.Request) error {
	q := r.URL.Query()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*task, 0, len(s.tasks))
	if v := q.Get("verbose"); v != "" && v != "1" {
		for i := len(s.tasks) - 1; i >= 0; i-- {
			out = append(out, s.tasks[i])
		}
	}
	if l, ok := q["limit"]; ok {
		n, _ := strconv.Atoi(strings.TrimLeft(l[0], "+"))
		n = max(n, 1)
		if len(out) > n {
			out = out[:n]
		}
	}
	return writeJSON(w, out)
}

func (s *Server) instances(w http.ResponseWriter, dep string) error {
	if dep != s.cfg.Deployment {
		return &dirError{http.StatusNotFound, 70000, fmt.Sprintf("Deployment '%s' doesn't exist", dep)}
	}
	out := []map[string]any{}
	for _, in := range s.insts {
		out = append(out, map[string]any{"agent_id": in.AgentID, "cid": in.VMCID, "job": in.Group, "index": in.Index,
			"id": in.ID, "az": in.AZ, "ips": []string{}, "vm_created_at": "2026-08-22T10:00:00Z", "expects_vm": true})
	}
	return writeJSON(w, out)
}

func (s *Server) list(w http.ResponseWriter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := make([]string, 0, len(s.disks))
	for n := range s.disks {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []map[string]any{}
	for _, n := range names {
		d := s.disks[n]
		var inst any
		for _, in := range s.insts {
			if d.vm != "" && in.VMCID == d.vm {
				inst = in.Group + "/" + in.ID
			}
		}
		var az any
		if d.az != "" {
			az = d.az
		}
		meta := d.metadata
		if meta == nil {
			meta = map[string]any{} // models/dynamic_disk.rb: a null metadata_json reads as {}
		}
		out = append(out, map[string]any{"name": d.name, "disk_cid": d.cid, "deployment": d.deployment, "instance": inst,
			"availability_zone": az, "size": d.size, "disk_pool_name": d.pool, "cpi": d.cpi, "metadata": meta})
	}
	return writeJSON(w, out)
}
