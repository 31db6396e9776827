// Package flock holds the project's one advisory file lock (flock(2)): a
// blocking lock on a path, and a try-lock on an open file.
//
//	release, err := flock.Lock(filepath.Join(root, "mounts.lock"))
//	if err != nil {
//		return err
//	}
//	defer release()
package flock

import (
	"fmt"
	"os"
	"path/filepath"
)

// Lock takes an exclusive lock on the file at path, creating it (and its
// directory) when missing, and waits while another process holds it. The
// returned func releases the lock by closing the file. The lock file stays:
// removing it would let two holders lock two different files.
func Lock(path string) (release func(), err error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("flock: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("flock: %w", err)
	}
	if err := lockWait(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("flock: locking %s: %w", path, err)
	}
	return func() { _ = f.Close() }, nil
}
