//go:build unix && !linux

package vmssh

import "golang.org/x/sys/unix"

// openDirFlags open a directory for look-ups only, never through a symlink.
const openDirFlags = unix.O_RDONLY | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC
