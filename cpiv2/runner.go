package cpiv2

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"time"
)

// Defaults of RunnerConfig.
const (
	// DefaultTimeout is the per-call time limit: long enough for the slowest
	// IaaS operation a Director waits on in one CPI call.
	DefaultTimeout = 10 * time.Minute
	// DefaultMaxOutput is how many bytes of stdout, and separately of
	// stderr, a call keeps (16 MiB).
	DefaultMaxOutput = 16 << 20
	// DefaultDirectorUUID is sent as context.director_uuid when none is
	// configured.
	DefaultDirectorUUID = "cpilab-director"
	// killGrace is how long a call waits for the output pipes to close after
	// killing the process group.
	killGrace = 5 * time.Second
)

// RunnerConfig configures a Runner. Only Command is required.
type RunnerConfig struct {
	// Command is the CPI's argv. Command[0] is found on the caller's PATH
	// when it has no slash.
	Command []string
	// Dir is the CPI's working directory (default: the caller's).
	Dir string
	// Profile is the caller profile (default ProfileDirectorCurrent).
	Profile Profile
	// DirectorUUID is sent as context.director_uuid (default
	// DefaultDirectorUUID).
	DirectorUUID string
	// Properties are the CPI config properties, merged at the top level of
	// every request's context.
	Properties map[string]json.RawMessage
	// ExtraEnv names environment variables passed to the CPI besides PATH,
	// TMPDIR and HOME (taken from the caller's environment when set). The
	// Director passes those three only; the bosh CLI adds
	// BOSH_PACKAGES_DIR and BOSH_JOBS_DIR.
	ExtraEnv []string
	// Timeout bounds each call (default DefaultTimeout). On expiry the CPI's
	// whole process group is killed and the call fails with ErrCPITimeout.
	Timeout time.Duration
	// MaxOutput caps stdout and stderr, in bytes each (default
	// DefaultMaxOutput). More stdout kills the process group and fails the
	// call with ErrOutputTooLarge; more stderr is dropped.
	MaxOutput int
	// WaitDelay bounds the wait for the CPI's stdout and stderr to close
	// once it has exited (default DefaultWaitDelay); see
	// ProcessConfig.WaitDelay.
	WaitDelay time.Duration
	// WaitForPipes waits for the CPI's stdout and stderr to close and
	// leaves its children running, as the upstream Director does
	// (ProcessConfig.WaitForPipes). Default false.
	WaitForPipes bool
	// RequestIDs generates request_id values (default NewRequestIDs(), a
	// per-runner sequence "cpi-000001", "cpi-000002", …).
	RequestIDs func() string
	// DebugLog, when set, is called after every call with its request,
	// stdout, stderr (the CPI's debug log), exit status and error. Calls
	// made concurrently call it concurrently.
	DebugLog func(CallRecord)
	// InfoBeforeEveryCall calls info before every other call, as the
	// Director and the bosh CLI do (two processes per operation). By default
	// the runner negotiates once, on its first call, and caches the
	// api_version; a failed negotiation is not cached.
	InfoBeforeEveryCall bool
	// LenientJSON accepts responses with duplicate keys (the last wins) or
	// invalid UTF-8 (replaced by U+FFFD), as the upstream Director and the
	// bosh CLI do (DecodeOptions.LenientJSON, docs/upstream.md). Default
	// false: such a response is invalid (ErrDuplicateKey, ErrInvalidUTF8).
	LenientJSON bool
}

// Runner calls a CPI executable as the Director does: one
// process per call, in its own process group, with a scrubbed environment;
// the request goes on stdin, which is then closed; exactly one JSON object
// is read from stdout; stderr is kept as the call's debug log. The exit
// status is ignored unless the profile says it matters (cli). A CPI error
// object comes back as a *Error (wrapped with the method and request_id),
// a bad response as an *InvalidResponseError, a call the profile will not
// make as a *RefusalError. Runner implements CPI and is safe for concurrent
// use. Cancelling a call's ctx kills the CPI's process group too.
//
// Runner is I/O-edge code: it runs real processes, so it uses a goroutine
// per call (cmd.Wait) and wall-clock timers (Timeout, the kill grace), not
// an rt.Runtime. In-process callers under the simulator use Loopback.
type Runner struct {
	*caller
	cfg RunnerConfig
	env []string
}

// NewRunner returns a Runner for cfg. An empty Command makes every call fail.
func NewRunner(cfg RunnerConfig) *Runner {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.DirectorUUID == "" {
		cfg.DirectorUUID = DefaultDirectorUUID
	}
	r := &Runner{cfg: cfg, env: ScrubbedEnv(cfg.ExtraEnv)}
	r.caller = newCaller(callerConfig{
		profile:             cfg.Profile,
		directorUUID:        cfg.DirectorUUID,
		properties:          cfg.Properties,
		requestIDs:          cfg.RequestIDs,
		infoBeforeEveryCall: cfg.InfoBeforeEveryCall,
		trace:               cfg.DebugLog,
		lenientJSON:         cfg.LenientJSON,
	}, r.roundTrip)
	return r
}

var _ CPI = (*Runner)(nil)

// ErrNoCommand is returned by every call of a Runner without a Command.
var ErrNoCommand = errors.New("cpiv2: RunnerConfig.Command is empty")

func (r *Runner) roundTrip(ctx context.Context, method string, req []byte) (exchange, error) {
	res, err := RunProcess(ctx, ProcessConfig{
		Command: r.cfg.Command, Dir: r.cfg.Dir, Env: r.env,
		Timeout: r.cfg.Timeout, MaxOutput: r.cfg.MaxOutput, WaitDelay: r.cfg.WaitDelay,
		WaitForPipes: r.cfg.WaitForPipes,
	}, req)
	return exchange{stdout: res.Stdout, stderr: res.Stderr, exitCode: res.ExitCode, outcome: res.Outcome}, err
}

// cappedBuffer keeps the first max bytes written to it. Past max it closes
// overflow once and, with failOnOverflow, fails the write (so os/exec stops
// copying); otherwise it drops the excess.
type cappedBuffer struct {
	max            int
	failOnOverflow bool
	overflow       chan struct{}

	mu   sync.Mutex
	buf  bytes.Buffer
	over bool // guarded by mu
}

func (b *cappedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.max - b.buf.Len()
	if len(p) <= room {
		return b.buf.Write(p)
	}
	b.buf.Write(p[:max(room, 0)])
	if !b.over {
		b.over = true
		close(b.overflow)
	}
	if b.failOnOverflow {
		return max(room, 0), ErrOutputTooLarge
	}
	return len(p), nil
}

func (b *cappedBuffer) overflowed() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.over
}

func (b *cappedBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
