//go:build unix && !linux

package vmssh

import "golang.org/x/sys/unix"

// openDir opens directory c of parent for look-ups only; a symlink there
// (swapped in since it was examined) is refused with ELOOP.
func openDir(parent int, c string) (int, error) {
	return unix.Openat(parent, c, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}
