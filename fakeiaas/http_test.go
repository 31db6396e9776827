package fakeiaas_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
)

func serveMem(t *testing.T) (*fakeiaas.Server, *fakeiaas.Client) {
	t.Helper()
	c := newCloud(t, nil)
	s, err := fakeiaas.Serve(fakeiaas.ServeConfig{Cloud: c})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, fakeiaas.NewClient(s.URL()).WithRegistryAuth("reg", "secret")
}

func TestServeRefusesNonLoopback(t *testing.T) {
	if _, err := fakeiaas.Serve(fakeiaas.ServeConfig{Store: "memory", DataDir: t.TempDir(), Listen: "0.0.0.0:0"}); err == nil {
		t.Fatal("Serve on 0.0.0.0 succeeded")
	}
}

func TestClientErrorsKeepTheirType(t *testing.T) {
	_, c := serveMem(t)
	sc := mustStemcell(t, c, 2)
	vm := mustVM(t, c, sc, nil)
	d := mustDisk(t, c, 1)
	_, err := c.AttachDisk(bg, vmCID("vm-missing"), d.CID)
	wantErr(t, "HTTP attach to a missing VM", err, cpiv2.ErrVMNotFound, fakeiaas.ErrNotFound)
	_, err = c.AttachDisk(bg, vm.CID, diskCID("disk-missing"))
	wantErr(t, "HTTP attach of a missing disk", err, cpiv2.ErrDiskNotFound, fakeiaas.ErrNotFound)
	wantErr(t, "HTTP detach of an unattached disk", c.DetachDisk(bg, vm.CID, d.CID), cpiv2.ErrDiskNotAttached, fakeiaas.ErrConflict)
	if _, err := c.AttachDisk(bg, vm.CID, d.CID); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "HTTP delete of an attached disk", c.DeleteDisk(bg, d.CID), cpiv2.ErrCloudError, fakeiaas.ErrConflict)
	got, err := c.VM(bg, vm.CID)
	if err != nil || len(got.Disks) != 1 || got.Attachments[0].Device != "sdc" {
		t.Fatalf("VM over HTTP = %+v, %v", got, err)
	}
	disks, err := c.VMDisks(bg, vm.CID)
	if err != nil || len(disks) != 1 || disks[0] != d.CID {
		t.Fatalf("get_disks over HTTP = %v, %v", disks, err)
	}
	wantErr(t, "HTTP hostile CID", c.DeleteVM(bg, vmCID("../../etc")), cpiv2.ErrVMNotFound, nil)
}

func TestRegistryAndMetadataOverHTTP(t *testing.T) {
	s, c := serveMem(t)
	vm := mustVM(t, c, mustStemcell(t, c, 1), nil)
	url := s.RegistryURL() + "/instances/" + vm.CID.String() + "/settings"

	// No auth: refused.
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("unauthenticated GET: HTTP %d", resp.StatusCode)
	}
	// Absent: 404 {"status": "not_found"}.
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	req.SetBasicAuth("reg", "secret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), `"not_found"`) {
		t.Fatalf("GET of absent settings: HTTP %d %s", resp.StatusCode, body)
	}
	settings := json.RawMessage(`{"agent_id":"agent-1","vm":{"name":"` + vm.CID.String() + `"}}`)
	if err := c.PutSettings(bg, vm.CID.String(), settings); err != nil {
		t.Fatal(err)
	}
	// Upstream shape: {"settings": "<json string>", "status": "ok"}.
	req, _ = http.NewRequest(http.MethodGet, url, nil)
	req.SetBasicAuth("reg", "secret")
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var env struct{ Settings, Status string }
	json.NewDecoder(resp.Body).Decode(&env)
	resp.Body.Close()
	if env.Status != "ok" || env.Settings != string(settings) {
		t.Fatalf("GET settings = %+v", env)
	}
	if err := c.DeleteSettings(bg, vm.CID.String()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSettings(bg, vm.CID.String()); !errors.Is(err, fakeiaas.ErrNotFound) {
		t.Fatalf("GET after DELETE: %v", err)
	}
	if _, err := fakeiaas.NewClient(s.URL()).WithRegistryAuth("reg", "wrong").GetSettings(bg, vm.CID.String()); err == nil {
		t.Fatal("wrong password accepted")
	}
	// Metadata service.
	if _, err := c.UserData(bg, vm.CID.String()); err != nil {
		t.Fatal(err)
	}
	_, err = c.UserData(bg, "vm-missing")
	wantErr(t, "user-data of a missing VM", err, cpiv2.ErrVMNotFound, nil)
	// Every access is in the history (the 401s never reached the registry).
	h, _ := c.History(bg, fakeiaas.HistoryFilter{Target: vm.CID.String()}, 0)
	var ops []string
	for _, e := range h {
		ops = append(ops, string(e.Op))
	}
	want := "create_vm registry_get registry_put registry_get registry_delete registry_get metadata_get"
	if strings.Join(ops, " ") != want {
		t.Fatalf("history for the VM = %v\nwant %s", ops, want)
	}
}

