//go:build unix

package vmssh

import (
	"io/fs"
	"syscall"
)

// isDeviceNode reports whether fi, found under dev/, stands for a disk: a
// regular file with more than one name (fakeiaas hard-links the disk's
// backing file there).
func isDeviceNode(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return fi.Mode().IsRegular() && (!ok || st.Nlink > 1)
}
