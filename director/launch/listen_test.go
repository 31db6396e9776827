package launch

import (
	"context"
	"errors"
	"testing"
)

// Plain HTTP is served on loopback only; TLS anywhere.
func TestCheckListen(t *testing.T) {
	for _, tc := range []struct {
		addr  string
		plain bool
		ok    bool
	}{
		{"127.0.0.1:25555", true, true},
		{"127.8.9.10:0", true, true},
		{"[::1]:0", true, true},
		{"localhost:0", true, true},
		{"0.0.0.0:25555", true, false},
		{":25555", true, false},
		{"[::]:0", true, false},
		{"10.1.2.3:25555", true, false},
		{"director.example.com:25555", true, false},
		{"0.0.0.0:25555", false, true},
	} {
		err := checkListen(tc.addr, tc.plain)
		if (err == nil) != tc.ok || (err != nil && !errors.Is(err, ErrPlainHTTPNotLoopback)) {
			t.Errorf("listen %q plain %v: %v; want accepted %v", tc.addr, tc.plain, err, tc.ok)
		}
	}
}

// Run refuses `--listen 0.0.0.0 --plain-http` before starting anything.
func TestRunRefusesPlainHTTPBeyondLoopback(t *testing.T) {
	err := Run(context.Background(), Config{DataDir: t.TempDir(), Listen: "0.0.0.0:0", PlainHTTP: true})
	if !errors.Is(err, ErrPlainHTTPNotLoopback) {
		t.Fatalf("Run = %v; want ErrPlainHTTPNotLoopback", err)
	}
}
