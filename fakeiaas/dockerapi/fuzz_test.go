package dockerapi

import (
	"archive/tar"
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// FuzzTarExtract: whatever tar a guest's exec streams in, nothing lands
// outside the VM root and no link or device lands inside it.
func FuzzTarExtract(f *testing.F) {
	seed := func(hs ...*tar.Header) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range hs {
			_ = tw.WriteHeader(h)
			if h.Typeflag == tar.TypeReg {
				_, _ = tw.Write(make([]byte, h.Size))
			}
		}
		_ = tw.Close()
		return buf.Bytes()
	}
	f.Add(seed(&tar.Header{Name: "var/vcap/bosh/settings.json", Typeflag: tar.TypeReg, Size: 3, Mode: 0o640}))
	f.Add(seed(&tar.Header{Name: "../../outside", Typeflag: tar.TypeReg, Size: 1, Mode: 0o644}))
	f.Add(seed(&tar.Header{Name: "a", Typeflag: tar.TypeSymlink, Linkname: ".."}, &tar.Header{Name: "a/x", Typeflag: tar.TypeReg, Size: 1}))
	f.Add(seed(&tar.Header{Name: "/abs/x", Typeflag: tar.TypeReg, Size: 1}, &tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		base := t.TempDir()
		root := filepath.Join(base, "root")
		if err := os.Mkdir(root, 0o755); err != nil {
			t.Fatal(err)
		}
		rt, err := os.OpenRoot(root)
		if err != nil {
			t.Fatal(err)
		}
		defer rt.Close()
		_ = tarExtract(rt, ".", bytes.NewReader(data), 1<<20)
		err = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p == base || p == root {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			if rel == ".." || len(rel) > 2 && rel[:3] == "../" {
				t.Errorf("%s was written outside the root", p)
			}
			if !d.IsDir() && !d.Type().IsRegular() {
				t.Errorf("%s is a %v, not a file or directory", p, d.Type())
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
