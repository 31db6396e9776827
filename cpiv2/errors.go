package cpiv2

import (
	"errors"
	"fmt"
)

// ErrorType is the "type" of a CPI error object.
type ErrorType string

// The error catalog. The hierarchy is upstream's: every type but InvalidCall
// and Unknown descends from CpiError or CloudError.
const (
	TypeCpiError                  ErrorType = "Bosh::Clouds::CpiError"
	TypeNotImplemented            ErrorType = "Bosh::Clouds::NotImplemented"
	TypeNotSupported              ErrorType = "Bosh::Clouds::NotSupported"
	TypeCPIAPIVersionNotSupported ErrorType = "Bosh::Clouds::CPIAPIVersionNotSupported"
	TypeCloudError                ErrorType = "Bosh::Clouds::CloudError"
	TypeVMNotFound                ErrorType = "Bosh::Clouds::VMNotFound"
	TypeNoDiskSpace               ErrorType = "Bosh::Clouds::NoDiskSpace"
	TypeDiskNotAttached           ErrorType = "Bosh::Clouds::DiskNotAttached"
	TypeDiskNotFound              ErrorType = "Bosh::Clouds::DiskNotFound"
	TypeVMCreationFailed          ErrorType = "Bosh::Clouds::VMCreationFailed"
	TypeNetworkNotFound           ErrorType = "Bosh::Clouds::NetworkNotFound"
	// TypeInvalidCall is what the Ruby CPI library reports for a malformed
	// request; the Director treats it as an unknown error.
	TypeInvalidCall ErrorType = "InvalidCall"
	// TypeUnknown is what the Ruby CPI library reports for any other exception.
	TypeUnknown ErrorType = "Unknown"
)

var parentType = map[ErrorType]ErrorType{
	TypeNotImplemented:            TypeCpiError,
	TypeNotSupported:              TypeCpiError,
	TypeCPIAPIVersionNotSupported: TypeCpiError,
	TypeVMNotFound:                TypeCloudError,
	TypeNoDiskSpace:               TypeCloudError,
	TypeDiskNotAttached:           TypeCloudError,
	TypeDiskNotFound:              TypeCloudError,
	TypeVMCreationFailed:          TypeCloudError,
	TypeNetworkNotFound:           TypeCloudError,
}

// IsA reports whether t is ancestor itself or one of its descendants.
func (t ErrorType) IsA(ancestor ErrorType) bool {
	for ; t != ""; t = parentType[t] {
		if t == ancestor {
			return true
		}
	}
	return false
}

// Known reports whether the Director recognises t (its KNOWN_RPC_ERRORS).
// Any other type reaches the Director as an unknown error.
func (t ErrorType) Known() bool {
	switch t {
	case TypeCpiError, TypeNotSupported, TypeNotImplemented, TypeCloudError, TypeVMNotFound,
		TypeNetworkNotFound, TypeNoDiskSpace, TypeDiskNotAttached, TypeDiskNotFound, TypeVMCreationFailed:
		return true
	}
	return false
}

// Error is a CPI error object: what a CPI returned, or what a Go CPI returns
// to be written back. It keeps type, message and ok_to_retry.
type Error struct {
	Type      ErrorType `json:"type"`
	Message   string    `json:"message"`
	OkToRetry bool      `json:"ok_to_retry"`
}

// Error is "<type>: <message>", with " (ok_to_retry)" when it is set.
func (e *Error) Error() string {
	if e.OkToRetry {
		return fmt.Sprintf("%s: %s (ok_to_retry)", e.Type, e.Message)
	}
	return fmt.Sprintf("%s: %s", e.Type, e.Message)
}

// Is matches a sentinel of the same type or of an ancestor type, so that
// errors.Is(err, cpiv2.ErrCloudError) holds for a VMNotFound.
func (e *Error) Is(target error) bool {
	var t *Error
	if !errors.As(target, &t) || t.Message != "" {
		return false
	}
	return e.Type.IsA(t.Type)
}

// Sentinels for errors.Is; each matches its type and every descendant type.
var (
	ErrCpiError                  = &Error{Type: TypeCpiError}
	ErrNotImplemented            = &Error{Type: TypeNotImplemented}
	ErrNotSupported              = &Error{Type: TypeNotSupported}
	ErrCPIAPIVersionNotSupported = &Error{Type: TypeCPIAPIVersionNotSupported}
	ErrCloudError                = &Error{Type: TypeCloudError}
	ErrVMNotFound                = &Error{Type: TypeVMNotFound}
	ErrNoDiskSpace               = &Error{Type: TypeNoDiskSpace}
	ErrDiskNotAttached           = &Error{Type: TypeDiskNotAttached}
	ErrDiskNotFound              = &Error{Type: TypeDiskNotFound}
	ErrVMCreationFailed          = &Error{Type: TypeVMCreationFailed}
	ErrNetworkNotFound           = &Error{Type: TypeNetworkNotFound}
)

// NewError returns an error of type t with a formatted message.
func NewError(t ErrorType, format string, args ...any) *Error {
	return &Error{Type: t, Message: fmt.Sprintf(format, args...)}
}

// Retryable returns a copy of e with ok_to_retry set.
func (e *Error) Retryable() *Error {
	c := *e
	c.OkToRetry = true
	return &c
}

// AsError converts any error to the wire error a Go CPI reports: a *Error in
// its chain keeps its identity; anything else becomes a CloudError carrying
// the error's text, as bosh-cpi-go does.
func AsError(err error) *Error {
	if err == nil {
		return nil
	}
	var e *Error
	if errors.As(err, &e) {
		if e.Message == "" {
			c := *e
			c.Message = err.Error()
			return &c
		}
		return e
	}
	return &Error{Type: TypeCloudError, Message: err.Error()}
}
