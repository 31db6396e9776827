package cpiv2

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// DefaultWaitDelay is how long RunProcess waits, once the CPI process has
// exited, for its stdout and stderr to close: a child it left behind that
// still holds them is then killed (ProcessConfig.WaitDelay).
const DefaultWaitDelay = 2 * time.Second

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
	// WaitDelay bounds the wait for stdout and stderr to close once the CPI
	// process has exited (default DefaultWaitDelay). A process it left
	// behind that still holds them (a daemon that called setsid, say) is
	// killed then, with its process group and session, and the answer
	// already read is used: it is not a time-out.
	WaitDelay time.Duration
	// WaitForPipes restores the upstream Director's behaviour: once the CPI
	// has exited, its children are left running and stdout and stderr are
	// read until they close, however long that takes within Timeout (on
	// expiry: ErrCPITimeout, and everything is killed as below). Default
	// false: the group is killed at exit and the wait is WaitDelay
	// (docs/upstream.md).
	WaitForPipes bool
	// CombinedOutput sends stderr into stdout's pipe, as kubelet runs a
	// FlexVolume driver (os/exec CombinedOutput): ProcessResult.Stdout is
	// then everything the process wrote, in order, and Stderr is empty.
	CombinedOutput bool
}

// ProcessResult is what one CPI process did.
type ProcessResult struct {
	Stdout, Stderr []byte
	// ExitCode is the exit status, -1 when the process did not exit by
	// itself (killed) or could not be waited for.
	ExitCode int
	// Signal names the signal that ended the process ("SIGKILL"), "" when
	// it exited by itself.
	Signal string
	// Outcome says in one line how the process ended: "exit status 3",
	// "killed by SIGKILL, exit status 137: probably out of memory or killed
	// by someone", "timed out after 10m0s; process group killed", "output
	// too large …", "could not start: …". Empty only before a start was
	// tried.
	Outcome string
	// PipesHeldAfterExit: when the CPI exited, something it started still
	// held its stdout or stderr (pipeSettle later). A caller that reads
	// both to the end, as the Director does, would have waited for it.
	PipesHeldAfterExit bool
	// Stragglers counts the processes the CPI left behind, still holding
	// its stdout or stderr after WaitDelay, that RunProcess killed.
	Stragglers int
	Elapsed    time.Duration
}

// pipeSettle is how long a CPI's output pipes may take to close after it
// exits before RunProcess says something else holds them.
const pipeSettle = 500 * time.Millisecond

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

// Reasons a CPI executable could not be started, matched with errors.Is
// against a *StartError.
var (
	// ErrCPINotFound: no file at the path (or none on PATH). It also
	// matches os.ErrNotExist.
	ErrCPINotFound = errors.New("not found")
	// ErrCPINotExecutable: the file exists but cannot be executed (no
	// execute permission, or not a program the system can run).
	ErrCPINotExecutable = errors.New("not executable")
	// ErrCPIIsDirectory: the path names a directory.
	ErrCPIIsDirectory = errors.New("is a directory")
)

// StartError is a CPI process that could not be started. errors.Is matches
// Reason (ErrCPINotFound, ErrCPINotExecutable, ErrCPIIsDirectory, or nil
// for another failure) and the underlying error.
type StartError struct {
	Path   string
	Reason error
	Err    error
}

// Error says which executable and why.
func (e *StartError) Error() string {
	if e.Reason != nil {
		return fmt.Sprintf("could not start CPI %q: %v (%v)", e.Path, e.Reason, e.Err)
	}
	return fmt.Sprintf("could not start CPI %q: %v", e.Path, e.Err)
}

// Unwrap returns Reason and Err.
func (e *StartError) Unwrap() []error {
	if e.Reason == nil {
		return []error{e.Err}
	}
	return []error{e.Reason, e.Err}
}

// startError classifies a failure to start path.
func startError(path string, err error) *StartError {
	se := &StartError{Path: path, Err: err}
	if fi, serr := os.Stat(path); serr == nil && fi.IsDir() {
		se.Reason = ErrCPIIsDirectory
		return se
	}
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist):
		se.Reason = ErrCPINotFound
	case errors.Is(err, syscall.EISDIR):
		se.Reason = ErrCPIIsDirectory
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.ENOEXEC), errors.Is(err, exec.ErrDot):
		se.Reason = ErrCPINotExecutable
	}
	return se
}

