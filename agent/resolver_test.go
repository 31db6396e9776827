package agent_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/rt"
)

// fakeVM is a VM of a fakeiaas cloud with two disks attached (c and d), so
// a resolver that picks the wrong disk is caught.
type fakeVM struct {
	root  string
	disks [2]fakeiaas.Attachment
}

func newFakeVM(t *testing.T, prefix string) fakeVM {
	t.Helper()
	ctx := context.Background()
	c, err := fakeiaas.New(fakeiaas.Config{DataDir: t.TempDir(), Store: "memory", Runtime: rt.Real(11)})
	if err != nil {
		t.Fatalf("fakeiaas.New: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	sc, err := c.CreateStemcell(ctx, fakeiaas.StemcellSpec{ImagePath: "image", Image: json.RawMessage(`{"name":"s","version":"1","api_version":2,"agent":{}}`)})
	if err != nil {
		t.Fatalf("create_stemcell: %v", err)
	}
	props := json.RawMessage(`{}`)
	if prefix != "sd" {
		props = json.RawMessage(`{"device_prefix":"` + prefix + `"}`)
	}
	vm, err := c.CreateVM(ctx, fakeiaas.VMSpec{AgentID: "agent-1", StemcellCID: sc.CID, CloudProperties: props})
	if err != nil {
		t.Fatalf("create_vm: %v", err)
	}
	out := fakeVM{root: c.VMRoot(vm.CID)}
	for i := range out.disks {
		d, err := c.CreateDisk(ctx, fakeiaas.DiskSpec{SizeMiB: 4})
		if err != nil {
			t.Fatalf("create_disk: %v", err)
		}
		out.disks[i], err = c.AttachDisk(ctx, vm.CID, d.CID)
		if err != nil {
			t.Fatalf("attach_disk: %v", err)
		}
	}
	return out
}

func resolver(t *testing.T, typ, root string) agent.Resolver {
	t.Helper()
	r, err := agent.NewResolver(agent.ResolverConfig{
		Type: typ, Root: root, Runtime: rt.Real(1),
		Timeout: 300 * time.Millisecond, PollInterval: 5 * time.Millisecond, VirtioIDWait: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// CONTRACTS §5 / bosh-anchors §3.1: every resolver finds the right device in
// roots fakeiaas laid out, for every device prefix and the hint styles of
// docs/seams.md.
func TestResolversOnFakeiaasRoots(t *testing.T) {
	for _, prefix := range []string{"sd", "xvd", "vd"} {
		t.Run(prefix, func(t *testing.T) {
			vm := newFakeVM(t, prefix)
			for _, a := range vm.disks {
				cid := a.DiskCID.String()
				dev := "/dev/" + a.Device
				lun := strconv.Itoa(a.LUN)
				cases := []struct {
					name, typ string
					hint      cpiv2.DiskHint
					want      string
				}{
					{"identity path", agent.ResolverIdentity, cpiv2.DiskHint{Path: a.SDPath}, a.SDPath},
					{"mapped path", agent.ResolverMapped, cpiv2.DiskHint{Path: a.SDPath}, dev},
					{"mapped string", agent.ResolverMapped, cpiv2.StringHint(a.SDPath), dev},
					{"virtio by id", agent.ResolverVirtio, cpiv2.DiskHint{Path: a.SDPath}, dev},
					{"scsi id", agent.ResolverSCSI, cpiv2.DiskHint{ID: cid, Path: a.SDPath}, dev},
					{"scsi volume_id", agent.ResolverSCSI, cpiv2.DiskHint{VolumeID: lun}, dev},
					{"scsi lun", agent.ResolverSCSI, cpiv2.DiskHint{LUN: lun, HostDeviceID: "2"}, dev},
				}
				for _, c := range cases {
					got, err := resolver(t, c.typ, vm.root).Resolve(agent.DiskSettingsFromHint(cid, c.hint))
					if err != nil || got != c.want {
						t.Errorf("%s on %s (%s): got %q, %v; want %q", c.name, a.Device, prefix, got, err, c.want)
					}
				}
			}
		})
	}
}

// bosh-anchors §3.1: virtio falls back to the mapped resolver when there is
// no by-id link (an ID shorter than 20 characters, or no link yet).
func TestVirtioFallsBackToMapped(t *testing.T) {
	v := newVMRoot(t, "vm-1")
	v.attach(t, "disk-short", 'c', "xvd", 1) // by-id link named virtio-disk-short: ID < 20, never used
	got, err := resolver(t, agent.ResolverVirtio, v.root).Resolve(agent.DiskSettings{ID: "disk-short", Path: "/dev/sdc"})
	if err != nil || got != "/dev/xvdc" {
		t.Fatalf("virtio with a short ID: %q, %v; want /dev/xvdc via mapped", got, err)
	}
	long := "disk-0123456789abcdef0123456789"
	got, err = resolver(t, agent.ResolverVirtio, v.root).Resolve(agent.DiskSettings{ID: long, Path: "/dev/sdc"})
	if err != nil || got != "/dev/xvdc" {
		t.Fatalf("virtio with no by-id link: %q, %v; want /dev/xvdc via mapped", got, err)
	}
}

// The device appears while the resolver polls (a slow attach).
func TestResolverWaitsForDevice(t *testing.T) {
	v := newVMRoot(t, "vm-1")
	cid := "disk-0123456789abcdef0123456789"
	done := make(chan struct{})
	go func() {
		defer close(done)
		time.Sleep(60 * time.Millisecond)
		v.attach(t, cid, 'c', "sd", 1)
	}()
	got, err := resolver(t, agent.ResolverVirtio, v.root).Resolve(agent.DiskSettings{ID: cid, Path: "/dev/sdc"})
	<-done // the layout may still be finishing after the link resolved; the root must outlive it
	if err != nil || got != "/dev/sdc" {
		t.Fatalf("resolve of a device that appears late: %q, %v", got, err)
	}
}

// "Timed out getting real device path for …", on the runtime's clock.
func TestResolverTimeouts(t *testing.T) {
	v := newVMRoot(t, "vm-1")
	for _, c := range []struct {
		typ string
		ds  agent.DiskSettings
	}{
		{agent.ResolverMapped, agent.DiskSettings{ID: "disk-1", Path: "/dev/sdq"}},
		{agent.ResolverVirtio, agent.DiskSettings{ID: "disk-0123456789abcdef0123456789", Path: "/dev/sdq"}},
		{agent.ResolverSCSI, agent.DiskSettings{ID: "disk-1", VolumeID: "9"}},
		{agent.ResolverSCSI, agent.DiskSettings{ID: "disk-1", Lun: "9", HostDeviceID: "2"}},
		{agent.ResolverSCSI, agent.DiskSettings{ID: "disk-1", DeviceID: "disk-0123456789abcdef0123456789"}},
	} {
		start := time.Now()
		_, err := resolver(t, c.typ, v.root).Resolve(c.ds)
		var te *agent.DeviceTimeoutError
		if !errors.Is(err, agent.ErrDeviceTimeout) || !errors.As(err, &te) {
			t.Errorf("%s %+v: err = %v, want a DeviceTimeoutError", c.typ, c.ds, err)
		}
		if el := time.Since(start); el < 300*time.Millisecond || el > 3*time.Second {
			t.Errorf("%s gave up after %s, want about the 300ms time-out", c.typ, el)
		}
	}
}

// An ambiguous match is an error, never a guess.
func TestResolverAmbiguous(t *testing.T) {
	v := newVMRoot(t, "vm-1")
	v.attach(t, "disk-0123456789abcdef0123456789", 'c', "sd", 1)
	// A second link whose name also ends with the first 20 characters.
	if err := os.Symlink("../../sdc", filepath.Join(v.root, "dev/disk/by-id", "scsi-0"+"disk-0123456789abcdef0123456789"[:20])); err != nil {
		t.Fatal(err)
	}
	_, err := resolver(t, agent.ResolverVirtio, v.root).Resolve(agent.DiskSettings{ID: "disk-0123456789abcdef0123456789", Path: "/dev/sdc"})
	if !errors.Is(err, agent.ErrAmbiguousDevice) {
		t.Errorf("virtio with two by-id matches: %v, want ErrAmbiguousDevice", err)
	}
	// Two SCSI hosts with the same target.
	mustMkdir(t, filepath.Join(v.root, "sys/bus/scsi/devices/3:0:2:0/block/sdd"))
	_, err = resolver(t, agent.ResolverSCSI, v.root).Resolve(agent.DiskSettings{ID: "disk-1", VolumeID: "2"})
	if !errors.Is(err, agent.ErrAmbiguousDevice) {
		t.Errorf("scsi with two hosts matching volume_id: %v, want ErrAmbiguousDevice", err)
	}
}

// Links inside the root that point outside it are followed as the guest
// would: "/" and ".." stay inside the root.
func TestResolverStaysInRoot(t *testing.T) {
	v := newVMRoot(t, "vm-1")
	outside := filepath.Join(v.dataDir, "secret")
	if err := os.WriteFile(outside, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cid := "disk-0123456789abcdef0123456789"
	if err := os.Symlink("../../../../../../../../secret", filepath.Join(v.root, "dev/disk/by-id", "virtio-"+cid[:20])); err != nil {
		t.Fatal(err)
	}
	_, err := resolver(t, agent.ResolverVirtio, v.root).Resolve(agent.DiskSettings{ID: cid, Path: "/dev/sdq"})
	if !errors.Is(err, agent.ErrDeviceTimeout) {
		t.Errorf("by-id link escaping the root: %v, want a time-out (the escape resolves to /secret in the root, which is absent)", err)
	}
}

func TestUnknownResolver(t *testing.T) {
	if _, err := agent.NewResolver(agent.ResolverConfig{Type: "iscsi", Root: t.TempDir()}); err == nil {
		t.Errorf("NewResolver(iscsi) succeeded, want an error")
	}
}
