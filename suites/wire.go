package suites

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

// Errors of the caller side, for errors.Is.
var (
	// ErrRefused: the caller profile refuses the CPI.
	ErrRefused = errors.New("caller refuses the CPI")
	// ErrProtocol: the CPI's response breaks the wire protocol.
	ErrProtocol = errors.New("invalid CPI response")
	// ErrCannotSwitch: the target cannot be put into a row's setup.
	ErrCannotSwitch = errors.New("the CPI cannot be switched into this setup")
	// ErrInfoVersion: info's api_version is not one the caller can use
	// (null, a string, not a positive integer).
	ErrInfoVersion = errors.New("unusable api_version in info")
)

// Exchange is one CPI call as it happened on the wire: what was sent, what
// came back, and what was wrong with it.
type Exchange struct {
	Method   string
	Request  []byte
	Stdout   []byte
	Stderr   []byte // the last StderrKeep bytes
	ExitCode int    // -1 when the process did not exit by itself
	// Start and End are when the call began and ended; Elapsed is the CPI
	// process's own run time (cpiv2.RunProcess).
	Start, End time.Time
	Elapsed    time.Duration
	// Cleanup marks a call made by a Tracker's clean-up, not by the spec
	// itself.
	Cleanup  bool
	TimedOut bool
	// HeldPipes counts processes the CPI left behind holding its stdout or
	// stderr after it exited (RunProcess killed them WaitDelay later).
	HeldPipes int
	// Response is the decoded response; valid only when Violations is empty
	// or holds only exit-status and type issues.
	Response Response
	// Violations lists every way the response breaks the wire protocol, empty
	// for a valid response.
	Violations []string
	// RunErr is a failure to run the command at all.
	RunErr error
	// Leaks says where the call showed a secret of the CPI's config
	// ("stderr: cloud.properties.registry.password"): secrets.not-printed.
	// Stderr is kept with every secret redacted; shownStdout redacts stdout.
	Leaks   []string
	secrets []secret
	// Model is what the contract's model made of the call (nil when the
	// oracle cannot read the whole cloud).
	Model *ModelCheck
}

// shownStdout is stdout as reports show it: every secret of the CPI's
// config redacted.
func (x *Exchange) shownStdout() []byte {
	if len(x.Leaks) == 0 {
		return x.Stdout
	}
	return redact(x.secrets, x.Stdout)
}

// Response is a decoded CPI response.
type Response struct {
	Result json.RawMessage // "null" when the result is null
	Error  *cpiv2.Error
	Log    string
	// IgnoredResult is a result other than null beside an error (Result is
	// then "null"): the documentation asks for null, every caller ignores
	// it, so it is a warning (results.unread), not a failure.
	IgnoredResult json.RawMessage
}

// Err returns the call's outcome as an error: nil for a valid response
// without error, the *cpiv2.Error the CPI returned, or an ErrProtocol error.
func (x *Exchange) Err() error {
	if x.RunErr != nil {
		return x.RunErr
	}
	if len(x.Violations) > 0 {
		return fmt.Errorf("%w: %s", ErrProtocol, strings.Join(x.Violations, "; "))
	}
	if x.Response.Error != nil {
		return x.Response.Error
	}
	return nil
}

// StderrKeep bounds the stderr kept per call (the tail is kept).
const StderrKeep = 16 << 10

// wire runs one CPI process per call, as the Director does.
type wire struct {
	command      []string // full argv, config args included
	timeout      time.Duration
	maxOutput    int  // stdout cap in bytes (default cpiv2.DefaultMaxOutput)
	noRequestID  bool // the bosh CLI sends no request_id
	directorUUID string
	seq          *atomic.Int64
	observe      func(*Exchange)
	// secrets are the credentials of the CPI's config, looked for in
	// everything the CPI prints (secrets.not-printed).
	secrets []secret
	// frame reads the whole cloud around each call (nil: no model check).
	frame *framer
}

type request struct {
	Method     string         `json:"method"`
	Arguments  []any          `json:"arguments"`
	Context    map[string]any `json:"context"`
	APIVersion *int           `json:"api_version,omitempty"`
}

