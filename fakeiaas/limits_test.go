package fakeiaas_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
)

// limitedEngine is what TestLimits calls: *Cloud and *Client alike.
type limitedEngine interface {
	engine
	ResizeDisk(ctx context.Context, cid cpiv2.DiskCID, newSizeMiB int) error
	UpdateDisk(ctx context.Context, u fakeiaas.DiskUpdate) error
	SetVMMetadata(ctx context.Context, cid cpiv2.VMCID, meta cpiv2.Metadata) error
	SetDiskMetadata(ctx context.Context, cid cpiv2.DiskCID, meta cpiv2.Metadata) error
}

func wantTooLarge(t *testing.T, what string, err error, limitName string) {
	t.Helper()
	var e *fakeiaas.Error
	if !errors.Is(err, fakeiaas.ErrTooLarge) || !errors.As(err, &e) || e.CPI == nil || e.CPI.Type != cpiv2.TypeCloudError {
		t.Fatalf("%s: err = %v, want ErrTooLarge carrying a CloudError", what, err)
	}
	if !strings.Contains(err.Error(), limitName) {
		t.Errorf("%s: %q does not name the limit %s", what, err, limitName)
	}
}

// TestLimits: every size, count and length a caller hands fakeiaas is
// bounded, in process and over HTTP, and a refused call changes nothing.
func TestLimits(t *testing.T) {
	c := newCloud(t, nil)
	srv, err := fakeiaas.Serve(fakeiaas.ServeConfig{Cloud: c})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cl := fakeiaas.NewClient(srv.URL())
	for _, e := range []struct {
		name string
		e    limitedEngine
	}{{"in process", c}, {"over HTTP", cl}} {
		t.Run(e.name, func(t *testing.T) {
			sc := mustStemcell(t, e.e, 2)
			vm := mustVM(t, e.e, sc, nil)
			before, _ := c.State(bg)

			_, err := e.e.CreateDisk(bg, fakeiaas.DiskSpec{SizeMiB: 1 << 62})
			wantTooLarge(t, "create_disk 2^62 MiB", err, "MaxDiskSizeMiB")
			_, err = e.e.CreateDisk(bg, fakeiaas.DiskSpec{SizeMiB: fakeiaas.MaxDiskSizeMiB + 1})
			wantTooLarge(t, "create_disk MaxDiskSizeMiB+1", err, "MaxDiskSizeMiB")
			d := mustDisk(t, e.e, 1)
			wantTooLarge(t, "resize_disk 2^62 MiB", e.e.ResizeDisk(bg, d.CID, 1<<62), "MaxDiskSizeMiB")
			wantTooLarge(t, "update_disk 2^44 MiB", e.e.UpdateDisk(bg, fakeiaas.DiskUpdate{DiskCID: d.CID, NewSizeMiB: 1 << 44}), "MaxDiskSizeMiB")
			if got, _ := c.Disk(bg, d.CID); got.SizeMiB != 1 {
				t.Errorf("a refused resize changed the disk to %d MiB", got.SizeMiB)
			}
			if fi, err := statSize(c.DiskFile(d.CID)); err != nil || fi != 1<<20 {
				t.Errorf("backing file is %d bytes (%v), want 1 MiB", fi, err)
			}

			_, err = e.e.CreateVM(bg, fakeiaas.VMSpec{AgentID: strings.Repeat("a", fakeiaas.MaxNameBytes+1), StemcellCID: sc.CID})
			wantTooLarge(t, "create_vm long agent_id", err, "MaxNameBytes")
			big := []byte(`{"x":"` + strings.Repeat("y", fakeiaas.MaxDocumentBytes) + `"}`)
			if e.name == "in process" { // over HTTP the body limit answers first
				_, err = e.e.CreateVM(bg, fakeiaas.VMSpec{AgentID: "a", StemcellCID: sc.CID, UserData: big})
				wantTooLarge(t, "create_vm huge user-data", err, "MaxDocumentBytes")
			}

			many := cpiv2.Metadata{}
			for i := range fakeiaas.MaxMetadataEntries + 1 {
				many[strings.Repeat("k", 1+i%50)+string(rune('a'+i%26))+strings.Repeat("z", i/26)] = "v"
			}
			wantTooLarge(t, "set_vm_metadata entries", e.e.SetVMMetadata(bg, vm.CID, many), "MaxMetadataEntries")
			wantTooLarge(t, "set_disk_metadata key", e.e.SetDiskMetadata(bg, d.CID, cpiv2.Metadata{strings.Repeat("k", fakeiaas.MaxMetadataKeyBytes+1): "v"}), "MaxMetadataKeyBytes")
			wantTooLarge(t, "set_disk_metadata value", e.e.SetDiskMetadata(bg, d.CID, cpiv2.Metadata{"k": strings.Repeat("v", fakeiaas.MaxMetadataValueBytes+1)}), "MaxMetadataValueBytes")

			after, _ := c.State(bg)
			if len(after.VMs) != len(before.VMs) || len(after.Disks) != len(before.Disks)+1 {
				t.Errorf("refused creates changed the cloud: %d→%d VMs, %d→%d disks", len(before.VMs), len(after.VMs), len(before.Disks), len(after.Disks))
			}
		})
	}

	// Over HTTP: a body beyond MaxRequestBytes, and invalid UTF-8.
	huge := bytes.Repeat([]byte("x"), fakeiaas.MaxRequestBytes+1)
	resp, err := http.Post(srv.URL()+"/api/v1/create_disk", "application/json", bytes.NewReader(append(append([]byte(`{"size_mib":1,"cloud_properties":{"x":"`), huge...), []byte(`"}}`)...)))
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body.String(), "MaxRequestBytes") {
		t.Errorf("huge body: %d %s; want 422 naming MaxRequestBytes", resp.StatusCode, body.String())
	}
	resp, err = http.Post(srv.URL()+"/api/v1/create_vm", "application/json", strings.NewReader("{\"agent_id\":\"a\xff\"}"))
	if err != nil {
		t.Fatal(err)
	}
	body.Reset()
	body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body.String(), "UTF-8") {
		t.Errorf("invalid UTF-8: %d %s; want 400 saying UTF-8", resp.StatusCode, body.String())
	}

	// Fault rules: a delay beyond MaxFaultDelay.
	_, err = cl.AddFault(bg, fakeiaas.Rule{Op: fakeiaas.OpCreateDisk, Effect: fakeiaas.Effect{Kind: fakeiaas.EffectLatency, Delay: fakeiaas.MaxFaultDelay + time.Second}})
	wantTooLarge(t, "fault delay", err, "MaxFaultDelay")
}

func statSize(path string) (int64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
