// Package vmssh serves SSH with an SFTP subsystem onto fake VM roots, jailed
// to each root, and gives suites a client for it.
//
// The SSH user name is the VM CID; Config.RootFor maps it to the VM's root
// directory (<data dir>/vms/<vm cid>/root, see docs/seams.md) and
// Config.Authorize (for instance an AuthorizedKeys registry) decides which
// public keys may log in. Only public-key authentication is offered, and
// only the "sftp" subsystem: no shell, exec or forwarding.
//
// # The jail
//
// Every path a client sends is read as a process chrooted into the VM root
// would read it:
//
//   - "/" is the root; relative paths start at the root; ".." at the root
//     stays at the root.
//   - Symlinks met while resolving are followed inside the root: an absolute
//     target such as var/vcap/data/dynamic_disks/<disk cid> → /dev/sdc means
//     <root>/dev/sdc, and a relative target such as
//     dev/disk/by-id/virtio-<id> → ../../sdc is read from the link's
//     directory, clamped at the root. ReadLink returns targets as stored.
//   - Creating a symlink with an absolute target, or with a relative target
//     that climbs above the root (or that has ".." after a name), is refused
//     with ErrEscape, so that links made over SFTP stay inside the root
//     even for processes on the host that follow them. Hard links and
//     renames that would move a symlink to where its target climbs out are
//     refused the same way.
//   - Names with a NUL byte, components longer than MaxNameLen and paths
//     longer than MaxPathLen are refused with ErrInvalidName.
//   - A hard link to anything under dev/, and a rename of a device node or
//     of dev/ itself, is refused with ErrDeviceNode: device nodes are hard
//     links to the disks' backing files, and a second name (or one moved
//     where detach does not look) would keep a detached disk readable.
//
// Resolution is done by the package, one component at a time relative to
// the directory reached so far, so its cost is linear in the path's depth;
// every file system call then goes through an os.Root opened on the VM
// root, so a component swapped for a symlink between resolution and use
// still cannot reach outside the root.
// The github.com/pkg/sftp request server cleans paths lexically before the
// jail sees them ("a/link/.." is "a"), which can only stay inside the root.
//
// # Example
//
//	keys := &vmssh.AuthorizedKeys{}
//	keys.Add(vmCID, clientSigner.PublicKey())
//	srv, err := vmssh.Start(vmssh.Config{
//		Authorize: keys.Authorize,
//		RootFor: func(cid string) (string, bool) {
//			return filepath.Join(dataDir, "vms", cid, "root"), cid == vmCID
//		},
//	})
//	if err != nil { … }
//	defer srv.Close()
//
//	c, err := vmssh.Dial(vmssh.ClientConfig{
//		Addr: srv.Addr(), VMCID: vmCID, Signer: clientSigner, HostKey: srv.HostKey(),
//	})
//	if err != nil { … }
//	defer c.Close()
//	target, err := c.ReadLink("/var/vcap/data/dynamic_disks/" + diskCID) // "../../../../dev/sdc"
//	fi, err := c.Stat("/var/vcap/data/dynamic_disks/" + diskCID)         // <root>/dev/sdc
//
// The server's goroutines are I/O-edge code: they use the wall clock (for
// handshake deadlines) and plain goroutines, not an injected runtime.
package vmssh
