package director

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/internal/strictjson"
)

// maxBody bounds request bodies (manifests, cloud configs, JSON): 4 MiB.
const maxBody = 4 << 20

// API is the director's HTTP API (see Handler).
type API struct {
	d    *Director
	auth *Auth
	// Stemcells resolves POST /stemcells {"location": …}; nil refuses
	// locations (only {"manifest", "image_path"} is accepted).
	stemcells *stemcellUnpacker
}

// APIConfig configures NewAPI.
type APIConfig struct {
	Director *Director // required
	Auth     *Auth     // required
	// DataDir receives unpacked stemcell tarballs. Default: a new
	// temporary directory, made on first use.
	DataDir string
}

// NewAPI returns the HTTP API of a director.
func NewAPI(cfg APIConfig) (*API, error) {
	if cfg.Director == nil || cfg.Auth == nil {
		return nil, errors.New("director: APIConfig.Director and Auth are required")
	}
	return &API{d: cfg.Director, auth: cfg.Auth, stemcells: &stemcellUnpacker{dir: cfg.DataDir}}, nil
}

type handlerFunc func(w http.ResponseWriter, r *http.Request, p Principal) error

// Handler routes the API. Every mutating call answers 302 to /tasks/:id
// with an empty body. Authentication and scopes are checked before the
// body is read, as upstream's route conditions do: no or bad credentials
// answer 401 "Not authorized: '<path>'", a missing scope 401
// {"code": 600000, "description": "Require one of the scopes: …"}.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	wrap := func(perm Permission, h handlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			p, err := a.auth.authenticate(r)
			if err != nil {
				w.Header().Set("WWW-Authenticate", `Basic realm="BOSH Director"`)
				w.Header().Set("Content-Type", "text/plain")
				w.WriteHeader(http.StatusUnauthorized)
				_, _ = fmt.Fprintf(w, "Not authorized: '%s'\n", r.URL.Path)
				return
			}
			if perm != "" {
				if sets := expectedScopes(perm, a.d.UUID()); !p.granted(sets) {
					writeError(w, scopeError(sets))
					return
				}
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
			if err := checkQuery(r); err != nil {
				writeError(w, err)
				return
			}
			if err := h(w, r, p); err != nil {
				if errors.Is(err, errServerError) {
					w.WriteHeader(http.StatusInternalServerError)
					return
				}
				writeError(w, err)
			}
		}
	}
	route := func(pattern string, perm Permission, h handlerFunc) { mux.HandleFunc(pattern, wrap(perm, h)) }
	mux.HandleFunc("GET /info", a.info)
	mux.HandleFunc("POST /oauth/token", a.token)

	route("GET /dynamic_disks", PermListDisks, a.listDisks)
	route("GET /dynamic_disks/{name}", PermListDisks, a.getDisk)
	route("POST /dynamic_disks", PermCreateDisks, a.createDisk)
	route("POST /dynamic_disks/provide", PermProvideDisks, a.provide)
	route("POST /dynamic_disks/{name}/attach", PermAttachDisks, a.attachDisk)
	route("POST /dynamic_disks/{name}/detach", PermDetachDisks, a.detachDisk)
	route("DELETE /dynamic_disks/{name}", PermDeleteDisks, a.deleteDisk)
	route("POST /dynamic_disks/{name}/resize", PermCreateDisks, a.resizeDisk) // cpilab extension

	route("GET /tasks", PermRead, a.listTasks)
	route("GET /tasks/{id}", "", a.getTask)
	route("GET /tasks/{id}/output", "", a.taskOutput)

	route("GET /stemcells", PermRead, jsonGet(a.d.Stemcells))
	route("POST /stemcells", PermAdmin, a.uploadStemcell)
	route("GET /cloud_configs", PermRead, a.getCloudConfig)
	route("POST /cloud_configs", PermAdmin, a.updateCloudConfig)
	route("GET /deployments", PermRead, jsonGet(a.d.Deployments))
	route("POST /deployments", PermAdmin, a.deploy)
	route("GET /deployments/{name}", PermRead, a.getDeployment)
	route("DELETE /deployments/{name}", PermAdmin, a.deleteDeployment)
	route("GET /deployments/{name}/instances", PermRead, a.instances)
	route("PUT /deployments/{name}/instances/{id}", PermAdmin, a.changeState)
	route("PUT /deployments/{name}/jobs/{group}/{id}", PermAdmin, a.changeState)
	route("GET /vms", PermRead, jsonGet(a.d.VMs))
	route("DELETE /vms/{cid}", PermAdmin, a.deleteVM)
	route("GET /disks", PermRead, a.orphanedDisks)
	route("DELETE /disks/{cid}", PermAdmin, a.deleteOrphan)
	route("GET /locks", PermRead, a.locks)
	// Anything else: upstream mounts one Sinatra controller per path prefix
	// (api/route_configuration.rb). Under a mounted prefix the controller's
	// before filter authenticates first (401), then its not_found answers
	// 404 "Endpoint '<path>' not found." (base_controller.rb:63, :90), for
	// an unknown method as for an unknown path; under no prefix Rack's
	// URLMap answers 404 "Not Found: <path>" without authenticating.
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		seg, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		if !upstreamMounts[seg] {
			w.Header().Set("Content-Type", "text/plain")
			w.WriteHeader(http.StatusNotFound)
			_, _ = fmt.Fprintf(w, "Not Found: %s", r.URL.Path)
			return
		}
		wrap("", func(w http.ResponseWriter, r *http.Request, _ Principal) error {
			w.Header().Set("Content-Type", "text/html;charset=utf-8")
			w.WriteHeader(http.StatusNotFound)
			_, _ = fmt.Fprintf(w, "Endpoint '%s' not found.", r.URL.Path)
			return nil
		})(w, r)
	})
	return mux
}

