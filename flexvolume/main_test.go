package flexvolume

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/internal/httpread/httpreadtest"
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

// Against a Director answering every endpoint with an endless or oversize
// body, a call-out fails at the Director client's cap naming the endpoint
// (the driver is killed by kubelet otherwise); kubelet's secrets in the
// options never reach the driver's log.
func TestDriverAgainstHostileDirectorAndSecretsInOptions(t *testing.T) {
	for name, h := range map[string]http.Handler{
		"endless":  httpreadtest.Endless(http.StatusOK),
		"oversize": httpreadtest.Oversize(http.StatusOK, 8<<20+1),
	} {
		srv := httptest.NewServer(h)
		dir := t.TempDir()
		exe := filepath.Join(dir, "bosh-disk")
		cfg := `{"director": {"url": "` + srv.URL + `", "client": "c", "client_secret": "cs-XYZ"}, "nodes": {"a": {"instance_id": "i"}}, "disk_pool": "p"}`
		if err := os.WriteFile(filepath.Join(dir, ConfigFileName), []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		opts := `{"kubernetes.io/pvOrVolumeName": "pv", "kubernetes.io/secret/token": "c2VjcmV0LXRva2Vu", "password": "pw-ABC"}`
		r, code := run(exe, []string{CmdAttach, opts, "a"}, MainConfig{})
		if r.Status != StatusFailure || code != 1 || !strings.Contains(r.Message, "MiB cap") || !strings.Contains(r.Message, "/dynamic_disks") {
			t.Errorf("%s: attach: %+v, exit %d; want Failure naming the endpoint and the cap", name, r, code)
		}
		srv.CloseClientConnections()
		srv.Close()
		logb, err := os.ReadFile(filepath.Join(dir, "bosh-disk.log"))
		if err != nil {
			t.Fatal(err)
		}
		for _, secret := range []string{"c2VjcmV0LXRva2Vu", "pw-ABC", "cs-XYZ"} {
			if strings.Contains(string(logb), secret) {
				t.Errorf("%s: the driver's log holds the secret %q:\n%s", name, secret, logb)
			}
		}
		if !strings.Contains(string(logb), "pv") {
			t.Errorf("%s: the log lost the call's other options:\n%s", name, logb)
		}
	}
}
