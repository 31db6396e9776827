package director

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/cpilab/cpilab/internal/httpread"
	"github.com/cpilab/cpilab/rt"
)

// ClientConfig configures NewClient.
type ClientConfig struct {
	// URL is the director's base URL (required).
	URL string
	// CACertPEM is trusted for TLS (Server.CACertPEM). Empty: the system
	// roots.
	CACertPEM []byte
	// Token is a bearer token; else Username and Password are used with
	// basic auth (call Login to trade them for a token).
	Token              string
	Username, Password string
	// HTTPClient overrides the transport (its redirects are not followed).
	HTTPClient *http.Client
	// Runtime is the clock task polling sleeps on. Default rt.Real(0).
	Runtime rt.Runtime
	// PollInterval is the first pause between task polls; each further
	// poll of the same task waits twice as long, up to PollMax. Default
	// 20 ms.
	PollInterval time.Duration
	// PollMax is the longest pause between task polls. Default 500 ms (a
	// task stuck in processing is polled twice a second, not 50 times).
	PollMax time.Duration
	// MaxAnswerBytes caps every answer's body, task output included
	// (default 8 MiB); a longer answer is an error naming the endpoint
	// and the cap (*httpread.TooLargeError).
	MaxAnswerBytes int64
	// AnswerTimeout caps the time spent reading one answer's body
	// (default 60 s; *httpread.TimeoutError).
	AnswerTimeout time.Duration
}

// Client calls a director's API and waits on its tasks.
type Client struct {
	cfg  ClientConfig
	base *url.URL
	hc   *http.Client
	r    rt.Runtime
}

// APIError is a non-success answer of the API.
type APIError struct {
	Status      int    // HTTP status
	Code        int    // the Director's error code (0: the answer had none)
	Description string // the director's message
	Field       string // the offending field of a 400 (cpilab only)
}

func (e *APIError) Error() string {
	return fmt.Sprintf("director: HTTP %d: %s", e.Status, e.Description)
}

// TaskFailedError is a task that ended in error or cancelled.
type TaskFailedError struct{ Task TaskView }

func (e *TaskFailedError) Error() string {
	return fmt.Sprintf("director: task %d (%s) %s: %s", e.Task.ID, e.Task.Description, e.Task.State, e.Task.Result)
}

// NewClient returns a client for cfg.
func NewClient(cfg ClientConfig) (*Client, error) {
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("director: client URL %q is not an absolute URL", cfg.URL)
	}
	if cfg.Runtime == nil {
		cfg.Runtime = rt.Real(0)
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 20 * time.Millisecond
	}
	if cfg.PollMax < cfg.PollInterval {
		cfg.PollMax = max(cfg.PollInterval, 500*time.Millisecond)
	}
	hc := cfg.HTTPClient
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		if len(cfg.CACertPEM) > 0 {
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(cfg.CACertPEM) {
				return nil, errors.New("director: CACertPEM holds no certificate")
			}
			tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		}
		hc = &http.Client{Transport: tr, Timeout: 5 * time.Minute}
	}
	c := *hc
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &Client{cfg: cfg, base: u, hc: &c, r: cfg.Runtime}, nil
}

// Login trades Username and Password for a bearer token used from then on.
func (c *Client) Login(ctx context.Context) error {
	form := url.Values{"grant_type": {"password"}, "username": {c.cfg.Username}, "password": {c.cfg.Password}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base.String()+"/oauth/token", strings.NewReader(form.Encode()))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	var out struct {
		AccessToken string `json:"access_token"`
	}
	if err := c.do(req, http.StatusOK, &out); err != nil {
		return err
	}
	c.cfg.Token = out.AccessToken
	return nil
}

func (c *Client) newRequest(ctx context.Context, method, path string, body io.Reader, ctype string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, body)
	if err != nil {
		return nil, err
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	switch {
	case c.cfg.Token != "":
		req.Header.Set("Authorization", "Bearer "+c.cfg.Token)
	case c.cfg.Username != "":
		req.SetBasicAuth(c.cfg.Username, c.cfg.Password)
	}
	return req, nil
}

