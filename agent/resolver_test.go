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
	"github.com/cpilab/cpilab/simulator/simrt"
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

// fast shortens every upstream time-out for tests on the real clock.
func fast(cfg agent.ResolverConfig) agent.ResolverConfig {
	cfg.Runtime = rt.Real(1)
	cfg.Timeout, cfg.SCSIIDTimeout, cfg.SCSILunTimeout, cfg.ISCSITimeout = 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond, 300*time.Millisecond
	cfg.PollInterval, cfg.VirtioIDWait = 5*time.Millisecond, 50*time.Millisecond
	cfg.SCSIVolumeIDRetries, cfg.SCSIVolumeIDWait = 3, 10*time.Millisecond
	return cfg
}

func resolver(t *testing.T, typ, root string) agent.Resolver {
	t.Helper()
	return resolverWith(t, agent.ResolverConfig{Type: typ, Root: root})
}

func resolverWith(t *testing.T, cfg agent.ResolverConfig) agent.Resolver {
	t.Helper()
	r, err := agent.NewResolver(fast(cfg))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// docs/upstream.md (agent): every resolver finds the right device in roots
// fakeiaas laid out, for every device prefix and every hint style of
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
					{"virtio (falls back to mapped: by-id holds 20 characters)", agent.ResolverVirtio, cpiv2.DiskHint{Path: a.SDPath}, dev},
					{"scsi id", agent.ResolverSCSI, cpiv2.DiskHint{ID: cid, Path: a.SDPath}, dev},
					{"scsi volume_id", agent.ResolverSCSI, cpiv2.DiskHint{VolumeID: lun}, dev},
					{"scsi string volume_id", agent.ResolverSCSI, cpiv2.StringHint(lun), dev},
					{"scsi lun", agent.ResolverSCSI, cpiv2.DiskHint{LUN: lun, HostDeviceID: fakeiaas.VMBusDeviceID}, dev},
				}
				for _, c := range cases {
					got, err := resolver(t, c.typ, vm.root).Resolve(agent.DiskSettingsFromHint(cid, c.hint))
					if err != nil || got != c.want {
						t.Errorf("%s on %s (%s): got %q, %v; want %q", c.name, a.Device, prefix, got, err, c.want)
					}
				}
			}
			// virtio by-id, with the OpenStack transform fakeiaas's names follow.
			r := resolverWith(t, agent.ResolverConfig{Type: agent.ResolverVirtio, Root: vm.root,
				DiskIDTransformPattern: "^(.{20}).*$", DiskIDTransformReplacement: "virtio-${1}"})
			for _, a := range vm.disks {
				got, err := r.Resolve(agent.DiskSettings{ID: a.DiskCID.String()}) // no path: only by-id can answer
				if err != nil || got != "/dev/"+a.Device {
					t.Errorf("virtio by-id of %s: %q, %v; want /dev/%s", a.DiskCID, got, err, a.Device)
				}
			}
		})
	}
}

type resolveCase struct {
	name string
	cfg  agent.ResolverConfig // Root is filled in
	ds   agent.DiskSettings
	want string      // the device, when err is nil
	err  error       // else the error it must match
	prep func(guest) // changes to the cloud's layout, for fallbacks
}

func runCases(t *testing.T, layout func(testing.TB) guest, cases []resolveCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			g := layout(t)
			if c.prep != nil {
				c.prep(g)
			}
			cfg := c.cfg
			cfg.Root = g.root
			got, err := resolverWith(t, cfg).Resolve(c.ds)
			switch {
			case c.err == nil && (err != nil || got != c.want):
				t.Errorf("got %q, %v; want %q", got, err, c.want)
			case c.err != nil && !errors.Is(err, c.err):
				t.Errorf("got %q, %v; want an error matching %v", got, err, c.err)
			}
		})
	}
}

const (
	awsVol     = "vol-0123456789abcdef0"
	awsPattern = "^(vol)-(.+)$"
	awsReplace = "nvme-Amazon_Elastic_Block_Store_${1}${2}"
)

