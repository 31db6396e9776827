//go:build !unix

package agent

import "io/fs"

// allocatedBytes is the file's size where block counts are unavailable.
func allocatedBytes(fi fs.FileInfo) int64 { return fi.Size() }
