//go:build !unix

package cpiv2

import "os/exec"

// setProcessGroup is a no-op where process groups do not exist.
func setProcessGroup(*exec.Cmd) {}

// killProcessGroup kills the CPI process itself where process groups do not
// exist.
func killProcessGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }
