package dynamicdisks

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
)

// retries is how often a request safe to repeat is sent again after a
// dropped connection or a 5xx, and the pauses between the attempts.
var retryPauses = []time.Duration{20 * time.Millisecond, 100 * time.Millisecond, 300 * time.Millisecond}

// retrying is the transport of every caller: it sends a request safe to
// repeat again, as a client would, when the connection drops or the
// director answers 5xx (a proxy restarting, a lost response): reads, DELETE,
// detach, attach and provide (each idempotent in the model; a provide
// repeated after its answer was lost makes no second disk). Create, deploys
// and the rest are sent once. The last attempt's outcome is what the
// suite judges; a transport error that outlives the retries is a harness
// error, never a director violation.
type retrying struct {
	next http.RoundTripper
}

// safeToRepeat reports whether req may be sent again.
func safeToRepeat(req *http.Request) bool {
	p := req.URL.Path
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodDelete:
		return true
	case http.MethodPost:
		return p == "/dynamic_disks/provide" || p == "/oauth/token" ||
			(strings.HasPrefix(p, "/dynamic_disks/") && (strings.HasSuffix(p, "/detach") || strings.HasSuffix(p, "/attach")))
	}
	return false
}

func (t retrying) RoundTrip(req *http.Request) (*http.Response, error) {
	if !safeToRepeat(req) || (req.Body != nil && req.GetBody == nil) {
		return t.next.RoundTrip(req)
	}
	for i := 0; ; i++ {
		r := req
		if i > 0 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			r = req.Clone(req.Context())
			r.Body = body
		}
		resp, err := t.next.RoundTrip(r)
		retry := err != nil || resp.StatusCode >= 500
		if !retry || i == len(retryPauses) || req.Context().Err() != nil {
			if i > 0 {
				what := "an error"
				if err == nil {
					what = resp.Status
				}
				GinkgoWriter.Printf("dynamic disks suite: %s %s sent %d times (the last answered %s)\n", req.Method, req.URL.Path, i+1, what)
			}
			return resp, err
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
		}
		select {
		case <-time.After(retryPauses[i]):
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
}

// HarnessError is a failure of the suite's own side (the director could
// not be reached, the connection dropped on every retry), never a
// director violation: the run cannot certify anything.
type HarnessError struct {
	What string `json:"what"`
}

// ReportEntryHarness names the report entry holding a HarnessError.
const ReportEntryHarness = "harness error"

// harnessf fails the current spec as a harness error.
func harnessf(format string, args ...any) {
	GinkgoHelper()
	h := HarnessError{What: fmt.Sprintf(format, args...)}
	AddReportEntry(ReportEntryHarness, h, ReportEntryVisibilityNever)
	Fail("harness error (not a director violation): " + h.What)
}

// transportErr reports whether err is a failure to reach the director (no
// answer), not an answer.
func transportErr(err error) bool {
	var ue *url.Error
	return err != nil && errors.As(err, &ue)
}
