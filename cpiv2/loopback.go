package cpiv2

import (
	"bytes"
	"context"
	"encoding/json"
)

// LoopbackConfig configures a Loopback. The zero value is usable.
type LoopbackConfig struct {
	// Profile is the caller profile (default ProfileDirectorCurrent).
	Profile Profile
	// MaxAPIVersion is the in-process CPI's highest api_version, as a
	// Dispatcher's (default 3).
	MaxAPIVersion int
	// DirectorUUID is sent as context.director_uuid (default
	// DefaultDirectorUUID).
	DirectorUUID string
	// Properties are the CPI config properties merged into every request's
	// context.
	Properties map[string]json.RawMessage
	// RequestIDs generates request_id values (default NewRequestIDs()).
	RequestIDs func() string
	// InfoBeforeEveryCall makes the loopback call info before every other
	// call, as the Director does, instead of negotiating once and caching
	// the api_version (the default).
	InfoBeforeEveryCall bool
	// Trace, when set, is called after every call with what went in and
	// out; Stderr holds the dispatcher's log lines. Calls made concurrently
	// call it concurrently.
	Trace func(CallRecord)
	// LenientJSON decodes responses as the upstream Director does
	// (DecodeOptions.LenientJSON). Default false: strict.
	LenientJSON bool
}

// Loopback is a CPI caller that runs the whole wire path in memory: it
// encodes each request exactly as a Runner with the same profile would,
// hands the bytes to a Dispatcher over impl, and decodes the response
// strictly. Only the process is missing: there is no exit status (always 0),
// no timeout and no output cap. It spawns no goroutine and never reads the
// clock, so the simulator can drive it deterministically. It implements CPI
// and is safe for concurrent use if impl is.
type Loopback struct {
	*caller
	d *Dispatcher
}

// NewLoopback returns a Loopback calling impl.
func NewLoopback(impl Core, cfg LoopbackConfig) *Loopback {
	l := &Loopback{d: NewDispatcher(impl, DispatcherConfig{MaxAPIVersion: cfg.MaxAPIVersion})}
	if cfg.DirectorUUID == "" {
		cfg.DirectorUUID = DefaultDirectorUUID
	}
	l.caller = newCaller(callerConfig{
		profile:             cfg.Profile,
		directorUUID:        cfg.DirectorUUID,
		properties:          cfg.Properties,
		requestIDs:          cfg.RequestIDs,
		infoBeforeEveryCall: cfg.InfoBeforeEveryCall,
		trace:               cfg.Trace,
		lenientJSON:         cfg.LenientJSON,
	}, l.roundTrip)
	return l
}

func (l *Loopback) roundTrip(ctx context.Context, _ string, req []byte) (exchange, error) {
	var log bytes.Buffer
	out := l.d.Handle(ctx, req, &log)
	return exchange{stdout: out, stderr: log.Bytes()}, nil
}

var _ CPI = (*Loopback)(nil)
