package datadir_test

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/datadir"
)

var heldLock *datadir.Lock

// The test binary doubles as the second process: DATADIR_TEST_HELPER=hold
// takes the lock, prints "locked" and waits to be killed; =try tries once
// and prints "locked" or "refused <pid>".
func TestMain(m *testing.M) {
	switch os.Getenv("DATADIR_TEST_HELPER") {
	case "hold":
		l, err := datadir.Acquire(os.Getenv("DATADIR_TEST_DIR"), "lock test holder")
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		// Keep the Lock reachable: its file would otherwise be closed by the
		// garbage collector's finalizer, releasing the lock.
		heldLock = l
		fmt.Println("locked")
		// Wait to be killed. Not select{}: with no other goroutine the
		// runtime would call that a deadlock and exit, releasing the lock.
		for {
			time.Sleep(time.Hour)
		}
	case "try":
		_, err := datadir.Acquire(os.Getenv("DATADIR_TEST_DIR"), "lock test trier")
		var le *datadir.LockedError
		switch {
		case err == nil:
			fmt.Println("locked")
		case errors.As(err, &le):
			fmt.Printf("refused %d %s\n", le.PID, err)
		default:
			fmt.Println("error", err)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func helper(t *testing.T, mode, dir string) (*exec.Cmd, *bufio.Reader) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "DATADIR_TEST_HELPER="+mode, "DATADIR_TEST_DIR="+dir)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	return cmd, bufio.NewReader(out)
}

func line(t *testing.T, r *bufio.Reader) string {
	t.Helper()
	s, err := r.ReadString('\n')
	if err != nil {
		t.Fatalf("helper said %q: %v", s, err)
	}
	return strings.TrimSpace(s)
}

func TestSecondProcessIsRefusedUntilTheFirstDies(t *testing.T) {
	dir := t.TempDir()
	holder, out := helper(t, "hold", dir)
	if got := line(t, out); got != "locked" {
		t.Fatalf("holder: %s", got)
	}
	// A second process is refused, told the dir and the holder's pid.
	_, tout := helper(t, "try", dir)
	got := line(t, tout)
	want := fmt.Sprintf("refused %d data dir %s is in use by pid %d (lock test holder)", holder.Process.Pid, dir, holder.Process.Pid)
	if !strings.HasPrefix(got, want) {
		t.Fatalf("second process said %q, want it to start with %q", got, want)
	}
	// So is this process.
	_, err := datadir.Acquire(dir, "test")
	var le *datadir.LockedError
	if !errors.Is(err, datadir.ErrLocked) || !errors.As(err, &le) || le.PID != holder.Process.Pid || le.Dir != dir {
		t.Fatalf("Acquire = %v, want a *LockedError naming %s and pid %d", err, dir, holder.Process.Pid)
	}
	// kill -9 releases it: no stale lock.
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	l, err := datadir.Acquire(dir, "test")
	if err != nil {
		t.Fatalf("after kill -9 of the holder: %v", err)
	}
	b, _ := os.ReadFile(dir + "/" + datadir.LockFile)
	if !strings.HasPrefix(string(b), strconv.Itoa(os.Getpid())+"\n") {
		t.Errorf("lock file says %q, want this pid first", b)
	}
	// Now we hold it: a second process is refused with our pid.
	_, tout = helper(t, "try", dir)
	if got := line(t, tout); !strings.HasPrefix(got, fmt.Sprintf("refused %d ", os.Getpid())) {
		t.Errorf("second process said %q while this one holds the dir", got)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	_, tout = helper(t, "try", dir)
	if got := line(t, tout); got != "locked" {
		t.Errorf("after Release, a second process said %q", got)
	}
}

func TestSameProcessTwiceIsRefused(t *testing.T) {
	dir := t.TempDir()
	l, err := datadir.Acquire(dir, "first")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := datadir.Acquire(dir, "second"); !errors.Is(err, datadir.ErrLocked) {
		t.Errorf("second Acquire in one process = %v, want ErrLocked", err)
	}
	if err := l.Release(); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(); err != nil {
		t.Errorf("second Release: %v", err)
	}
	l2, err := datadir.Acquire(dir, "again")
	if err != nil {
		t.Fatalf("Acquire after Release: %v", err)
	}
	l2.Release()
}
