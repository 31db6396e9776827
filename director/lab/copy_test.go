//go:build unix

package lab

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func sparseFile(t *testing.T, path string, size int64, at map[int64][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, b := range at {
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
}

func TestCopySparseKeepsDataAndHoles(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	sparseFile(t, src, 16<<20, map[int64][]byte{1 << 20: []byte("one"), 5<<20 + 7: []byte("five")})
	sparseFile(t, dst, 8<<20, nil)
	if err := copySparse(src, dst); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(dst)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 8<<20 || !bytes.Equal(b[1<<20:1<<20+3], []byte("one")) || !bytes.Equal(b[5<<20+7:5<<20+11], []byte("five")) {
		t.Fatalf("target: %d bytes, data at 1 MiB %q, at 5 MiB %q", len(b), b[1<<20:1<<20+3], b[5<<20+7:5<<20+11])
	}
	var st syscall.Stat_t
	if err := syscall.Stat(dst, &st); err != nil {
		t.Fatal(err)
	}
	if alloc := st.Blocks * 512; alloc > 1<<20 {
		t.Fatalf("the copy allocated %d bytes for two small writes: holes were filled", alloc)
	}
}

func TestCopySparseRefusesToCutData(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "src"), filepath.Join(dir, "dst")
	sparseFile(t, src, 16<<20, map[int64][]byte{12 << 20: []byte("late")})
	sparseFile(t, dst, 8<<20, nil)
	if err := copySparse(src, dst); !errors.Is(err, ErrDataBeyondSize) {
		t.Fatalf("copy of data past the target's end: %v; want ErrDataBeyondSize", err)
	}
	// Zeros past the end are no data: a shrink of an empty tail works.
	sparseFile(t, src, 16<<20, map[int64][]byte{2 << 20: []byte("early")})
	if err := copySparse(src, dst); err != nil {
		t.Fatalf("copy with only zeros past the target's end: %v", err)
	}
}
