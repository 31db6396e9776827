package cpiv2

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Request is one CPI request as it travels on the wire:
//
//	{"method": m, "arguments": [...], "context": {...}, "api_version": N}
//
// Marshal it with Encode, which is byte-deterministic.
type Request struct {
	Method    string
	Arguments []json.RawMessage
	Context   RequestContext
	// APIVersion is the request's api_version; 0 leaves the key out (the
	// Director's info call, every call of a Director 1 caller).
	APIVersion int
}

// RequestContext is a request's "context" object.
type RequestContext struct {
	DirectorUUID string
	// RequestID is "cpi-NNNNNN" as the Director writes it.
	RequestID string
	// StemcellAPIVersion is sent as vm.stemcell.api_version; 0 leaves the
	// "vm" key out.
	StemcellAPIVersion int
	// Properties are the CPI config properties, merged at the top level of
	// the context. Keys that collide with director_uuid, request_id or vm are
	// not sent: the caller's own values win.
	Properties map[string]json.RawMessage
}

// Encode returns the request's exact bytes: keys in the order method,
// arguments, context, api_version; inside the context director_uuid,
// request_id, vm, then the properties sorted by key; every value compact. The
// same request always gives the same bytes.
func (r Request) Encode() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"method":`)
	writeJSONString(&b, r.Method)
	b.WriteString(`,"arguments":[`)
	for i, a := range r.Arguments {
		if i > 0 {
			b.WriteByte(',')
		}
		if err := compactInto(&b, a); err != nil {
			return nil, fmt.Errorf("cpiv2: encoding %s request: argument %d: %w", r.Method, i, err)
		}
	}
	b.WriteString(`],"context":{"director_uuid":`)
	writeJSONString(&b, r.Context.DirectorUUID)
	b.WriteString(`,"request_id":`)
	writeJSONString(&b, r.Context.RequestID)
	if r.Context.StemcellAPIVersion != 0 {
		b.WriteString(`,"vm":{"stemcell":{"api_version":`)
		b.WriteString(strconv.Itoa(r.Context.StemcellAPIVersion))
		b.WriteString(`}}`)
	}
	for _, k := range sortedKeys(r.Context.Properties) {
		if k == "director_uuid" || k == "request_id" || k == "vm" {
			continue
		}
		b.WriteByte(',')
		writeJSONString(&b, k)
		b.WriteByte(':')
		if err := compactInto(&b, r.Context.Properties[k]); err != nil {
			return nil, fmt.Errorf("cpiv2: encoding %s request: context property %q: %w", r.Method, k, err)
		}
	}
	b.WriteByte('}')
	if r.APIVersion != 0 {
		b.WriteString(`,"api_version":`)
		b.WriteString(strconv.Itoa(r.APIVersion))
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func writeJSONString(b *bytes.Buffer, s string) {
	enc, _ := json.Marshal(s) // a string always encodes
	b.Write(enc)
}

func compactInto(b *bytes.Buffer, raw json.RawMessage) error {
	if len(raw) == 0 {
		b.WriteString("null")
		return nil
	}
	return json.Compact(b, raw)
}

// DecodeRequest parses a request as a CPI reads it. Any malformation is a
// *Error of type CpiError saying what was wrong (bad JSON, method missing or
// not a string, arguments missing or not an array, api_version not an
// integer, context not an object).
func DecodeRequest(data []byte) (Request, error) {
	var top map[string]json.RawMessage
	if err := strictOne(data, &top); err != nil || top == nil {
		if err == nil {
			err = errors.New("not an object")
		}
		return Request{}, NewError(TypeCpiError, "Invalid request: not one JSON object: %v; got %s", err, excerpt(data))
	}
	var r Request
	m, ok := top["method"]
	if !ok || json.Unmarshal(m, &r.Method) != nil || r.Method == "" {
		return Request{}, NewError(TypeCpiError, "Invalid request: \"method\" must be a non-empty string, got %s", rawOrAbsent(m, ok))
	}
	a, ok := top["arguments"]
	if !ok || len(a) == 0 || a[0] != '[' || json.Unmarshal(a, &r.Arguments) != nil {
		return Request{}, NewError(TypeCpiError, "Invalid request: \"arguments\" must be an array, got %s", rawOrAbsent(a, ok))
	}
	if v, ok := top["api_version"]; ok && string(v) != "null" {
		n, err := strictInt(v)
		if err != nil {
			return Request{}, NewError(TypeCpiError, "Invalid request: \"api_version\" must be an integer, got %s", excerpt(v))
		}
		r.APIVersion = n
	}
	if c, ok := top["context"]; ok && string(c) != "null" {
		ctx, err := decodeRequestContext(c)
		if err != nil {
			return Request{}, NewError(TypeCpiError, "Invalid request: context: %v", err)
		}
		r.Context = ctx
	}
	return r, nil
}

func rawOrAbsent(v json.RawMessage, present bool) string {
	if !present {
		return "no such key"
	}
	return excerpt(v)
}

func decodeRequestContext(c json.RawMessage) (RequestContext, error) {
	var m map[string]json.RawMessage
	if len(c) == 0 || c[0] != '{' || json.Unmarshal(c, &m) != nil {
		return RequestContext{}, fmt.Errorf("must be an object, got %s", excerpt(c))
	}
	var ctx RequestContext
	for _, k := range sortedKeys(m) {
		v := m[k]
		switch k {
		case "director_uuid", "request_id":
			var s string
			if json.Unmarshal(v, &s) != nil {
				return RequestContext{}, fmt.Errorf("%s must be a string, got %s", k, excerpt(v))
			}
			if k == "director_uuid" {
				ctx.DirectorUUID = s
			} else {
				ctx.RequestID = s
			}
		case "vm":
			var vm struct {
				Stemcell struct {
					APIVersion json.RawMessage `json:"api_version"`
				} `json:"stemcell"`
			}
			if json.Unmarshal(v, &vm) != nil {
				return RequestContext{}, fmt.Errorf("vm must be an object, got %s", excerpt(v))
			}
			if av := vm.Stemcell.APIVersion; len(av) > 0 && string(av) != "null" {
				n, err := strictInt(av)
				if err != nil {
					return RequestContext{}, fmt.Errorf("vm.stemcell.api_version must be an integer, got %s", excerpt(av))
				}
				ctx.StemcellAPIVersion = n
			}
		default:
			if ctx.Properties == nil {
				ctx.Properties = map[string]json.RawMessage{}
			}
			ctx.Properties[k] = v
		}
	}
	return ctx, nil
}

func strictInt(v json.RawMessage) (int, error) {
	n, err := strconv.Atoi(string(bytes.TrimSpace(v)))
	if err != nil {
		return 0, fmt.Errorf("not an integer: %s", excerpt(v))
	}
	return n, nil
}

// strictOne decodes exactly one JSON value from data into v; anything but
// white space after it is an error.
func strictOne(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("data after the JSON value at offset %d", dec.InputOffset())
	}
	return nil
}

// Response is one CPI response:
//
//	{"result": any, "error": null | {"type", "message", "ok_to_retry"}, "log": str}
type Response struct {
	// Result is the raw result; nil or "null" for null.
	Result json.RawMessage
	// Error is the CPI's error object, nil for null.
	Error *Error
	// Log is the response's log string.
	Log string
}

// Encode returns the response's exact bytes: {"result":…,"error":…,"log":…},
// compact. It fails only when Result is not valid JSON.
func (r Response) Encode() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString(`{"result":`)
	if err := compactInto(&b, r.Result); err != nil {
		return nil, fmt.Errorf("cpiv2: encoding response result: %w", err)
	}
	b.WriteString(`,"error":`)
	if r.Error == nil {
		b.WriteString("null")
	} else {
		b.WriteString(`{"type":`)
		writeJSONString(&b, string(r.Error.Type))
		b.WriteString(`,"message":`)
		writeJSONString(&b, r.Error.Message)
		b.WriteString(`,"ok_to_retry":`)
		b.WriteString(strconv.FormatBool(r.Error.OkToRetry))
		b.WriteByte('}')
	}
	b.WriteString(`,"log":`)
	writeJSONString(&b, r.Log)
	b.WriteByte('}')
	return b.Bytes(), nil
}

// Kinds of invalid response, matched with errors.Is against an
// *InvalidResponseError. Every one of them also matches ErrInvalidResponse.
var (
	// ErrInvalidResponse matches every *InvalidResponseError.
	ErrInvalidResponse = errors.New("invalid CPI response")
	// ErrEmptyOutput: the CPI wrote nothing (or only white space) to stdout.
	ErrEmptyOutput = errors.New("no output on stdout")
	// ErrNotJSON: stdout does not start with a JSON value.
	ErrNotJSON = errors.New("stdout is not JSON")
	// ErrNotObject: stdout holds a JSON value that is not an object.
	ErrNotObject = errors.New("stdout is JSON but not an object")
	// ErrMultipleObjects: a second JSON object follows the first.
	ErrMultipleObjects = errors.New("more than one JSON object on stdout")
	// ErrTrailingGarbage: something other than white space or a JSON object
	// follows the first object.
	ErrTrailingGarbage = errors.New("trailing data after the JSON object")
	// ErrTruncatedOutput: stdout ends in the middle of the JSON object.
	ErrTruncatedOutput = errors.New("stdout ends inside the JSON object")
	// ErrOutputTooLarge: stdout exceeded the runner's MaxOutput; the process
	// group was killed.
	ErrOutputTooLarge = errors.New("stdout exceeds the output limit")
	// ErrDuplicateKey: an object in the response holds the same key twice
	// (Key is the path of the repeated key). See CheckJSON.
	ErrDuplicateKey = errors.New("duplicate key in a JSON object")
	// ErrInvalidUTF8: the response is not valid UTF-8 (Detail gives the
	// offset). See CheckJSON.
	ErrInvalidUTF8 = errors.New("response is not valid UTF-8")
	// ErrMissingKey: one of result, error, log is absent (Key names it).
	ErrMissingKey = errors.New("required key missing")
	// ErrLogNotString: log is not a JSON string.
	ErrLogNotString = errors.New("log is not a string")
	// ErrBadErrorObject: error is neither null nor an object with a string
	// type and a string message (Key names the offending member).
	ErrBadErrorObject = errors.New("error is not null or a valid error object")
	// ErrOkToRetryNotBool: error.ok_to_retry is absent or not a boolean.
	ErrOkToRetryNotBool = errors.New("error.ok_to_retry is not a boolean")
	// ErrBadResult: result has the wrong shape for the method at the
	// negotiated api_version.
	ErrBadResult = errors.New("result has the wrong shape")
	// ErrNoDiskHint: attach_disk at api_version ≥ 2 returned no (or an empty)
	// disk hint; the Director's "No disk_hint" (AttachDiskResponseError).
	ErrNoDiskHint = errors.New("No disk_hint")
	// ErrCPITimeout: the CPI did not finish within the per-call timeout (a
	// hang); its process group was killed.
	ErrCPITimeout = errors.New("CPI timed out")
	// ErrNonZeroExit: the CPI exited non-zero and the caller profile treats
	// that as failure (cli). ExitCode holds the status.
	ErrNonZeroExit = errors.New("CPI exited with a non-zero status")
)

// InvalidResponseError is a call that produced no valid response. Kind is
// one of the Err* kinds above; errors.Is(err, Kind) and
// errors.Is(err, ErrInvalidResponse) both hold.
type InvalidResponseError struct {
	Kind      error
	Method    string
	RequestID string
	// Key names the offending key (ErrMissingKey, ErrBadErrorObject, …).
	Key string
	// Detail says more about what was wrong, if anything.
	Detail string
	// Excerpt is a quoted, shortened copy of what came back on stdout.
	Excerpt string
	// ExitCode is the CPI's exit status (-1 when killed by a signal or not
	// known; 0 for in-process calls).
	ExitCode int
	// Outcome says how the CPI process ended (ProcessResult.Outcome); empty
	// for in-process calls.
	Outcome string
	// Cause is an underlying error (a JSON syntax error, …), or nil.
	Cause error
}

// Error names the method, the request_id, what was wrong and an excerpt of
// stdout.
func (e *InvalidResponseError) Error() string {
	var b bytes.Buffer
	fmt.Fprintf(&b, "cpi %s (request_id %s): invalid response: %v", orDash(e.Method), orDash(e.RequestID), e.Kind)
	if e.Key != "" {
		fmt.Fprintf(&b, " (key %q)", e.Key)
	}
	if e.Detail != "" {
		fmt.Fprintf(&b, ": %s", e.Detail)
	}
	switch {
	case e.Outcome != "" && e.Outcome != "exit status 0" && e.Kind != ErrCPITimeout && e.Kind != ErrOutputTooLarge:
		fmt.Fprintf(&b, " (CPI process %s)", e.Outcome)
	case e.Kind == ErrNonZeroExit:
		fmt.Fprintf(&b, " (exit status %d)", e.ExitCode)
	}
	fmt.Fprintf(&b, "; stdout %s", e.Excerpt)
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Is matches the error's Kind and ErrInvalidResponse.
func (e *InvalidResponseError) Is(target error) bool {
	return target == ErrInvalidResponse || target == e.Kind
}

// Unwrap returns Cause.
func (e *InvalidResponseError) Unwrap() error { return e.Cause }

func invalid(kind error, out []byte, key, detail string, cause error) *InvalidResponseError {
	return &InvalidResponseError{Kind: kind, Key: key, Detail: detail, Excerpt: excerpt(out), Cause: cause}
}

// DecodeResponse decodes a CPI's stdout strictly, as the Director does:
// exactly one JSON object (white space around it allowed), with the keys
// result, error and log; log a string; error null or an object with a string
// type, a string message and a boolean ok_to_retry; result null when error is
// set; valid UTF-8 and no duplicate key in any object (CheckJSON). Any
// violation is an *InvalidResponseError of the matching kind (Method and
// RequestID are left for the caller to fill in). Keys beyond the three are
// ignored, as the Director's schema ignores them.
func DecodeResponse(out []byte) (Response, error) {
	return DecodeResponseWith(out, DecodeOptions{})
}

// DecodeOptions relax DecodeResponse. The zero value is strict.
type DecodeOptions struct {
	// LenientJSON accepts duplicate keys (the last one wins) and invalid
	// UTF-8 (replaced by U+FFFD), as the upstream Director's JSON.parse and
	// the bosh CLI's encoding/json do (docs/upstream.md). Default false:
	// both are invalid responses (ErrDuplicateKey, ErrInvalidUTF8).
	LenientJSON bool
}

// DecodeResponseWith is DecodeResponse with options.
func DecodeResponseWith(out []byte, opts DecodeOptions) (Response, error) {
	trimmed := bytes.TrimSpace(out)
	if len(trimmed) == 0 {
		return Response{}, invalid(ErrEmptyOutput, out, "", "", nil)
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	var first json.RawMessage
	if err := dec.Decode(&first); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return Response{}, invalid(ErrTruncatedOutput, out, "", "", err)
		}
		return Response{}, invalid(ErrNotJSON, out, "", err.Error(), err)
	}
	if first[0] != '{' {
		return Response{}, invalid(ErrNotObject, out, "", "", nil)
	}
	if rest := bytes.TrimSpace(trimmed[dec.InputOffset():]); len(rest) > 0 {
		if rest[0] == '{' {
			return Response{}, invalid(ErrMultipleObjects, out, "", "", nil)
		}
		return Response{}, invalid(ErrTrailingGarbage, out, "", fmt.Sprintf("%d bytes after the object", len(rest)), nil)
	}
	if !opts.LenientJSON {
		if err := CheckJSON(first); err != nil {
			var ir *InvalidResponseError
			if errors.As(err, &ir) {
				ir.Excerpt = excerpt(out)
			}
			return Response{}, err
		}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(first, &top); err != nil {
		return Response{}, invalid(ErrNotJSON, out, "", err.Error(), err)
	}
	for _, k := range []string{"result", "error", "log"} {
		if _, ok := top[k]; !ok {
			return Response{}, invalid(ErrMissingKey, out, k, "", nil)
		}
	}
	var r Response
	if lg := top["log"]; lg[0] != '"' || json.Unmarshal(lg, &r.Log) != nil {
		return Response{}, invalid(ErrLogNotString, out, "log", "got "+excerpt(lg), nil)
	}
	if ev := top["error"]; string(ev) != "null" {
		e, err := decodeErrorObject(ev, out)
		if err != nil {
			return Response{}, err
		}
		// A result beside an error is dropped: the documentation asks for
		// null, but the Director raises the error without looking at it
		// (external_cpi.rb) and so does the bosh CLI (cloud/cloud.go).
		r.Error = e
		return r, nil
	}
	r.Result = top["result"]
	return r, nil
}

func decodeErrorObject(ev json.RawMessage, out []byte) (*Error, error) {
	var m map[string]json.RawMessage
	if ev[0] != '{' || json.Unmarshal(ev, &m) != nil {
		return nil, invalid(ErrBadErrorObject, out, "error", "got "+excerpt(ev), nil)
	}
	var e Error
	for _, k := range []string{"type", "message"} {
		v, ok := m[k]
		var s string
		if !ok || v[0] != '"' || json.Unmarshal(v, &s) != nil {
			return nil, invalid(ErrBadErrorObject, out, "error."+k, "must be a string, got "+rawOrAbsent(v, ok), nil)
		}
		if k == "type" {
			e.Type = ErrorType(s)
		} else {
			e.Message = s
		}
	}
	switch v, ok := m["ok_to_retry"]; {
	case ok && string(v) == "true":
		e.OkToRetry = true
	case ok && string(v) == "false":
	default:
		return nil, invalid(ErrOkToRetryNotBool, out, "error.ok_to_retry", "got "+rawOrAbsent(v, ok), nil)
	}
	return &e, nil
}
