package vmssh

import (
	"os"
	"testing"
	"time"

	"github.com/pkg/sftp"
)

// A device node under dev/ shares its inode with the disk's backing file
// outside the root: changing its mode, owner, times or size over SFTP
// changed that file (found by the adversarial campaign: chmod through the
// agent's dynamic-disk link made the backing file world-writable). They
// are refused, and opening a node with O_TRUNC keeps its data, as Linux
// ignores O_TRUNC on a block device.
func TestDeviceNodeAttributesStayTheDisks(t *testing.T) {
	f := newFixture(t, nil)
	c := f.dial(t)
	before, err := os.Stat(f.disk)
	mustDo(t, err)
	for _, p := range []string{"/dev/sdc", "/dev/disk/by-id/" + virtioName, "/var/vcap/data/dynamic_disks/" + testDisk} {
		wantCode(t, "chmod "+p, c.Chmod(p, 0o777), sftp.ErrSSHFxPermissionDenied)
		wantCode(t, "truncate "+p, c.Truncate(p, 0), sftp.ErrSSHFxPermissionDenied)
		wantCode(t, "chtimes "+p, c.Chtimes(p, time.Unix(1, 0), time.Unix(1, 0)), sftp.ErrSSHFxPermissionDenied)
		if w, err := c.Create(p); err == nil { // O_CREAT|O_TRUNC|O_WRONLY
			mustDo(t, w.Close())
		}
	}
	after, err := os.Stat(f.disk)
	mustDo(t, err)
	if after.Mode() != before.Mode() || after.Size() != before.Size() || !after.ModTime().Equal(before.ModTime()) {
		t.Fatalf("the backing file changed: mode %v size %d mtime %v, was %v %d %v",
			after.Mode(), after.Size(), after.ModTime(), before.Mode(), before.Size(), before.ModTime())
	}
	// A file of its own under dev/ stays the user's to change.
	w, err := c.Create("/dev/mine")
	mustDo(t, err)
	mustDo(t, w.Close())
	mustDo(t, c.Chmod("/dev/mine", 0o600))
}