// call sends method with args. apiVersion 0 sends no api_version;
// stemcellAPIVersion 0 sends no context.vm.
func (w *wire) call(ctx context.Context, method string, args []any, apiVersion, stemcellAPIVersion int) *Exchange {
	if args == nil {
		args = []any{}
	}
	req := request{Method: method, Arguments: args, Context: map[string]any{
		"director_uuid": w.directorUUID,
	}}
	if !w.noRequestID {
		req.Context["request_id"] = fmt.Sprintf("cpi-%06d", w.seq.Add(1))
	}
	if apiVersion > 0 {
		req.APIVersion = &apiVersion
	}
	if stemcellAPIVersion > 0 {
		req.Context["vm"] = map[string]any{"stemcell": map[string]any{"api_version": stemcellAPIVersion}}
	}
	body, err := json.Marshal(req)
	x := &Exchange{Method: method, Request: body, ExitCode: -1, Cleanup: isCleanup(ctx)}
	if err != nil {
		x.RunErr = fmt.Errorf("encoding %s request: %w", method, err)
		return x
	}
	if w.frame != nil {
		fc := w.frame.begin(ctx, x)
		w.run(ctx, x)
		x.Model = w.frame.end(ctx, fc, x)
	} else {
		w.run(ctx, x)
	}
	if w.observe != nil {
		w.observe(x)
	}
	return x
}

func (w *wire) run(ctx context.Context, x *Exchange) {
	// One exec path for every CPI call cpilab makes (cpiv2.RunProcess): the
	// Director's scrubbed environment (a worker's own TMPDIR), its own process group killed on
	// time-out, stdout capped.
	x.Start = time.Now()
	res, err := cpiv2.RunProcess(ctx, cpiv2.ProcessConfig{Command: w.command, Env: cpiEnv(), Timeout: w.timeout, MaxOutput: w.maxOutput}, x.Request)
	x.End = time.Now()
	x.Elapsed = res.Elapsed
	x.Stdout = res.Stdout
	x.Stderr = keepTail(res.Stderr, StderrKeep)
	x.secrets = w.secrets
	x.Leaks = w.leaksOf(res.Stdout, res.Stderr)
	if len(x.Leaks) > 0 {
		x.Stderr = redact(w.secrets, x.Stderr)
	}
	x.ExitCode = res.ExitCode
	x.HeldPipes = res.Stragglers
	if res.PipesHeldAfterExit && x.HeldPipes == 0 {
		x.HeldPipes = 1
	}
	switch {
	case errors.Is(err, cpiv2.ErrCPITimeout):
		x.TimedOut = true
		x.Violations = append(x.Violations, fmt.Sprintf("the CPI did not answer within %s (its process group was killed)", w.timeout))
		return
	case errors.Is(err, cpiv2.ErrOutputTooLarge):
		x.Violations = append(x.Violations, fmt.Sprintf("stdout grew past %d bytes (the process group was killed): a CPI writes one response object there", w.maxOutputOrDefault()))
		return
	case err != nil:
		x.RunErr = fmt.Errorf("running %s: %w", w.command[0], err)
		return
	}
	x.Violations = append(x.Violations, checkResponse(x.Stdout, &x.Response)...)
	if x.ExitCode != 0 {
		x.Violations = append(x.Violations, fmt.Sprintf("exit status %d (a CPI must exit 0, even with an error object: the bosh CLI fails the call otherwise)", x.ExitCode))
	}
}

func (w *wire) maxOutputOrDefault() int {
	if w.maxOutput > 0 {
		return w.maxOutput
	}
	return cpiv2.DefaultMaxOutput
}

// keepTail keeps the last n bytes of b, saying how many were dropped.
func keepTail(b []byte, n int) []byte {
	if len(b) <= n {
		return b
	}
	cut := len(b) - n
	return append([]byte(fmt.Sprintf("[%d earlier bytes dropped]\n", cut)), b[cut:]...)
}