func TestFaultsOverHTTP(t *testing.T) {
	_, c := serveMem(t)
	sc := mustStemcell(t, c, 2)
	vm := mustVM(t, c, sc, nil)
	rules, err := c.AddFaultText(bg, "op=create_disk times=1 effect=rate_limit delay=20ms\nop=set_vm_metadata times=1 effect=lose_response")
	if err != nil || len(rules) != 2 {
		t.Fatalf("AddFaultText = %+v, %v", rules, err)
	}
	_, err = c.CreateDisk(bg, fakeiaas.DiskSpec{SizeMiB: 1})
	var fe *fakeiaas.Error
	if !errors.As(err, &fe) || fe.Code != fakeiaas.CodeRateLimited || fe.RetryAfter.Milliseconds() != 20 || !errors.Is(err, cpiv2.ErrCloudError) {
		t.Fatalf("rate-limited create_disk over HTTP: %v", err)
	}
	err = c.SetVMMetadata(bg, vm.CID, cpiv2.Metadata{"k": "v"})
	if !errors.Is(err, fakeiaas.ErrUnavailable) {
		t.Fatalf("lost response over HTTP: %v, want a transport failure", err)
	}
	if got, _ := c.VM(bg, vm.CID); got.Metadata["k"] != "v" {
		t.Fatalf("lost response: metadata not applied: %+v", got.Metadata)
	}
	l, err := c.Faults(bg)
	if err != nil || len(l) != 2 || l[0].Fired != 1 || l[1].Fired != 1 {
		t.Fatalf("faults after firing = %+v, %v", l, err)
	}
	if err := c.RemoveFault(bg, l[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddFault(bg, fakeiaas.Rule{Op: "bogus", Effect: fakeiaas.Effect{Kind: fakeiaas.EffectPause}}); !errors.Is(err, fakeiaas.ErrInvalid) {
		t.Fatalf("bad rule over HTTP: %v", err)
	}
	if err := c.ClearFaults(bg); err != nil {
		t.Fatal(err)
	}
	if l, _ := c.Faults(bg); len(l) != 0 {
		t.Fatalf("rules after clear: %+v", l)
	}
}

func TestOracleOverHTTP(t *testing.T) {
	_, c := serveMem(t)
	sc := mustStemcell(t, c, 2)
	vm := mustVM(t, c, sc, nil)
	d := mustDisk(t, c, 3)
	ctx := fakeiaas.WithRequestID(bg, "cpi-7")
	if _, err := c.AttachDisk(ctx, vm.CID, d.CID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SnapshotDisk(bg, d.CID, cpiv2.Metadata{"s": "1"}); err != nil {
		t.Fatal(err)
	}
	s, err := c.State(bg)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Stemcells) != 1 || len(s.VMs) != 1 || len(s.Disks) != 1 || len(s.Snapshots) != 1 {
		t.Fatalf("state = %+v", s)
	}
	if s.Disks[0].VMCID != vm.CID || s.Disks[0].Device != "sdc" || s.VMs[0].Disks[0] != d.CID {
		t.Fatalf("state attachment = %+v / %+v", s.Disks[0], s.VMs[0])
	}
	h, err := c.History(bg, fakeiaas.HistoryFilter{RequestID: "cpi-7"}, 0)
	if err != nil || len(h) != 1 || h[0].Op != fakeiaas.OpAttachDisk || h[0].Target != vm.CID.String() || !strings.Contains(h[0].Detail, "sdc") {
		t.Fatalf("history by request_id = %+v, %v", h, err)
	}
	lim, _ := c.History(bg, fakeiaas.HistoryFilter{}, 2)
	if len(lim) != 2 {
		t.Fatalf("limit 2 gave %d entries", len(lim))
	}
}

func TestRunServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(bg)
	out := &lockedBuf{}
	done := make(chan error, 1)
	dir := t.TempDir()
	go func() { done <- fakeiaas.Run(ctx, fakeiaas.ServeConfig{DataDir: dir, Store: "memory"}, out) }()
	var url string
	for deadline := time.Now().Add(10 * time.Second); url == "" && time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if f := strings.Fields(out.String()); len(f) > 3 && f[0] == "fakeiaas" {
			url = f[3]
		}
	}
	if url == "" {
		t.Fatalf("Run printed no URL: %q", out.String())
	}
	if _, err := fakeiaas.NewClient(url).State(bg); err != nil {
		t.Fatalf("oracle of a running server: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel: %v", err)
	}
	if _, err := fakeiaas.NewClient(url).State(bg); !errors.Is(err, fakeiaas.ErrUnavailable) {
		t.Fatalf("server still answering after Run returned: %v", err)
	}
	if d, err := fakeiaas.DefaultDataDir(); err == nil && !strings.HasSuffix(d, "cpilab/fakeiaas") {
		t.Fatalf("DefaultDataDir = %q", d)
	}
}

type lockedBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
