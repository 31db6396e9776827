package fakeiaas_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/rt"
)

var bg = context.Background()

// TestMain lets tests re-exec this binary as a fakeiaas server or client
// process (FAKEIAAS_TEST_HELPER=server|client).
func TestMain(m *testing.M) {
	switch os.Getenv("FAKEIAAS_TEST_HELPER") {
	case "server":
		helperServer()
	case "client":
		helperClient()
	}
	os.Exit(m.Run())
}

func image(apiVersion int, resolver string) json.RawMessage {
	b, _ := json.Marshal(map[string]any{"name": "test-stemcell", "version": "1", "api_version": apiVersion,
		"agent": map[string]string{"device_path_resolution_type": resolver}})
	return b
}

func newCloud(t testing.TB, hooks fakeiaas.VMHooks) *fakeiaas.Cloud {
	t.Helper()
	c, err := fakeiaas.New(fakeiaas.Config{DataDir: t.TempDir(), Store: "memory", Runtime: rt.Real(1), Hooks: hooks,
		RegistryUser: "reg", RegistryPassword: "secret"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// engine is what tests need from either a *Cloud or a *Client.
type engine interface {
	CreateStemcell(ctx context.Context, spec fakeiaas.StemcellSpec) (fakeiaas.Stemcell, error)
	CreateVM(ctx context.Context, spec fakeiaas.VMSpec) (fakeiaas.VM, error)
	CreateDisk(ctx context.Context, spec fakeiaas.DiskSpec) (fakeiaas.Disk, error)
}

func mustStemcell(t testing.TB, e engine, api int) fakeiaas.Stemcell {
	t.Helper()
	sc, err := e.CreateStemcell(bg, fakeiaas.StemcellSpec{ImagePath: "image", Image: image(api, "virtio")})
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func mustVM(t testing.TB, e engine, sc fakeiaas.Stemcell, props map[string]any) fakeiaas.VM {
	t.Helper()
	var cp json.RawMessage
	if props != nil {
		cp, _ = json.Marshal(props)
	}
	vm, err := e.CreateVM(bg, fakeiaas.VMSpec{AgentID: "agent-1", StemcellCID: sc.CID, CloudProperties: cp})
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

func mustDisk(t testing.TB, e engine, size int) fakeiaas.Disk {
	t.Helper()
	d, err := e.CreateDisk(bg, fakeiaas.DiskSpec{SizeMiB: size})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// wantErr fails unless err matches both the CPI sentinel and the fakeiaas code.
func wantErr(t testing.TB, what string, err error, cpi *cpiv2.Error, code *fakeiaas.Error) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want %s / %s", what, cpi.Type, code.Code)
	}
	if !errors.Is(err, cpi) {
		t.Fatalf("%s: error %v (%T) is not %s", what, err, err, cpi.Type)
	}
	if code != nil && !errors.Is(err, code) {
		t.Fatalf("%s: error %v is not code %s", what, err, code.Code)
	}
	var ce *cpiv2.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%s: error %v carries no *cpiv2.Error", what, err)
	}
}

func vmCID(s string) cpiv2.VMCID     { return cpiv2.MustCID[cpiv2.VMKind](s) }
func diskCID(s string) cpiv2.DiskCID { return cpiv2.MustCID[cpiv2.DiskKind](s) }

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(2)
}
