package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/launch"
	"github.com/cpilab/cpilab/mbus"
)

// cpilab storage run against a launched Director over HTTPS and NATS: the
// first pass provides the disk, a pass after the disk is filled past the
// critical threshold starts an emergency growth through the resize
// endpoint, the Director grows the disk, and the status file records it.
func TestStorageRunGrowsADiskThroughTheDirector(t *testing.T) {
	if testing.Short() {
		t.Skip("launches a director")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	nats, err := mbus.StartEmbedded(mbus.EmbeddedConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer nats.Shutdown()
	dataDir := t.TempDir()
	ready, done := make(chan launch.Info, 1), make(chan error, 1)
	go func() {
		done <- launch.Run(ctx, launch.Config{DataDir: dataDir, Listen: "127.0.0.1:0", Out: io.Discard, NATSURL: nats.URL(),
			Ready: func(i launch.Info) { ready <- i }})
	}()
	var info launch.Info
	select {
	case info = <-ready:
	case err := <-done:
		t.Fatalf("launch: %v", err)
	}
	user := info.Users[0]
	c, err := director.NewClient(director.ClientConfig{URL: info.URL, CACertPEM: info.CACertPEM, Username: user.Name, Password: user.Password})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Login(ctx); err != nil {
		t.Fatal(err)
	}
	fx := "../../fixtures/director"
	loc, _ := filepath.Abs(filepath.Join(fx, "stemcell-v2"))
	cc, _ := os.ReadFile(filepath.Join(fx, "cloud-config.yml"))
	m, _ := os.ReadFile(filepath.Join(fx, "manifest.yml"))
	for _, err := range []error{c.UploadStemcell(ctx, loc), c.UpdateCloudConfig(ctx, cc), c.Deploy(ctx, m)} {
		if err != nil {
			t.Fatal(err)
		}
	}
	insts, err := c.Instances(ctx, "workers")
	if err != nil || len(insts) == 0 {
		t.Fatalf("instances %v: %v", insts, err)
	}
	dir := t.TempDir()
	ca, policy, status := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "volumes.yml"), filepath.Join(dir, "status.json")
	os.WriteFile(ca, info.CACertPEM, 0o600)
	os.WriteFile(policy, []byte(fmt.Sprintf(`volumes:
- id: app/data
  diskName: app-data
  instanceId: %s
  diskPool: small
  policy:
    request: 64
    limit: 256
    minStep: 16
    emergencyGrow: {criticalThreshold: 90, criticalMinimumFree: 4}
`, insts[0].ID)), 0o600)
	once := func() string {
		t.Helper()
		var stdout, stderr bytes.Buffer
		code := run(ctx, []string{"storage", "run", "--once", "--director", info.URL, "--ca-cert", ca, "--user", user.Name,
			"--password", user.Password, "--nats-url", nats.URL(), "--policy", policy, "--status", status}, &stdout, &stderr)
		if code != 0 || stderr.Len() > 0 {
			t.Fatalf("storage run --once exited %d:\n%s%s", code, stdout.String(), stderr.String())
		}
		return stdout.String()
	}
	if out := once(); !strings.Contains(out, "app/data: WaitingForDiskStatus") {
		t.Fatalf("first pass: %s; want the disk provided, waiting for its usage", out)
	}
	disk := func() director.DiskInfo {
		t.Helper()
		var d director.DiskInfo
		if err := c.GetJSON(ctx, "/dynamic_disks/app-data", &d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	d := disk()
	if d.SizeMiB != 64 || d.InstanceName() == "" {
		t.Fatalf("after the first pass the disk is %+v; want 64 MiB, attached", d)
	}
	// Fill 60 of 64 MiB through the device in the VM root.
	devs, _ := filepath.Glob(filepath.Join(dataDir, "fakeiaas", "vms", insts[0].VMCID, "root", "dev", "sdc"))
	if len(devs) != 1 {
		t.Fatalf("device of the disk on %s: %v", insts[0].VMCID, devs)
	}
	f, err := os.OpenFile(devs[0], os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(bytes.Repeat([]byte{7}, 60<<20)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if out := once(); !strings.Contains(out, "EmergencyGrow 64→") {
		t.Fatalf("second pass with the disk 94%% full: %s; want an emergency growth", out)
	}
	deadline := time.Now().Add(time.Minute)
	for disk().SizeMiB == 64 {
		if time.Now().After(deadline) {
			t.Fatal("the Director never grew the disk")
		}
		time.Sleep(50 * time.Millisecond)
	}
	if d := disk(); d.SizeMiB <= 64 || d.SizeMiB > 256 || d.CID == "" {
		t.Fatalf("after the resize the disk is %+v", d)
	}
	type statusView struct {
		EffectiveSizeMiB int64
		LastAction       *struct{ Kind, Result string }
		PendingTask      string
	}
	var st statusView
	var b []byte
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		once() // the pass that sees the task done records it
		if b, err = os.ReadFile(status); err != nil {
			t.Fatal(err)
		}
		var all map[string]statusView
		if err := json.Unmarshal(b, &all); err != nil {
			t.Fatal(err)
		}
		if st = all["app/data"]; st.PendingTask == "" || time.Now().After(deadline) {
			break
		}
	}
	if st.EffectiveSizeMiB != int64(disk().SizeMiB) || st.LastAction == nil || st.LastAction.Kind != "EmergencyGrow" || st.LastAction.Result != "Succeeded" {
		t.Fatalf("status file: %s", b)
	}
}
