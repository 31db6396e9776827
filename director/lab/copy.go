package lab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
)

// ErrDataBeyondSize is returned by CopyDisk when the source holds data past
// the end of the target: a copy to a smaller disk would lose it.
var ErrDataBeyondSize = errors.New("the source disk holds data beyond the target disk's size")

var _ director.DiskCopier = (*Lab)(nil)

// copyBlock is the unit CopyDisk reads and, unless it is all zeros, writes.
const copyBlock = 64 << 10

// CopyDisk copies disk from onto disk to, both attached to vm, through the
// VM root's device nodes (hard links to the disks' backing files), as a
// copy in the guest would: the Director's disk migration (director.DiskCopier).
// Blocks of zeros are skipped, so the copy stays as sparse as the source and
// a usage report of the new disk equals the old one's. Data past the
// target's size fails the copy (ErrDataBeyondSize) rather than being cut.
func (l *Lab) CopyDisk(ctx context.Context, vm cpiv2.VMCID, from, to cpiv2.DiskCID) error {
	st, err := l.Cloud.State(ctx)
	if err != nil {
		return err
	}
	var src, dst string
	for _, v := range st.VMs {
		if v.CID != vm {
			continue
		}
		for _, a := range v.Attachments {
			switch a.DiskCID {
			case from:
				src = filepath.Join(v.Root, "dev", a.Device)
			case to:
				dst = filepath.Join(v.Root, "dev", a.Device)
			}
		}
	}
	if src == "" || dst == "" {
		return fmt.Errorf("lab: copy %s to %s: both must be attached to VM %s (source device %q, target device %q)", from, to, vm, src, dst)
	}
	return copySparse(src, dst)
}

func copySparse(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("lab: copy: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("lab: copy: %w", err)
	}
	fi, err := out.Stat()
	if err != nil {
		_ = out.Close()
		return fmt.Errorf("lab: copy: %w", err)
	}
	limit := fi.Size()
	buf, zero := make([]byte, copyBlock), make([]byte, copyBlock)
	var off int64
	for {
		n, rerr := io.ReadFull(in, buf)
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			if off+int64(n) > limit && !bytes.Equal(buf[max(0, limit-off):n], zero[:n-int(max(0, limit-off))]) {
				_ = out.Close()
				return fmt.Errorf("lab: copy %s to %s: data at byte %d, target is %d bytes: %w", src, dst, max(off, limit), limit, ErrDataBeyondSize)
			}
			w := int64(n)
			if off+w > limit {
				w = limit - off
			}
			if _, err := out.WriteAt(buf[:w], off); err != nil {
				_ = out.Close()
				return fmt.Errorf("lab: copy: %w", err)
			}
		}
		off += int64(n)
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			_ = out.Close()
			return fmt.Errorf("lab: copy: %w", rerr)
		}
	}
	if err := out.Sync(); err != nil {
		_ = out.Close()
		return fmt.Errorf("lab: copy: %w", err)
	}
	return out.Close()
}
