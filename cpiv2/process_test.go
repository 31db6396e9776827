package cpiv2_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

var hasVMRequest = []byte(`{"method":"has_vm","arguments":["vm-1"],"context":{"director_uuid":"d","request_id":"cpi-000001"},"api_version":2}`)

func runTestCPI(t *testing.T, cfg cpiv2.ProcessConfig, mode ...string) (cpiv2.ProcessResult, error) {
	t.Helper()
	cfg.Command = append([]string{testCPI}, mode...)
	if cfg.Timeout == 0 {
		cfg.Timeout = 20 * time.Second
	}
	return cpiv2.RunProcess(context.Background(), cfg, hasVMRequest)
}

// readPid reads the pid a test CPI wrote and registers a cleanup that kills
// it if a test fails before checking it.
func readPid(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("the CPI did not start its child: %v", err)
	}
	pid, err := strconv.Atoi(string(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// waitGone fails the test if pid is still alive (not a zombie) after 5 s.
func waitGone(t *testing.T, pid int, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("%s (pid %d) still alive: leaked", what, pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestRunProcessSetsidChildHoldingStdout(t *testing.T) {
	// The CPI answers, starts a daemon in a new session that keeps its
	// stdout and stderr open, and exits. The answer stands (no time-out),
	// the call ends soon after WaitDelay, and the daemon is killed.
	pidFile := filepath.Join(t.TempDir(), "daemon.pid")
	start := time.Now()
	res, err := runTestCPI(t, cpiv2.ProcessConfig{Timeout: 20 * time.Second, WaitDelay: 300 * time.Millisecond}, "daemon", pidFile)
	if err != nil {
		t.Fatalf("RunProcess: %v (a correct answer must not become an error)", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("call took %v: the wait for the held pipes was not bounded", d)
	}
	resp, derr := cpiv2.DecodeResponse(res.Stdout)
	if derr != nil || string(resp.Result) != "true" {
		t.Errorf("stdout %q: %v; want has_vm's answer true", res.Stdout, derr)
	}
	if res.ExitCode != 0 || res.Outcome != "exit status 0" {
		t.Errorf("exit %d, outcome %q; want 0, \"exit status 0\"", res.ExitCode, res.Outcome)
	}
	if res.Stragglers != 1 {
		t.Errorf("Stragglers = %d, want 1 (the daemon)", res.Stragglers)
	}
	waitGone(t, readPid(t, pidFile), "the setsid daemon holding stdout")
}

func TestRunnerSetsidChildIsNotATimeout(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "daemon.pid")
	r := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileDirectorV1, Timeout: 20 * time.Second, WaitDelay: 200 * time.Millisecond}, "daemon", pidFile)
	ok, err := r.HasVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1"))
	if err != nil || !ok {
		t.Fatalf("has_vm = %v, %v; want true, nil", ok, err)
	}
	waitGone(t, readPid(t, pidFile), "the setsid daemon holding stdout")
}

func TestRunProcessKillsWhatTheCPILeftInItsGroup(t *testing.T) {
	pidFile := filepath.Join(t.TempDir(), "child.pid")
	res, err := runTestCPI(t, cpiv2.ProcessConfig{}, "leave-child", pidFile)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("RunProcess = %+v, %v", res, err)
	}
	waitGone(t, readPid(t, pidFile), "a child the CPI left running in its process group")
}

func TestRunProcessOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		mode    []string
		cfg     cpiv2.ProcessConfig
		kind    error
		code    int
		signal  string
		outcome string
	}{
		{name: "exit 0", mode: []string{"serve"}, code: 0, outcome: "exit status 0"},
		{name: "exit 3", mode: []string{"exit", "3"}, code: 3, outcome: "exit status 3"},
		{name: "SIGKILL", mode: []string{"signal", "SIGKILL"}, code: -1, signal: "SIGKILL",
			outcome: "killed by SIGKILL, exit status 137: probably out of memory or killed by someone"},
		{name: "SIGTERM", mode: []string{"signal", "SIGTERM"}, code: -1, signal: "SIGTERM",
			outcome: "killed by SIGTERM, exit status 143: asked to stop by someone"},
		{name: "time-out", mode: []string{"hang"}, cfg: cpiv2.ProcessConfig{Timeout: 300 * time.Millisecond},
			kind: cpiv2.ErrCPITimeout, code: -1, signal: "SIGKILL", outcome: "timed out after 300ms; process group killed"},
		{name: "output too large", mode: []string{"flood"}, cfg: cpiv2.ProcessConfig{MaxOutput: 1 << 20},
			kind: cpiv2.ErrOutputTooLarge, code: -1, signal: "SIGKILL", outcome: "output too large (more than 1048576 bytes on stdout); process group killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := runTestCPI(t, tc.cfg, tc.mode...)
			if tc.kind == nil && err != nil {
				t.Fatalf("err = %v, want none (how the process ended is in the result)", err)
			}
			if tc.kind != nil && !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want kind %v", err, tc.kind)
			}
			if tc.kind == nil && res.ExitCode != tc.code {
				t.Errorf("ExitCode = %d, want %d", res.ExitCode, tc.code)
			}
			if res.Signal != tc.signal {
				t.Errorf("Signal = %q, want %q", res.Signal, tc.signal)
			}
			if res.Outcome != tc.outcome {
				t.Errorf("Outcome = %q, want %q", res.Outcome, tc.outcome)
			}
		})
	}
}

