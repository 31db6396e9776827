package flexvolume

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunWithoutConfigFailsSayingWhere(t *testing.T) {
	exe := filepath.Join(t.TempDir(), "cpilab~bosh-disk", "bosh-disk")
	t.Setenv(ConfigEnv, "")
	if r, code := run(exe, []string{CmdInit}, MainConfig{}); r.Status != StatusSuccess || code != 0 || r.Capabilities == nil || !r.Capabilities.Attach {
		t.Fatalf("init without a config: %+v, exit %d; want Success with attach", r, code)
	}
	r, code := run(exe, []string{CmdAttach, "{}", "node"}, MainConfig{})
	if r.Status != StatusFailure || code != 1 || !strings.Contains(r.Message, filepath.Join(filepath.Dir(exe), ConfigFileName)) {
		t.Fatalf("attach without a config: %+v, exit %d; want Failure naming the config file", r, code)
	}
}

func TestRunRefusesBadArguments(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "bosh-disk")
	cfg := `{"director": {"url": "https://127.0.0.1:1"}, "nodes": {"a": {"instance_id": "i"}}, "disk_pool": "p"}`
	if err := os.WriteFile(filepath.Join(dir, ConfigFileName), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{CmdAttach, "{}"}, "attach needs 2 arguments"},
		{[]string{CmdAttach, "not json", "a"}, "options are not a JSON object"},
		{[]string{CmdAttach, `{"kubernetes.io/pvOrVolumeName": "pv"}`, "b"}, `node "b" is not in the driver's config`},
		{[]string{CmdAttach, `{"kubernetes.io/pvOrVolumeName": "pv", "diskSizeMiB": "big"}`, "a"}, "diskSizeMiB must be a positive integer"},
		{[]string{CmdAttach, `{}`, "a"}, "options name no volume"},
		{[]string{CmdWaitForAttach, "/dev/sdb", "{}"}, "is not a dynamic disk link"},
	} {
		r, code := run(exe, tc.args, MainConfig{})
		if r.Status != StatusFailure || code != 1 || !strings.Contains(r.Message, tc.want) {
			t.Errorf("%q: %+v, exit %d; want Failure saying %q", tc.args, r, code, tc.want)
		}
	}
	if r, code := run(exe, []string{"provision", "{}"}, MainConfig{}); r.Status != StatusNotSupported || code != 0 {
		t.Errorf("unknown call-out: %+v, exit %d", r, code)
	}
	// Without "resize" (an upstream Director) there is no expansion.
	for _, cmd := range []string{CmdExpandVolume, CmdExpandFS} {
		if r, code := run(exe, []string{cmd, "{}"}, MainConfig{}); r.Status != StatusNotSupported || code != 0 {
			t.Errorf("%s without resize: %+v, exit %d; want Not supported", cmd, r, code)
		}
	}
	if r, _ := run(exe, []string{CmdInit}, MainConfig{}); r.Capabilities == nil || r.Capabilities.RequiresFSResize {
		t.Errorf("init without resize: %+v; want requiresFSResize false", r.Capabilities)
	}
}

func TestExpansionFollowsTheConfig(t *testing.T) {
	dir := t.TempDir()
	exe := filepath.Join(dir, "bosh-disk")
	cfg := `{"director": {"url": "https://127.0.0.1:1"}, "nodes": {"a": {"instance_id": "i"}}, "disk_pool": "p", "resize": true, "task_timeout_seconds": 2}`
	if err := os.WriteFile(filepath.Join(dir, ConfigFileName), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if r, _ := run(exe, []string{CmdInit}, MainConfig{}); r.Capabilities == nil || !r.Capabilities.RequiresFSResize {
		t.Errorf("init with resize: %+v; want requiresFSResize true", r.Capabilities)
	}
	pv := `{"kubernetes.io/pvOrVolumeName": "pv"}`
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{CmdExpandVolume, pv, "/mnt"}, "expandvolume needs 4 arguments"},
		{[]string{CmdExpandVolume, pv, "/mnt", "big", "1"}, "new size must be a positive number of bytes"},
		{[]string{CmdExpandVolume, "[]", "/mnt", "2", "1"}, "options are not a JSON object"},
		{[]string{CmdExpandVolume, pv, "/mnt", "33554432", "16777216"}, "GET /dynamic_disks"},
		{[]string{CmdExpandFS, pv, "/dev/x", "/mnt", "-1", "1"}, "new size must be a positive number of bytes"},
	} {
		r, code := run(exe, tc.args, MainConfig{})
		if r.Status != StatusFailure || code != 1 || !strings.Contains(r.Message, tc.want) {
			t.Errorf("%q: %+v, exit %d; want Failure saying %q", tc.args, r, code, tc.want)
		}
	}
}