// do sends req and decodes a want-status JSON answer into out (nil: drop).
func (c *Client) do(req *http.Request, want int, out any) error {
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("director: %s %s: %w", req.Method, req.URL.Path, err)
	}
	b, err := httpread.Body(resp, httpread.Endpoint(req), c.limits())
	if err != nil {
		return fmt.Errorf("director: %w", err)
	}
	if resp.StatusCode != want {
		var eb errorBody
		if json.Unmarshal(b, &eb) != nil || eb.Description == "" {
			eb.Description = strings.TrimSpace(string(b))
		}
		return &APIError{Status: resp.StatusCode, Code: eb.Code, Description: eb.Description, Field: eb.Field}
	}
	if out == nil {
		return nil
	}
	if s, ok := out.(*[]byte); ok {
		*s = b
		return nil
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("director: %s %s: decode answer: %w", req.Method, req.URL.Path, err)
	}
	return nil
}

// Start sends a mutating call and returns the ID of the task it queued,
// read from the 302's Location (/tasks/<id>, absolute or not); the body
// is ignored (upstream's is empty).
func (c *Client) Start(ctx context.Context, method, path string, body any) (int64, error) {
	var rd io.Reader
	ctype := ""
	switch b := body.(type) {
	case nil:
	case []byte: // YAML documents
		rd, ctype = bytes.NewReader(b), "text/yaml"
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, err
		}
		rd, ctype = bytes.NewReader(j), "application/json"
	}
	req, err := c.newRequest(ctx, method, path, rd, ctype)
	if err != nil {
		return 0, err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("director: %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusFound {
		b, err := httpread.Body(resp, httpread.Endpoint(req), c.limits())
		if err != nil {
			return 0, fmt.Errorf("director: HTTP %d: %w", resp.StatusCode, err)
		}
		var eb errorBody
		if json.Unmarshal(b, &eb) != nil || eb.Description == "" {
			eb.Description = strings.TrimSpace(string(b))
		}
		return 0, &APIError{Status: resp.StatusCode, Code: eb.Code, Description: eb.Description, Field: eb.Field}
	}
	httpread.Drain(resp, 1<<20)
	loc := resp.Header.Get("Location")
	i := strings.LastIndex(loc, "/tasks/")
	if i < 0 {
		return 0, fmt.Errorf("director: %s %s: 302 to %q, not to /tasks/<id>", method, path, loc)
	}
	id, err := strconv.ParseInt(loc[i+len("/tasks/"):], 10, 64)
	if err != nil || id < 1 {
		return 0, fmt.Errorf("director: %s %s: 302 to %q, not to /tasks/<id>", method, path, loc)
	}
	return id, nil
}

func (c *Client) limits() httpread.Limits {
	return httpread.Limits{MaxBytes: c.cfg.MaxAnswerBytes, Timeout: c.cfg.AnswerTimeout}
}

// Task returns a task.
func (c *Client) Task(ctx context.Context, id int64) (TaskView, error) {
	var tv TaskView
	return tv, c.get(ctx, "/tasks/"+strconv.FormatInt(id, 10), &tv)
}

// WaitTask polls the task until it ends (or ctx is done), backing off
// from PollInterval to PollMax. A task that ends in error returns
// *TaskFailedError.
func (c *Client) WaitTask(ctx context.Context, id int64) (TaskView, error) {
	pause := c.cfg.PollInterval
	for {
		tv, err := c.Task(ctx, id)
		if err != nil {
			return tv, err
		}
		switch tv.State {
		case TaskDone:
			return tv, nil
		case TaskError, TaskCancelled, TaskTimeout:
			return tv, &TaskFailedError{Task: tv}
		}
		if err := ctx.Err(); err != nil {
			return tv, fmt.Errorf("director: waiting for task %d (%s): %w", id, tv.State, err)
		}
		c.r.Sleep(pause)
		pause = NextPoll(pause, c.cfg.PollMax)
	}
}

