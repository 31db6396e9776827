// Package httpread bounds every read of a peer's HTTP answer: a size cap
// and a time cap, and an error that names the endpoint and the cap that
// was hit. Every HTTP client in cpilab (the Director client that
// certify-director and the drivers use, the suite's raw exchanges, the
// fakeiaas client, the reference CPI's registry client, the agent's
// settings fetcher) reads answers through Body, so a hostile or broken
// peer serving an endless or oversize answer costs at most the cap.
//
//	b, err := httpread.Body(resp, "GET /tasks/7", httpread.Limits{MaxBytes: 1 << 20})
//	var tl *httpread.TooLargeError
//	if errors.As(err, &tl) { … tl.Endpoint, tl.Limit … }
package httpread

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// Defaults of Limits' zero fields.
const (
	// DefaultMaxBytes caps an answer's body: 8 MiB.
	DefaultMaxBytes int64 = 8 << 20
	// DefaultTimeout caps the time spent reading one answer's body: 60 s.
	DefaultTimeout = 60 * time.Second
)

// Limits bound one read. Zero fields take the defaults above.
type Limits struct {
	// MaxBytes is the largest body accepted, in bytes (default
	// DefaultMaxBytes). One byte more is a *TooLargeError.
	MaxBytes int64
	// Timeout bounds reading the body, from the call to Body until its
	// last byte (default DefaultTimeout). Exceeding it is a
	// *TimeoutError. The request's own context and the http.Client's
	// Timeout still apply as well.
	Timeout time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	return l
}

// TooLargeError is an answer longer than its cap. The body was read up to
// the cap plus one byte and then closed.
type TooLargeError struct {
	Endpoint string // what was asked, e.g. "GET /tasks/7"
	Limit    int64  // the cap, bytes
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s: the answer is larger than the %s cap (refused, read no further)", e.Endpoint, Size(e.Limit))
}

// TimeoutError is an answer whose body did not end within its time cap.
type TimeoutError struct {
	Endpoint string        // what was asked
	Limit    time.Duration // the cap
	Read     int64         // bytes read before the cap
}

func (e *TimeoutError) Error() string {
	return fmt.Sprintf("%s: the answer did not end within the %s read cap (%d bytes read)", e.Endpoint, e.Limit, e.Read)
}

// ErrCapped matches both *TooLargeError and *TimeoutError with errors.Is.
var ErrCapped = errors.New("httpread: answer over its cap")

// Is makes errors.Is(err, ErrCapped) true.
func (e *TooLargeError) Is(target error) bool { return target == ErrCapped }

// Is makes errors.Is(err, ErrCapped) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrCapped }

// Endpoint names a request for errors: "GET /tasks/7" (path and query,
// without the host or credentials).
func Endpoint(req *http.Request) string {
	if req == nil || req.URL == nil {
		return "request"
	}
	return req.Method + " " + req.URL.RequestURI()
}

// Body reads resp's whole body within lim and closes it. endpoint names
// the request in errors ("" : taken from resp.Request). Over the size cap
// it returns the first MaxBytes bytes and a *TooLargeError; over the time
// cap, what was read and a *TimeoutError; any other read error is wrapped
// with the endpoint.
func Body(resp *http.Response, endpoint string, lim Limits) ([]byte, error) {
	lim = lim.withDefaults()
	if endpoint == "" {
		endpoint = Endpoint(resp.Request)
	}
	defer resp.Body.Close()
	var expired atomic.Bool
	// The timer only closes the body (the I/O edge): a read blocked on a
	// silent peer then returns at once.
	t := time.AfterFunc(lim.Timeout, func() { expired.Store(true); resp.Body.Close() })
	defer t.Stop()
	b, err := io.ReadAll(io.LimitReader(resp.Body, lim.MaxBytes+1))
	switch {
	case expired.Load():
		return b, &TimeoutError{Endpoint: endpoint, Limit: lim.Timeout, Read: int64(len(b))}
	case err != nil:
		return b, fmt.Errorf("%s: read answer: %w", endpoint, err)
	case int64(len(b)) > lim.MaxBytes:
		return b[:lim.MaxBytes], &TooLargeError{Endpoint: endpoint, Limit: lim.MaxBytes}
	}
	return b, nil
}

// Drain reads and drops at most max bytes of resp's body (default 64 KiB)
// and closes it, so the connection may be reused without a peer holding
// the client for an endless body.
func Drain(resp *http.Response, max int64) {
	if max <= 0 {
		max = 64 << 10
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, max))
	resp.Body.Close()
}

// Size prints a byte count the way the caps are written: "8 MiB", "512 KiB",
// "100 bytes".
func Size(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}
