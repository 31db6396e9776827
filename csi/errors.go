package csi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/cpilab/cpilab/director"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// directorError maps a Director call's error to the gRPC status the CSI
// spec asks for; what names the call (and the volume) in the message.
//
//   - the Director cannot be reached, or answers 5xx: Unavailable, so that
//     the sidecars retry (the call is idempotent and converges);
//   - a deadline or cancellation: DeadlineExceeded or Canceled;
//   - 401/403: PermissionDenied (the client lacks a scope);
//   - 404: NotFound; 400/422: InvalidArgument; 409: Aborted (an operation
//     on the disk is in flight);
//   - a task that failed: by its message (upstream's job errors): "not
//     found" → NotFound, "already exists" → AlreadyExists, attached to
//     another VM → FailedPrecondition, an unknown disk pool →
//     InvalidArgument, anything else Internal.
func directorError(what string, err error) error {
	if err == nil {
		return nil
	}
	code := codes.Unavailable
	var api *director.APIError
	var task *director.TaskFailedError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.As(err, &api):
		switch {
		case api.Status == http.StatusUnauthorized || api.Status == http.StatusForbidden:
			code = codes.PermissionDenied
		case api.Status == http.StatusNotFound:
			code = codes.NotFound
		case api.Status == http.StatusBadRequest || api.Status == http.StatusUnprocessableEntity:
			code = codes.InvalidArgument
		case api.Status == http.StatusConflict:
			code = codes.Aborted
		case api.Status >= 500:
			code = codes.Unavailable
		default:
			code = codes.Internal
		}
	case errors.As(err, &task):
		code = taskCode(task.Task.Result)
	}
	return status.Error(code, fmt.Sprintf("%s: %v", what, err))
}

// taskCode classifies a failed task's message.
func taskCode(msg string) codes.Code {
	m := strings.ToLower(msg)
	switch {
	case strings.Contains(m, "could not find disk pool"), strings.Contains(m, "no cloud config"):
		return codes.InvalidArgument
	case strings.Contains(m, "no active vm found in deployment"):
		return codes.ResourceExhausted
	case strings.Contains(m, "no active vm found for instance"), strings.Contains(m, "not found"):
		return codes.NotFound
	case strings.Contains(m, "already exists"):
		return codes.AlreadyExists
	case strings.Contains(m, "attached to"), strings.Contains(m, "another vm"), strings.Contains(m, "is in az"),
		strings.Contains(m, "cannot be attached"):
		return codes.FailedPrecondition
	}
	return codes.Internal
}
