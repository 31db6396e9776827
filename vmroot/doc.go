// Package vmroot does file operations inside a VM root directory that stay
// inside it. Whatever has been done to the tree under it (by an SFTP user,
// say), no operation ever follows a symlink out of the root, and the
// operations on the agent's and the fake cloud's own files follow no symlink
// at all.
//
// Paths are in-guest paths ("/var/vcap/bosh/settings.json") or the same
// relative to the root; ".." is refused (ErrEscape). Two families of calls:
//
//   - Strict (ReadFile, WriteFileAtomic, MkdirAll, Symlink, Readlink, Lstat,
//     Remove, RemoveAll, ReadDir, ChmodDir, LinkFrom): every component of the
//     path must be a real directory, never a symlink; a symlink met anywhere
//     is an error wrapping ErrSymlink. The last component is never followed:
//     a file is replaced by creating a fresh temporary and renaming it over
//     the name, so a symlink planted where the file belongs is replaced, not
//     written through.
//   - Guest view (Resolve, Glob, Exists, ReadFileIn): symlinks are followed
//     as the guest would follow them, inside the root: an absolute target
//     starts again at the root and ".." at the root stays at the root.
//
// A Root is on a Host: OS, the machine's file system, or a memory one
// (NewMem) that answers every call as Linux does, for a simulated world
// that should make no system call (docs/seams.md).
//
// On the machine's file system, on Linux every call is made relative to a
// file descriptor of the root with openat2(2) (RESOLVE_BENEATH|
// RESOLVE_NO_SYMLINKS for strict calls, RESOLVE_IN_ROOT to read a file as
// the guest would) and the *at system calls, so a component swapped for a
// symlink between two calls cannot lead outside. Elsewhere os.Root gives
// the same confinement with per-component symlink checks.
//
//	r, err := vmroot.Open("/data/vms/vm-1/root")
//	if err != nil { … }
//	defer r.Close()
//	err = r.MkdirAll("/var/vcap/data/dynamic_disks", 0o700)
//	err = r.Symlink("../../../../dev/sdc", "/var/vcap/data/dynamic_disks/disk-1", vmroot.SymlinkAtomic)
//	dev, err := r.Resolve("/var/vcap/data/dynamic_disks/disk-1") // "/dev/sdc"
package vmroot
