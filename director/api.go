package director

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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

// Handler routes the API. Every mutating call answers 302 to /tasks/:id.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	route := func(pattern string, allow func(Principal) bool, h handlerFunc) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			p, err := a.auth.authenticate(r)
			if err != nil {
				w.Header().Set("WWW-Authenticate", `Bearer realm="cpilab-director", Basic realm="cpilab-director"`)
				writeError(w, &Error{Status: http.StatusUnauthorized, Message: err.Error()})
				return
			}
			if allow != nil && !allow(p) {
				writeError(w, &Error{Status: http.StatusForbidden, Message: fmt.Sprintf("%s may not %s %s (scopes %v)", p.Name, r.Method, r.URL.Path, p.Scopes)})
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
			if err := checkQuery(r); err != nil {
				writeError(w, err)
				return
			}
			if err := h(w, r, p); err != nil {
				writeError(w, err)
			}
		})
	}
	mux.HandleFunc("GET /info", a.info)
	mux.HandleFunc("POST /oauth/token", a.token)

	route("GET /dynamic_disks", canList, a.listDisks)
	route("GET /dynamic_disks/{name}", canList, a.getDisk)
	route("POST /dynamic_disks", canCreate, a.createDisk)
	route("POST /dynamic_disks/provide", canProvide, a.provide)
	route("POST /dynamic_disks/{name}/attach", canAttach, a.attachDisk)
	route("POST /dynamic_disks/{name}/detach", canDetach, a.detachDisk)
	route("DELETE /dynamic_disks/{name}", canDelete, a.deleteDisk)

	route("GET /tasks", canRead, a.listTasks)
	route("GET /tasks/{id}", nil, a.getTask)
	route("GET /tasks/{id}/output", nil, a.taskOutput)

	route("GET /stemcells", canRead, jsonGet(a.d.Stemcells))
	route("POST /stemcells", canAdmin, a.uploadStemcell)
	route("GET /cloud_configs", canRead, a.getCloudConfig)
	route("POST /cloud_configs", canAdmin, a.updateCloudConfig)
	route("GET /deployments", canRead, jsonGet(a.d.Deployments))
	route("POST /deployments", canAdmin, a.deploy)
	route("GET /deployments/{name}", canRead, a.getDeployment)
	route("DELETE /deployments/{name}", canAdmin, a.deleteDeployment)
	route("GET /deployments/{name}/instances", canRead, a.instances)
	route("PUT /deployments/{name}/instances/{id}", canAdmin, a.changeState)
	route("PUT /deployments/{name}/jobs/{group}/{id}", canAdmin, a.changeState)
	route("GET /vms", canRead, jsonGet(a.d.VMs))
	route("DELETE /vms/{cid}", canAdmin, a.deleteVM)
	route("GET /disks", canRead, a.orphanedDisks)
	route("DELETE /disks/{cid}", canAdmin, a.deleteOrphan)
	route("GET /locks", canRead, jsonGet(a.d.Locks))
	return mux
}

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

// errorBody is the JSON of every error answer.
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
	writeJSON(w, e.Status, errorBody{Code: e.Status, Description: e.Error(), Field: e.Field})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// redirectTask answers 302 to the task, with the task as the body.
func (a *API) redirectTask(w http.ResponseWriter, id int64, err error) error {
	if err != nil {
		return err
	}
	w.Header().Set("Location", fmt.Sprintf("/tasks/%d", id))
	t, _ := a.d.Task(id)
	writeJSON(w, http.StatusFound, taskView(t))
	return nil
}

// decodeBody decodes a JSON body strictly; errors name the field.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(r.Body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var te *json.UnmarshalTypeError
		var se *json.SyntaxError
		var mb *http.MaxBytesError
		switch {
		case errors.As(err, &mb):
			return err
		case errors.As(err, &te):
			return badField(te.Field, "must be %s, got a JSON %s", te.Type, te.Value)
		case errors.As(err, &se), errors.Is(err, io.ErrUnexpectedEOF):
			return badField("body", "not valid JSON: %v", err)
		case errors.Is(err, io.EOF):
			return badField("body", "is empty; a JSON object is required")
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			return badField(strings.Trim(f, `"`), "is not a known field")
		}
		return badField("body", "%v", err)
	}
	if dec.More() {
		return badField("body", "holds more than one JSON value")
	}
	return nil
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
		out = append(out, viewDisk(dd))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (a *API) getDisk(w http.ResponseWriter, r *http.Request, _ Principal) error {
	name := r.PathValue("name")
	if err := validateDiskName("disk_name", name); err != nil {
		return err
	}
	dd, err := a.d.DynamicDisk(name)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, viewDisk(dd))
	return nil
}

