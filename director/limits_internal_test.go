package director

import (
	"errors"
	"testing"
)

// disk_size is accepted up to MaxDiskSizeMiB (64 TiB) and refused past it,
// naming the field.
func TestCheckDiskSizeBoundary(t *testing.T) {
	if MaxDiskSizeMiB != 64*1024*1024 {
		t.Fatalf("MaxDiskSizeMiB = %d; the documented limit is 64 TiB", MaxDiskSizeMiB)
	}
	for size, ok := range map[int]bool{0: true, 1: true, MaxDiskSizeMiB: true, MaxDiskSizeMiB + 1: false, 1 << 44: false, -1: false} {
		err := checkDiskSize("disk_size", size)
		if (err == nil) != ok {
			t.Errorf("disk_size %d: %v; want accepted %v", size, err, ok)
		}
		var e *Error
		if err != nil && (!errors.As(err, &e) || e.Field != "disk_size" || !errors.Is(err, ErrBadRequest)) {
			t.Errorf("disk_size %d: %v; want a 400 naming disk_size", size, err)
		}
	}
}
