package director_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/internal/httpread"
	"github.com/cpilab/cpilab/rt"
)

// hostileDirector answers every endpoint with a body that never ends
// (endless) or with one a byte over the client's cap (oversize).
func hostileDirector(t *testing.T, endless bool, size int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			w.WriteHeader(http.StatusBadRequest) // Start's error path reads the body too
		}
		chunk := []byte(strings.Repeat("[", 16<<10))
		if !endless {
			_, _ = w.Write([]byte(strings.Repeat("[", size)))
			return
		}
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestClientCapsEveryAnswer(t *testing.T) {
	const limit = 64 << 10
	calls := map[string]func(*director.Client) error{
		"GET /tasks/7": func(c *director.Client) error { _, err := c.Task(context.Background(), 7); return err },
		"GET /tasks/7/output?type=result": func(c *director.Client) error {
			_, err := c.TaskOutput(context.Background(), 7, "result")
			return err
		},
		"GET /deployments/d/instances": func(c *director.Client) error { _, err := c.Instances(context.Background(), "d"); return err },
		"GET /dynamic_disks":           func(c *director.Client) error { _, err := c.DynamicDisks(context.Background()); return err },
		"GET /info":                    func(c *director.Client) error { _, err := c.Info(context.Background()); return err },
		"POST /dynamic_disks/provide": func(c *director.Client) error {
			_, err := c.Start(context.Background(), http.MethodPost, "/dynamic_disks/provide", map[string]string{})
			return err
		},
	}
	for _, endless := range []bool{true, false} {
		srv := hostileDirector(t, endless, limit+1)
		c, err := director.NewClient(director.ClientConfig{URL: srv.URL, Token: "t", MaxAnswerBytes: limit})
		if err != nil {
			t.Fatal(err)
		}
		for ep, call := range calls {
			err := call(c)
			var tl *httpread.TooLargeError
			if !errors.As(err, &tl) || tl.Endpoint != ep || tl.Limit != limit {
				t.Errorf("endless=%v %s: err = %v, want a *TooLargeError naming the endpoint and the 64 KiB cap", endless, ep, err)
				continue
			}
			if !strings.Contains(err.Error(), ep) || !strings.Contains(err.Error(), "64 KiB") {
				t.Errorf("endless=%v %s: error %q names neither endpoint nor cap", endless, ep, err)
			}
		}
	}
}

// sleeps records the pauses of task polling.
type sleeps struct {
	rt.Runtime
	mu sync.Mutex
	d  []time.Duration
}

func (s *sleeps) Sleep(d time.Duration) { s.mu.Lock(); s.d = append(s.d, d); s.mu.Unlock() }

func TestWaitTaskBacksOff(t *testing.T) {
	polls := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		polls++
		state := "processing"
		if polls == 8 {
			state = "done"
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"id": 3, "state": state})
	}))
	defer srv.Close()
	rec := &sleeps{Runtime: rt.Real(1)}
	c, err := director.NewClient(director.ClientConfig{URL: srv.URL, Runtime: rec, PollInterval: 20 * time.Millisecond, PollMax: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTask(context.Background(), 3); err != nil {
		t.Fatal(err)
	}
	ms := time.Millisecond
	want := []time.Duration{20 * ms, 40 * ms, 80 * ms, 160 * ms, 200 * ms, 200 * ms, 200 * ms}
	if len(rec.d) != len(want) {
		t.Fatalf("pauses %v, want %v", rec.d, want)
	}
	for i := range want {
		if rec.d[i] != want[i] {
			t.Fatalf("pauses %v, want %v", rec.d, want)
		}
	}
}
