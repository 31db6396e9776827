package cpimodel

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// Call is one CPI request as the model reads it.
type Call struct {
	Method string            `json:"method"`
	Args   []json.RawMessage `json:"arguments"`
	// APIVersion is the request's api_version (1 when absent) and
	// StemcellAPIVersion context.vm.stemcell.api_version (1 when absent).
	APIVersion         int `json:"api_version"`
	StemcellAPIVersion int `json:"stemcell_api_version"`
	// Profile is the caller profile's name ("" when unknown); the model's
	// rules are the same for every profile today, the name goes into
	// what a violation says.
	Profile string `json:"profile,omitempty"`
	// RequestID is context.request_id ("" when absent).
	RequestID string `json:"request_id,omitempty"`
}

// Result is a CPI response as the model reads it.
type Result struct {
	// Value is the result member (null on error).
	Value json.RawMessage `json:"result"`
	// ErrType is the error's type, "" on success.
	ErrType string `json:"error_type,omitempty"`
}

// OK reports whether the call succeeded.
func (r Result) OK() bool { return r.ErrType == "" }

// ParseRequest reads a CPI request's JSON.
func ParseRequest(body []byte) (Call, error) {
	var req struct {
		Method     string            `json:"method"`
		Arguments  []json.RawMessage `json:"arguments"`
		APIVersion *int              `json:"api_version"`
		Context    struct {
			RequestID string `json:"request_id"`
			VM        struct {
				Stemcell struct {
					APIVersion int `json:"api_version"`
				} `json:"stemcell"`
			} `json:"vm"`
		} `json:"context"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return Call{}, fmt.Errorf("request is not a CPI request: %w", err)
	}
	c := Call{Method: req.Method, Args: req.Arguments, APIVersion: 1, StemcellAPIVersion: max(1, req.Context.VM.Stemcell.APIVersion),
		RequestID: req.Context.RequestID}
	if req.APIVersion != nil && *req.APIVersion > 0 {
		c.APIVersion = *req.APIVersion
	}
	return c, nil
}

// ParseResponse reads a CPI response's JSON (white space around it
// allowed).
func ParseResponse(stdout []byte) (Result, error) {
	var resp struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Type string `json:"type"`
		} `json:"error"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(stdout), &resp); err != nil {
		return Result{}, fmt.Errorf("response is not a CPI response: %w", err)
	}
	r := Result{Value: resp.Result}
	if len(r.Value) == 0 {
		r.Value = json.RawMessage("null")
	}
	if resp.Error != nil {
		r.ErrType = resp.Error.Type
		if r.ErrType == "" {
			r.ErrType = "error"
		}
	}
	return r, nil
}

// str decodes argument i as a string ("" and false when it is not one).
func (c Call) str(i int) (string, bool) {
	if i >= len(c.Args) {
		return "", false
	}
	var s string
	if json.Unmarshal(c.Args[i], &s) != nil {
		return "", false
	}
	return s, true
}

// num decodes argument i as an integer.
func (c Call) num(i int) (int, bool) {
	if i >= len(c.Args) {
		return 0, false
	}
	var f float64
	if json.Unmarshal(c.Args[i], &f) != nil || f != float64(int(f)) {
		return 0, false
	}
	return int(f), true
}

// meta decodes argument i as metadata: a hash whose values are kept as
// strings (numbers and booleans as their JSON text).
func (c Call) meta(i int) (map[string]string, bool) {
	if i >= len(c.Args) {
		return nil, false
	}
	var raw map[string]json.RawMessage
	if json.Unmarshal(c.Args[i], &raw) != nil || raw == nil {
		return nil, false
	}
	out := make(map[string]string, len(raw))
	for k, v := range raw {
		var s string
		if json.Unmarshal(v, &s) == nil {
			out[k] = s
		} else {
			out[k] = string(v)
		}
	}
	return out, true
}

// raw returns argument i (nil when absent or null).
func (c Call) raw(i int) json.RawMessage {
	if i >= len(c.Args) || string(c.Args[i]) == "null" {
		return nil
	}
	return c.Args[i]
}

// StringArg returns argument i when it is a string ("" otherwise).
func (c Call) StringArg(i int) string { s, _ := c.str(i); return s }
