package refcpi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/internal/httpread"
)

// Registry is the BOSH Registry as the CPI uses it. *fakeiaas.Cloud
// implements it in process; HTTPRegistry speaks the upstream HTTP API.
// GetSettings and DeleteSettings fail with an error matching
// fakeiaas.ErrNotFound when the VM has no settings.
type Registry interface {
	GetSettings(ctx context.Context, vmCID string) (json.RawMessage, error)
	PutSettings(ctx context.Context, vmCID string, settings json.RawMessage) error
	DeleteSettings(ctx context.Context, vmCID string) error
}

// HTTPRegistry is a client of the upstream registry API:
// GET|PUT|DELETE <endpoint>/instances/<vm cid>/settings with basic auth.
type HTTPRegistry struct {
	endpoint, user, password string
	hc                       *http.Client
}

// NewHTTPRegistry returns a registry client for endpoint (e.g.
// http://127.0.0.1:PORT/registry).
func NewHTTPRegistry(endpoint, user, password string) *HTTPRegistry {
	return &HTTPRegistry{endpoint: strings.TrimRight(endpoint, "/"), user: user, password: password, hc: &http.Client{}}
}

func (r *HTTPRegistry) do(ctx context.Context, method, vm string, body []byte) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, r.endpoint+"/instances/"+url.PathEscape(vm)+"/settings", bytes.NewReader(body))
	if err != nil {
		return 0, nil, regErr(fakeiaas.CodeInvalid, "registry %s %s: %v", method, vm, err)
	}
	if r.user != "" {
		req.SetBasicAuth(r.user, r.password)
	}
	if id := fakeiaas.RequestIDFrom(ctx); id != "" {
		req.Header.Set("X-Request-Id", id)
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return 0, nil, regErr(fakeiaas.CodeUnavailable, "registry at %s: %v", r.endpoint, err)
	}
	data, err := httpread.Body(resp, httpread.Endpoint(req), httpread.Limits{MaxBytes: fakeiaas.MaxAnswerBytes})
	if err != nil {
		return 0, nil, regErr(fakeiaas.CodeUnavailable, "registry at %s: %v", r.endpoint, err)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return resp.StatusCode, data, regErr(fakeiaas.CodeNotFound, "registry: no settings for %q", vm)
	case resp.StatusCode == http.StatusTooManyRequests:
		return resp.StatusCode, data, &fakeiaas.Error{Code: fakeiaas.CodeRateLimited,
			CPI: cpiv2.NewError(cpiv2.TypeCloudError, "registry %s %s: rate limited", method, vm).Retryable()}
	case resp.StatusCode/100 != 2:
		return resp.StatusCode, data, regErr(fakeiaas.CodeInternal, "registry %s %s: HTTP %d: %.200s", method, vm, resp.StatusCode, data)
	}
	return resp.StatusCode, data, nil
}

func regErr(code fakeiaas.Code, format string, args ...any) error {
	return &fakeiaas.Error{Code: code, CPI: cpiv2.NewError(cpiv2.TypeCloudError, format, args...)}
}

// GetSettings reads a VM's settings ({"settings": "<json>", "status": "ok"}).
func (r *HTTPRegistry) GetSettings(ctx context.Context, vm string) (json.RawMessage, error) {
	_, data, err := r.do(ctx, http.MethodGet, vm, nil)
	if err != nil {
		return nil, err
	}
	var env struct {
		Settings string `json:"settings"`
	}
	if err := json.Unmarshal(data, &env); err != nil || env.Settings == "" {
		return nil, regErr(fakeiaas.CodeInternal, "registry GET %s: unexpected body %.200s", vm, data)
	}
	return json.RawMessage(env.Settings), nil
}

// PutSettings writes a VM's settings.
func (r *HTTPRegistry) PutSettings(ctx context.Context, vm string, settings json.RawMessage) error {
	_, _, err := r.do(ctx, http.MethodPut, vm, settings)
	return err
}

// DeleteSettings deletes a VM's settings.
func (r *HTTPRegistry) DeleteSettings(ctx context.Context, vm string) error {
	_, _, err := r.do(ctx, http.MethodDelete, vm, nil)
	return err
}
