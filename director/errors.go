package director

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is a request the director refuses, with the HTTP status it maps to,
// the Director's error code (upstream errors.rb) and, for a bad body, the
// field at fault.
type Error struct {
	Status  int    // HTTP status: 400, 401, 403, 404, 422, 409
	Code    int    // the Director's error code; 0: the default for Status (see ErrorCode)
	Field   string // the offending body field, if any
	Message string
}

func (e *Error) Error() string {
	if e.Field != "" && e.Code == 0 {
		return fmt.Sprintf("%s: %s", e.Field, e.Message)
	}
	return e.Message
}

// Is matches another *Error with the same Status and an empty message, so
// errors.Is(err, director.ErrNotFound) works.
func (e *Error) Is(target error) bool {
	var t *Error
	return errors.As(target, &t) && t.Message == "" && t.Field == "" && t.Status == e.Status
}

// Director error codes cpilab answers with, as upstream's errors.rb names
// them.
const (
	CodeTaskNotFound          = 10000
	CodeValidationInvalidType = 40000
	CodeValidationMissing     = 40001
	CodeValidationViolatedMin = 40002
	CodeValidationViolatedMax = 40003
	CodeValidationInvalid     = 40005
	CodeStemcellNotFound      = 50003
	CodeDeploymentNotFound    = 70000
	CodeInstanceNotFound      = 70001
	CodeResourceError         = 100001
	CodeResourceNotFound      = 100002
	CodeUnauthorized          = 600000 // UnauthorizedToAccessDeployment
)

// ErrorCode is the Director error code an error answer carries: e.Code,
// else the nearest upstream code for its status.
func (e *Error) ErrorCode() int {
	if e.Code != 0 {
		return e.Code
	}
	switch e.Status {
	case http.StatusBadRequest:
		return CodeValidationInvalid
	case http.StatusUnauthorized, http.StatusForbidden:
		return CodeUnauthorized
	case http.StatusNotFound:
		return CodeResourceNotFound
	case http.StatusRequestEntityTooLarge:
		return CodeValidationViolatedMax
	}
	return CodeResourceError
}

// Sentinels for errors.Is, by status.
var (
	ErrBadRequest    = &Error{Status: http.StatusBadRequest}
	ErrUnauthorized  = &Error{Status: http.StatusUnauthorized}
	ErrNotFound      = &Error{Status: http.StatusNotFound}
	ErrUnprocessable = &Error{Status: http.StatusUnprocessableEntity}
	ErrConflict      = &Error{Status: http.StatusConflict}
)

func badField(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Field: field, Message: fmt.Sprintf(format, args...)}
}

// validation is a 400 with one of upstream's validation codes; message is
// upstream's wording (validation_helper.rb).
func validation(code int, field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

func notFound(format string, args ...any) *Error {
	return &Error{Status: http.StatusNotFound, Message: fmt.Sprintf(format, args...)}
}

func unprocessable(format string, args ...any) *Error {
	return &Error{Status: http.StatusUnprocessableEntity, Message: fmt.Sprintf(format, args...)}
}

func conflict(format string, args ...any) *Error {
	return &Error{Status: http.StatusConflict, Message: fmt.Sprintf(format, args...)}
}
