//go:build !unix

package main

import (
	"os"
	"os/exec"
)

// newSession is a no-op where sessions do not exist.
func newSession(*exec.Cmd) {}

// killSelf exits with status 2 where signals do not exist.
func killSelf(string) { os.Exit(2) }
