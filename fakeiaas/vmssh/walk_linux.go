//go:build linux

package vmssh

import "golang.org/x/sys/unix"

// openDir opens directory c of parent for look-ups only. A symlink there
// (swapped in since it was examined) is refused, never followed: openat2's
// RESOLVE_NO_SYMLINKS without O_NOFOLLOW (with O_PATH, O_NOFOLLOW would open
// the link itself).
func openDir(parent int, c string) (int, error) {
	return unix.Openat2(parent, c, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}