// checkResponse decodes stdout into r and returns every wire protocol
// violation (wire.one-object): exactly one JSON object, the three keys, log a string, error
// null or {type, message, ok_to_retry: bool}. A result beside an error is
// kept aside (Response.IgnoredResult) for a warning.
func checkResponse(stdout []byte, r *Response) []string {
	var v []string
	// cpiv2.CheckJSON is the one strict reader: invalid UTF-8 (a lone
	// surrogate escape too) and repeated keys; what it says of anything
	// else (not JSON, trailing data) the checks below say in their words.
	var bad *cpiv2.InvalidResponseError
	if err := cpiv2.CheckJSON(stdout); errors.As(err, &bad) {
		switch {
		case errors.Is(bad.Kind, cpiv2.ErrInvalidUTF8):
			v = append(v, fmt.Sprintf("stdout is not valid UTF-8 (JSON must be; the Director's parser rejects it): %s: %s", bad.Detail, excerpt(bytes.ToValidUTF8(stdout, []byte("\uFFFD")))))
		case errors.Is(bad.Kind, cpiv2.ErrDuplicateKey):
			v = append(v, fmt.Sprintf("the response holds key %q more than once (which one counts is up to the parser)", bad.Key))
		}
	}
	dec := json.NewDecoder(bytes.NewReader(stdout))
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil || raw == nil {
		return []string{fmt.Sprintf("stdout is not one JSON object: %s", excerpt(stdout))}
	}
	if _, err := dec.Token(); err != io.EOF {
		v = append(v, fmt.Sprintf("stdout holds more than one JSON value (anything but the response must go to stderr): %s", excerpt(stdout)))
	}
	for _, k := range []string{"result", "error", "log"} {
		if _, ok := raw[k]; !ok {
			v = append(v, fmt.Sprintf("the response has no %q key", k))
		}
	}
	r.Result = raw["result"]
	if len(r.Result) == 0 {
		r.Result = json.RawMessage("null")
	}
	if l, ok := raw["log"]; ok {
		if err := json.Unmarshal(l, &r.Log); err != nil || !isJSONString(l) {
			v = append(v, fmt.Sprintf("log must be a string, got %s", excerpt(l)))
		}
	}
	if e, ok := raw["error"]; ok && string(e) != "null" {
		var fields map[string]json.RawMessage
		if err := json.Unmarshal(e, &fields); err != nil || fields == nil {
			v = append(v, fmt.Sprintf("error must be null or an object, got %s", excerpt(e)))
		} else {
			ce := &cpiv2.Error{}
			if t, ok := fields["type"]; !ok || !isJSONString(t) {
				v = append(v, fmt.Sprintf("error.type must be a string, got %s", excerpt(t)))
			} else {
				var s string
				_ = json.Unmarshal(t, &s)
				ce.Type = cpiv2.ErrorType(s)
			}
			if m, ok := fields["message"]; !ok || !isJSONString(m) {
				v = append(v, fmt.Sprintf("error.message must be a string, got %s", excerpt(m)))
			} else {
				_ = json.Unmarshal(m, &ce.Message)
			}
			if o, ok := fields["ok_to_retry"]; !ok || (string(o) != "true" && string(o) != "false") {
				v = append(v, fmt.Sprintf("error.ok_to_retry must be a bool, got %s", excerpt(o)))
			} else {
				ce.OkToRetry = string(o) == "true"
			}
			r.Error = ce
			if string(r.Result) != "null" {
				r.IgnoredResult, r.Result = r.Result, json.RawMessage("null")
			}
		}
	}
	return v
}

func isJSONString(b json.RawMessage) bool {
	b = bytes.TrimSpace(b)
	return len(b) > 0 && b[0] == '"'
}

// excerpt shortens b for a message.
func excerpt(b []byte) string {
	const max = 400
	s := string(b)
	if len(s) == 0 {
		return "(nothing)"
	}
	if len(s) > max {
		return fmt.Sprintf("%s… (%d bytes)", s[:max], len(s))
	}
	return s
}

type cleanupKey struct{}

// withCleanup marks the calls made with ctx as clean-up calls.
func withCleanup(ctx context.Context) context.Context {
	return context.WithValue(ctx, cleanupKey{}, true)
}

func isCleanup(ctx context.Context) bool {
	v, _ := ctx.Value(cleanupKey{}).(bool)
	return v
}

// leaksOf says where stdout (the response: its log, error message or
// result) and the whole of stderr show a secret of the CPI's config.
func (w *wire) leaksOf(stdout, stderr []byte) []string {
	if len(w.secrets) == 0 {
		return nil
	}
	var out []string
	for _, k := range leaks(w.secrets, stdout) {
		out = append(out, "stdout (log, error message or result): "+k)
	}
	for _, k := range leaks(w.secrets, stderr) {
		out = append(out, "stderr: "+k)
	}
	return out
}
