//go:build !unix

package suites

import (
	"os"
	"os/exec"
)

var interruptSignals = []os.Signal{os.Interrupt}

func startWorkerGroup(*exec.Cmd) {}

func forwardInterrupts(func() []*os.Process) (stop func()) { return func() {} }

func interruptWhenOrphaned() (stop func()) { return func() {} }
