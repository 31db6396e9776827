package cpisuite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestCheckResponse(t *testing.T) {
	for _, tc := range []struct {
		name, stdout string
		want         string // substring of the only violation; "" for none
	}{
		{"ok", `{"result":"disk-1","error":null,"log":""}`, ""},
		{"ok with newline", "{\"result\":null,\"error\":null,\"log\":\"\"}\n", ""},
		{"error", `{"result":null,"error":{"type":"Bosh::Clouds::DiskNotFound","message":"m","ok_to_retry":false},"log":""}`, ""},
		{"empty", ``, "not one JSON object"},
		{"log line first", "INFO hello\n{\"result\":null,\"error\":null,\"log\":\"\"}", "not one JSON object"},
		{"two objects", `{"progress":1}{"result":null,"error":null,"log":""}`, "more than one JSON value"},
		{"array", `[1]`, "not one JSON object"},
		{"no log", `{"result":null,"error":null}`, `no "log" key`},
		{"no result", `{"error":null,"log":""}`, `no "result" key`},
		{"log not a string", `{"result":null,"error":null,"log":5}`, "log must be a string"},
		{"ok_to_retry string", `{"result":null,"error":{"type":"T","message":"m","ok_to_retry":"false"},"log":""}`, "ok_to_retry must be a bool"},
		{"ok_to_retry missing", `{"result":null,"error":{"type":"T","message":"m"},"log":""}`, "ok_to_retry must be a bool"},
		{"type missing", `{"result":null,"error":{"message":"m","ok_to_retry":true},"log":""}`, "error.type must be a string"},
		{"error a string", `{"result":null,"error":"boom","log":""}`, "error must be null or an object"},
		{"duplicate key", `{"result":null,"error":null,"log":"","result":"disk-1"}`, `key "result" more than once`},
		{"duplicate key in error", `{"result":null,"error":{"type":"T","type":"U","message":"m","ok_to_retry":false},"log":""}`, `key "error.type" more than once`},
		{"not UTF-8", "{\"result\":null,\"error\":null,\"log\":\"caf\xe9\"}", "not valid UTF-8"},
		{"lone surrogate escape", `{"result":"disk-\ud800","error":null,"log":""}`, "lone UTF-16 surrogate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var r Response
			v := checkResponse([]byte(tc.stdout), &r)
			switch {
			case tc.want == "" && len(v) > 0:
				t.Fatalf("violations %q for a valid response", v)
			case tc.want != "" && (len(v) == 0 || !strings.Contains(v[0], tc.want)):
				t.Fatalf("violations %q, want the first to contain %q", v, tc.want)
			}
		})
	}
	var r Response
	if v := checkResponse([]byte(`{"result":null,"error":{"type":"Bosh::Clouds::VMNotFound","message":"gone","ok_to_retry":true},"log":"l"}`), &r); len(v) != 0 ||
		r.Error == nil || r.Error.Type != "Bosh::Clouds::VMNotFound" || !r.Error.OkToRetry || r.Error.Message != "gone" || r.Log != "l" {
		t.Fatalf("decoded %+v / %+v, violations %q", r, r.Error, v)
	}
}

// The test binary doubles as a fake CPI process (first argument
// "fake-cpi:<mode>") to check how the wire runs one.
func TestMain(m *testing.M) {
	mode, fake := "", false
	if len(os.Args) > 1 {
		mode, fake = strings.CutPrefix(os.Args[1], "fake-cpi:")
	}
	if !fake {
		os.Exit(m.Run())
	}
	switch mode {
	case "exit1":
		fmt.Print(`{"result":null,"error":{"type":"Bosh::Clouds::CloudError","message":"m","ok_to_retry":false},"log":""}`)
		os.Exit(1)
	case "hang":
		for i := 0; i < 100000; i++ {
			fmt.Fprintf(os.Stderr, "spam line %d\n", i)
		}
		time.Sleep(time.Minute)
	case "env":
		fmt.Printf(`{"result":%q,"error":null,"log":""}`, strings.Join(os.Environ(), ","))
	}
	os.Exit(0)
}

