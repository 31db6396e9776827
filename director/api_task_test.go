package director_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"testing"

	"github.com/cpilab/cpilab/director"
)

// API.Task is GET /tasks/:id without HTTP: for every task (done, failed,
// with a result file and without) the view it returns is the one the
// handler's answer decodes to, for an admin and for the disk-scoped user
// who queued it; where the handler answers an error, Task returns the same
// one (its status and code).
func TestAPITaskIsWhatGetTaskAnswers(t *testing.T) {
	w := newWorld(t, worldOpts{})
	auth, err := director.NewAuth(director.AuthConfig{Users: []director.User{
		{Name: "admin", Password: "pw", Scopes: []string{director.ScopeAdmin}},
		{Name: "csi", Password: "pw", Scopes: []string{director.ScopeDisksCreate, director.ScopeDisksAttach}},
		{Name: "other", Password: "pw", Scopes: []string{director.ScopeDisksDetach}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	api, err := director.NewAPI(director.APIConfig{Director: w.d, Auth: auth, DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	h := api.Handler()
	provide := func(name string, inst int) (int64, error) {
		return w.d.Provide("csi", director.ProvideRequest{DiskSize: 4, DiskName: name, DiskPoolName: "small", InstanceID: w.insts[inst].ID})
	}
	w.done(provide("d", 0))
	w.failed(provide("d", 1)) // attached to another VM
	last := w.done(w.d.DetachDynamicDisk("csi", "d")).ID

	principals := map[string]director.Principal{}
	for _, u := range []string{"admin", "csi", "other"} {
		_, p, err := auth.Token(u, "pw")
		if err != nil {
			t.Fatal(err)
		}
		principals[u] = p
	}
	withOutput, errorStatuses := 0, map[int]bool{}
	for user, p := range principals {
		for id := int64(0); id <= last+1; id++ {
			req := httptest.NewRequest(http.MethodGet, "/tasks/"+strconv.FormatInt(id, 10), nil)
			req.SetBasicAuth(user, "pw")
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			got, err := api.Task(p, id)
			if rec.Code != http.StatusOK {
				errorStatuses[rec.Code] = true
				var e *director.Error
				if !errors.As(err, &e) || e.Status != rec.Code {
					t.Errorf("%s, task %d: Task returned %v; GET answered %d %s", user, id, err, rec.Code, rec.Body)
					continue
				}
				var body struct {
					Code        int    `json:"code"`
					Description string `json:"description"`
				}
				if json.Unmarshal(rec.Body.Bytes(), &body) != nil || body.Code != e.ErrorCode() || body.Description != e.Error() {
					t.Errorf("%s, task %d: Task's error is %d %q; GET answered %s", user, id, e.ErrorCode(), e.Error(), rec.Body)
				}
				continue
			}
			var want director.TaskView
			if err := json.Unmarshal(rec.Body.Bytes(), &want); err != nil {
				t.Fatal(err)
			}
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("%s, task %d: Task returned\n%#v, %v\nGET answered\n%#v", user, id, got, err, want)
			}
			if len(got.Output) > 0 {
				withOutput++
			}
		}
	}
	if withOutput == 0 {
		t.Error("no task compared had a result file")
	}
	for _, code := range []int{http.StatusBadRequest, http.StatusUnauthorized, http.StatusNotFound} {
		if !errorStatuses[code] {
			t.Errorf("no read was answered %d (answers seen: %v)", code, errorStatuses)
		}
	}
}
