package director

import (
	"errors"
	"fmt"
	"net/http"
)

// Error is a request the director refuses, with the HTTP status it maps to
// and, for a bad body, the field at fault.
type Error struct {
	Status  int    // HTTP status: 400, 401, 403, 404, 422, 409
	Field   string // the offending body field, if any
	Message string
}

func (e *Error) Error() string {
	if e.Field != "" {
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

// Sentinels for errors.Is, by status.
var (
	ErrBadRequest    = &Error{Status: http.StatusBadRequest}
	ErrNotFound      = &Error{Status: http.StatusNotFound}
	ErrUnprocessable = &Error{Status: http.StatusUnprocessableEntity}
	ErrConflict      = &Error{Status: http.StatusConflict}
)

func badField(field, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Field: field, Message: fmt.Sprintf(format, args...)}
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
