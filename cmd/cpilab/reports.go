package main

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/onsi/ginkgo/v2/types"

	"github.com/cpilab/cpilab/suites"
)

// reportPaths are the report files a certification run writes
// (--json-report, --junit-report, --html-report); certify and certify-flex
// share them. The path "-" is stdout: the run's text then goes to stderr.
type reportPaths struct{ json, junit, html, dir string }

// The files --report-dir DIR writes, beside the reports named elsewhere.
const (
	dirJSON  = "report.json"
	dirJUnit = "junit.xml"
	dirHTML  = "report.html"
	dirLog   = "cpilab.log"
)

// archived is p with --report-dir DIR.tar.gz (or .tgz) read as: write the
// reports and the log into DIR.tar.gz.d, then archive that directory into
// DIR.tar.gz at the end of the run (openDir's closer) and remove it.
func (p reportPaths) archived() (reportPaths, string) {
	if strings.HasSuffix(p.dir, ".tar.gz") || strings.HasSuffix(p.dir, ".tgz") {
		archive := p.dir
		p.dir += ".d"
		return p, archive
	}
	return p, ""
}

// inDir is p with every report not named otherwise in p.dir.
func (p reportPaths) inDir() reportPaths {
	p, _ = p.archived()
	if p.dir == "" {
		return p
	}
	for _, r := range []struct {
		path *string
		name string
	}{{&p.json, dirJSON}, {&p.junit, dirJUnit}, {&p.html, dirHTML}} {
		if *r.path == "" {
			*r.path = filepath.Join(p.dir, r.name)
		}
	}
	return p
}

