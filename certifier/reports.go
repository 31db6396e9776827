package certifier

import (
	"archive/tar"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cpilab/cpilab/suites"
)

// Reports are the report files a certification run writes (--json-report,
// --junit-report, --html-report) and its results directory (--report-dir).
// The path "-" is stdout: the run's text then goes to stderr.
type Reports struct{ JSON, JUnit, HTML, Dir string }

// The files --report-dir DIR writes, beside the reports named elsewhere.
const (
	DirJSON  = "report.json"
	DirJUnit = "junit.xml"
	DirHTML  = "report.html"
	DirLog   = "cpilab.log"
)

// Stdout is the report path that means stdout.
const Stdout = "-"

// reportDirUsage is --report-dir's help.
const reportDirUsage = "write every report (" + DirJSON + ", " + DirJUnit + ", " + DirHTML + ") and the run's log (" + DirLog + ") into `DIR`, made if missing (DIR ending in .tar.gz or .tgz: packed into that archive at the end); a report flag given as well still wins"

// archived is p with --report-dir DIR.tar.gz (or .tgz) read as: write the
// reports and the log into DIR.tar.gz.d, then archive that directory into
// DIR.tar.gz at the end of the run (OpenDir's closer) and remove it.
func (p Reports) archived() (Reports, string) {
	if strings.HasSuffix(p.Dir, ".tar.gz") || strings.HasSuffix(p.Dir, ".tgz") {
		archive := p.Dir
		p.Dir += ".d"
		return p, archive
	}
	return p, ""
}

// inDir is p with every report not named otherwise in p.Dir.
func (p Reports) inDir() Reports {
	p, _ = p.archived()
	if p.Dir == "" {
		return p
	}
	for _, r := range []struct {
		path *string
		name string
	}{{&p.JSON, DirJSON}, {&p.JUnit, DirJUnit}, {&p.HTML, DirHTML}} {
		if *r.path == "" {
			*r.path = filepath.Join(p.Dir, r.name)
		}
	}
	return p
}

// OpenDir makes --report-dir (and its parents) and sends everything o
// prints, its Out and Err, to its cpilab.log too, without colour: the
// run's log beside its reports. The caller closes the log (which, for an
// archive, packs the directory).
func (p Reports) OpenDir(o *Output) (io.Closer, error) {
	p, archive := p.archived()
	if p.Dir == "" {
		return io.NopCloser(nil), nil
	}
	if err := os.MkdirAll(p.Dir, 0o755); err != nil {
		return nil, usagef("--report-dir %s: %v", p.Dir, err)
	}
	log, err := os.OpenFile(filepath.Join(p.Dir, DirLog), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return nil, usagef("--report-dir %s: %v", p.Dir, err)
	}
	o.Paint = nil
	o.Out, o.Err = io.MultiWriter(o.Out, log), io.MultiWriter(o.Err, log)
	if archive != "" {
		return archiveOnClose{log: log, dir: p.Dir, archive: archive}, nil
	}
	return log, nil
}

// archiveOnClose closes the run's log, then packs the report directory
// into a .tar.gz and removes the directory.
type archiveOnClose struct {
	log          io.Closer
	dir, archive string
}

func (a archiveOnClose) Close() error {
	if err := a.log.Close(); err != nil {
		return err
	}
	if err := WriteFile(a.archive, func(w io.Writer) error { return tarGz(w, a.dir) }); err != nil {
		return fmt.Errorf("--report-dir %s: %w", a.archive, err)
	}
	return os.RemoveAll(a.dir)
}

// tarGz writes the regular files of dir (one level) as a gzip-compressed
// tar, under the archive's base name without its extension.
func tarGz(w io.Writer, dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	top := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(filepath.Base(dir), ".d"), ".tar.gz"), ".tgz")
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: top + "/" + e.Name(), Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(b); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return zw.Close()
}

