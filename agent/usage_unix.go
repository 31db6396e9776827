//go:build unix

package agent

import (
	"io/fs"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/cpilab/cpilab/vmroot"
)

// allocatedBytes is the space a file really occupies: st_blocks × 512.
func allocatedBytes(fi fs.FileInfo) int64 {
	switch st := fi.Sys().(type) {
	case *syscall.Stat_t:
		return int64(st.Blocks) * 512
	case *unix.Stat_t:
		return int64(st.Blocks) * 512
	case *vmroot.MemStat:
		return st.Blocks * 512
	}
	return fi.Size()
}
