// Package checkout finds the root of the cpilab checkout a process runs
// in, for the project scripts (scripts/dockerd.sh, scripts/agentbox.sh)
// that tests and the real-agent box call.
package checkout

import (
	"errors"
	"os"
	"path/filepath"
)

// ErrNotFound is Root's error when no checkout is above either place.
var ErrNotFound = errors.New("no cpilab checkout (scripts/dockerd.sh) above the working directory or the executable")

// Root returns the checkout's root (the directory holding
// scripts/dockerd.sh): found from the working directory upwards (a test
// runs in its package's directory), else from the running executable's
// directory upwards (bin/cpilab of a checkout).
func Root() (string, error) {
	d, err := os.Getwd()
	if err != nil {
		return "", err
	}
	if c, ok := above(d); ok {
		return c, nil
	}
	if exe, err := os.Executable(); err == nil {
		if c, ok := above(filepath.Dir(exe)); ok {
			return c, nil
		}
	}
	return "", ErrNotFound
}

func above(d string) (string, bool) {
	for {
		if _, err := os.Stat(filepath.Join(d, "scripts", "dockerd.sh")); err == nil {
			return d, true
		}
		up := filepath.Dir(d)
		if up == d {
			return "", false
		}
		d = up
	}
}