// RunProcess runs one CPI process: in its own process group, stdin the
// request and then closed, stdout and stderr kept up to MaxOutput. It is
// the project's one runner of an external executable: every caller of a CPI
// (Runner, the suites) and of a FlexVolume driver (flexvolume.Caller) goes
// through it, so the output cap, the time-out, the process-group kill and
// the bounded wait for the pipes hold everywhere.
//
// Once the process exits, whatever it left running in its process group is
// killed; if stdout or stderr are still held open WaitDelay later (by a
// child that left the group), every process holding them is killed with its
// process group and session, and the answer already read stands.
//
// The error is an *InvalidResponseError (ErrCPITimeout, ErrOutputTooLarge)
// with the result filled in as far as it got, a cancelled ctx, or a
// *StartError. A non-zero exit or a death by signal is not an error:
// ExitCode, Signal and Outcome say it.
func RunProcess(ctx context.Context, cfg ProcessConfig, stdin []byte) (ProcessResult, error) {
	res := ProcessResult{ExitCode: -1}
	if len(cfg.Command) == 0 {
		return res, ErrNoCommand
	}
	cfg = cfg.withDefaults()
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("call abandoned before starting the CPI: %w", err)
	}
	p, err := startProcess(cfg, stdin, &res)
	if err != nil {
		return res, err
	}
	failure := p.waitExit(ctx, &res)
	failure = p.settlePipes(failure, &res)
	return p.finish(failure, res)
}

func (cfg ProcessConfig) withDefaults() ProcessConfig {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.MaxOutput <= 0 {
		cfg.MaxOutput = DefaultMaxOutput
	}
	if cfg.WaitDelay <= 0 {
		cfg.WaitDelay = DefaultWaitDelay
	}
	if cfg.Env == nil {
		cfg.Env = ScrubbedEnv(nil)
	}
	return cfg
}

// running is a started process and the readers of its output.
type running struct {
	cfg            ProcessConfig
	cmd            *exec.Cmd
	start          time.Time
	outR, errR     *os.File
	pipes          pipeSet
	stdout, stderr *cappedBuffer
	pipesClosed    chan struct{} // both readers are done
	done           chan error    // cmd.Wait's answer
	waitErr        error
	waited         bool
}

// startProcess starts cfg.Command on pipes of its own, in its own process
// group, and starts reading its stdout and stderr.
func startProcess(cfg ProcessConfig, stdin []byte, res *ProcessResult) (*running, error) {
	cmd := exec.Command(cfg.Command[0], cfg.Command[1:]...)
	if cmd.Err != nil { // not on PATH
		res.Outcome = "could not start: " + cmd.Err.Error()
		return nil, startError(cfg.Command[0], cmd.Err)
	}
	cmd.Env = cfg.Env
	cmd.Dir = cfg.Dir
	cmd.Stdin = bytes.NewReader(stdin)
	// Our own pipes, so that the child gets them as they are (os/exec starts
	// no copying goroutine it would wait for) and we can tell who holds them.
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("running CPI %q: %w", cfg.Command[0], err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("running CPI %q: %w", cfg.Command[0], err)
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	if cfg.CombinedOutput {
		cmd.Stderr = outW // errW is closed unused below: its reader sees EOF at once
	}
	// Bounds os/exec's own stdin copy once the process has exited (a child
	// holding stdin without reading it).
	cmd.WaitDelay = cfg.WaitDelay
	setProcessGroup(cmd)
	p := &running{cfg: cfg, cmd: cmd, start: time.Now(), outR: outR, errR: errR}
	err = cmd.Start()
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		res.Outcome = "could not start: " + err.Error()
		return nil, startError(cmd.Path, err)
	}
	p.pipes = pipeIDs(outR, errR)
	p.stdout = &cappedBuffer{max: cfg.MaxOutput, overflow: make(chan struct{}), failOnOverflow: true}
	p.stderr = &cappedBuffer{max: cfg.MaxOutput, overflow: make(chan struct{})}
	var readers sync.WaitGroup
	p.pipesClosed = make(chan struct{})
	readers.Go(func() { drain(p.stdout, outR) })
	readers.Go(func() { drain(p.stderr, errR) })
	go func() { readers.Wait(); close(p.pipesClosed) }() // the I/O edge: real goroutines
	p.done = make(chan error, 1)
	go func() { p.done <- cmd.Wait() }()
	return p, nil
}

// waitExit waits for the process to exit, its time-out, its stdout cap or
// ctx; on any but the first it kills the process group and returns why.
func (p *running) waitExit(ctx context.Context, res *ProcessResult) error {
	cfg := p.cfg
	timer := time.NewTimer(cfg.Timeout)
	defer timer.Stop()
	var failure error
	select {
	case p.waitErr = <-p.done:
		p.waited = true
	case <-timer.C:
		failure = invalid(ErrCPITimeout, nil, "", fmt.Sprintf("no answer within %v; process group killed", cfg.Timeout), nil)
		res.Outcome = fmt.Sprintf("timed out after %v; process group killed", cfg.Timeout)
	case <-p.stdout.overflow:
		failure = invalid(ErrOutputTooLarge, nil, "", fmt.Sprintf("more than %d bytes; process group killed", cfg.MaxOutput), nil)
		res.Outcome = fmt.Sprintf("output too large (more than %d bytes on stdout); process group killed", cfg.MaxOutput)
	case <-ctx.Done():
		failure = fmt.Errorf("call abandoned, process group killed: %w", ctx.Err())
		res.Outcome = "call abandoned (" + ctx.Err().Error() + "); process group killed"
	}
	if failure != nil {
		killProcessGroup(p.cmd)
		grace := time.NewTimer(killGrace)
		select {
		case p.waitErr = <-p.done:
			p.waited = true
		case <-grace.C:
		}
		grace.Stop()
	}
	return failure
}

