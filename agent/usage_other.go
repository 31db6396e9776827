//go:build !unix

package agent

import (
	"io/fs"

	"github.com/cpilab/cpilab/vmroot"
)

// allocatedBytes is the file's size where block counts are unavailable
// (a memory file system's are).
func allocatedBytes(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*vmroot.MemStat); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
