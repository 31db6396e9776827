package launch_test

import (
	"context"
	"errors"
	"io"
	"os"
	"testing"

	"github.com/cpilab/cpilab/datadir"
	"github.com/cpilab/cpilab/director/launch"
)

// A director does not start on a data dir someone else holds; the error
// names the dir and the holder.
func TestRunRefusesALockedDataDir(t *testing.T) {
	dir := t.TempDir()
	l, err := datadir.Acquire(dir, "another director")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release()
	err = launch.Run(context.Background(), launch.Config{DataDir: dir, Listen: "127.0.0.1:0", Out: io.Discard})
	var le *datadir.LockedError
	if !errors.Is(err, datadir.ErrLocked) || !errors.As(err, &le) || le.PID != os.Getpid() || le.Owner != "another director" {
		t.Fatalf("Run on a held data dir = %v, want a *datadir.LockedError naming this pid", err)
	}
}
