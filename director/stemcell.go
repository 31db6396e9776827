package director

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// stemcellUnpacker turns a stemcell location into stemcell.MF and an image
// path: a directory holding stemcell.MF and image, or a .tgz of them (as
// upstream stemcell tarballs are laid out), unpacked under dir.
type stemcellUnpacker struct {
	mu  sync.Mutex
	dir string // guarded by mu
}

func (u *stemcellUnpacker) open(location string) (mf []byte, image string, err error) {
	if err := checkPath("location", location); err != nil {
		return nil, "", err
	}
	if !filepath.IsAbs(location) {
		return nil, "", badField("location", "must be an absolute path; got %q", location)
	}
	fi, err := os.Stat(location)
	if err != nil {
		return nil, "", unprocessable("stemcell location %s: %v", location, err)
	}
	dir := location
	if !fi.IsDir() && fi.Size() > MaxStemcellTarballBytes {
		return nil, "", tarballTooBig(location, "the tarball's size in bytes", fi.Size(), MaxStemcellTarballBytes)
	}
	if !fi.IsDir() {
		if dir, err = u.unpack(location); err != nil {
			return nil, "", err
		}
	}
	mfPath := filepath.Join(dir, "stemcell.MF")
	if fi, err := os.Stat(mfPath); err == nil && fi.Size() > MaxStemcellManifestBytes {
		return nil, "", tarballTooBig(location, "stemcell.MF's size in bytes", fi.Size(), MaxStemcellManifestBytes)
	}
	mf, err = os.ReadFile(mfPath)
	if err != nil {
		return nil, "", unprocessable("stemcell at %s has no stemcell.MF: %v", location, err)
	}
	image = filepath.Join(dir, "image")
	if _, err := os.Stat(image); err != nil {
		return nil, "", unprocessable("stemcell at %s has no image: %v", location, err)
	}
	return mf, image, nil
}

func (u *stemcellUnpacker) unpack(tgz string) (_ string, err error) {
	u.mu.Lock()
	if u.dir == "" {
		d, err := os.MkdirTemp("", "cpilab-director-stemcells-")
		if err != nil {
			u.mu.Unlock()
			return "", err
		}
		u.dir = d
	}
	base := u.dir
	u.mu.Unlock()
	// The configured directory may not exist yet (a fresh data dir).
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", fmt.Errorf("stemcells directory %s: %w", base, err)
	}
	out, err := os.MkdirTemp(base, "stemcell-")
	if err != nil {
		return "", err
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(out) // leave no half-unpacked stemcell behind
		}
	}()
	f, err := os.Open(tgz)
	if err != nil {
		return "", unprocessable("open stemcell %s: %v", tgz, err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return "", unprocessable("stemcell %s is not a gzipped tarball: %v", tgz, err)
	}
	tr := tar.NewReader(zr)
	for entries := 1; ; entries++ {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return "", unprocessable("stemcell %s: %v", tgz, err)
		}
		if entries > MaxStemcellTarEntries {
			return "", tarballTooBig(tgz, "the number of entries", int64(entries), MaxStemcellTarEntries)
		}
		name := filepath.Base(filepath.Clean(h.Name))
		if h.Typeflag != tar.TypeReg || (name != "stemcell.MF" && name != "image") || strings.Contains(h.Name, "..") {
			continue
		}
		limit := int64(MaxStemcellImageBytes)
		if name == "stemcell.MF" {
			limit = MaxStemcellManifestBytes
		}
		if h.Size > limit {
			return "", tarballTooBig(tgz, h.Name+"'s size in bytes", h.Size, limit)
		}
		src := &readErrs{r: tr}
		if err := writeFile(filepath.Join(out, name), src); err != nil {
			if src.err != nil { // the tarball is broken, not the director
				return "", unprocessable("stemcell %s: %s: %v", tgz, h.Name, src.err)
			}
			return "", fmt.Errorf("unpack stemcell %s: %w", tgz, err)
		}
	}
}

// readErrs remembers the reader's error, to tell a broken tarball from a
// failed write.
type readErrs struct {
	r   io.Reader
	err error
}

func (e *readErrs) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		e.err = err
	}
	return n, err
}

func writeFile(path string, r io.Reader) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}