// LockView is a lock as GET /locks lists it, in upstream's shape
// (api/controllers/locks_controller.rb): the name's second part as type, the
// rest as resource, the expiry as "<seconds>.<microseconds>" and the task
// ID as a string; cpilab adds the name, the owner and the expiry as a time.
type LockView struct {
	Type      string    `json:"type"`
	Resource  []string  `json:"resource"`
	Timeout   string    `json:"timeout"`
	TaskID    string    `json:"task_id"`
	Name      string    `json:"name"`
	Owner     string    `json:"owner"`
	ExpiresAt time.Time `json:"expires_at"`
}

// locks is GET /locks. As upstream, a lock that expired a minute ago or
// more (6 × its 10 s renewal interval) is not listed.
func (a *API) locks(w http.ResponseWriter, _ *http.Request, _ Principal) error {
	recs, err := a.d.Locks()
	if err != nil {
		return err
	}
	cutoff := a.d.r.Now().Add(-time.Minute)
	out := make([]LockView, 0, len(recs))
	for _, l := range recs {
		if !l.ExpiresAt.After(cutoff) {
			continue
		}
		parts := strings.Split(l.Name, ":")
		v := LockView{Resource: []string{}, Timeout: fmt.Sprintf("%d.%06d", l.ExpiresAt.Unix(), l.ExpiresAt.Nanosecond()/1000),
			TaskID: strconv.FormatInt(l.TaskID, 10), Name: l.Name, Owner: l.Owner, ExpiresAt: l.ExpiresAt}
		if len(parts) > 1 {
			v.Type = parts[1]
		}
		if len(parts) > 2 {
			v.Resource = parts[2:]
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// upstreamMounts are the path prefixes upstream's Director mounts a
// controller at (api/route_configuration.rb @96f9135).
var upstreamMounts = map[string]bool{}

func init() {
	for _, p := range strings.Fields(`cleanup cloud_configs runtime_configs cpi_configs configs deployments
		deployment_configs disks director dynamic_disks networks orphan_disks orphaned_vms info locks packages
		releases resources resurrection stemcells stemcell_uploads task tasks events vms jobs link_providers
		link_consumers link_address links deployed_variables`) {
		upstreamMounts[p] = true
	}
}

// errServerError makes a handler answer 500 with an empty body, as
// upstream does for an exception outside its DirectorError handling.
var errServerError = errors.New("internal server error")

func jsonGet[T any](fn func() (T, error)) handlerFunc {
	return func(w http.ResponseWriter, _ *http.Request, _ Principal) error {
		v, err := fn()
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, v)
		return nil
	}
}

// errorBody is the JSON of every error answer: upstream's {"code",
// "description"}, and cpilab's "field" naming the offending body field.
type errorBody struct {
	Code        int    `json:"code"`
	Description string `json:"description"`
	Field       string `json:"field,omitempty"`
}

func writeError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			e = &Error{Status: http.StatusRequestEntityTooLarge, Message: err.Error()}
		} else {
			e = &Error{Status: http.StatusInternalServerError, Message: err.Error()}
		}
	}
	writeJSON(w, e.Status, errorBody{Code: e.ErrorCode(), Description: e.Error(), Field: e.Field})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// redirectTask answers 302 to the task with an empty body, as upstream's
