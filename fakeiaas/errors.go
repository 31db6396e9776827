package fakeiaas

import (
	"fmt"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

// Code says why a fakeiaas operation failed, beyond the CPI error type it
// carries. It crosses HTTP unchanged, so callers of *Client can test it
// with errors.Is exactly as callers of *Cloud do.
type Code string

// The codes fakeiaas reports.
const (
	CodeNotFound     Code = "not_found"     // the CID names no such object
	CodeConflict     Code = "conflict"      // state forbids it (attached, in use, …)
	CodeExists       Code = "exists"        // a create would have replaced an existing object
	CodeTooLarge     Code = "too_large"     // a size, count or length beyond a documented limit
	CodeInvalid      Code = "invalid"       // malformed argument
	CodeRateLimited  Code = "rate_limited"  // a rate-limit fault rule fired (HTTP 429)
	CodeInjected     Code = "injected"      // an error fault rule fired
	CodeResponseLost Code = "response_lost" // applied, but the response was dropped
	CodeUnavailable  Code = "unavailable"   // the server could not be reached
	CodeInternal     Code = "internal"      // the store or file system failed
)

// Error is a fakeiaas failure: a Code plus the CPI error a CPI should
// report for it. It unwraps to the *cpiv2.Error, so both
// errors.Is(err, cpiv2.ErrVMNotFound) and errors.Is(err, fakeiaas.ErrNotFound)
// work, in-process and over HTTP alike.
type Error struct {
	Code Code
	// CPI is the typed CPI error (type, message, ok_to_retry).
	CPI *cpiv2.Error
	// RetryAfter is how long a rate-limited caller should wait (CodeRateLimited).
	RetryAfter time.Duration
}

// Error returns the CPI error's text.
func (e *Error) Error() string {
	if e.CPI == nil {
		return "fakeiaas: " + string(e.Code)
	}
	return e.CPI.Error()
}

// Unwrap returns the CPI error.
func (e *Error) Unwrap() error {
	if e.CPI == nil {
		return nil
	}
	return e.CPI
}

// Is matches a sentinel *Error (no CPI error set) with the same Code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.CPI == nil && t.Code == e.Code
}

// Sentinels for errors.Is, one per Code.
var (
	ErrNotFound     = &Error{Code: CodeNotFound}
	ErrConflict     = &Error{Code: CodeConflict}
	ErrExists       = &Error{Code: CodeExists}
	ErrTooLarge     = &Error{Code: CodeTooLarge}
	ErrInvalid      = &Error{Code: CodeInvalid}
	ErrRateLimited  = &Error{Code: CodeRateLimited}
	ErrInjected     = &Error{Code: CodeInjected}
	ErrResponseLost = &Error{Code: CodeResponseLost}
	ErrUnavailable  = &Error{Code: CodeUnavailable}
	ErrInternal     = &Error{Code: CodeInternal}
)

func newErr(code Code, t cpiv2.ErrorType, format string, args ...any) *Error {
	return &Error{Code: code, CPI: cpiv2.NewError(t, format, args...)}
}

func vmNotFound(cid string) *Error {
	return newErr(CodeNotFound, cpiv2.TypeVMNotFound, "VM %q not found", cid)
}

func diskNotFound(cid string) *Error {
	return newErr(CodeNotFound, cpiv2.TypeDiskNotFound, "disk %q not found", cid)
}

func internalErr(op string, err error) *Error {
	return newErr(CodeInternal, cpiv2.TypeCloudError, "fakeiaas %s: %v", op, err)
}

func invalid(format string, args ...any) *Error {
	return newErr(CodeInvalid, cpiv2.TypeCloudError, format, args...)
}

// wireError is an *Error as it crosses HTTP.
type wireError struct {
	Type         cpiv2.ErrorType `json:"type"`
	Message      string          `json:"message"`
	OkToRetry    bool            `json:"ok_to_retry"`
	Code         Code            `json:"code"`
	RetryAfterMS int64           `json:"retry_after_ms,omitempty"`
}

func toWire(e *Error) wireError {
	w := wireError{Code: e.Code, RetryAfterMS: e.RetryAfter.Milliseconds()}
	if e.CPI != nil {
		w.Type, w.Message, w.OkToRetry = e.CPI.Type, e.CPI.Message, e.CPI.OkToRetry
	}
	return w
}

func fromWire(w wireError) *Error {
	if w.Type == "" {
		w.Type = cpiv2.TypeCloudError
	}
	return &Error{
		Code:       w.Code,
		CPI:        &cpiv2.Error{Type: w.Type, Message: w.Message, OkToRetry: w.OkToRetry},
		RetryAfter: time.Duration(w.RetryAfterMS) * time.Millisecond,
	}
}

// asError converts any error into an *Error (internal when it is not one).
func asError(op string, err error) *Error {
	if e, ok := err.(*Error); ok {
		return e
	}
	return internalErr(op, fmt.Errorf("%w", err))
}
