//go:build unix

package cpiv2

import (
	"os/exec"
	"syscall"
)

// setProcessGroup starts cmd as the leader of a new process group, so that
// killProcessGroup reaches its children too.
func setProcessGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

// killProcessGroup sends SIGKILL to cmd's whole process group.
func killProcessGroup(cmd *exec.Cmd) {
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // ESRCH: already gone
}