// Director behind its nginx.
func (a *API) redirectTask(w http.ResponseWriter, id int64, err error) error {
	if err != nil {
		return err
	}
	w.Header().Set("Location", fmt.Sprintf("/tasks/%d", id))
	w.WriteHeader(http.StatusFound)
	return nil
}

// decodeBody decodes a JSON body strictly (internal/strictjson: no
// duplicate or case-variant keys, no unknown fields); errors name the
// field.
func decodeBody(r *http.Request, v any) error {
	b, err := io.ReadAll(r.Body)
	var mb *http.MaxBytesError
	if errors.As(err, &mb) {
		return err
	}
	if err != nil {
		return badField("body", "reading it: %v", err)
	}
	err = strictjson.Decode(b, v, strictjson.Options{DisallowUnknownFields: true})
	var je *strictjson.Error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, strictjson.ErrEmpty):
		return badField("body", "is empty; a JSON object is required")
	case errors.As(err, &je) && errors.Is(err, strictjson.ErrDuplicateKey):
		return badField(je.Key, "is ambiguous: %s", je.Detail)
	case errors.As(err, &je) && errors.Is(err, strictjson.ErrUnknownField):
		return badField(je.Key, "is not a known field")
	case errors.As(err, &je) && je.Key != "":
		return badField(je.Key, "%s", je.Detail)
	}
	return badField("body", "not valid JSON: %v", err)
}

func (a *API) info(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"name": a.d.cfg.Name, "uuid": a.d.UUID(), "version": "cpilab", "cpi": "cpilab",
		"user_authentication": map[string]any{"type": "local", "options": map[string]any{"token_endpoint": "/oauth/token"}},
		"features": map[string]any{"dynamic_disks": map[string]any{"status": true,
			"extras": map[string]any{"knobs": a.d.cfg.Knobs, "dynamic_disks_workers": a.dynamicWorkers()}}},
	})
}

func (a *API) dynamicWorkers() int {
	if a.d.cfg.Knobs.ZeroDynamicDiskWorkers {
		return 0
	}
	return a.d.cfg.DynamicDiskWorkers
}

// token is POST /oauth/token: grant_type password (username, password) or
// client_credentials (client_id, client_secret), form-encoded.
func (a *API) token(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		writeError(w, badField("body", "not a form: %v", err))
		return
	}
	var user, pass string
	switch gt := r.PostForm.Get("grant_type"); gt {
	case "password":
		user, pass = r.PostForm.Get("username"), r.PostForm.Get("password")
	case "client_credentials":
		user, pass = r.PostForm.Get("client_id"), r.PostForm.Get("client_secret")
		if u, p, ok := r.BasicAuth(); ok && user == "" {
			user, pass = u, p
		}
	default:
		writeError(w, badField("grant_type", "must be password or client_credentials; got %q", gt))
		return
	}
	tok, p, err := a.auth.Token(user, pass)
	if err != nil {
		writeError(w, &Error{Status: http.StatusUnauthorized, Message: err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"access_token": tok, "token_type": "bearer",
		"expires_in": int(a.auth.ttl.Seconds()), "scope": strings.Join(p.Scopes, " ")})
}

