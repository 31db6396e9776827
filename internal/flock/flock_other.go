//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package flock

import "os"

// TryLock always succeeds where flock(2) does not exist: the lock file is
// written but excludes no one.
func TryLock(*os.File) (bool, error) { return true, nil }

// Unlock does nothing where flock(2) does not exist.
func Unlock(*os.File) error { return nil }

func lockWait(*os.File) error { return nil }