// openDir makes --report-dir (and its parents) and sends everything u
// prints, stdout and stderr, to its cpilab.log too, without colour: the
// run's log beside its reports. The caller closes the log.
func (p reportPaths) openDir(fs *flag.FlagSet, u *ui) (io.Closer, error) {
	p, archive := p.archived()
	if p.dir == "" {
		return io.NopCloser(nil), nil
	}
	if err := os.MkdirAll(p.dir, 0o755); err != nil {
		return nil, usageError(fs, "--report-dir %s: %v", p.dir, err)
	}
	log, err := os.OpenFile(filepath.Join(p.dir, dirLog), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o666)
	if err != nil {
		return nil, usageError(fs, "--report-dir %s: %v", p.dir, err)
	}
	u.color = false
	u.out, u.err = io.MultiWriter(u.out, log), io.MultiWriter(u.err, log)
	if archive != "" {
		return archiveOnClose{log: log, dir: p.dir, archive: archive}, nil
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
	if err := writeFile(a.archive, func(w io.Writer) error { return tarGz(w, a.dir) }); err != nil {
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

// stdoutPath is the report path that means stdout.
const stdoutPath = "-"

// toStdout reports whether a report goes to stdout; the text output then
// goes to stderr, so that stdout holds the report alone.
func (p reportPaths) toStdout() bool {
	return p.json == stdoutPath || p.junit == stdoutPath || p.html == stdoutPath
}

// check refuses, before the run, a report path that could not be written
// after it (a missing directory, a directory), and two reports on stdout,
// as a usage error.
func (p reportPaths) check(fs *flag.FlagSet) error {
	p, archive := p.archived()
	if archive != "" {
		if err := checkReportPath(archive); err != nil {
			return usageError(fs, "--report-dir %s: %v", archive, err)
		}
	}
	if p.dir != "" {
		if fi, err := os.Stat(p.dir); err == nil && !fi.IsDir() {
			return usageError(fs, "--report-dir %s: not a directory", p.dir)
		}
	}
	p = p.inDir()
	var onStdout []string
	for _, r := range []struct{ flag, path string }{{"--junit-report", p.junit}, {"--json-report", p.json}, {"--html-report", p.html}} {
		if r.path == "" {
			continue
		}
		if r.path == stdoutPath {
			if onStdout = append(onStdout, r.flag); len(onStdout) > 1 {
				return usageError(fs, "%s: only one report can go to stdout (-)", strings.Join(onStdout, " and "))
			}
			continue
		}
		if p.dir != "" && filepath.Dir(r.path) == filepath.Clean(p.dir) {
			continue // made by openDir
		}
		if err := checkReportPath(r.path); err != nil {
			return usageError(fs, "%s %s: %v", r.flag, r.path, err)
		}
	}
	return nil
}

// write writes each report asked for, the one named "-" to stdout.
func (p reportPaths) write(rep *suites.CertifyReport, stdout io.Writer) error {
	p = p.inDir()
	for _, r := range []struct {
		path  string
		write func(io.Writer) error
	}{
		{p.json, rep.WriteJSON},
		{p.junit, rep.WriteJUnit},
		{p.html, func(w io.Writer) error { return suites.WriteHTML(w, rep) }},
	} {
		if r.path == "" {
			continue
		}
		if r.path == stdoutPath {
			if err := writeOrSignal("stdout", func() error { return r.write(stdout) }); err != nil {
				return fmt.Errorf("writing a report to stdout: %w", err)
			}
			continue
		}
		if err := writeFile(r.path, r.write); err != nil {
			return err
		}
	}
	return nil
}

func (f certifyFlags) reports() reportPaths {
	return reportPaths{json: f.jsonReport, junit: f.junit, html: f.html, dir: f.reportDir}
}

func (f certifyFlexFlags) reports() reportPaths {
	return reportPaths{json: f.jsonReport, junit: f.junit, html: f.html, dir: f.reportDir}
}

// reportDirUsage is --report-dir's help.
const reportDirUsage = "write every report (" + dirJSON + ", " + dirJUnit + ", " + dirHTML + ") and the run's log (" + dirLog + ") into `DIR`, made if missing (DIR ending in .tar.gz or .tgz: packed into that archive at the end); a report flag given as well still wins"

// verdictExit is a certifier's exit status for its verdict: 0 accepted,
// 2 interrupted (a harness limit), 1 otherwise.
func verdictExit(rep *suites.CertifyReport) error {
	switch rep.Verdict {
	case suites.VerdictAccepted:
		return nil
	case suites.VerdictInterrupted:
		return exitError(exitUsage)
	}
	return exitError(exitRejected)
}

// checkFilters refuses a malformed label filter, focus or skip before
// anything starts.
func checkFilters(fs *flag.FlagSet, labelFilter, focus, skip string) error {
	if labelFilter != "" {
		if _, err := types.ParseLabelFilter(labelFilter); err != nil {
			return usageError(fs, "--label-filter %q: %s", labelFilter, oneLine(err.Error()))
		}
	}
	for _, r := range []struct{ name, re string }{{"--focus", focus}, {"--skip", skip}} {
		if _, err := regexp.Compile(r.re); err != nil {
			return usageError(fs, "%s %q: %v", r.name, r.re, err)
		}
	}
	return nil
}

// writeSpecList prints what --list found: for a person, each spec's id,
// text, clause and labels and the count; with --json, one JSON object
// {"specs": [...], "count": N} for a program.
func writeSpecList(w io.Writer, specs []suites.SpecInfo, asJSON bool) error {
	if asJSON {
		type listed struct {
			ID string `json:"id"`
			suites.SpecInfo
		}
		out := struct {
			Specs []listed `json:"specs"`
			Count int      `json:"count"`
		}{Specs: []listed{}, Count: len(specs)}
		for _, s := range specs {
			out.Specs = append(out.Specs, listed{ID: suites.SpecID(s.Text), SpecInfo: s})
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	for _, s := range specs {
		fmt.Fprintf(w, "%s  %s\n    clause: %s\n    labels: %s\n", suites.SpecID(s.Text), s.Text, suites.ClauseText(s.Clause), strings.Join(s.Labels, ", "))
	}
	fmt.Fprintf(w, "%d %s\n", len(specs), plural(len(specs), "spec", "specs"))
	return nil
}

// plural is one or many.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// selection is the flags every certifier shares to choose its specs and
// its reports: --label-filter, --focus, --skip, --list [--json], and the
// report paths. A certifier registers them with register.
type selection struct {
	labelFilter, focus, skip string
	list, listJSON           bool
	reports                  reportPaths
}

func (s *selection) register(fs *flag.FlagSet) {
	fs.StringVar(&s.labelFilter, "label-filter", "", "run only the specs matching this Ginkgo label filter `EXPR`")
	fs.StringVar(&s.focus, "focus", "", "run only the specs whose full text matches this `REGEXP`")
	fs.StringVar(&s.skip, "skip", "", "leave out the specs whose full text matches this `REGEXP`")
	fs.BoolVar(&s.list, "list", false, "list the specs (id, clause, labels) that would run, without running anything")
	fs.BoolVar(&s.listJSON, "json", false, "with --list: print the specs as JSON")
	fs.StringVar(&s.reports.junit, "junit-report", "", "write a JUnit XML report to `FILE` (- for stdout; the text then goes to stderr)")
	fs.StringVar(&s.reports.json, "json-report", "", "write cpilab's JSON report (docs/report.md) to `FILE` (- for stdout; the text then goes to stderr)")
	fs.StringVar(&s.reports.html, "html-report", "", "write an HTML report to `FILE` (- for stdout; the text then goes to stderr)")
	fs.StringVar(&s.reports.dir, "report-dir", "", reportDirUsage)
}

// check refuses, as usage errors, a malformed filter, --json without
// --list, and a report that could not be written.
func (s *selection) check(fs *flag.FlagSet) error {
	if err := checkFilters(fs, s.labelFilter, s.focus, s.skip); err != nil {
		return err
	}
	if s.listJSON && !s.list {
		return usageError(fs, "--json goes with --list")
	}
	return s.reports.check(fs)
}

func (s *selection) focusList() []string {
	if s.focus == "" {
		return nil
	}
	return []string{s.focus}
}

func (s *selection) skipList() []string {
	if s.skip == "" {
		return nil
	}
	return []string{s.skip}
}
