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

func newAPIHandler(w *World, d *director.Director) (http.Handler, error) {
	auth, err := director.NewAuth(director.AuthConfig{Runtime: w.s, SigningKey: []byte("cpilab-simulator-signing-key-000"),
		Users: []director.User{{Name: apiUser, Password: apiPassword, Scopes: []string{director.ScopeAdmin}}}})
	if err != nil {
		return nil, err
	}
	api, err := director.NewAPI(director.APIConfig{Director: d, Auth: auth, DataDir: w.cfg.DataDir})
	if err != nil {
		return nil, err
	}
	h := api.Handler()
	if f := w.cfg.tamper.api; f != nil {
		h = f(h)
	}
	return h, nil
}

// apiGet answers GET path from the running Director's API into out.
func (w *World) apiGet(path string, out any) error {
	w.mu.Lock()
	h := w.api
	w.mu.Unlock()
	if h == nil {
		return errDirectorDown
	}
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.SetBasicAuth(apiUser, apiPassword)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return &apiError{Status: rec.Code, Path: path, Body: rec.Body.String()}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	return nil
}

// Task is GET /tasks/:id as the user sees it.
func (w *World) Task(id int64) (director.TaskView, error) {
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
