package flexvolume

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	mount "k8s.io/mount-utils"
)

// newDisk lays out a VM root with an attached blank disk as fakeiaas and
// the agent do: dev/sdc (the backing file) and the dynamic disk link.
func newDisk(t *testing.T) (*VMRoot, string) {
	t.Helper()
	root := t.TempDir()
	dev := filepath.Join(root, "dev", "sdc")
	if err := os.MkdirAll(filepath.Dir(dev), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(dev)
	if err != nil {
		t.Fatal(err)
	}
	if err := errors.Join(f.Truncate(1<<20), f.Close()); err != nil {
		t.Fatal(err)
	}
	link := DeviceOf("disk-0123456789abcdef")
	if err := os.MkdirAll(filepath.Join(root, filepath.Dir(link)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/sdc", filepath.Join(root, link)); err != nil {
		t.Fatal(err)
	}
	return NewVMRoot(root), link
}

func TestVMRootFormatsOnlyABlankDiskAndKeepsItsData(t *testing.T) {
	v, dev := newDisk(t)
	sfm := mount.NewSafeFormatAndMount(v, v.Exec())
	if err := sfm.FormatAndMount(dev, "/mnt/a", "ext4", []string{"ro"}); err == nil {
		t.Fatal("a blank disk mounted read-only: mount-utils must refuse to format it")
	}
	if err := sfm.FormatAndMount(dev, "/mnt/a", "ext4", nil); err != nil {
		t.Fatal(err)
	}
	if typ, err := sfm.GetDiskFormat(dev); err != nil || typ != "ext4" {
		t.Fatalf("blkid after mkfs: %q, %v", typ, err)
	}
	if err := os.WriteFile(v.Host("/mnt/a/data"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	if mp, err := v.IsMountPoint("/mnt/a"); err != nil || !mp {
		t.Fatalf("IsMountPoint after mount: %v, %v", mp, err)
	}
	if err := v.Unmount("/mnt/a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(v.Host("/mnt/a/data")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after unmount the file is still in the mount point: %v", err)
	}
	// Mounted again elsewhere: the filesystem is found, not re-made.
	if err := sfm.FormatAndMount(dev, "/mnt/b", "ext4", nil); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(v.Host("/mnt/b/data")); err != nil || string(b) != "kept" {
		t.Fatalf("data after unmount and mount: %q, %v", b, err)
	}
	if err := v.Mount("/mnt/b", "/pod/vol", "", []string{"bind"}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(v.Host("/pod/vol/data")); err != nil || string(b) != "kept" {
		t.Fatalf("data through the bind mount: %q, %v", b, err)
	}
	if err := v.Mount("/mnt/b", "/pod/vol", "", []string{"bind"}); err == nil {
		t.Fatal("a second mount on the same target succeeded")
	}
	if err := errors.Join(v.Unmount("/pod/vol"), v.Unmount("/mnt/b")); err != nil {
		t.Fatal(err)
	}
	if ms, err := v.Mounts(); err != nil || len(ms) != 0 {
		t.Fatalf("mount table after every unmount: %+v, %v", ms, err)
	}
	if err := v.Unmount("/mnt/b"); err == nil {
		t.Fatal("unmount of a target that is not mounted succeeded")
	}
}

func TestVMRootStaysInsideTheRoot(t *testing.T) {
	v := NewVMRoot("/r")
	for in, want := range map[string]string{"/a/b": "/r/a/b", "../../etc": "/r/etc", "/x/../../y": "/r/y"} {
		if got := v.Host(in); got != want {
			t.Errorf("Host(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestVMRootGrowsAMountedFilesystem: mkfs makes a filesystem the size of
// the disk; the disk grown under it (the cloud's resize), df still shows
// the old size until resize2fs (or xfs_growfs on the mount point), and a
// remount keeps size and data.
func TestVMRootGrowsAMountedFilesystem(t *testing.T) {
	for _, fsType := range []string{"ext4", "xfs"} {
		t.Run(fsType, func(t *testing.T) {
			v, dev := newDisk(t)
			sfm := mount.NewSafeFormatAndMount(v, v.Exec())
			if err := sfm.FormatAndMount(dev, "/mnt/a", fsType, nil); err != nil {
				t.Fatal(err)
			}
			if err := v.Mount("/mnt/a", "/pod/vol", "", []string{"bind"}); err != nil {
				t.Fatal(err)
			}
			if size, err := v.FSSize("/pod/vol"); err != nil || size != 1<<20 {
				t.Fatalf("df after mkfs: %d, %v; want the disk's 1 MiB", size, err)
			}
			if err := os.WriteFile(v.Host("/pod/vol/data"), []byte("kept"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(v.Host("/dev/sdc"), 4<<20); err != nil {
				t.Fatal(err)
			}
			if size, _ := v.FSSize("/mnt/a"); size != 1<<20 {
				t.Fatalf("df after the disk grew, before the filesystem: %d, want 1 MiB", size)
			}
			if _, err := mount.NewResizeFs(v.Exec()).Resize(dev, "/mnt/a"); err != nil {
				t.Fatal(err)
			}
			if size, err := v.FSSize("/pod/vol"); err != nil || size != 4<<20 {
				t.Fatalf("df after the resize: %d, %v; want 4 MiB", size, err)
			}
			if err := errors.Join(v.Unmount("/pod/vol"), v.Unmount("/mnt/a")); err != nil {
				t.Fatal(err)
			}
			if err := sfm.FormatAndMount(dev, "/mnt/b", fsType, nil); err != nil {
				t.Fatal(err)
			}
			if size, err := v.FSSize("/mnt/b"); err != nil || size != 4<<20 {
				t.Fatalf("df after a remount: %d, %v; want 4 MiB", size, err)
			}
			if b, err := os.ReadFile(v.Host("/mnt/b/data")); err != nil || string(b) != "kept" {
				t.Fatalf("data after the resize and a remount: %q, %v", b, err)
			}
		})
	}
	if _, err := NewVMRoot(t.TempDir()).FSSize("/nowhere"); err == nil {
		t.Fatal("df of a path that is no mount point succeeded")
	}
}
