package dynamicdisks

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
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/internal/httpread"
)

// caller is one identity the suite speaks as: a bearer token for raw
// exchanges and a director.Client (same token, same transport) for task
// polling and the admin's set-up calls.
type caller struct {
	name  string // "admin", "disks", "anonymous"
	token string // "" : no credentials
	dc    *director.Client
}

// Exchange is one HTTP request to the director and its answer, kept so a
// failure can show both.
type Exchange struct {
	Caller   string // who asked: "admin", "disks", "anonymous", …
	Method   string // HTTP method
	Path     string // path and query, e.g. "/dynamic_disks/provide"
	Body     []byte // request body
	Status   int    // HTTP status of the answer
	Location string // the Location header (a 302's task)
	Answer   []byte // response body (first MiB)
	Err      error  // transport error: no answer
}

// RequestString is the request as a failure shows it.
func (x *Exchange) RequestString() string {
	s := fmt.Sprintf("%s %s as %s", x.Method, x.Path, x.Caller)
	if len(x.Body) > 0 {
		s += " " + excerpt(x.Body)
	}
	return s
}

// ResponseString is the answer as a failure shows it.
func (x *Exchange) ResponseString() string {
	if x.Err != nil {
		return "no answer: " + x.Err.Error()
	}
	s := fmt.Sprintf("HTTP %d", x.Status)
	if x.Location != "" {
		s += " Location: " + x.Location
	}
	if b := bytes.TrimSpace(x.Answer); len(b) > 0 {
		s += " " + excerpt(b)
	}
	return s
}

// errorBody is the director's JSON error answer (upstream's {"code",
// "description"}, and cpilab's field).
type errorBody struct {
	Code        int    `json:"code"`
	Description string `json:"description"`
	Field       string `json:"field"`
}

// message is the error description of an error answer ("" : none).
func (x *Exchange) message() string {
	var eb errorBody
	if json.Unmarshal(x.Answer, &eb) == nil && eb.Description != "" {
		return eb.Description
	}
	return strings.TrimSpace(string(x.Answer))
}

// names reports whether an error answer names field: in its "field" key
// or in its description.
func (x *Exchange) names(field string) bool {
	var eb errorBody
	_ = json.Unmarshal(x.Answer, &eb)
	return eb.Field == field || strings.Contains(eb.Description, field) ||
		(eb.Description == "" && strings.Contains(string(x.Answer), field))
}

var taskPath = regexp.MustCompile(`/tasks/([0-9]+)$`)

