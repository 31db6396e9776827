package fakeiaas_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/cpilab/cpilab/fakeiaas"
)

func TestVMRootLayoutAtCreate(t *testing.T) {
	c := newCloud(t, nil)
	vm := mustVM(t, c, mustStemcell(t, c, 2), nil)
	want := filepath.Join(c.DataDir(), "vms", vm.CID.String(), "root")
	if vm.Root != want || c.VMRoot(vm.CID) != want {
		t.Fatalf("root = %q, want %q", vm.Root, want)
	}
	for _, d := range []string{"dev", "dev/disk/by-id", "sys/bus/scsi/devices", "var/vcap/bosh", "var/vcap/data", "var/vcap/store"} {
		if fi, err := os.Stat(filepath.Join(want, d)); err != nil || !fi.IsDir() {
			t.Fatalf("root lacks %s/: %v", d, err)
		}
	}
}

// TestDeviceLayoutPerPrefix checks each resolver's view (docs/seams.md):
// identity/mapped read dev/<prefix><letter>, virtio the by-id link, scsi the
// sys entry for the LUN; and that data moves with the disk.
func TestDeviceLayoutPerPrefix(t *testing.T) {
	for _, prefix := range []string{"sd", "xvd", "vd"} {
		t.Run(prefix, func(t *testing.T) {
			c := newCloud(t, nil)
			sc := mustStemcell(t, c, 2)
			vm := mustVM(t, c, sc, map[string]any{"device_prefix": prefix})
			other := mustVM(t, c, sc, map[string]any{"device_prefix": "sd"})
			first, d := mustDisk(t, c, 1), mustDisk(t, c, 8)
			if _, err := c.AttachDisk(bg, vm.CID, first.CID); err != nil {
				t.Fatal(err)
			}
			a, err := c.AttachDisk(bg, vm.CID, d.CID)
			if err != nil {
				t.Fatal(err)
			}
			if a.Device != prefix+"d" || a.Letter != "d" || a.LUN != 3 || a.SDPath != "/dev/sdd" {
				t.Fatalf("attachment = %+v, want %sd, LUN 3", a, prefix)
			}
			root := c.VMRoot(vm.CID)
			dev := filepath.Join(root, "dev", a.Device)
			// mapped/identity: the device node is the backing file (same inode).
			fiDev, err := os.Stat(dev)
			if err != nil {
				t.Fatal(err)
			}
			fiImg, _ := os.Stat(c.DiskFile(d.CID))
			if !os.SameFile(fiDev, fiImg) || fiDev.Size() != 8<<20 {
				t.Fatalf("%s is not the disk's backing file (size %d)", dev, fiDev.Size())
			}
			// virtio: by-id link, relative, resolving inside the root.
			link := filepath.Join(root, "dev/disk/by-id", "virtio-"+d.CID.String()[:20])
			target, err := os.Readlink(link)
			if err != nil || target != "../../"+a.Device {
				t.Fatalf("by-id link %s -> %q, %v; want ../../%s", link, target, err, a.Device)
			}
			if fi, err := os.Stat(link); err != nil || !os.SameFile(fi, fiImg) {
				t.Fatalf("by-id link does not resolve to the disk: %v", err)
			}
			matches, _ := filepath.Glob(filepath.Join(root, "dev/disk/by-id", "*"+d.CID.String()[:20]))
			if len(matches) != 1 {
				t.Fatalf("virtio glob found %v", matches)
			}
			// scsi: sys/bus/scsi/devices/2:0:<lun>:0/block/<dev>.
			blocks, _ := filepath.Glob(filepath.Join(root, "sys/bus/scsi/devices/2:0:3:0/block/*"))
			if len(blocks) != 1 || filepath.Base(blocks[0]) != a.Device {
				t.Fatalf("scsi block entries for LUN 3 = %v, want one named %s", blocks, a.Device)
			}

			// Write through the device, move the disk, read it on the other VM.
			payload := []byte("written on " + vm.CID.String())
			if err := os.WriteFile(dev, payload, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := c.DetachDisk(bg, vm.CID, d.CID); err != nil {
				t.Fatal(err)
			}
			for _, p := range []string{dev, link, filepath.Join(root, "sys/bus/scsi/devices/2:0:3:0")} {
				if _, err := os.Lstat(p); !os.IsNotExist(err) {
					t.Fatalf("%s still there after detach: %v", p, err)
				}
			}
			if _, err := os.Stat(filepath.Join(root, "dev", prefix+"c")); err != nil {
				t.Fatalf("detach of one disk removed another's device: %v", err)
			}
			b, err := c.AttachDisk(bg, other.CID, d.CID)
			if err != nil {
				t.Fatal(err)
			}
			if b.Device != "sdc" {
				t.Fatalf("on the other VM the disk is %s, want sdc", b.Device)
			}
			got := make([]byte, len(payload))
			f, err := os.Open(filepath.Join(c.VMRoot(other.CID), "dev", "sdc"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if _, err := f.Read(got); err != nil || !bytes.Equal(got, payload) {
				t.Fatalf("read back %q, %v; want %q", got, err, payload)
			}
		})
	}
}

func TestBadDevicePrefixRefused(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 2)
	for _, p := range []string{"../../x", "hd", "/dev/sd"} {
		_, err := c.CreateVM(bg, fakeiaas.VMSpec{AgentID: "a", StemcellCID: sc.CID, CloudProperties: []byte(`{"device_prefix":"` + p + `"}`)})
		if err == nil {
			t.Fatalf("device_prefix %q accepted", p)
		}
	}
}

// Every file operation fakeiaas makes in a VM root stays inside it: links
// planted where its own directories belong (as an SFTP user or the guest
// could plant them) make attach fail, never write or remove outside.
func TestLayoutConfinedToRoot(t *testing.T) {
	c := newCloud(t, nil)
	sc := mustStemcell(t, c, 2)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, planted := range []string{"dev/disk/by-id", "sys/class/block", "sys/bus/scsi/devices", "dev", "sys"} {
		t.Run(planted, func(t *testing.T) {
			vm := mustVM(t, c, sc, nil)
			d := mustDisk(t, c, 1)
			root := c.VMRoot(vm.CID)
			if err := os.RemoveAll(filepath.Join(root, planted)); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(root, planted)); err != nil {
				t.Fatal(err)
			}
			_, attachErr := c.AttachDisk(bg, vm.CID, d.CID)
			if attachErr == nil {
				_ = c.DetachDisk(bg, vm.CID, d.CID)
			}
			ents, err := os.ReadDir(outside)
			if err != nil || len(ents) != 1 || ents[0].Name() != "keep" {
				names := []string{}
				for _, e := range ents {
					names = append(names, e.Name())
				}
				t.Fatalf("attach with %s → outside (err %v) changed the outside directory: %v", planted, attachErr, names)
			}
			if attachErr == nil {
				t.Errorf("attach with %s planted as a link out of the root succeeded", planted)
			}
		})
	}
}

// The layout leaves nothing but what docs/seams.md lists: no temporary
// directories beside the ones it fills.
func TestLayoutLeavesNoTemporaries(t *testing.T) {
	c := newCloud(t, nil)
	vm := mustVM(t, c, mustStemcell(t, c, 2), nil)
	d := mustDisk(t, c, 1)
	if _, err := c.AttachDisk(bg, vm.CID, d.CID); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(c.VMRoot(vm.CID), func(p string, e os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if filepath.Ext(p) == ".tmp" {
			t.Errorf("temporary left in the root: %s", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
