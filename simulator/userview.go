package simulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"

	"github.com/cpilab/cpilab/director"
)

// What the simulated user sees of the Director: its HTTP API, served in
// process (the handler runs on the caller's logical goroutine, so a request
// is no scheduling point). The workload's clients poll their tasks here and
// the quiescent checkers read their view of the Director here, never from
// its store: a Director that records a disk but never lists it, or whose
// task never ends, is seen as a user sees it.
//
// GET /tasks/:id, what the clients poll, is answered without HTTP when no
// control test rewrites the API: director.API.Task is what the handler
// encodes (TestInProcessTaskReadsAreHTTPReads compares the two for every
// task of runs), and an error answer is still read through HTTP, so the
// user sees the same status and body either way.

// The simulated user's credentials (an admin: it reads every task).
const (
	apiUser     = directorUser
	apiPassword = "sim-password"
)

// errDirectorDown is what a request to a crashed Director gets.
var errDirectorDown = errors.New("the director is down")

// apiError is a non-2xx answer.
type apiError struct {
	Status int
	Path   string
	Body   string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("GET %s: %d %s", e.Path, e.Status, e.Body)
}

// apiPrincipal is who apiUser authenticates as.
var apiPrincipal = director.Principal{Name: apiUser, Scopes: []string{director.ScopeAdmin}}

// newAPIHandler serves director d's API to the simulated user: the API read
// in process (nil when a control test rewrites the handler) and the handler.
func newAPIHandler(w *World, d *director.Director) (*director.API, http.Handler, error) {
	auth, err := director.NewAuth(director.AuthConfig{Runtime: w.s, SigningKey: []byte("cpilab-simulator-signing-key-000"),
		Users: []director.User{{Name: apiPrincipal.Name, Password: apiPassword, Scopes: apiPrincipal.Scopes}}})
	if err != nil {
		return nil, nil, err
	}
	api, err := director.NewAPI(director.APIConfig{Director: d, Auth: auth, DataDir: w.cfg.DataDir})
	if err != nil {
		return nil, nil, err
	}
	h := api.Handler()
	if f := w.cfg.tamper.api; f != nil {
		return nil, f(h), nil
	}
	return api, h, nil
}

// apiGet answers GET path from the running Director's API into out.
func (w *World) apiGet(path string, out any) error {
	body, err := w.apiGetBody(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(body, out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// apiGetBody is GET path's body as the API answers it (apiGet's request,
// for answers that are not one JSON value, such as a task's event log).
func (w *World) apiGetBody(path string) ([]byte, error) {
	w.mu.Lock()
	h := w.api
	w.mu.Unlock()
	if h == nil {
		return nil, errDirectorDown
	}
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.SetBasicAuth(apiUser, apiPassword)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return nil, &apiError{Status: rec.Code, Path: path, Body: rec.Body.String()}
	}
	return rec.Body.Bytes(), nil
}

// Task is GET /tasks/:id as the user sees it.
func (w *World) Task(id int64) (director.TaskView, error) {
	w.mu.Lock()
	api := w.apiTasks
	w.mu.Unlock()
	if api != nil {
		if t, err := api.Task(apiPrincipal, id); err == nil {
			return t, nil
		}
	}
	return w.httpTask(id)
}

// httpTask is GET /tasks/:id through the API's HTTP handler.
func (w *World) httpTask(id int64) (director.TaskView, error) {
	var t director.TaskView
	err := w.apiGet("/tasks/"+strconv.FormatInt(id, 10), &t)
	return t, err
}

// apiInstances is GET /deployments/:name/instances.
func (w *World) apiInstances() ([]director.InstanceInfo, error) {
	var out []director.InstanceInfo
	err := w.apiGet("/deployments/"+w.Deployment+"/instances", &out)
	return out, err
}

// instanceVM is the active VM CID and agent ID the API shows for instance
// ID id ("" without one).
func (w *World) instanceVM(id string) (vm, agentID string, err error) {
	ins, err := w.apiInstances()
	if err != nil {
		return "", "", err
	}
	for _, in := range ins {
		if in.ID == id && in.CID != nil {
			vm = *in.CID
			if in.AgentID != nil {
				agentID = *in.AgentID
			}
		}
	}
	return vm, agentID, nil
}
