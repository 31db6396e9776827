package flexvolume

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

// CallerConfig configures NewCaller.
type CallerConfig struct {
	// Executable is the installed driver,
	// <plugindir>/<vendor~driver>/<driver> (required).
	Executable string
	// Timeout bounds each call-out; the process group is killed when it
	// runs out and the call fails with ErrTimeout. Default 2 min (kubelet
	// passes its own per call; waitforattach gets the operation's).
	Timeout time.Duration
	// MaxOutput caps the combined output read, in bytes. Default 1 MiB.
	MaxOutput int
	// Env is added to the driver's environment.
	Env []string
	// Dir is the driver's working directory. Default "/" (kubelet's, as a
	// system service), so that a driver reading files relative to its
	// working directory fails here as on a node.
	Dir string
}

// Caller runs a FlexVolume driver as kubelet and the attach/detach
// controller do (pkg/volume/flexvolume driver-call.go): argv shapes of
// kubelet's code, combined stdout+stderr parsed as one JSON object,
// "Not supported" cached per call-out for the caller's lifetime, Success
// with a non-zero exit treated as a driver bug, a time-out killing the
// driver.
type Caller struct {
	cfg CallerConfig

	mu struct {
		sync.Mutex
		unsupported map[string]bool
	}
}

// NewCaller returns a caller of cfg.Executable.
func NewCaller(cfg CallerConfig) *Caller {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 2 * time.Minute
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = 1 << 20
	}
	if cfg.Dir == "" {
		cfg.Dir = "/"
	}
	c := &Caller{cfg: cfg}
	c.mu.unsupported = map[string]bool{}
	return c
}

// Call is one call-out as it happened.
type Call struct {
	Args     []string // argv[1:]
	Output   []byte   // combined stdout+stderr
	ExitCode int      // -1: killed or not started
	Result   Result   // parsed when Err is nil or a status error
	Duration time.Duration
	// Err is the protocol error (ErrNotOneJSONObject, ErrUnknownStatus,
	// ErrSuccessNonZeroExit, ErrTimeout, …), or nil for a well-formed
	// answer, whatever its status.
	Err error
}

// String shows the call for a failure message.
func (c Call) String() string {
	return fmt.Sprintf("driver %s → exit %d, output %q", strings.Join(quoteArgs(c.Args), " "), c.ExitCode, clip(c.Output))
}

func quoteArgs(a []string) []string {
	out := make([]string, len(a))
	for i, s := range a {
		if s == "" || strings.ContainsAny(s, " \"'{}") {
			out[i] = fmt.Sprintf("%q", s)
		} else {
			out[i] = s
		}
	}
	return out
}

// ErrCachedNotSupported is returned, without running the driver, for a
// call-out that answered "Not supported" before (kubelet's
// unsupportedCommands).
var ErrCachedNotSupported = errors.New("flexvolume: call-out answered Not supported before (cached)")

// Unsupported reports whether cmd answered "Not supported".
func (c *Caller) Unsupported(cmd string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.unsupported[cmd]
}

// Run runs the driver with args (args[0] is the call-out) unless the
// call-out is cached as unsupported.
func (c *Caller) Run(ctx context.Context, args ...string) Call {
	if len(args) > 0 && c.Unsupported(args[0]) {
		return Call{Args: args, ExitCode: -1, Err: ErrCachedNotSupported, Result: Result{Status: StatusNotSupported}}
	}
	call := c.RunUncached(ctx, args...)
	if call.Err == nil && call.Result.Status == StatusNotSupported && len(args) > 0 {
		c.mu.Lock()
		c.mu.unsupported[args[0]] = true
		c.mu.Unlock()
	}
	return call
}

// RunUncached runs the driver with args whatever the cache says, through
// the project's one process runner (cpiv2.RunProcess): its own process
// group, killed on time-out, combined output capped at MaxOutput.
func (c *Caller) RunUncached(ctx context.Context, args ...string) Call {
	call := Call{Args: args, ExitCode: -1}
	res, err := cpiv2.RunProcess(ctx, cpiv2.ProcessConfig{
		Command:        append([]string{c.cfg.Executable}, args...),
		Dir:            c.cfg.Dir,
		Env:            append(os.Environ(), c.cfg.Env...),
		Timeout:        c.cfg.Timeout,
		MaxOutput:      c.cfg.MaxOutput,
		WaitDelay:      time.Second,
		CombinedOutput: true,
	}, nil)
	call.Duration = res.Elapsed
	call.Output = res.Stdout
	var start *cpiv2.StartError
	switch {
	case errors.As(err, &start):
		call.Err = fmt.Errorf("flexvolume: start %s: %w", c.cfg.Executable, err)
		return call
	case errors.Is(err, cpiv2.ErrCPITimeout):
		call.Err = fmt.Errorf("%w after %s (process group killed)", ErrTimeout, c.cfg.Timeout)
		return call
	case ctx.Err() != nil:
		call.Err = fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
		return call
	case err != nil:
		call.Err = fmt.Errorf("flexvolume: %s %s: %w", c.cfg.Executable, strings.Join(quoteArgs(args), " "), err)
		return call
	}
	call.ExitCode = res.ExitCode
	r, err := ParseOutput(call.Output)
	call.Result = r
	if err != nil {
		call.Err = err
		return call
	}
	call.Err = CheckExit(r, call.ExitCode)
	if call.Err == nil && r.Status == StatusSuccess && len(args) > 0 {
		switch {
		case (args[0] == CmdAttach || args[0] == CmdWaitForAttach) && r.Device == "":
			call.Err = fmt.Errorf("%w: %s answered no device", ErrMissingField, args[0])
		case args[0] == CmdIsAttached && r.Attached == nil:
			call.Err = fmt.Errorf("%w: isattached answered no attached", ErrMissingField)
		}
	}
	return call
}
