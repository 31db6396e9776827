package cpiv2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"time"
)

// ProcessConfig configures RunProcess: one CPI process, started the way
// the Director starts it. Only Command is required.
type ProcessConfig struct {
	// Command is the CPI's argv. Command[0] is found on the caller's PATH
	// when it has no slash.
	Command []string
	// Dir is the working directory (default: the caller's).
	Dir string
	// Env is the process's whole environment; nil means ScrubbedEnv(nil).
	Env []string
	// Timeout bounds the call (default DefaultTimeout). On expiry the whole
	// process group is killed and RunProcess fails with ErrCPITimeout.
	Timeout time.Duration
	// MaxOutput caps stdout and stderr, in bytes each (default
	// DefaultMaxOutput). More stdout kills the process group and fails with
	// ErrOutputTooLarge; more stderr is dropped.
	MaxOutput int
}

// ProcessResult is what one CPI process did.
type ProcessResult struct {
	Stdout, Stderr []byte
	// ExitCode is the exit status, -1 when the process did not exit by
	// itself (killed) or could not be waited for.
	ExitCode int
	Elapsed  time.Duration
}

// ScrubbedEnv is the Director's environment for a CPI: PATH, TMPDIR and
// HOME from the caller's environment (when set), plus the variables named
// in extra. It is never nil, so a process given it inherits nothing else.
func ScrubbedEnv(extra []string) []string {
	env := []string{}
	for _, name := range append([]string{"PATH", "TMPDIR", "HOME"}, extra...) {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
}

// RunProcess runs one CPI process: in its own process group, stdin the
// request and then closed, stdout and stderr kept up to MaxOutput. Every
// caller of a CPI executable (Runner, the suites) goes through it, so the
// output cap, the time-out and the process-group kill hold everywhere.
//
// The error is an *InvalidResponseError (ErrCPITimeout, ErrOutputTooLarge)
// with the result filled in as far as it got, a cancelled ctx, or a failure
// to start the process. A non-zero exit is not an error: ExitCode says it.
func RunProcess(ctx context.Context, cfg ProcessConfig, stdin []byte) (ProcessResult, error) {
	res := ProcessResult{ExitCode: -1}
	if len(cfg.Command) == 0 {
		return res, ErrNoCommand
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.Env == nil {
		cfg.Env = ScrubbedEnv(nil)
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("call abandoned before starting the CPI: %w", err)
	}
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	cmd.Env = cfg.Env
	cmd.Dir = cfg.Dir
	cmd.Stdin = bytes.NewReader(stdin)
	stdout := &cappedBuffer{max: cfg.MaxOutput, overflow: make(chan struct{}), failOnOverflow: true}
	stderr := &cappedBuffer{max: cfg.MaxOutput, overflow: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	setProcessGroup(cmd)
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return res, fmt.Errorf("starting CPI %q: %w", cfg.Command[0], err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(cfg.Timeout)
	defer timer.Stop()

	var failure, waitErr error
	waited := false
	select {
	case waitErr = <-done:
		waited = true
	case <-timer.C:
		failure = invalid(ErrCPITimeout, nil, "", fmt.Sprintf("no answer within %v; process group killed", cfg.Timeout), nil)
	case <-stdout.overflow:
		failure = invalid(ErrOutputTooLarge, nil, "", fmt.Sprintf("more than %d bytes; process group killed", cfg.MaxOutput), nil)
	case <-ctx.Done():
		failure = fmt.Errorf("call abandoned, process group killed: %w", ctx.Err())
	}
	if failure != nil {
		killProcessGroup(cmd)
		grace := time.NewTimer(killGrace)
		select {
		case waitErr = <-done:
			waited = true
		case <-grace.C:
		}
		grace.Stop()
	}
	if failure == nil && stdout.overflowed() {
		failure = invalid(ErrOutputTooLarge, nil, "", fmt.Sprintf("more than %d bytes; process group killed", cfg.MaxOutput), nil)
		killProcessGroup(cmd)
	}
	res.Elapsed = time.Since(start)
	res.Stdout, res.Stderr = stdout.bytes(), stderr.bytes()
	if waited && cmd.ProcessState != nil {
		res.ExitCode = cmd.ProcessState.ExitCode()
	}
	var ir *InvalidResponseError
	if errors.As(failure, &ir) {
		ir.Excerpt = excerpt(res.Stdout)
	}
	if failure != nil {
		return res, failure
	}
	var exitErr *exec.ExitError
	if waitErr != nil && !errors.As(waitErr, &exitErr) {
		return res, fmt.Errorf("running CPI %q: %w", cfg.Command[0], waitErr)
	}
	return res, nil
}
