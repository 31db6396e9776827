package director

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
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

// Invalid UTF-8 in a JSON body is a malformed body (400), not text that
// silently becomes U+FFFD: a disk named "\xff" would be recorded as "�"
// (found by the adversarial campaign).
func TestInvalidUTF8BodyIsRefused(t *testing.T) {
	req := httptest.NewRequest(http.MethodPost, "/dynamic_disks/provide", strings.NewReader("{\"disk_name\":\"\xff\xfe\"}"))
	req.Header.Set("Content-Type", "application/json")
	_, err := readJSONObject(req, Knobs{})
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Field != "body" {
		t.Fatalf("a body with invalid UTF-8: %v; want a 400 naming the body", err)
	}
	req = httptest.NewRequest(http.MethodPost, "/dynamic_disks/provide", strings.NewReader(`{"disk_name":"名前"}`))
	req.Header.Set("Content-Type", "application/json")
	if _, err := readJSONObject(req, Knobs{}); err != nil {
		t.Fatalf("valid UTF-8 refused: %v", err)
	}
}
