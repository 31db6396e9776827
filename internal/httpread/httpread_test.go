package httpread_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/internal/httpread"
)

// endless writes until the client goes away.
func endless(w http.ResponseWriter, r *http.Request) {
	chunk := []byte(strings.Repeat("x", 32<<10))
	for {
		if _, err := w.Write(chunk); err != nil {
			return
		}
		if r.Context().Err() != nil {
			return
		}
	}
}

func get(t *testing.T, h http.HandlerFunc) *http.Response {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	resp, err := http.Get(srv.URL + "/tasks/7?type=result")
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestBodyEndlessAnswerIsCapped(t *testing.T) {
	resp := get(t, endless)
	b, err := httpread.Body(resp, "", httpread.Limits{MaxBytes: 1 << 20})
	var tl *httpread.TooLargeError
	if !errors.As(err, &tl) {
		t.Fatalf("err = %v, want *TooLargeError", err)
	}
	if tl.Endpoint != "GET /tasks/7?type=result" || tl.Limit != 1<<20 || len(b) != 1<<20 {
		t.Fatalf("endpoint %q limit %d read %d", tl.Endpoint, tl.Limit, len(b))
	}
	if !strings.Contains(err.Error(), "GET /tasks/7?type=result") || !strings.Contains(err.Error(), "1 MiB") {
		t.Fatalf("error %q does not name the endpoint and the cap", err)
	}
	if !errors.Is(err, httpread.ErrCapped) {
		t.Fatal("not ErrCapped")
	}
}

func TestBodyOversizeAnswerIsCapped(t *testing.T) {
	resp := get(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("y", 1001)))
	})
	_, err := httpread.Body(resp, "GET /info", httpread.Limits{MaxBytes: 1000})
	var tl *httpread.TooLargeError
	if !errors.As(err, &tl) || tl.Endpoint != "GET /info" {
		t.Fatalf("err = %v", err)
	}
}

func TestBodyAtTheCapIsAccepted(t *testing.T) {
	resp := get(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(strings.Repeat("y", 1000)))
	})
	b, err := httpread.Body(resp, "GET /info", httpread.Limits{MaxBytes: 1000})
	if err != nil || len(b) != 1000 {
		t.Fatalf("read %d, err %v", len(b), err)
	}
}

func TestBodySilentPeerHitsTheTimeCap(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	resp := get(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("partial"))
		w.(http.Flusher).Flush()
		<-release
	})
	b, err := httpread.Body(resp, "GET /tasks/9", httpread.Limits{Timeout: 50 * time.Millisecond})
	var te *httpread.TimeoutError
	if !errors.As(err, &te) || te.Endpoint != "GET /tasks/9" || te.Limit != 50*time.Millisecond {
		t.Fatalf("err = %v, want *TimeoutError", err)
	}
	if string(b) != "partial" || te.Read != 7 {
		t.Fatalf("read %q (%d)", b, te.Read)
	}
}

func TestDrainStopsAtItsCap(t *testing.T) {
	resp := get(t, endless)
	done := make(chan struct{})
	go func() { httpread.Drain(resp, 1<<20); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Drain read an endless body without end")
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[int64]string{8 << 20: "8 MiB", 512 << 10: "512 KiB", 100: "100 bytes", 1<<20 + 1: "1048577 bytes"} {
		if got := httpread.Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
