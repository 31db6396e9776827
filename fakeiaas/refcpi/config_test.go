package refcpi_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cpilab/cpilab/fakeiaas/refcpi"
)

func TestLoadFileConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		p := filepath.Join(dir, "cpi.json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	fc, err := refcpi.LoadFileConfig(write(`{"cloud": {"plugin": "fakeiaas", "properties": {
		"fakeiaas": {"url": "http://127.0.0.1:1", "retry": {"max_attempts": 7, "base_delay_ms": 3}},
		"registry": {"endpoint": "http://127.0.0.1:1/registry", "user": "u", "password": "p"},
		"agent": {"mbus": "nats://x", "ntp": ["0.pool"]},
		"debug": {"cpi": {"api_version": 2}}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg := fc.Config()
	if cfg.MaxAPIVersion != 2 || cfg.Retry.MaxAttempts != 7 || cfg.Retry.BaseDelay != 3*time.Millisecond ||
		cfg.Registry == nil || cfg.RegistryEndpoint != "http://127.0.0.1:1/registry" || cfg.MBus != "nats://x" || len(cfg.NTP) != 1 {
		t.Fatalf("config = %+v", cfg)
	}
	if refcpi.New(cfg, nil).MaxAPIVersion() != 2 {
		t.Fatal("debug.cpi.api_version not honoured")
	}
	fc, err = refcpi.LoadFileConfig(write(`{"cloud": {"properties": {"fakeiaas": {"url": "http://x"}}}}`))
	if err != nil || fc.Config().Registry != nil || refcpi.New(fc.Config(), nil).MaxAPIVersion() != 3 {
		t.Fatalf("minimal config: %+v, %v", fc, err)
	}
	for _, bad := range []string{
		`{`,
		`{"cloud": {"properties": {}}}`,
		`{"cloud": {"plugin": "aws", "properties": {"fakeiaas": {"url": "http://x"}}}}`,
		`{"cloud": {"properties": {"fakeiaas": {"url": "http://x"}, "debug": {"cpi": {"api_version": 4}}}}}`,
		`{"cloud": {"properties": {"fakeiaas": {"url": "http://x"}, "registry": {"user": "u"}}}}`,
	} {
		if _, err := refcpi.LoadFileConfig(write(bad)); err == nil {
			t.Errorf("LoadFileConfig(%s) succeeded", bad)
		}
	}
	if _, err := refcpi.LoadFileConfig(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("a missing config file loaded")
	}
}
