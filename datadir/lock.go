// Package datadir keeps two processes off one data directory. A cpilab
// process that owns a data dir (fakeiaas's state, the director's database,
// CA and keys) takes its lock at start and holds it until it exits; a
// second process on the same dir gets a *LockedError naming the dir and
// the holder's pid instead of starting and overwriting the first one's
// files.
//
//	l, err := datadir.Acquire(dir, "cpilab fakeiaas")
//	if err != nil {
//		return err // "data dir /x is in use by pid 1234 (cpilab fakeiaas) …"
//	}
//	defer l.Release()
//
// The lock is an flock(2) on <dir>/.cpilab.lock: the kernel drops it when
// the process ends, however it ends (kill -9 included), so a stale lock
// file never blocks anyone. The file keeps the holder's pid and owner
// string only to name it in the error.
package datadir

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cpilab/cpilab/internal/flock"
)

// LockFile is the lock's file name inside the data dir.
const LockFile = ".cpilab.lock"

// ErrLocked matches every *LockedError.
var ErrLocked = errors.New("data dir is in use by another process")

// LockedError is a data dir another process (or another open of it in this
// process) holds.
type LockedError struct {
	// Dir is the data dir.
	Dir string
	// PID is the holder's process id, 0 when the lock file does not say.
	PID int
	// Owner is what the holder said it was ("cpilab fakeiaas"), if anything.
	Owner string
}

// Error names the dir and the holder.
func (e *LockedError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = "pid " + strconv.Itoa(e.PID)
		if e.Owner != "" {
			who += " (" + e.Owner + ")"
		}
	}
	return fmt.Sprintf("data dir %s is in use by %s: stop it, or give this one another data dir (lock %s)",
		e.Dir, who, filepath.Join(e.Dir, LockFile))
}

// Is matches ErrLocked.
func (e *LockedError) Is(target error) bool { return target == ErrLocked }

// A Lock is a held data dir lock. Keep it reachable until Release: a Lock
// dropped unreleased is closed by the garbage collector, releasing it.
type Lock struct {
	dir string
	f   *os.File
}

// Acquire creates dir if needed and locks it for this process, recording the
// pid and owner (a short description of the holder, e.g. "cpilab director")
// for a second process's error. It fails with a *LockedError if another
// holder has it, without waiting.
func Acquire(dir, owner string) (*Lock, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("datadir: %q: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("datadir: %w", err)
	}
	path := filepath.Join(abs, LockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("datadir: opening the lock of %s: %w", abs, err)
	}
	held, err := flock.TryLock(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("datadir: locking %s: %w", path, err)
	}
	if !held {
		le := &LockedError{Dir: abs}
		if b, err := os.ReadFile(path); err == nil {
			le.PID, le.Owner = parseHolder(string(b))
		}
		f.Close()
		return nil, le
	}
	owner = strings.ReplaceAll(owner, "\n", " ")
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"+owner+"\n"), 0)
	}
	return &Lock{dir: abs, f: f}, nil
}

func parseHolder(s string) (pid int, owner string) {
	lines := strings.SplitN(s, "\n", 3)
	pid, _ = strconv.Atoi(strings.TrimSpace(lines[0]))
	if len(lines) > 1 {
		owner = strings.TrimSpace(lines[1])
	}
	return pid, owner
}

// Dir is the locked data dir (absolute).
func (l *Lock) Dir() string { return l.dir }

// Release unlocks the dir. The lock file stays (removing it would let two
// processes hold locks on two different files); it is harmless. Release is
// idempotent.
func (l *Lock) Release() error {
	if l == nil || l.f == nil {
		return nil
	}
	_ = l.f.Truncate(0)
	err := flock.Unlock(l.f)
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}