// DiskInfo is a dynamic disk as GET /dynamic_disks and
// GET /dynamic_disks/:name show it.
type DiskInfo struct {
	Name         string            `json:"disk_name"`
	CID          string            `json:"disk_cid"`
	Deployment   string            `json:"deployment"`
	DiskPoolName string            `json:"disk_pool_name"`
	SizeMiB      int               `json:"disk_size"`
	InstanceID   string            `json:"instance_id,omitempty"`
	VMCID        string            `json:"vm_cid,omitempty"`
	AZ           string            `json:"az,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	State        DiskState         `json:"state"`
	Hint         json.RawMessage   `json:"disk_hint,omitempty"`
}

func viewDisk(dd DynamicDisk) DiskInfo {
	return DiskInfo{Name: dd.Name, CID: dd.CID, Deployment: dd.Deployment, DiskPoolName: dd.DiskPoolName,
		SizeMiB: dd.SizeMiB, InstanceID: dd.InstanceID, VMCID: dd.VMCID, AZ: dd.AZ, Metadata: dd.Metadata,
		State: dd.State, Hint: dd.Hint}
}

func (a *API) provide(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req ProvideRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	id, err := a.d.Provide(p.Name, req)
	return a.redirectTask(w, id, err)
}

func (a *API) createDisk(w http.ResponseWriter, r *http.Request, p Principal) error {
	var req CreateDiskRequest
	if err := decodeBody(r, &req); err != nil {
		return err
	}
	id, err := a.d.CreateDynamicDisk(p.Name, req)
	return a.redirectTask(w, id, err)
}

func (a *API) attachDisk(w http.ResponseWriter, r *http.Request, p Principal) error {
	var body struct {
		InstanceID string `json:"instance_id"`
	}
	if err := decodeBody(r, &body); err != nil {
		return err
	}
	id, err := a.d.AttachDynamicDisk(p.Name, AttachRequest{DiskName: r.PathValue("name"), InstanceID: body.InstanceID})
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

// TaskView is a task as the API shows it (upstream's shape).
type TaskView struct {
	ID          int64           `json:"id"`
	State       TaskState       `json:"state"`
	Description string          `json:"description"`
	Timestamp   int64           `json:"timestamp"`
	StartedAt   int64           `json:"started_at,omitempty"`
	Result      string          `json:"result,omitempty"` // the error message, or "" (upstream)
	User        string          `json:"user"`
	Deployment  string          `json:"deployment,omitempty"`
	Type        string          `json:"type"`
	Queue       string          `json:"queue"`
	Output      json.RawMessage `json:"result_output,omitempty"` // the job's JSON result
}

func taskView(t Task) TaskView {
	v := TaskView{ID: t.ID, State: t.State, Description: t.Description, Timestamp: t.CreatedAt.Unix(),
		Result: t.Error, User: t.User, Deployment: t.Deployment, Type: t.Type, Queue: t.Queue, Output: t.Result}
	if !t.StartedAt.IsZero() {
		v.StartedAt = t.StartedAt.Unix()
	}
	return v
}

func (a *API) listTasks(w http.ResponseWriter, r *http.Request, _ Principal) error {
	q := r.URL.Query()
	limit := 100
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxTaskListLimit {
			return badField("limit", "must be an integer from 1 to %d; got %q", MaxTaskListLimit, s)
		}
		limit = n
	}
	states := map[string]bool{}
	for _, s := range strings.Split(q.Get("state"), ",") {
		if s != "" {
			states[s] = true
		}
	}
	dep := q.Get("deployment")
	tasks, err := a.d.Tasks(limit, func(t *Task) bool {
		return (len(states) == 0 || states[string(t.State)]) && (dep == "" || t.Deployment == dep)
	})
	if err != nil {
		return err
	}
	out := make([]TaskView, 0, len(tasks))
	for _, t := range tasks {
		out = append(out, taskView(t))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// readableTask loads a task the caller may read: readers see every task; a
// dynamic-disk-scoped caller sees only its own.
func (a *API) readableTask(r *http.Request, p Principal) (Task, error) {
	s := r.PathValue("id")
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil || id < 1 {
		return Task{}, badField("id", "must be a positive integer; got %q", s)
	}
	if !canRead(p) && !diskScoped(p) {
		return Task{}, &Error{Status: http.StatusForbidden, Message: fmt.Sprintf("%s may not read tasks", p.Name)}
	}
	t, err := a.d.Task(id)
	if err != nil {
		return Task{}, err
	}
	if !canRead(p) && t.User != p.Name {
		return Task{}, &Error{Status: http.StatusForbidden, Message: fmt.Sprintf("task %d belongs to another user", id)}
	}
	return t, nil
}

func (a *API) getTask(w http.ResponseWriter, r *http.Request, p Principal) error {
	t, err := a.readableTask(r, p)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, taskView(t))
	return nil
}

// taskOutput is GET /tasks/:id/output?type=event|debug|result: the event
// log as one JSON object per line, the debug log as text, or the result.
func (a *API) taskOutput(w http.ResponseWriter, r *http.Request, p Principal) error {
	t, err := a.readableTask(r, p)
	if err != nil {
		return err
	}
	switch typ := r.URL.Query().Get("type"); typ {
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
	case "result", "":
		w.Header().Set("Content-Type", "text/plain")
		if len(t.Result) > 0 {
			_, _ = w.Write(append(t.Result, '\n'))
		}
	default:
		return badField("type", "must be event, debug or result; got %q", typ)
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
	writeJSON(w, http.StatusOK, ins)
	return nil
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
