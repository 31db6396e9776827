package dynamicdisks

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// A request safe to repeat is sent again after a dropped connection or a
// 5xx, and the last answer is returned; create is sent once; a director
// that never answers is a transport error (the harness's, not a
// violation).
func TestRetryingTransport(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := calls.Add(1)
		b, _ := io.ReadAll(r.Body)
		switch {
		case r.URL.Path == "/drop" || (n == 1 && r.URL.Path != "/dynamic_disks/x/detach"):
			// The first call of a test (and every /drop) loses its answer.
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
		case n == 1:
			w.WriteHeader(http.StatusServiceUnavailable)
		default:
			w.Header().Set("Location", "/tasks/7")
			w.WriteHeader(http.StatusFound)
			_, _ = w.Write(b)
		}
	}))
	defer srv.Close()
	cfg := Config{}.withDefaults()
	hc, err := httpClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	send := func(method, path, body string) (*http.Response, error) {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		return hc.Do(req)
	}
	for _, c := range []struct {
		method, path string
		calls        int64
		ok           bool
	}{
		{http.MethodPost, "/dynamic_disks/provide", 2, true},
		{http.MethodPost, "/dynamic_disks/x/detach", 2, true}, // a 503, then the answer
		{http.MethodDelete, "/dynamic_disks/x", 2, true},
		{http.MethodPost, "/dynamic_disks", 1, false}, // create: not safe to repeat
		{http.MethodGet, "/drop", int64(len(retryPauses) + 1), false},
	} {
		calls.Store(0)
		resp, err := send(c.method, c.path, `{"disk_name":"x"}`)
		if got := calls.Load(); got != c.calls {
			t.Errorf("%s %s: sent %d times; want %d", c.method, c.path, got, c.calls)
		}
		switch {
		case c.ok && (err != nil || resp.StatusCode != http.StatusFound):
			t.Errorf("%s %s: %v %v; want the 302 of the retry", c.method, c.path, resp, err)
		case c.ok:
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if string(b) != `{"disk_name":"x"}` {
				t.Errorf("%s %s: the retry sent body %q", c.method, c.path, b)
			}
		case err == nil:
			resp.Body.Close()
			t.Errorf("%s %s: answered %d; want a transport error", c.method, c.path, resp.StatusCode)
		case !transportErr(err):
			t.Errorf("%s %s: %v is not seen as a transport error", c.method, c.path, err)
		}
	}
}