// taskID is the task a 302 points to; 0 when the answer is no redirect to
// /tasks/<id>.
func (x *Exchange) taskID() int64 {
	if x.Status != http.StatusFound {
		return 0
	}
	m := taskPath.FindStringSubmatch(x.Location)
	if m == nil {
		return 0
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	return id
}

// excerpt is b for a failure message: at most 600 bytes, escaped.
func excerpt(b []byte) string {
	const n = 600
	s := string(b)
	if len(s) > n {
		s = s[:n] + "…"
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

// httpClient is the transport every caller shares: TLS as configured, no
// redirects followed.
func httpClient(cfg Config) (*http.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	switch {
	case cfg.Insecure:
		tc.InsecureSkipVerify = true // the operator asked for it (Config.Insecure)
	case len(cfg.CACertPEM) > 0:
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(cfg.CACertPEM) {
			return nil, errors.New("dynamicdisks: Config.CACertPEM holds no certificate")
		}
		tc.RootCAs = pool
	}
	tr.TLSClientConfig = tc
	return &http.Client{Transport: retrying{next: tr}, Timeout: cfg.Timeouts.Request,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}, nil
}

// session is a connection to the director: its callers and the state
// shared by the specs.
type session struct {
	cfg   Config
	base  string
	hc    *http.Client
	admin *caller
	disks *caller
	anon  *caller
	// scoped are the scope matrix's callers, by ScopeSets name.
	scoped map[string]*caller

	mu sync.Mutex
	// stuck is a disk task seen still queued after Timeouts.Task (0:
	// none): the dynamic_disks queue is not served.
	stuck int64 // guarded by mu
}

func newSession(ctx context.Context, cfg Config) (*session, error) {
	hc, err := httpClient(cfg)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(strings.TrimRight(cfg.URL, "/"))
	if err != nil || u.Scheme == "" || u.Host == "" {
		return nil, fmt.Errorf("dynamicdisks: Config.URL %q is not an absolute URL", cfg.URL)
	}
	s := &session{cfg: cfg, base: u.String(), hc: hc}
	if s.admin, err = s.login(ctx, "admin", cfg.Admin); err != nil {
		return nil, err
	}
	if s.disks, err = s.login(ctx, "disks", cfg.Disks); err != nil {
		return nil, err
	}
	if s.anon, err = s.newCaller("anonymous", ""); err != nil {
		return nil, err
	}
	s.scoped = map[string]*caller{}
	for set, c := range cfg.ScopeCredentials {
		if _, ok := ScopeSets[set]; !ok {
			return nil, fmt.Errorf("dynamicdisks: credentials for an unknown scope set %q (known: %s)", set, strings.Join(ScopeSetNames(), ", "))
		}
		if s.scoped[set], err = s.login(ctx, "a token holding "+set, c); err != nil {
			return nil, err
		}
	}
	return s, nil
}

func (s *session) newCaller(name, token string) (*caller, error) {
	dc, err := director.NewClient(director.ClientConfig{URL: s.base, Token: token, HTTPClient: s.hc})
	if err != nil {
		return nil, err
	}
	return &caller{name: name, token: token, dc: dc}, nil
}

// login trades a username and password for a token at POST /oauth/token
// (grant_type password), as the bosh CLI does.
func (s *session) login(ctx context.Context, name string, c Credentials) (*caller, error) {
	if c.Token != "" {
		return s.newCaller(name, c.Token)
	}
	form := url.Values{"grant_type": {"password"}, "username": {c.Username}, "password": {c.Password}}
	x := s.send(ctx, &caller{name: name}, http.MethodPost, "/oauth/token", []byte(form.Encode()),
		"application/x-www-form-urlencoded")
	if x.Err != nil {
		return nil, fmt.Errorf("dynamicdisks: log in as %s (%s): %w", name, c.Username, x.Err)
	}
	if x.Status != http.StatusOK {
		return nil, fmt.Errorf("dynamicdisks: log in as %s (%s): %s", name, c.Username, x.ResponseString())
	}
	var out struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(x.Answer, &out); err != nil || out.AccessToken == "" {
		return nil, fmt.Errorf("dynamicdisks: log in as %s: no access_token in %s", name, x.ResponseString())
	}
	return s.newCaller(name, out.AccessToken)
}

// send makes one request; ctype "" with a body means JSON.
func (s *session) send(ctx context.Context, who *caller, method, path string, body []byte, ctype string) *Exchange {
	x := &Exchange{Caller: who.name, Method: method, Path: path, Body: body}
	if ctype == "" && body != nil {
		ctype = "application/json"
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, s.base+path, rd)
	if err != nil {
		x.Err = err
		return x
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if who.token != "" {
		req.Header.Set("Authorization", "Bearer "+who.token)
	}
	resp, err := s.hc.Do(req)
	if err != nil {
		x.Err = err
		return x
	}
	x.Status, x.Location = resp.StatusCode, resp.Header.Get("Location")
	x.Answer, x.Err = httpread.Body(resp, method+" "+path, httpread.Limits{MaxBytes: 1 << 20, Timeout: s.cfg.Timeouts.Request})
	return x
}

// sendJSON sends v as a JSON body (nil: no body).
func (s *session) sendJSON(ctx context.Context, who *caller, method, path string, v any) *Exchange {
	if v == nil {
		return s.send(ctx, who, method, path, nil, "")
	}
	b, err := json.Marshal(v)
	if err != nil {
		return &Exchange{Caller: who.name, Method: method, Path: path, Err: err}
	}
	return s.send(ctx, who, method, path, b, "")
}

// diskPath is /dynamic_disks/<name><suffix>, the name path-escaped.
func diskPath(name, suffix string) string {
	return "/dynamic_disks/" + url.PathEscape(name) + suffix
}

// errStuck is a task that stayed queued: its queue has no worker.
type errStuck struct {
	id      int64
	waited  time.Duration
	earlier int64 // an earlier stuck task, 0 if none
}

func (e *errStuck) Error() string {
	s := fmt.Sprintf("task %d was still queued after %s: no worker started it", e.id, e.waited.Round(time.Millisecond))
	if e.earlier != 0 {
		s += fmt.Sprintf(" (task %d, seen stuck before, is still queued too)", e.earlier)
	}
	return s
}

// stuckGrace is how long a queued task may wait once an earlier task of
// the run is known stuck and still queued: the queue is dead, so specs
// fail fast instead of each waiting Timeouts.Task.
const stuckGrace = 500 * time.Millisecond

// waitTask polls task id until it ends or limit passes. It reads the task
// as the admin: upstream gives a token holding only dynamic-disk scopes no
// access to tasks (GET /tasks/:id needs bosh.read or admin). A task still
// queued at the limit returns *errStuck; one still processing returns an
// error saying so.
func (s *session) waitTask(ctx context.Context, id int64, limit time.Duration) (director.TaskView, error) {
	who := s.admin
	start := time.Now() // the suite's own wall clock: it waits on a remote director
	pause := 20 * time.Millisecond
	for {
		tv, err := who.dc.Task(ctx, id)
		if err != nil {
			return tv, fmt.Errorf("GET /tasks/%d as %s: %w", id, who.name, err)
		}
		if tv.State.Final() {
			if tv.State != director.TaskDone && strings.HasSuffix(tv.Result, "...") {
				if e := s.eventErrors(ctx, id); e != "" {
					tv.Result += " (event log: " + e + ")"
				}
			}
			return tv, nil
		}
		waited := time.Since(start)
		if tv.State == director.TaskQueued {
			if earlier := s.stillStuck(ctx, id); earlier != 0 && waited >= stuckGrace {
				return tv, &errStuck{id: id, waited: waited, earlier: earlier}
			}
		}
		if waited >= limit {
			if tv.State == director.TaskQueued {
				s.mu.Lock()
				if s.stuck == 0 {
					s.stuck = id
				}
				s.mu.Unlock()
				return tv, &errStuck{id: id, waited: waited}
			}
			return tv, fmt.Errorf("task %d (%s) still %s after %s", id, tv.Description, tv.State, waited.Round(time.Millisecond))
		}
		if err := ctx.Err(); err != nil {
			return tv, err
		}
		time.Sleep(pause)
		pause = director.NextPoll(pause, 500*time.Millisecond)
	}
}

// eventErrors returns the errors of task id's event log, joined: upstream
// cuts a task's result to 128 characters (job_runner.rb), and a failure is
// then told by its event log, which keeps each error whole (a string, or
// upstream's {"code", "message"}). "" when there are none or the log
// cannot be read.
func (s *session) eventErrors(ctx context.Context, id int64) string {
	raw, err := s.admin.dc.TaskOutput(ctx, id, "event")
	if err != nil {
		return ""
	}
	var errs []string
	for _, line := range bytes.Split(raw, []byte("\n")) {
		var ev struct {
			Error json.RawMessage `json:"error"`
		}
		if json.Unmarshal(line, &ev) != nil || len(ev.Error) == 0 {
			continue
		}
		var text string
		var obj struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(ev.Error, &text) != nil && json.Unmarshal(ev.Error, &obj) == nil {
			text = obj.Message
		}
		if text != "" {
			errs = append(errs, text)
		}
	}
	return strings.Join(errs, "; ")
}

// stillStuck returns the run's stuck task when it is still queued (and is
// not id), else 0.
func (s *session) stillStuck(ctx context.Context, id int64) int64 {
	s.mu.Lock()
	st := s.stuck
	s.mu.Unlock()
	if st == 0 || st == id {
		return 0
	}
	tv, err := s.admin.dc.Task(ctx, st)
	if err != nil || tv.State != director.TaskQueued {
		return 0
	}
	return st
}

// taskString shows a task in a failure.
func taskString(tv director.TaskView) string {
	s := fmt.Sprintf("task %d %q (queue %s) %s", tv.ID, tv.Description, tv.Queue, tv.State)
	if tv.Result != "" {
		s += ": " + tv.Result
	}
	if len(tv.Output) > 0 {
		s += " result " + string(tv.Output)
	}
	return s
}

// resultCID is the disk_cid of a task's result, read from GET
// /tasks/:id/output?type=result as upstream serves it, as the admin ("" with
// ok false: the result holds no disk_cid).
func (s *session) resultCID(ctx context.Context, id int64) (cid string, ok bool, raw []byte, err error) {
	who := s.admin
	raw, err = who.dc.TaskOutput(ctx, id, "result")
	if err != nil {
		return "", false, nil, fmt.Errorf("GET /tasks/%d/output?type=result as %s: %w", id, who.name, err)
	}
	var r struct {
		DiskCID *string `json:"disk_cid"`
	}
	if t := bytes.TrimSpace(raw); len(t) == 0 || json.Unmarshal(t, &r) != nil || r.DiskCID == nil {
		return "", false, raw, nil
	}
	return *r.DiskCID, true, raw, nil
}