// settlePipes waits, bounded, for stdout and stderr to close once the
// process is gone; whatever still holds them is a leftover, killed with
// its group and session. Under WaitForPipes the bound is the rest of the
// time-out, and running into it is the call's failure.
func (p *running) settlePipes(failure error, res *ProcessResult) error {
	cfg := p.cfg
	if failure == nil && !cfg.WaitForPipes {
		// The CPI has exited: its output pipes close at once, unless
		// something it started still holds them (a caller that reads to the
		// end, as the Director does, would hang). Then nothing it started
		// may outlive the call.
		settle := time.NewTimer(pipeSettle)
		select {
		case <-p.pipesClosed:
		case <-settle.C:
			res.PipesHeldAfterExit = true
		}
		settle.Stop()
		killProcessGroup(p.cmd)
	}
	bound := cfg.WaitDelay
	if cfg.WaitForPipes && failure == nil {
		bound = max(cfg.Timeout-time.Since(p.start), 0)
	}
	grace := time.NewTimer(bound)
	select {
	case <-p.pipesClosed:
	case <-grace.C:
		if cfg.WaitForPipes && failure == nil {
			failure = invalid(ErrCPITimeout, nil, "", fmt.Sprintf("the CPI exited but its stdout or stderr stayed open for the rest of %v; everything holding them killed", cfg.Timeout), nil)
			res.Outcome = fmt.Sprintf("timed out after %v waiting for the CPI's children to close its output; killed", cfg.Timeout)
			killProcessGroup(p.cmd)
		}
		res.Stragglers = killPipeHolders(p.pipes)
		kill := time.NewTimer(killGrace)
		select {
		case <-p.pipesClosed:
		case <-kill.C:
		}
		kill.Stop()
	}
	grace.Stop()
	p.outR.Close() // unblocks the readers if something still holds the pipes
	p.errR.Close()
	<-p.pipesClosed
	return failure
}

// finish fills in the result from the ended process and its output.
func (p *running) finish(failure error, res ProcessResult) (ProcessResult, error) {
	cfg := p.cfg
	if failure == nil && p.stdout.overflowed() {
		failure = invalid(ErrOutputTooLarge, nil, "", fmt.Sprintf("more than %d bytes; process group killed", cfg.MaxOutput), nil)
		res.Outcome = fmt.Sprintf("output too large (more than %d bytes on stdout); process group killed", cfg.MaxOutput)
	}
	res.Elapsed = time.Since(p.start)
	res.Stdout, res.Stderr = p.stdout.bytes(), p.stderr.bytes()
	if ps := p.cmd.ProcessState; p.waited && ps != nil {
		res.ExitCode = ps.ExitCode()
		res.Signal = signalName(ps)
		if res.Outcome == "" {
			res.Outcome = describeExit(ps)
		}
	}
	var ir *InvalidResponseError
	if errors.As(failure, &ir) {
		ir.Excerpt = excerpt(res.Stdout)
	}
	if failure != nil {
		return res, failure
	}
	var exitErr *exec.ExitError
	if p.waitErr != nil && !errors.As(p.waitErr, &exitErr) && !errors.Is(p.waitErr, exec.ErrWaitDelay) {
		return res, fmt.Errorf("running CPI %q: %w", cfg.Command[0], p.waitErr)
	}
	return res, nil
}

// drain reads r into b until EOF or until r is closed; past b's cap it
// keeps reading (and discarding) so the writer is never blocked by a full
// pipe.
func drain(b *cappedBuffer, r io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			_, _ = b.Write(buf[:n])
		}
		if err != nil {
			return
		}
	}
}

// describeExit says how a process that was waited for ended.
func describeExit(ps *os.ProcessState) string {
	if sig := signalName(ps); sig != "" {
		code := 128 + signalNumber(ps)
		s := fmt.Sprintf("killed by %s, exit status %d", sig, code)
		if hint := signalHint(sig); hint != "" {
			s += ": " + hint
		}
		return s
	}
	return fmt.Sprintf("exit status %d", ps.ExitCode())
}

// signalHint is the likely cause of a death by sig.
func signalHint(sig string) string {
	switch sig {
	case "SIGKILL":
		return "probably out of memory or killed by someone"
	case "SIGTERM", "SIGINT", "SIGHUP":
		return "asked to stop by someone"
	case "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE", "SIGABRT":
		return "the CPI crashed"
	case "SIGPIPE":
		return "it wrote to a closed pipe"
	}
	return ""
}
