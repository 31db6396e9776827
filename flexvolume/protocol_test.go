package flexvolume

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseOutputAsKubeletDoes(t *testing.T) {
	for _, tc := range []struct {
		out  string
		want error
	}{
		{`{"status":"Success"}`, nil},
		{"  {\"status\":\"Not supported\"}\n", nil},
		{`{"status":"Failure","message":"no"}`, nil},
		{"attaching…\n{\"status\":\"Success\"}", ErrNotOneJSONObject},
		{`{"status":"Success"}{"status":"Success"}`, ErrNotOneJSONObject},
		{`{"status":"Success"} trailing`, ErrNotOneJSONObject},
		{``, ErrNotOneJSONObject},
		{`["Success"]`, ErrNotOneJSONObject},
		{`{"status":"Failed","message":"typo"}`, ErrUnknownStatus},
		{`{"status":"success"}`, ErrUnknownStatus},
	} {
		_, err := ParseOutput([]byte(tc.out))
		if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("ParseOutput(%q) = %v, want %v", tc.out, err, tc.want)
		}
	}
}

func TestCheckExit(t *testing.T) {
	for _, tc := range []struct {
		r    Result
		code int
		want error
	}{
		{Result{Status: StatusSuccess}, 0, nil},
		{Result{Status: StatusSuccess}, 1, ErrSuccessNonZeroExit},
		{Result{Status: StatusFailure, Message: "x"}, 1, nil},
		{Result{Status: StatusFailure, Message: "x"}, 0, ErrFailureZeroExit},
		{Result{Status: StatusFailure}, 1, ErrFailureNoMessage},
		{Result{Status: StatusNotSupported}, 0, nil},
		{Result{Status: StatusNotSupported}, 1, nil},
	} {
		if err := CheckExit(tc.r, tc.code); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("CheckExit(%v, %d) = %v, want %v", tc.r, tc.code, err, tc.want)
		}
	}
}

// script writes an executable shell script driver.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "drv")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCallerKillsADriverPastItsTimeout(t *testing.T) {
	c := NewCaller(CallerConfig{Executable: script(t, "sleep 30 & wait\n"), Timeout: 200 * time.Millisecond})
	start := time.Now()
	call := c.Run(context.Background(), CmdWaitForAttach, "/dev/x", "{}")
	if !errors.Is(call.Err, ErrTimeout) {
		t.Fatalf("err = %v, want ErrTimeout", call.Err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the call took %s: the driver's process group was not killed", d)
	}
}

func TestCallerCachesNotSupportedAndChecksFields(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "calls")
	drv := script(t, `echo "$1" >> `+count+`
case "$1" in
  getvolumename) echo '{"status":"Not supported"}' ;;
  attach) echo '{"status":"Success"}' ;;
  *) echo '{"status":"Failure","message":"no"}'; exit 1 ;;
esac
`)
	c := NewCaller(CallerConfig{Executable: drv})
	ctx := context.Background()
	if call := c.Run(ctx, CmdGetVolumeName, "{}"); call.Err != nil || call.Result.Status != StatusNotSupported {
		t.Fatalf("first getvolumename: %+v", call)
	}
	if call := c.Run(ctx, CmdGetVolumeName, "{}"); !errors.Is(call.Err, ErrCachedNotSupported) {
		t.Fatalf("second getvolumename: err %v, want the cached Not supported", call.Err)
	}
	if call := c.Run(ctx, CmdAttach, "{}", "node"); !errors.Is(call.Err, ErrMissingField) {
		t.Fatalf("attach without device: err %v, want ErrMissingField", call.Err)
	}
	if call := c.Run(ctx, CmdDetach, "v", "node"); call.Err != nil || call.Result.Status != StatusFailure || call.ExitCode != 1 {
		t.Fatalf("detach: %+v", call)
	}
	b, _ := os.ReadFile(count)
	if got := strings.Count(string(b), "getvolumename"); got != 1 {
		t.Fatalf("the driver ran getvolumename %d times, want 1 (cached)", got)
	}
}

func TestLoadConfigSaysWhatIsWrong(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"nodes": {}}`, "director.url is required"},
		{`{"director": {"url": "https://d"}, "mounter": "vmroot", "nodes": {"a": {"instance_id": "i", "root": "/r"}}}`, `"node" is required`},
		{`{"director": {"url": "https://d"}, "nodes": {"a": {}}}`, "nodes.a.instance_id is required"},
		{`{"director": {"url": "https://d"}, "mounter": "fuse"}`, `mounter must be "real" or "vmroot"`},
		{`{"director": {"url": "https://d"}, "disk_pol": "x"}`, `unknown field "disk_pol"`},
	} {
		p := filepath.Join(t.TempDir(), ConfigFileName)
		if err := os.WriteFile(p, []byte(tc.json), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(p)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadConfig(%s) = %v, want ErrConfig saying %q", tc.json, err, tc.want)
		}
	}
}

// The config file and a call-out's options are read under cpilab's JSON
// policy: a key twice, or two spellings differing in case, is refused
// naming the key; nonsense bounds and the host's own root for vmroot too.
func TestConfigAndOptionsRefuseAmbiguousInput(t *testing.T) {
	for _, tc := range []struct{ json, want string }{
		{`{"director": {"url": "https://a", "url": "https://b"}}`, "director.url"},
		{`{"director": {"url": "https://d"}, "disk_pool": "a", "Disk_Pool": "b"}`, "Disk_Pool"},
		{`{"director": {"url": "https://d"}, "nodes": {"a": {"instance_id": "i", "instance_id": "j"}}}`, "nodes.a.instance_id"},
		{`{"director": {"url": "https://d"}, "task_timeout_seconds": -1}`, "task_timeout_seconds must be ≥ 1, not -1"},
		{`{"director": {"url": "https://d"}, "attach_wait_seconds": -5}`, "attach_wait_seconds must be ≥ 1, not -5"},
		{`{"director": {"url": "https://d"}, "mounter": "vmroot", "node": "a", "nodes": {"a": {"instance_id": "i", "root": "/"}}}`, `nodes.a.root is "/", the host's own root`},
		{`{"director": {"url": "https://d"}, "mounter": "vmroot", "node": "a", "nodes": {"a": {"instance_id": "i", "root": "//."}}}`, `the host's own root`},
	} {
		p := filepath.Join(t.TempDir(), ConfigFileName)
		if err := os.WriteFile(p, []byte(tc.json), 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadConfig(p)
		if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("LoadConfig(%s) = %v, want ErrConfig saying %q", tc.json, err, tc.want)
		}
	}
	for _, tc := range []struct{ json, want string }{
		{`{"diskName":"a","diskName":"b"}`, "diskName"},
		{`{"diskName":"a","DiskName":"b"}`, "DiskName"},
		{`{"kubernetes.io/fsType":"ext4","kubernetes.io/fsType":"xfs"}`, "kubernetes.io/fsType"},
	} {
		if _, err := parseOptions(tc.json); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "duplicate key") {
			t.Errorf("parseOptions(%s) = %v; want a duplicate key error naming %q", tc.json, err, tc.want)
		}
	}
	if o, err := parseOptions(`{"diskName":"a","kubernetes.io/fsType":"ext4"}`); err != nil || o["diskName"] != "a" {
		t.Fatalf("parseOptions of plain options: %v, %v", o, err)
	}
}
