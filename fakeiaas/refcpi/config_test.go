package refcpi_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/fakeiaas/refcpi"
)

// What WriteFileConfig writes, LoadFileConfig reads back; the optional
// blocks are there only when asked for.
func TestWriteFileConfigRoundTrips(t *testing.T) {
	dir := t.TempDir()
	full := filepath.Join(dir, "full.json")
	if err := refcpi.WriteFileConfig(full, refcpi.FileSpec{URL: "http://127.0.0.1:1", MBus: "nats://127.0.0.1:2",
		RegistryEndpoint: "http://127.0.0.1:1/registry", RegistryUser: "u", RegistryPassword: "p", APIVersionCap: 2}); err != nil {
		t.Fatal(err)
	}
	fc, err := refcpi.LoadFileConfig(full)
	if err != nil {
		t.Fatal(err)
	}
	p := fc.Cloud.Properties
	if p.Fakeiaas.URL != "http://127.0.0.1:1" || p.Agent.MBus != "nats://127.0.0.1:2" || p.Debug.CPI.APIVersion != 2 ||
		p.Registry == nil || p.Registry.Endpoint != "http://127.0.0.1:1/registry" || p.Registry.User != "u" || p.Registry.Password != "p" {
		t.Fatalf("read back %+v", p)
	}

	bare := filepath.Join(dir, "bare.json")
	if err := refcpi.WriteFileConfig(bare, refcpi.FileSpec{URL: "http://127.0.0.1:1", MBus: "memory://"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(bare)
	if strings.Contains(string(b), `"registry"`) || strings.Contains(string(b), `"debug"`) {
		t.Fatalf("no registry and no cap asked for, but the file has them:\n%s", b)
	}
	if fc, err := refcpi.LoadFileConfig(bare); err != nil || fc.Cloud.Properties.Registry != nil {
		t.Fatalf("bare config: %+v, %v", fc, err)
	}
}