// AWS: virtio with the nvme transform on Nitro; every failure of the by-id
// look-up falls back to mapped (/dev/sdf → /dev/xvdf on Xen).
func TestResolverAWS(t *testing.T) {
	virtio := agent.ResolverConfig{Type: agent.ResolverVirtio, DiskIDTransformPattern: awsPattern, DiskIDTransformReplacement: awsReplace}
	runCases(t, awsNitro, []resolveCase{
		{name: "nitro by-id", cfg: virtio, ds: agent.DiskSettings{ID: awsVol, Path: "/dev/sdf"}, want: "/dev/nvme1n1"},
		{name: "nitro without the transform: no by-id match, mapped has no sdf", cfg: agent.ResolverConfig{Type: agent.ResolverVirtio},
			ds: agent.DiskSettings{ID: awsVol, Path: "/dev/sdf"}, err: agent.ErrDeviceTimeout},
		{name: "nitro by-id link dangling: mapped", cfg: virtio, ds: agent.DiskSettings{ID: awsVol, Path: "/dev/nvme1n1"}, want: "/dev/nvme1n1",
			prep: func(g guest) {
				_ = os.Remove(g.host("/dev/disk/by-id/nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0"))
				g.byID("nvme-Amazon_Elastic_Block_Store_vol0123456789abcdef0", "nvme9n1")
			}},
		{name: "two by-id matches: ambiguous, mapped", cfg: agent.ResolverConfig{Type: agent.ResolverVirtio}, ds: agent.DiskSettings{ID: awsVol, Path: "/dev/nvme2n1"}, want: "/dev/nvme2n1",
			prep: func(g guest) { g.byID("a-"+awsVol, "nvme1n1").byID("b-"+awsVol, "nvme1n1") }},
	})
	runCases(t, awsXen, []resolveCase{
		{name: "xen: by-id absent, mapped sdf → xvdf", cfg: virtio, ds: agent.DiskSettings{ID: awsVol, Path: "/dev/sdf"}, want: "/dev/xvdf"},
		{name: "xen: an ID shorter than 20 characters, mapped", cfg: virtio, ds: agent.DiskSettings{ID: "vol-0123", Path: "/dev/sdg"}, want: "/dev/xvdg"},
		{name: "xen: nothing at sdh", cfg: virtio, ds: agent.DiskSettings{ID: awsVol, Path: "/dev/sdh"}, err: agent.ErrDeviceTimeout},
	})
}

// GCP: virtio; the glob *<CID> matches both google- and scsi-0Google_ names,
// which is ambiguous (→ mapped) unless the stemcell's transform names one.
func TestResolverGCP(t *testing.T) {
	const cid = "disk-0e1d2c3b-4a59-4687-b9ca-dbecfd0e1f20"
	transform := agent.ResolverConfig{Type: agent.ResolverVirtio, DiskIDTransformPattern: "^(disk-.+)$", DiskIDTransformReplacement: "google-${1}"}
	runCases(t, gcp, []resolveCase{
		{name: "by-id google-<name>", cfg: transform, ds: agent.DiskSettings{ID: cid}, want: "/dev/sdc"},
		{name: "no transform: two matches, mapped", cfg: agent.ResolverConfig{Type: agent.ResolverVirtio}, ds: agent.DiskSettings{ID: cid, Path: "/dev/sdc"}, want: "/dev/sdc"},
		{name: "no transform, no path: mapped cannot help", cfg: agent.ResolverConfig{Type: agent.ResolverVirtio}, ds: agent.DiskSettings{ID: cid}, err: agent.ErrHintUnusable},
		{name: "transform that does not match: the CID itself, mapped", cfg: transform, ds: agent.DiskSettings{ID: "vol-12345678901234567890", Path: "/dev/sdb"}, want: "/dev/sdb"},
	})
}