func (a *API) listDisks(w http.ResponseWriter, _ *http.Request, _ Principal) error {
	disks, err := a.d.DynamicDisks()
	if err != nil {
		return err
	}
	out := make([]DiskInfo, 0, len(disks))
	for _, dd := range disks {
		v, err := a.d.viewDisk(dd)
		if err != nil {
			return err
		}
		out = append(out, v)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// getDisk is GET /dynamic_disks/:name, a cpilab extension (upstream has
// only the list): one entry of the list, or 404.
func (a *API) getDisk(w http.ResponseWriter, r *http.Request, _ Principal) error {
	dd, err := a.d.DynamicDisk(r.PathValue("name"))
	if err != nil {
		return err
	}
	v, err := a.d.viewDisk(dd)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

// DiskInfo is a dynamic disk as GET /dynamic_disks lists it, in upstream's
// shape: Instance is "<instance group>/<instance id>" of the VM the disk is
// attached to, null when detached; Deployment and AZ are null when unset.
// As upstream (the dynamic_disks table's cpi column defaults to the empty string, and
// models/dynamic_disk.rb reads a null metadata_json as {}), CPI is "" and
// Metadata {} when unset.
type DiskInfo struct {
	Name         string         `json:"name"`
	CID          string         `json:"disk_cid"`
	Deployment   *string        `json:"deployment"`
	Instance     *string        `json:"instance"`
	AZ           *string        `json:"availability_zone"`
	SizeMiB      int            `json:"size"`
	DiskPoolName string         `json:"disk_pool_name"`
	CPI          string         `json:"cpi"`
	Metadata     map[string]any `json:"metadata"`
}

// InstanceName is the group/id name the list gives the instance ("" when
// detached).
func (i DiskInfo) InstanceName() string {
	if i.Instance == nil {
		return ""
	}
	return *i.Instance
}

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// viewDisk is a record as the list shows it.
func (d *Director) viewDisk(dd DynamicDisk) (DiskInfo, error) {
	v := DiskInfo{Name: dd.Name, CID: dd.CID, Deployment: strPtr(dd.Deployment), AZ: strPtr(dd.AZ), SizeMiB: dd.SizeMiB,
		DiskPoolName: dd.DiskPoolName, CPI: dd.CPI, Metadata: dd.Metadata}
	if v.Metadata == nil {
		v.Metadata = map[string]any{}
	}
	if dd.InstanceID != "" {
		inst, err := d.instance(dd.InstanceID)
		switch {
		case err == nil:
			v.Instance = strPtr(inst.Group + "/" + inst.ID)
		case !errors.Is(err, ErrNotFound):
			return v, err
		}
	}
	return v, nil
}

func (a *API) provide(w http.ResponseWriter, r *http.Request, p Principal) error {
	b, err := readJSONObject(r, a.d.cfg.Knobs)
	if err != nil {
		return err
	}
	req, err := parseProvide(b)
	if err != nil {
		return err
	}
	id, err := a.d.Provide(p.Name, req)
	return a.redirectTask(w, id, err)
}

func (a *API) createDisk(w http.ResponseWriter, r *http.Request, p Principal) error {
	b, err := readJSONObject(r, a.d.cfg.Knobs)
	if err != nil {
		return err
	}
	req, err := parseCreate(b)
	if err != nil {
		return err
	}
	id, err := a.d.CreateDynamicDisk(p.Name, req)
	return a.redirectTask(w, id, err)
}

func (a *API) attachDisk(w http.ResponseWriter, r *http.Request, p Principal) error {
	b, err := readJSONObject(r, a.d.cfg.Knobs)
	if err != nil {
		return err
	}
	req, err := parseAttach(b, r.PathValue("name"))
	if err != nil {
		return err
	}
	id, err := a.d.AttachDynamicDisk(p.Name, req)
	return a.redirectTask(w, id, err)
}

func (a *API) detachDisk(w http.ResponseWriter, r *http.Request, p Principal) error {
	id, err := a.d.DetachDynamicDisk(p.Name, r.PathValue("name"))
	return a.redirectTask(w, id, err)
}

func (a *API) deleteDisk(w http.ResponseWriter, r *http.Request, p Principal) error {
	id, err := a.d.DeleteDynamicDisk(p.Name, r.PathValue("name"))
	return a.redirectTask(w, id, err)
}

// TaskView is a task as the API shows it, in upstream's shape
// (api/task_manager.rb task_to_hash: id, state, description, timestamp,
// started_at, result, user, deployment, context_id; started_at and
// deployment null when unset) and cpilab's additions type, queue and
// result_output. cpilab records no context id: context_id is always "", as
// upstream's for a request without X-Bosh-Context-Id.
type TaskView struct {
	ID          int64
	State       TaskState
	Description string
	Timestamp   int64
	StartedAt   int64  // 0: not started (null)
	Result      string // the job's message, or its error (upstream)
	User        string
	Deployment  string // "": none (null)
	ContextID   string
	Type        string
	Queue       string
	Output      json.RawMessage // cpilab: the task's result file, inline
}

type taskJSON struct {
	ID          int64           `json:"id"`
	State       TaskState       `json:"state"`
	Description string          `json:"description"`
	Timestamp   int64           `json:"timestamp"`
	StartedAt   *int64          `json:"started_at"`
	Result      string          `json:"result"`
	User        string          `json:"user"`
	Deployment  *string         `json:"deployment"`
	ContextID   string          `json:"context_id"`
	Type        string          `json:"type"`
	Queue       string          `json:"queue"`
	Output      json.RawMessage `json:"result_output,omitempty"`
}

// MarshalJSON writes upstream's shape: null started_at and deployment
// when unset.
func (v TaskView) MarshalJSON() ([]byte, error) {
	j := taskJSON{ID: v.ID, State: v.State, Description: v.Description, Timestamp: v.Timestamp, Result: v.Result,
		User: v.User, Deployment: strPtr(v.Deployment), ContextID: v.ContextID, Type: v.Type, Queue: v.Queue, Output: v.Output}
	if v.StartedAt != 0 {
		j.StartedAt = &v.StartedAt
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads upstream's shape (and cpilab's).
func (v *TaskView) UnmarshalJSON(b []byte) error {
	var j taskJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*v = TaskView{ID: j.ID, State: j.State, Description: j.Description, Timestamp: j.Timestamp, Result: j.Result,
		User: j.User, ContextID: j.ContextID, Type: j.Type, Queue: j.Queue, Output: j.Output}
	if j.StartedAt != nil {
		v.StartedAt = *j.StartedAt
	}
	if j.Deployment != nil {
		v.Deployment = *j.Deployment
	}
	return nil
}

func (a *API) taskView(t Task) TaskView {
	v := TaskView{ID: t.ID, State: t.State, Description: t.Description, Timestamp: t.CreatedAt.Unix(),
		Result: t.Message, User: t.User, Deployment: t.Deployment, Type: t.Type, Queue: t.Queue, Output: t.Result}
	if t.State == TaskError || t.State == TaskCancelled || t.State == TaskTimeout {
		v.Result = t.Error
	}
	if a.d.cfg.Knobs.TruncateTaskResult {
		v.Result = truncateResult(v.Result)
	}
	if !t.StartedAt.IsZero() {
		v.StartedAt = t.StartedAt.Unix()
	}
	return v
}

// truncateResult is upstream's JobRunner#truncate (job_runner.rb:134):
// the stripped text cut to 129 characters and, when longer than 128, its
// last (partial) word and the blanks before it replaced by "...".
func truncateResult(s string) string {
	r := []rune(strings.TrimSpace(s))
	if len(r) <= resultLen {
		return string(r)
	}
	return lastWord.ReplaceAllString(string(r[:resultLen+1]), "") + "..."
}

const resultLen = 128

var lastWord = regexp.MustCompile(`\s+?(\S+)?$`)

// verboseTypes are the task types GET /tasks shows by default under
// TaskListAsUpstream (tasks_controller.rb:36, verbose 1): upstream's list,
// and cpilab's deploy and upload_stemcell, its update_deployment and
// update_stemcell. Disk tasks are not among them.
var verboseTypes = map[string]bool{}

func init() {
	for _, t := range strings.Fields(`attach_disk create_snapshot delete_deployment delete_release delete_snapshot
		delete_stemcell run_errand snapshot_deployment update_instance update_deployment update_release
		update_stemcell export_release deploy upload_stemcell`) {
		verboseTypes[t] = true
	}
}

// listTasks is GET /tasks?state=a,b&deployment=d&limit=n&verbose=1|2,
// newest first. verbose 1 shows only verboseTypes; 2 every task.
// Reference: verbose 2 and limit 100 by default, a limit outside 1 to
// MaxTaskListLimit refused. TaskListAsUpstream: verbose 1 and no limit by
// default, a limit below 1 (or not a number: Ruby's to_i) taken as 1.
func (a *API) listTasks(w http.ResponseWriter, r *http.Request, _ Principal) error {
	q := r.URL.Query()
	upstream := a.d.cfg.Knobs.TaskListAsUpstream
	limit, verbose := 100, "2"
	if upstream {
		limit, verbose = 0, "1"
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		switch {
		case upstream:
			n = rubyToI(s)
			if n < 1 {
				n = 1
			}
			n = min(n, MaxTaskListLimit)
		case err != nil || n < 1 || n > MaxTaskListLimit:
			return badField("limit", "must be an integer from 1 to %d; got %q", MaxTaskListLimit, s)
		}
		limit = n
	}
	if s := q.Get("verbose"); s != "" {
		verbose = s
	}
	states := map[string]bool{}
	for _, s := range strings.Split(q.Get("state"), ",") {
		if s != "" {
			states[s] = true
		}
	}
	dep := q.Get("deployment")
	ctxID, byContext := q["context_id"]
	tasks, err := a.d.tasks(limit, false, func(t *Task) bool {
		return (len(states) == 0 || states[string(t.State)]) && (dep == "" || t.Deployment == dep) &&
			(verbose != "1" || verboseTypes[t.Type]) && (!byContext || ctxID[0] == "")
	})
	if err != nil {
		return err
	}
	out := make([]TaskView, 0, len(tasks))
	for _, t := range tasks {
		out = append(out, a.taskView(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// rubyToI is Ruby's String#to_i: the leading integer, else 0.
func rubyToI(s string) int {
	s = strings.TrimLeft(s, " \t\n\v\f\r")
	end := 0
	if end < len(s) && (s[end] == '-' || s[end] == '+') {
		end++
	}
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(s[:end])
	if err != nil {
		if end > 1 && s[0] != '-' {
			return MaxTaskListLimit // too many digits: as many as allowed
		}
		return 0
	}
	return n
}

// readableTask loads a task the caller may read: readers see every task; a
// dynamic-disk-scoped caller sees only its own.
func (a *API) readableTask(r *http.Request, p Principal) (Task, error) { return a.readTask(r, p, true) }

// readTask is readableTask; with logs false the task's event and debug logs
// are left out (what the task views show has none of them).
func (a *API) readTask(r *http.Request, p Principal, logs bool) (Task, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return Task{}, badField("id", "must be a positive integer; got %q", s)
	}
	return a.readTaskID(p, id, logs)
}

// readTaskID is readTask of the task numbered id.
func (a *API) readTaskID(p Principal, id int64, logs bool) (Task, error) {
	if id < 1 {
		return Task{}, badField("id", "must be a positive integer; got %q", strconv.FormatInt(id, 10))
	}
	sets := expectedScopes(PermRead, a.d.UUID())
	reader := p.granted(sets)
	if !reader && (!diskScoped(p) || a.d.cfg.Knobs.DiskScopesCannotReadTasks) {
		return Task{}, scopeError(sets)
	}
	t, err := a.d.task(id, logs)
	if errors.Is(err, ErrNotFound) {
		return Task{}, &Error{Status: http.StatusNotFound, Code: CodeTaskNotFound, Message: fmt.Sprintf("Task %d not found", id)}
	}
	if err != nil {
		return Task{}, err
	}
	if !reader && t.User != p.Name {
		e := scopeError(sets)
		e.Message = fmt.Sprintf("task %d was queued by another user; %s", id, e.Message)
		return Task{}, e
	}
	return t, nil
}

func (a *API) getTask(w http.ResponseWriter, r *http.Request, p Principal) error {
	t, err := a.readTask(r, p, false)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, a.taskView(t))
	return nil
}

// Task is GET /tasks/:id for principal p without HTTP: on success the view
// the handler encodes, which decodes to the same TaskView; on failure the
// error the handler would write. It neither authenticates p nor applies the
// request checks of a route, and is for callers inside the process that
// read tasks often (the simulator's users poll their tasks with it).
func (a *API) Task(p Principal, id int64) (TaskView, error) {
	t, err := a.readTaskID(p, id, false)
	if err != nil {
		return TaskView{}, err
	}
	return a.taskView(t), nil
}

// taskOutput is GET /tasks/:id/output?type=event|debug|cpi|result|none:
// the event log as one JSON object per line, the debug log as text, or the
// result. As upstream (tasks_controller.rb:123): the type defaults to
// debug, none answers 204, and so does cpi (cpilab keeps no separate CPI
// log; upstream answers 204 for a log file that is absent). Under
// TaskDebugNeedsAdmin debug and cpi need admin (tasks_controller.rb:18).
func (a *API) taskOutput(w http.ResponseWriter, r *http.Request, p Principal) error {
	typ := r.URL.Query().Get("type")
	if typ == "" {
		typ = "debug"
	}
	t, err := a.readableTask(r, p)
	if err != nil {
		return err
	}
	if (typ == "debug" || typ == "cpi") && a.d.cfg.Knobs.TaskDebugNeedsAdmin {
		if sets := expectedScopes(PermAdmin, a.d.UUID()); !p.granted(sets) {
			return scopeError(sets)
		}
	}
	switch typ {
	case "none", "cpi":
		w.WriteHeader(http.StatusNoContent)
	case "event":
		w.Header().Set("Content-Type", "text/plain")
		enc := json.NewEncoder(w)
		for _, e := range t.Events {
			_ = enc.Encode(map[string]any{"time": e.Time.Unix(), "stage": e.Stage, "task": e.Task, "state": e.State,
				"error": e.Error, "tags": []string{}, "index": 1, "total": 1})
		}
	case "debug":
		w.Header().Set("Content-Type", "text/plain")
		for _, l := range t.Debug {
			_, _ = io.WriteString(w, l+"\n")
		}
	case "result":
		w.Header().Set("Content-Type", "text/plain")
		if len(t.Result) > 0 {
			_, _ = w.Write(append(t.Result, '\n'))
		}
	default:
		return badField("type", "must be event, debug, cpi, result or none; got %q", typ)
	}
	return nil
}

func (a *API) uploadStemcell(w http.ResponseWriter, r *http.Request, p Principal) error {
	var body struct {
		Location  string `json:"location"`
		Manifest  string `json:"manifest"`
		ImagePath string `json:"image_path"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	mf, image := []byte(body.Manifest), body.ImagePath
	switch {
	case body.Location != "" && body.Manifest != "":
		return badField("location", "give location or manifest, not both")
	case body.Location != "":
		var err error
		if mf, image, err = a.stemcells.open(body.Location); err != nil {
			return err
		}
	case body.Manifest == "":
		return badField("manifest", "location or manifest is required")
	}
	id, err := a.d.UploadStemcell(p.Name, mf, image)
	return a.redirectTask(w, id, err)
}

func readText(r *http.Request, field string) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	if len(strings.TrimSpace(string(b))) == 0 {
		return nil, badField(field, "is empty")
	}
	return b, nil
}

func (a *API) getCloudConfig(w http.ResponseWriter, _ *http.Request, _ Principal) error {
	cc, err := a.d.CloudConfig()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, cc)
	return nil
}

func (a *API) updateCloudConfig(w http.ResponseWriter, r *http.Request, p Principal) error {
	b, err := readText(r, "cloud_config")
	if err != nil {
		return err
	}
	id, err := a.d.UpdateCloudConfig(p.Name, b)
	return a.redirectTask(w, id, err)
}

func (a *API) deploy(w http.ResponseWriter, r *http.Request, p Principal) error {
	b, err := readText(r, "manifest")
	if err != nil {
		return err
	}
	id, err := a.d.Deploy(p.Name, b)
	return a.redirectTask(w, id, err)
}

func (a *API) getDeployment(w http.ResponseWriter, r *http.Request, _ Principal) error {
	name := r.PathValue("name")
	if err := a.d.checkDeployment(name); err != nil {
		return err
	}
	deps, err := a.d.Deployments()
	if err != nil {
		return err
	}
	for _, dep := range deps {
		if dep.Name == name {
			writeJSON(w, http.StatusOK, dep)
			return nil
		}
	}
	return notFound("deployment %q not found", name)
}

func (a *API) deleteDeployment(w http.ResponseWriter, r *http.Request, p Principal) error {
	id, err := a.d.DeleteDeployment(p.Name, r.PathValue("name"))
	return a.redirectTask(w, id, err)
}

func (a *API) instances(w http.ResponseWriter, r *http.Request, _ Principal) error {
	ins, err := a.d.Instances(r.PathValue("name"))
	if err != nil {
		return err
	}
	out := make([]InstanceInfo, 0, len(ins))
	for _, in := range ins {
		out = append(out, viewInstance(in))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// InstanceInfo is an instance as GET /deployments/:name/instances shows it,
// in upstream's shape (deployments_controller.rb create_vm_response): CID
// and AgentID are the active VM's, null without one. VMType and State are
// cpilab's.
type InstanceInfo struct {
	AgentID   *string  `json:"agent_id"`
	CID       *string  `json:"cid"`
	Job       string   `json:"job"`
	Index     int      `json:"index"`
	ID        string   `json:"id"`
	AZ        *string  `json:"az"`
	IPs       []string `json:"ips"`
	ExpectsVM bool     `json:"expects_vm"`
	State     string   `json:"state,omitempty"`
}

func viewInstance(in Instance) InstanceInfo {
	v := InstanceInfo{Job: in.Group, Index: in.Index, ID: in.ID, AZ: strPtr(in.AZ), IPs: []string{},
		ExpectsVM: in.State != InstanceDetached, State: string(in.State)}
	if in.VMCID != "" {
		v.CID, v.AgentID = strPtr(in.VMCID), strPtr(in.AgentID)
	}
	return v
}

// Instance turns the API's view back into an Instance of deployment.
func (v InstanceInfo) Instance(deployment string) Instance {
	in := Instance{ID: v.ID, Deployment: deployment, Group: v.Job, Index: v.Index, State: InstanceState(v.State)}
	if v.AZ != nil {
		in.AZ = *v.AZ
	}
	if v.CID != nil {
		in.VMCID = *v.CID
	}
	if v.AgentID != nil {
		in.AgentID = *v.AgentID
	}
	return in
}

// changeState is PUT /deployments/:d/instances/:id?state=…&hard=…&reattach_dynamic_disks=…
func (a *API) changeState(w http.ResponseWriter, r *http.Request, p Principal) error {
	q := r.URL.Query()
	req := InstanceStateRequest{Deployment: r.PathValue("name"), InstanceID: r.PathValue("id"), State: q.Get("state")}
	for _, f := range []struct {
		name string
		dst  *bool
	}{{"hard", &req.Hard}, {"reattach_dynamic_disks", &req.ReattachDynamicDisks}} {
		if s := q.Get(f.name); s != "" {
			v, err := strconv.ParseBool(s)
			if err != nil {
				return badField(f.name, "must be true or false; got %q", s)
			}
			*f.dst = v
		}
	}
	if g := r.PathValue("group"); g != "" {
		inst, err := a.d.instance(req.InstanceID)
		if err != nil {
			return err
		}
		if inst.Group != g {
			return notFound("instance %q is not in instance group %q", req.InstanceID, g)
		}
	}
	id, err := a.d.ChangeInstanceState(p.Name, req)
	return a.redirectTask(w, id, err)
}

func (a *API) deleteVM(w http.ResponseWriter, r *http.Request, p Principal) error {
	id, err := a.d.DeleteVM(p.Name, r.PathValue("cid"))
	return a.redirectTask(w, id, err)
}

func (a *API) orphanedDisks(w http.ResponseWriter, r *http.Request, _ Principal) error {
	if s := r.URL.Query().Get("orphaned"); s != "true" {
		return badField("orphaned", "only orphaned=true is supported")
	}
	o, err := a.d.OrphanedDisks()
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, o)
	return nil
}

func (a *API) deleteOrphan(w http.ResponseWriter, r *http.Request, p Principal) error {
	cid := r.PathValue("cid")
	o, err := a.d.OrphanedDisks()
	if err != nil {
		return err
	}
	found := false
	for _, x := range o {
		found = found || x.CID == cid
	}
	if !found {
		return notFound("orphaned disk %q not found", cid)
	}
	id, err := a.d.DeleteOrphanedDisks(p.Name, []string{cid})
	return a.redirectTask(w, id, err)
}