// ToStdout reports whether a report goes to stdout; the text output then
// goes to stderr, so that stdout holds the report alone.
func (p Reports) ToStdout() bool {
	return p.JSON == Stdout || p.JUnit == Stdout || p.HTML == Stdout
}

// Check refuses, before the run, a report path that could not be written
// after it (a missing directory, a directory), and two reports on stdout,
// as a usage error.
func (p Reports) Check() error {
	p, archive := p.archived()
	if archive != "" {
		if err := CheckReportPath(archive); err != nil {
			return usagef("--report-dir %s: %v", archive, err)
		}
	}
	if p.Dir != "" {
		if fi, err := os.Stat(p.Dir); err == nil && !fi.IsDir() {
			return usagef("--report-dir %s: not a directory", p.Dir)
		}
	}
	p = p.inDir()
	var onStdout []string
	for _, r := range []struct{ flag, path string }{{"--junit-report", p.JUnit}, {"--json-report", p.JSON}, {"--html-report", p.HTML}} {
		if r.path == "" {
			continue
		}
		if r.path == Stdout {
			if onStdout = append(onStdout, r.flag); len(onStdout) > 1 {
				return usagef("%s: only one report can go to stdout (-)", strings.Join(onStdout, " and "))
			}
			continue
		}
		if p.Dir != "" && filepath.Dir(r.path) == filepath.Clean(p.Dir) {
			continue // made by OpenDir
		}
		if err := CheckReportPath(r.path); err != nil {
			return usagef("%s %s: %v", r.flag, r.path, err)
		}
	}
	return nil
}

// Write writes each report asked for, the one named "-" to stdout.
func (p Reports) Write(rep *suites.CertifyReport, stdout io.Writer) error {
	p = p.inDir()
	for _, r := range []struct {
		path  string
		write func(io.Writer) error
	}{
		{p.JSON, rep.WriteJSON},
		{p.JUnit, rep.WriteJUnit},
		{p.HTML, func(w io.Writer) error { return suites.WriteHTML(w, rep) }},
	} {
		if r.path == "" {
			continue
		}
		if r.path == Stdout {
			if err := writeOrSignal("stdout", func() error { return r.write(stdout) }); err != nil {
				return fmt.Errorf("writing a report to stdout: %w", err)
			}
			continue
		}
		if err := WriteFile(r.path, r.write); err != nil {
			return err
		}
	}
	return nil
}

// CheckReportPath refuses a report path whose directory is missing or
// that names a directory, so that a report is never lost after a run.
func CheckReportPath(p string) error {
	if fi, err := os.Stat(p); err == nil && fi.IsDir() {
		return errors.New("is a directory; give a file name")
	}
	dir := filepath.Dir(p)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist (create it first)", dir)
	case err != nil:
		return err
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	return nil
}

// WriteFile writes a report to path. It opens path write-only: opened
// read-write, a path such as /dev/stdout that names a pipe would make this
// process a reader of its own pipe, and a write would block for good once
// the real reader left. A signal stops a write that blocks (writeOrSignal).
func WriteFile(path string, write func(io.Writer) error) error {
	return writeOrSignal(path, func() error {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
		if err != nil {
			return err
		}
		if err := write(f); err != nil {
			f.Close()
			return fmt.Errorf("writing %s: %w", path, err)
		}
		return f.Close()
	})
}

// writeOrSignal runs write, returning early with an error when SIGINT or
// SIGTERM arrives while it runs: writing to a pipe or a slow file never
// keeps Ctrl-C from ending cpilab (the run's own interrupt came before, and
// the reports of an interrupted run are still written).
func writeOrSignal(what string, write func() error) error {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan error, 1)
	go func() { done <- write() }() // I/O edge: the write may block on a pipe
	select {
	case err := <-done:
		return err
	case sig := <-sigs:
		return fmt.Errorf("writing %s: stopped by %v; the report is incomplete", what, sig)
	}
}
