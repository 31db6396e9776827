package flock_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/cpilab/cpilab/internal/flock"
)

func TestLockExcludesATryLockUntilReleased(t *testing.T) {
	p := filepath.Join(t.TempDir(), "sub", "x.lock")
	release, err := flock.Lock(p)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(p, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if held, err := flock.TryLock(f); err != nil || held {
		t.Fatalf("TryLock while Lock holds the file: held=%v err=%v, want false", held, err)
	}
	release()
	if held, err := flock.TryLock(f); err != nil || !held {
		t.Fatalf("TryLock after release: held=%v err=%v, want true", held, err)
	}
	if err := flock.Unlock(f); err != nil {
		t.Fatal(err)
	}
}

func TestLockNamesThePathItCannotCreate(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := flock.Lock(filepath.Join(file, "x.lock")); err == nil {
		t.Fatal("Lock under a regular file succeeded")
	}
}