// Azure: scsi by lun + host_device_id, through the vmbus device_id files.
func TestResolverAzure(t *testing.T) {
	scsi := agent.ResolverConfig{Type: agent.ResolverSCSI}
	hostID := "{" + azureVMBus + "}"
	runCases(t, azure, []resolveCase{
		{name: "lun 2 on the data controller, not the root one", cfg: scsi, ds: agent.DiskSettings{ID: "d", Lun: "2", HostDeviceID: hostID}, want: "/dev/sdc"},
		{name: "lun 3", cfg: scsi, ds: agent.DiskSettings{ID: "d", Lun: "3", HostDeviceID: hostID}, want: "/dev/sdd"},
		{name: "lun not there yet", cfg: scsi, ds: agent.DiskSettings{ID: "d", Lun: "7", HostDeviceID: hostID}, err: agent.ErrDeviceTimeout},
		{name: "unknown host_device_id", cfg: scsi, ds: agent.DiskSettings{ID: "d", Lun: "2", HostDeviceID: "{00000000-1111-2222-3333-444444444444}"}, err: agent.ErrNoDevice},
		{name: "device node missing", cfg: scsi, ds: agent.DiskSettings{ID: "d", Lun: "3", HostDeviceID: hostID}, err: agent.ErrDeviceTimeout,
			prep: func(g guest) { _ = os.Remove(g.host("/dev/sdd")) }},
		{name: "lun without host_device_id", cfg: scsi, ds: agent.DiskSettings{ID: "d", Lun: "2"}, err: agent.ErrHintUnusable},
	})
}

// OpenStack: virtio; serials are 20 characters, so the full-ID glob finds
// nothing and mapped answers, unless the transform names the serial.
func TestResolverOpenStack(t *testing.T) {
	const cid = "9a8b7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d"
	transform := agent.ResolverConfig{Type: agent.ResolverVirtio, DiskIDTransformPattern: "^(.{20}).*$", DiskIDTransformReplacement: "virtio-${1}"}
	runCases(t, openstack, []resolveCase{
		{name: "by-id, truncated serial", cfg: transform, ds: agent.DiskSettings{ID: cid, Path: "/dev/sdb"}, want: "/dev/vdc"},
		{name: "no transform: full ID not found, mapped sdc → vdc", cfg: agent.ResolverConfig{Type: agent.ResolverVirtio}, ds: agent.DiskSettings{ID: cid, Path: "/dev/sdc"}, want: "/dev/vdc"},
		{name: "by-id link missing: mapped", cfg: transform, ds: agent.DiskSettings{ID: cid, Path: "/dev/sdc"}, want: "/dev/vdc",
			prep: func(g guest) { _ = os.Remove(g.host("/dev/disk/by-id/virtio-9a8b7c6d-5e4f-4a3b-2")) }},
	})
}

// vSphere: scsi by id (dashes stripped) first, else by volume_id on the
// root disk's host.
func TestResolverVSphere(t *testing.T) {
	scsi := agent.ResolverConfig{Type: agent.ResolverSCSI}
	runCases(t, vsphere, []resolveCase{
		{name: "id, dashes stripped", cfg: scsi, ds: agent.DiskSettings{ID: "disk-1", DeviceID: "6000c29d-4e1f-2a3b-4c5d-6e7f8091a2b3"}, want: "/dev/sdb"},
		{name: "id wins over volume_id", cfg: scsi, ds: agent.DiskSettings{ID: "disk-1", DeviceID: "6000c291-1223-3445-5667-7889900aabbc", VolumeID: "1"}, want: "/dev/sdc"},
		{name: "volume_id on host 2", cfg: scsi, ds: agent.DiskSettings{ID: "disk-1", VolumeID: "2"}, want: "/dev/sdc"},
		{name: "volume_id: root disk on host 5", cfg: scsi, ds: agent.DiskSettings{ID: "disk-1", VolumeID: "1"}, want: "/dev/sdq",
			prep: func(g guest) {
				_ = os.Remove(g.host("/sys/bus/scsi/devices/2:0:0:0"))
				_ = os.Remove(g.host("/sys/class/block/sda"))
				g.scsi("/sys/devices/pci0000:00/x", "5", "5:0:0:0", "sda").scsi("/sys/devices/pci0000:00/x", "5", "5:0:1:0", "sdq")
			}},
		{name: "volume_id absent", cfg: scsi, ds: agent.DiskSettings{ID: "disk-1", VolumeID: "9"}, err: agent.ErrDeviceTimeout},
		{name: "volume_id without a root disk", cfg: scsi, ds: agent.DiskSettings{ID: "disk-1", VolumeID: "2"}, err: agent.ErrNoDevice,
			prep: func(g guest) { _ = os.Remove(g.host("/sys/bus/scsi/devices/2:0:0:0")) }},
		{name: "id not found", cfg: scsi, ds: agent.DiskSettings{ID: "disk-1", DeviceID: "6000c29f-ffff-ffff-ffff-ffffffffffff"}, err: agent.ErrDeviceTimeout},
		{name: "nothing usable", cfg: scsi, ds: agent.DiskSettings{ID: "disk-1", Path: "/dev/sdb"}, err: agent.ErrHintUnusable},
	})
}

