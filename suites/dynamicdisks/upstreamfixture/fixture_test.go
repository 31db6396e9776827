package upstreamfixture_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/suites/dynamicdisks/upstreamfixture"
)

// The fixture answers as upstream's controller does, byte for byte where
// clients depend on it.
func TestFixtureAnswersAsUpstream(t *testing.T) {
	fx := upstreamfixture.New(upstreamfixture.Config{Tokens: map[string][]string{"a": {"bosh.admin"}, "r": {"bosh.read"}}})
	defer fx.Close()
	srv := httptest.NewServer(fx.Handler())
	defer srv.Close()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(tok, method, path, ctype, body string) (int, http.Header, string) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		if ctype != "" {
			req.Header.Set("Content-Type", ctype)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(b)
	}
	inst := fx.Instances()[0].ID
	for _, tc := range []struct {
		tok, method, path, ctype, body string
		status                         int
		answer                         string // "" : empty
	}{
		{"", "GET", "/dynamic_disks", "", "", 401, "Not authorized: '/dynamic_disks'\n"},
		{"r", "GET", "/dynamic_disks", "", "", 401, `{"code":600000,"description":"Require one of the scopes: bosh.admin, bosh.upstream-fixture.admin, bosh.dynamic-disks.list"}` + "\n"},
		{"a", "POST", "/dynamic_disks/provide", "application/json", "{", 500, ""},
		{"a", "POST", "/dynamic_disks/provide", "text/plain", "{}", 404, "Endpoint '/dynamic_disks/provide' not found."},
		{"a", "POST", "/dynamic_disks/provide", "application/json", `{"instance_id":"` + inst + `"}`, 400, `"code":40001`},
		{"a", "POST", "/dynamic_disks/provide", "application/json", `{"instance_id":"` + inst + `","disk_name":"d","disk_pool_name":"dynamic","disk_size":0}`, 400, `"code":40002`},
		{"a", "POST", "/dynamic_disks/provide", "application/json", `{"instance_id":"` + inst + `","disk_name":"d","disk_pool_name":"dynamic","disk_size":1}`, 302, ""},
		// Unknown routes: Rack's URLMap outside the mounted prefixes, the
		// controller's before filter (401) then not_found inside them.
		{"", "GET", "/nowhere", "", "", 404, "Not Found: /nowhere"},
		{"", "GET", "/dynamic_disks/d/bogus", "", "", 401, "Not authorized: '/dynamic_disks/d/bogus'\n"},
		{"a", "PUT", "/dynamic_disks/d/bogus", "", "", 404, "Endpoint '/dynamic_disks/d/bogus' not found."},
		{"", "GET", "/info", "", "", 200, `"uuid":"upstream-fixture"`},
		// Tasks: verbose 1 by default hides disk tasks; output defaults to
		// debug, which needs admin; none is 204.
		{"a", "GET", "/tasks", "", "", 200, "[]\n"},
		{"a", "GET", "/tasks?verbose=2&limit=0", "", "", 200, `"context_id":""`},
		{"r", "GET", "/tasks/1/output", "", "", 401, `"code":600000`},
		{"r", "GET", "/tasks/1/output?type=result", "", "", 200, "?"},
		{"a", "GET", "/tasks/1/output?type=none", "", "", 204, ""},
	} {
		status, h, answer := send(tc.tok, tc.method, tc.path, tc.ctype, tc.body)
		ok := status == tc.status
		switch {
		case tc.answer == "?": // any answer
		case tc.answer == "":
			ok = ok && answer == ""
		case strings.HasPrefix(tc.answer, `"`):
			ok = ok && strings.Contains(answer, tc.answer)
		default:
			ok = ok && answer == tc.answer
		}
		if status == 302 && !strings.HasPrefix(h.Get("Location"), "/tasks/") {
			ok = false
		}
		if !ok {
			t.Errorf("%s %s %s: %d %q; want %d %q", tc.method, tc.path, tc.body, status, answer, tc.status, tc.answer)
		}
	}
}

// A disk provided without metadata lists "metadata": {} and "cpi": "", and
// metadata {} on it calls no set_disk_metadata (upstream's model reads a
// null metadata_json as {}); a long task result is cut to 128 characters.
func TestFixtureUnsetFieldsAndTruncation(t *testing.T) {
	fx := upstreamfixture.New(upstreamfixture.Config{Tokens: map[string][]string{"a": {"bosh.admin"}}})
	defer fx.Close()
	srv := httptest.NewServer(fx.Handler())
	defer srv.Close()
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var do func(method, path, body string) string
	do = func(method, path, body string) string {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer a")
		req.Header.Set("Content-Type", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode == http.StatusFound {
			loc := resp.Header.Get("Location")
			for i := 0; i < 500; i++ {
				task := do("GET", loc, "")
				if !strings.Contains(task, `"state":"queued"`) && !strings.Contains(task, `"state":"processing"`) {
					return task
				}
				time.Sleep(10 * time.Millisecond)
			}
			t.Fatalf("task %s never ended", loc)
		}
		return string(b)
	}
	inst := fx.Instances()[0].ID
	do("POST", "/dynamic_disks/provide", `{"instance_id":"`+inst+`","disk_name":"d","disk_pool_name":"dynamic","disk_size":1}`)
	do("POST", "/dynamic_disks/d/attach", `{"instance_id":"`+inst+`","metadata":{}}`)
	if list := do("GET", "/dynamic_disks", ""); !strings.Contains(list, `"metadata":{}`) || !strings.Contains(list, `"cpi":""`) {
		t.Errorf("GET /dynamic_disks = %s; want metadata {} and cpi \"\"", list)
	}
	for _, c := range fx.Calls() {
		if c.Method == "set_disk_metadata" {
			t.Errorf("metadata {} on a disk without metadata called set_disk_metadata %v", c.Args)
		}
	}
	task := do("POST", "/dynamic_disks/"+strings.Repeat("n", 200)+"/attach", `{"instance_id":"`+inst+`"}`)
	var tv struct {
		Result string `json:"result"`
	}
	if err := json.Unmarshal([]byte(task), &tv); err != nil || len(tv.Result) > 131 || !strings.HasSuffix(tv.Result, "...") {
		t.Errorf("a long error's task = %s; want its result cut to 128 characters and ...", task)
	}
}
