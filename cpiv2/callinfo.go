package cpiv2

import (
	"context"
	"encoding/json"
)

// CallInfo is what travels beside a call's arguments: the request's
// api_version and context. The caller side (runner, in-process client) fills
// it from its negotiated profile; the CPI side (dispatcher) fills it from the
// request, so a Go CPI reads it the same way in both cases.
type CallInfo struct {
	// APIVersion is the request's api_version; 0 when the request carried
	// none (a Director 1 caller, or the current Director's info call).
	APIVersion int
	// StemcellAPIVersion is context.vm.stemcell.api_version; 0 when absent.
	StemcellAPIVersion int
	// DirectorUUID and RequestID are context.director_uuid and
	// context.request_id.
	DirectorUUID string
	RequestID    string
	// Properties are the CPI config properties merged into the context.
	Properties map[string]json.RawMessage
}

type callInfoKey struct{}

// WithCallInfo returns ctx carrying ci.
func WithCallInfo(ctx context.Context, ci CallInfo) context.Context {
	return context.WithValue(ctx, callInfoKey{}, ci)
}

// CallInfoFrom returns the CallInfo in ctx, if any.
func CallInfoFrom(ctx context.Context) (CallInfo, bool) {
	ci, ok := ctx.Value(callInfoKey{}).(CallInfo)
	return ci, ok
}

type stemcellKey struct{}

// WithStemcellAPIVersion returns ctx asking the caller side to send n as
// context.vm.stemcell.api_version on calls made with it (0: send none).
func WithStemcellAPIVersion(ctx context.Context, n int) context.Context {
	return context.WithValue(ctx, stemcellKey{}, n)
}

// StemcellAPIVersionFrom returns the stemcell api_version set on ctx by
// WithStemcellAPIVersion, or 0.
func StemcellAPIVersionFrom(ctx context.Context) int {
	n, _ := ctx.Value(stemcellKey{}).(int)
	return n
}