// iscsi: identity when the hint has a path, else complete iscsi_settings
// and the one multipath device without a partition.
func TestResolverISCSI(t *testing.T) {
	iscsi := agent.ResolverConfig{Type: agent.ResolverISCSI}
	full := &cpiv2.ISCSISettings{InitiatorName: "iqn.2026-01.test:vm", Username: "u", Password: "p", Target: "10.0.0.5"}
	mapper := func(t testing.TB) guest {
		g := newGuest(t)
		return g.dev("/dev/mapper/3600a0980383030523424457a4a695266").dev("/dev/mapper/3600a0980383030523424457a4a695266-part1").dev("/dev/mapper/3600a09803830305234244579999999999")
	}
	runCases(t, mapper, []resolveCase{
		{name: "path: identity", cfg: iscsi, ds: agent.DiskSettings{ID: "d", Path: "/dev/sdz"}, want: "/dev/sdz"},
		{name: "the new multipath device", cfg: iscsi, ds: agent.DiskSettings{ID: "d", ISCSISettings: full}, want: "/dev/mapper/3600a09803830305234244579999999999"},
		{name: "settings incomplete", cfg: iscsi, ds: agent.DiskSettings{ID: "d", ISCSISettings: &cpiv2.ISCSISettings{InitiatorName: "i", Username: "u", Password: "p"}}, err: agent.ErrHintUnusable},
		{name: "no new device", cfg: iscsi, ds: agent.DiskSettings{ID: "d", ISCSISettings: full}, err: agent.ErrDeviceTimeout,
			prep: func(g guest) { g.dev("/dev/mapper/3600a09803830305234244579999999999-part1") }},
	})
}

// Upstream's provider: any unknown type is identity.
func TestUnknownResolverIsIdentity(t *testing.T) {
	for _, typ := range []string{"", "identity", "nvme", "Virtio"} {
		r, err := agent.NewResolver(agent.ResolverConfig{Type: typ})
		if err != nil {
			t.Fatalf("NewResolver(%q): %v", typ, err)
		}
		if got, err := r.Resolve(agent.DiskSettings{ID: "d", Path: "/dev/sdq"}); err != nil || got != "/dev/sdq" {
			t.Errorf("%q resolver: %q, %v; want the path as given", typ, got, err)
		}
	}
}

