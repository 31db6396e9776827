//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// newSession makes cmd call setsid: it leaves the CPI's process group.
func newSession(cmd *exec.Cmd) { cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true} }

// killSelf sends the named signal to this process.
func killSelf(name string) {
	sig := map[string]syscall.Signal{"SIGKILL": syscall.SIGKILL, "SIGTERM": syscall.SIGTERM, "SIGSEGV": syscall.SIGSEGV}[name]
	if sig == 0 {
		os.Exit(2)
	}
	_ = syscall.Kill(os.Getpid(), sig)
}
