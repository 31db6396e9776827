//go:build !unix

package vmssh

import "io/fs"

// isDeviceNode reports whether fi, found under dev/, stands for a disk:
// without link counts every regular file there is taken for one.
func isDeviceNode(fi fs.FileInfo) bool { return fi.Mode().IsRegular() }