func fakeWire(mode string, timeout time.Duration) *wire {
	return &wire{command: []string{os.Args[0], "fake-cpi:" + mode}, timeout: timeout,
		directorUUID: "d", seq: new(atomic.Int64)}
}

func TestWireExitStatusAndTimeout(t *testing.T) {
	x := fakeWire("exit1", 10*time.Second).call(context.Background(), "delete_disk", []any{"disk-1"}, 2, 0)
	if x.ExitCode != 1 || len(x.Violations) != 1 || !strings.HasPrefix(x.Violations[0], "exit status 1") || x.Response.Error == nil {
		t.Fatalf("exit 1: code %d, violations %q, error %v", x.ExitCode, x.Violations, x.Response.Error)
	}
	start := time.Now()
	x = fakeWire("hang", 500*time.Millisecond).call(context.Background(), "reboot_vm", []any{"vm-1"}, 2, 0)
	if !x.TimedOut || time.Since(start) > 5*time.Second {
		t.Fatalf("hang: timed out %v after %s", x.TimedOut, time.Since(start))
	}
	if len(x.Stderr) > StderrKeep+100 || !strings.Contains(string(x.Stderr), "earlier bytes dropped") || x.ExitCode != -1 {
		t.Fatalf("stderr kept %d bytes: %.100q", len(x.Stderr), x.Stderr)
	}
	// The Director's scrubbed environment: PATH, TMPDIR and HOME only.
	t.Setenv("CPILAB_SECRET_FOR_TEST", "x")
	x = fakeWire("env", 10*time.Second).call(context.Background(), "info", nil, 0, 0)
	var env string
	if err := jsonUnmarshal(x.Response.Result, &env); err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(env, ",") {
		k, _, _ := strings.Cut(kv, "=")
		if k != "PATH" && k != "TMPDIR" && k != "HOME" && k != "" {
			t.Errorf("the CPI saw %s in its environment", k)
		}
	}
}

// FuzzCheckResponse: whatever a CPI prints, judging it never panics, and a
// response judged valid really has the shape wire.one-object requires.
func FuzzCheckResponse(f *testing.F) {
	for _, s := range []string{
		`{"result":"disk-1","error":null,"log":""}`,
		`{"result":null,"error":{"type":"Bosh::Clouds::DiskNotFound","message":"m","ok_to_retry":false},"log":""}`,
		`{"result":null,"error":{"type":"T","message":"m","ok_to_retry":"false"},"log":""}`,
		`INFO {"result":null}`, `{"a":1}{"b":2}`, `[]`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdout []byte) {
		var r Response
		if v := checkResponse(stdout, &r); len(v) > 0 {
			return
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(stdout, &m); err != nil {
			t.Fatalf("judged valid but not one JSON object: %q", stdout)
		}
		for _, k := range []string{"result", "error", "log"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("judged valid without %q: %q", k, stdout)
			}
		}
		if r.Error != nil && string(r.Result) != "null" {
			t.Fatalf("judged valid with a result beside an error: %q", stdout)
		}
	})
}

// A result beside an error is no protocol violation: no caller reads it.
// checkResponse keeps it aside for the results.unread warning and leaves
// Result null, so that no spec takes it for the call's result.
func TestResultBesideErrorIsKeptAsideNotAViolation(t *testing.T) {
	var r Response
	v := checkResponse([]byte(`{"result":"","error":{"type":"Bosh::Clouds::VMNotFound","message":"gone","ok_to_retry":false},"log":""}`), &r)
	if len(v) != 0 {
		t.Fatalf("violations %q, want none", v)
	}
	if r.Error == nil || r.Error.Type != "Bosh::Clouds::VMNotFound" {
		t.Fatalf("error %+v, want the VMNotFound the CPI answered", r.Error)
	}
	if string(r.Result) != "null" || string(r.IgnoredResult) != `""` {
		t.Fatalf("result %s, ignored %s: want null and \"\"", r.Result, r.IgnoredResult)
	}
}