func TestRunProcessStartFailures(t *testing.T) {
	dir := t.TempDir()
	notExec := filepath.Join(dir, "cpi.txt")
	if err := os.WriteFile(notExec, []byte("#!/bin/sh\necho hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	noFormat := filepath.Join(dir, "garbage")
	if err := os.WriteFile(noFormat, []byte("\x00\x01\x02 not a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		path string
		kind error
	}{
		{"missing file", filepath.Join(dir, "missing-cpi"), cpiv2.ErrCPINotFound},
		{"not on PATH", "cpilab-no-such-cpi-on-path", cpiv2.ErrCPINotFound},
		{"no execute permission", notExec, cpiv2.ErrCPINotExecutable},
		{"not a program", noFormat, cpiv2.ErrCPINotExecutable},
		{"a directory", dir, cpiv2.ErrCPIIsDirectory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := cpiv2.RunProcess(context.Background(), cpiv2.ProcessConfig{Command: []string{tc.path}}, hasVMRequest)
			var se *cpiv2.StartError
			if !errors.As(err, &se) || !errors.Is(err, tc.kind) {
				t.Fatalf("err = %v, want a *StartError of reason %v", err, tc.kind)
			}
			for _, other := range []error{cpiv2.ErrCPINotFound, cpiv2.ErrCPINotExecutable, cpiv2.ErrCPIIsDirectory} {
				if other != tc.kind && errors.Is(err, other) {
					t.Errorf("err %v also matches %v", err, other)
				}
			}
			if tc.kind == cpiv2.ErrCPINotFound && !errors.Is(err, os.ErrNotExist) && !strings.Contains(tc.name, "PATH") {
				t.Errorf("err = %v does not match os.ErrNotExist", err)
			}
			if !strings.HasPrefix(res.Outcome, "could not start: ") || res.ExitCode != -1 {
				t.Errorf("Outcome %q, exit %d; want \"could not start: …\", -1", res.Outcome, res.ExitCode)
			}
		})
	}
}

func TestRunnerSignalMessage(t *testing.T) {
	// A CPI killed by the OOM killer: the caller's error says so, with the
	// exit status a shell would show.
	r := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileCLI}, "signal", "SIGKILL")
	_, err := r.HasVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1"))
	var ir *cpiv2.InvalidResponseError
	if !errors.Is(err, cpiv2.ErrNonZeroExit) || !errors.As(err, &ir) {
		t.Fatalf("err = %v, want ErrNonZeroExit", err)
	}
	want := "killed by SIGKILL, exit status 137: probably out of memory or killed by someone"
	if ir.Outcome != want || !strings.Contains(err.Error(), want) {
		t.Errorf("Outcome %q, message %q; want both to say %q", ir.Outcome, err, want)
	}
	// The Director ignores the exit status, but the error of the empty
	// answer still says how the process ended.
	d := newTestRunner(t, cpiv2.RunnerConfig{Profile: cpiv2.ProfileDirectorV1}, "signal", "SIGKILL")
	_, err = d.HasVM(context.Background(), cpiv2.MustCID[cpiv2.VMKind]("vm-1"))
	if !errors.Is(err, cpiv2.ErrEmptyOutput) || !errors.As(err, &ir) || ir.Outcome != want {
		t.Errorf("director profile: err = %v, want ErrEmptyOutput with outcome %q", err, want)
	}
}

func TestRunProcessWaitForPipesIsUpstream(t *testing.T) {
	// Upstream's behaviour, on request: the child the CPI left in its group
	// keeps running, and a daemon holding stdout turns the call into a
	// time-out (then everything is killed).
	dir := t.TempDir()
	res, err := runTestCPI(t, cpiv2.ProcessConfig{WaitForPipes: true}, "leave-child", filepath.Join(dir, "child.pid"))
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("leave-child: %+v, %v", res, err)
	}
	child := readPid(t, filepath.Join(dir, "child.pid"))
	if !alive(child) {
		t.Errorf("WaitForPipes: the CPI's child %d was killed; upstream leaves it running", child)
	}
	_ = syscall.Kill(child, syscall.SIGKILL)

	res, err = runTestCPI(t, cpiv2.ProcessConfig{WaitForPipes: true, Timeout: 500 * time.Millisecond}, "daemon", filepath.Join(dir, "daemon.pid"))
	if !errors.Is(err, cpiv2.ErrCPITimeout) {
		t.Fatalf("daemon holding stdout with WaitForPipes: err = %v, want ErrCPITimeout", err)
	}
	if res.Stragglers != 1 {
		t.Errorf("Stragglers = %d, want 1", res.Stragglers)
	}
	waitGone(t, readPid(t, filepath.Join(dir, "daemon.pid")), "the daemon after the time-out")
}

// CombinedOutput interleaves stderr into stdout in the order written, as
// kubelet reads a FlexVolume driver; the output cap applies to the whole.
func TestRunProcessCombinedOutput(t *testing.T) {
	sh := func(script string, max int) (cpiv2.ProcessResult, error) {
		return cpiv2.RunProcess(context.Background(), cpiv2.ProcessConfig{
			Command: []string{"/bin/sh", "-c", script}, Timeout: 20 * time.Second, MaxOutput: max, CombinedOutput: true}, nil)
	}
	res, err := sh(`echo one; echo two >&2; echo three`, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res.Stdout); got != "one\ntwo\nthree\n" || len(res.Stderr) != 0 {
		t.Errorf("combined output %q, stderr %q; want one, two, three in order and no stderr", got, res.Stderr)
	}
	if _, err := sh(`head -c 5000 /dev/zero >&2`, 1000); !errors.Is(err, cpiv2.ErrOutputTooLarge) {
		t.Errorf("5000 bytes on stderr with a 1000-byte cap: %v, want ErrOutputTooLarge", err)
	}
}
