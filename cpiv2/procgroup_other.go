//go:build !unix

package cpiv2

import (
	"os"
	"os/exec"
)

// setProcessGroup is a no-op where process groups do not exist.
func setProcessGroup(*exec.Cmd) {}

// killProcessGroup kills the CPI process itself where process groups do not
// exist.
func killProcessGroup(cmd *exec.Cmd) { _ = cmd.Process.Kill() }

// signalName is always "": no signals here.
func signalName(*os.ProcessState) string { return "" }

// signalNumber is always 0: no signals here.
func signalNumber(*os.ProcessState) int { return 0 }