// NextPoll is the pause after one of d before a task is polled again:
// twice d, at most max. Every task poller in cpilab backs off this way.
func NextPoll(d, max time.Duration) time.Duration {
	if d *= 2; d > max {
		return max
	}
	return d
}

// Run starts a call and waits for its task.
func (c *Client) Run(ctx context.Context, method, path string, body any) (TaskView, error) {
	id, err := c.Start(ctx, method, path, body)
	if err != nil {
		return TaskView{}, err
	}
	return c.WaitTask(ctx, id)
}

// GetJSON decodes GET path into out.
func (c *Client) GetJSON(ctx context.Context, path string, out any) error {
	return c.get(ctx, path, out)
}

func (c *Client) get(ctx context.Context, path string, out any) error {
	req, err := c.newRequest(ctx, http.MethodGet, path, nil, "")
	if err != nil {
		return err
	}
	return c.do(req, http.StatusOK, out)
}

// diskCIDOf reads the disk_cid of a finished task's result file
// (GET /tasks/:id/output?type=result), as provide and create write it.
func (c *Client) diskCIDOf(ctx context.Context, tv TaskView, err error) (string, error) {
	if err != nil {
		return "", err
	}
	raw, err := c.TaskOutput(ctx, tv.ID, "result")
	if err != nil {
		return "", err
	}
	var r DiskResult
	if t := bytes.TrimSpace(raw); len(t) > 0 {
		if err := json.Unmarshal(t, &r); err != nil {
			return "", fmt.Errorf("director: task %d result %q: %w", tv.ID, t, err)
		}
	}
	if r.DiskCID == "" {
		return "", fmt.Errorf("director: task %d succeeded, but its result %q holds no disk_cid", tv.ID, bytes.TrimSpace(raw))
	}
	return r.DiskCID, nil
}

// Provide runs POST /dynamic_disks/provide and returns the disk CID.
func (c *Client) Provide(ctx context.Context, req ProvideRequest) (string, error) {
	tv, err := c.Run(ctx, http.MethodPost, "/dynamic_disks/provide", req)
	return c.diskCIDOf(ctx, tv, err)
}

// CreateDynamicDisk runs POST /dynamic_disks and returns the disk CID.
func (c *Client) CreateDynamicDisk(ctx context.Context, req CreateDiskRequest) (string, error) {
	tv, err := c.Run(ctx, http.MethodPost, "/dynamic_disks", req)
	return c.diskCIDOf(ctx, tv, err)
}

// AttachDynamicDisk runs POST /dynamic_disks/:name/attach (metadata
// optional) and returns the task's message.
func (c *Client) AttachDynamicDisk(ctx context.Context, name, instanceID string, metadata map[string]any) (string, error) {
	body := map[string]any{"instance_id": instanceID}
	if metadata != nil {
		body["metadata"] = metadata
	}
	tv, err := c.Run(ctx, http.MethodPost, "/dynamic_disks/"+url.PathEscape(name)+"/attach", body)
	return tv.Result, err
}

// DetachDynamicDisk runs POST /dynamic_disks/:name/detach.
func (c *Client) DetachDynamicDisk(ctx context.Context, name string) error {
	_, err := c.Run(ctx, http.MethodPost, "/dynamic_disks/"+url.PathEscape(name)+"/detach", nil)
	return err
}

// ResizeDynamicDisk runs POST /dynamic_disks/:name/resize (a cpilab
// extension) and returns the disk's CID afterwards (a new one when the
// director resized by copy).
func (c *Client) ResizeDynamicDisk(ctx context.Context, name string, sizeMiB int) (string, error) {
	tv, err := c.Run(ctx, http.MethodPost, "/dynamic_disks/"+url.PathEscape(name)+"/resize", map[string]int{"disk_size": sizeMiB})
	return c.diskCIDOf(ctx, tv, err)
}

// DeleteDynamicDisk runs DELETE /dynamic_disks/:name.
func (c *Client) DeleteDynamicDisk(ctx context.Context, name string) error {
	_, err := c.Run(ctx, http.MethodDelete, "/dynamic_disks/"+url.PathEscape(name), nil)
	return err
}

// DynamicDisks lists the dynamic disks.
func (c *Client) DynamicDisks(ctx context.Context) ([]DiskInfo, error) {
	var out []DiskInfo
	return out, c.get(ctx, "/dynamic_disks", &out)
}

// UploadStemcell uploads a stemcell from a directory or .tgz on the
// director's host.
func (c *Client) UploadStemcell(ctx context.Context, location string) error {
	_, err := c.Run(ctx, http.MethodPost, "/stemcells", map[string]string{"location": location})
	return err
}

// UploadStemcellManifest uploads a stemcell from stemcell.MF text and an
// image path on the director's host.
func (c *Client) UploadStemcellManifest(ctx context.Context, mf []byte, imagePath string) error {
	_, err := c.Run(ctx, http.MethodPost, "/stemcells", map[string]string{"manifest": string(mf), "image_path": imagePath})
	return err
}

// UpdateCloudConfig replaces the cloud config.
func (c *Client) UpdateCloudConfig(ctx context.Context, yaml []byte) error {
	_, err := c.Run(ctx, http.MethodPost, "/cloud_configs", yaml)
	return err
}

// Deploy deploys a manifest.
func (c *Client) Deploy(ctx context.Context, manifest []byte) error {
	_, err := c.Run(ctx, http.MethodPost, "/deployments", manifest)
	return err
}

// Instances lists a deployment's instances (upstream's shape, see
// InstanceInfo).
func (c *Client) Instances(ctx context.Context, deployment string) ([]Instance, error) {
	var infos []InstanceInfo
	if err := c.get(ctx, "/deployments/"+url.PathEscape(deployment)+"/instances", &infos); err != nil {
		return nil, err
	}
	out := make([]Instance, 0, len(infos))
	for _, v := range infos {
		out = append(out, v.Instance(deployment))
	}
	return out, nil
}

// ChangeInstanceState runs PUT /deployments/:d/instances/:id.
func (c *Client) ChangeInstanceState(ctx context.Context, req InstanceStateRequest) error {
	q := url.Values{"state": {req.State}}
	if req.Hard {
		q.Set("hard", "true")
	}
	if req.ReattachDynamicDisks {
		q.Set("reattach_dynamic_disks", "true")
	}
	_, err := c.Run(ctx, http.MethodPut, "/deployments/"+url.PathEscape(req.Deployment)+"/instances/"+
		url.PathEscape(req.InstanceID)+"?"+q.Encode(), nil)
	return err
}

// DeleteVM runs DELETE /vms/:cid.
func (c *Client) DeleteVM(ctx context.Context, cid string) error {
	_, err := c.Run(ctx, http.MethodDelete, "/vms/"+url.PathEscape(cid), nil)
	return err
}

// DeleteDeployment runs DELETE /deployments/:name.
func (c *Client) DeleteDeployment(ctx context.Context, name string) error {
	_, err := c.Run(ctx, http.MethodDelete, "/deployments/"+url.PathEscape(name), nil)
	return err
}

// TaskOutput returns GET /tasks/:id/output?type=typ (event, debug, result).
func (c *Client) TaskOutput(ctx context.Context, id int64, typ string) ([]byte, error) {
	var b []byte
	return b, c.get(ctx, fmt.Sprintf("/tasks/%d/output?type=%s", id, url.QueryEscape(typ)), &b)
}

// Info returns GET /info.
func (c *Client) Info(ctx context.Context) (map[string]any, error) {
	var out map[string]any
	return out, c.get(ctx, "/info", &out)
}