// The device appears while the resolver polls (a slow attach): on the
// simulator's virtual clock the attach lands 2 s into virtio's wait, and
// the resolver finds it at its next poll, long before the time-out.
func TestResolverWaitsForDevice(t *testing.T) {
	v := newVMRoot(t, "vm-1")
	cid := "disk-0123456789abcdef0123456789"
	const attachAt = 2 * time.Second
	var got string
	var err error
	res := simrt.Run(simrt.Config{Seed: 1, MaxTime: time.Hour}, func(sim *simrt.Sim) {
		sim.Go("slow attach", func() {
			sim.Sleep(attachAt)
			v.attach(t, cid, 'c', "sd", 1)
		})
		r, nerr := agent.NewResolver(agent.ResolverConfig{Type: agent.ResolverVirtio, Root: v.root, Runtime: sim})
		if nerr != nil {
			err = nerr
			return
		}
		got, err = r.Resolve(agent.DiskSettings{ID: cid, Path: "/dev/sdc"})
	})
	if err != nil || got != "/dev/sdc" {
		t.Fatalf("resolve of a device that appears late: %q, %v", got, err)
	}
	if res.Elapsed < attachAt || res.Elapsed > attachAt+2*time.Second {
		t.Errorf("resolved after %s (virtual), want soon after the attach at %s", res.Elapsed, attachAt)
	}
}

// Upstream's time-outs, measured on the simulator's virtual clock: mapped
// 30 s, virtio 500 ms then mapped's 30 s, scsi by id and by lun 50 s, by
// volume_id 30 tries 500 ms apart, iscsi 50 s.
func TestResolverTimeoutsAsUpstream(t *testing.T) {
	g := azure(t) // a vmbus device and a root SCSI disk, so every look-up gets to wait
	hostID := "{" + azureVMBus + "}"
	for _, c := range []struct {
		typ      string
		ds       agent.DiskSettings
		min, max time.Duration
	}{
		{agent.ResolverMapped, agent.DiskSettings{ID: "d", Path: "/dev/sdq"}, 30 * time.Second, 30*time.Second + 200*time.Millisecond},
		{agent.ResolverVirtio, agent.DiskSettings{ID: "disk-0123456789abcdef0123456789", Path: "/dev/sdq"}, 30500 * time.Millisecond, 30700 * time.Millisecond},
		{agent.ResolverSCSI, agent.DiskSettings{ID: "d", DeviceID: "0123-4567"}, 50 * time.Second, 50*time.Second + 200*time.Millisecond},
		{agent.ResolverSCSI, agent.DiskSettings{ID: "d", VolumeID: "9"}, 29 * 500 * time.Millisecond, 30 * 500 * time.Millisecond},
		{agent.ResolverSCSI, agent.DiskSettings{ID: "d", Lun: "9", HostDeviceID: hostID}, 50 * time.Second, 50*time.Second + 200*time.Millisecond},
		{agent.ResolverISCSI, agent.DiskSettings{ID: "d", ISCSISettings: &cpiv2.ISCSISettings{InitiatorName: "i", Username: "u", Password: "p", Target: "t"}}, 50 * time.Second, 50*time.Second + 200*time.Millisecond},
	} {
		var err error
		res := simrt.Run(simrt.Config{Seed: 1, MaxTime: time.Hour}, func(sim *simrt.Sim) {
			r, nerr := agent.NewResolver(agent.ResolverConfig{Type: c.typ, Root: g.root, Runtime: sim})
			if nerr != nil {
				err = nerr
				return
			}
			_, err = r.Resolve(c.ds)
		})
		if !errors.Is(err, agent.ErrDeviceTimeout) {
			t.Errorf("%s %+v: %v, want a time-out", c.typ, c.ds, err)
		}
		if res.Elapsed < c.min || res.Elapsed > c.max {
			t.Errorf("%s %+v gave up after %s (virtual), want %s–%s", c.typ, c.ds, res.Elapsed, c.min, c.max)
		}
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
	if err := os.Symlink("../../../../../../../../secret", filepath.Join(v.root, "dev/disk/by-id", "virtio-"+cid)); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(v.root, "dev/sdq")); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{agent.ResolverVirtio, agent.ResolverMapped} {
		_, err := resolver(t, typ, v.root).Resolve(agent.DiskSettings{ID: cid, Path: "/dev/sdq"})
		if !errors.Is(err, agent.ErrDeviceTimeout) {
			t.Errorf("%s with links escaping the root: %v, want a time-out (they lead to /secret inside the root, which is absent)", typ, err)
		}
	}
}
