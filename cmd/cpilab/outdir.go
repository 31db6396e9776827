package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// checkOutDir checks, before any work starts, that files can be written
// under dir: it is a writable directory, or the nearest directory above it
// that exists is writable (dir is then made when a file is written). It
// writes and removes one probe file; it creates nothing that stays.
func checkOutDir(dir string) error {
	p := filepath.Clean(dir)
	for {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			return fmt.Errorf("%s is not a directory", p)
		case err == nil:
			f, err := os.CreateTemp(p, ".cpilab-out-probe-*")
			if err != nil {
				return fmt.Errorf("cannot write in %s: %w", p, errors.Unwrap(err))
			}
			name := f.Name()
			f.Close()
			return os.Remove(name)
		case !errors.Is(err, fs.ErrNotExist):
			return err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return fmt.Errorf("no directory of %s exists", dir)
		}
		p = parent
	}
}
