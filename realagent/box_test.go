package realagent

import (
	"errors"
	"testing"
)

// startBox starts a box for a test, or skips saying why it cannot run.
func startBox(t *testing.T, o Options) *Box {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: not starting the real-agent box (a Docker daemon and the upstream agent)")
	}
	o.Log = t.Logf
	b, err := Start(o)
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("%v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}
