//go:build unix

package suites

import (
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"
)

// Signals and worker processes. A worker runs in a process group of its
// own, so a Ctrl-C at the terminal (which signals the foreground group)
// reaches only the parent, and the parent forwards it to every worker
// exactly once: a worker interrupted twice would skip its clean-up, as
// Ginkgo does on a second interrupt. The same path serves a signal sent to
// the parent alone (kill, a CI runner's SIGTERM), which before reached no
// worker. A worker whose parent is gone interrupts itself.

// interruptSignals are the signals that end a run as interrupted.
var interruptSignals = []os.Signal{os.Interrupt, syscall.SIGTERM}

// startWorkerGroup makes cmd start as the leader of its own process group.
func startWorkerGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// forwardInterrupts relays SIGINT and SIGTERM received by this process to
// every process procs returns, until the returned stop is called.
func forwardInterrupts(procs func() []*os.Process) (stop func()) {
	ch := make(chan os.Signal, 4)
	done := make(chan struct{})
	signal.Notify(ch, interruptSignals...)
	go func() {
		for {
			select {
			case sig := <-ch:
				for _, p := range procs() {
					_ = p.Signal(sig) // a worker that has ended: nothing to do
				}
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// orphanWatchPeriod is how often a worker checks that its parent is alive.
const orphanWatchPeriod = 250 * time.Millisecond

// interruptWhenOrphaned sends this process SIGTERM once its parent is gone
// (killed with SIGKILL, say), so that a worker cleans up and ends instead
// of running its share for nobody. Stop it with the returned function.
func interruptWhenOrphaned() (stop func()) {
	parent := os.Getppid()
	t := time.NewTicker(orphanWatchPeriod)
	done := make(chan struct{})
	go func() {
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if os.Getppid() != parent {
					_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
					return
				}
			case <-done:
				return
			}
		}
	}()
	return func() { close(done) }
}
