package director

import (
	"fmt"

	"github.com/cpilab/cpilab/rt"
)

// newUUID draws a version-4 UUID from the runtime's "director/ids" stream, so
// IDs replay under the simulator.
func newUUID(r rt.Runtime) string {
	rng := r.Rand("director/ids")
	hi, lo := rng.Uint64(), rng.Uint64()
	hi = (hi &^ (0xf << 12)) | (4 << 12)
	lo = (lo &^ (0x3 << 62)) | (0x2 << 62)
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", hi>>32, (hi>>16)&0xffff, hi&0xffff, lo>>48, lo&0xffffffffffff)
}
