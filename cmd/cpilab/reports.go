package main

import (
	"flag"
	"io"

	"github.com/cpilab/cpilab/suites"
)

// reportPaths are the report files a certification run writes
// (--json-report, --junit-report, --html-report); certify and certify-flex
// share them.
type reportPaths struct{ json, junit, html string }

// check refuses, before the run, a report path that could not be written
// after it (a missing directory, a directory), as a usage error.
func (p reportPaths) check(fs *flag.FlagSet) error {
	for _, r := range []struct{ flag, path string }{{"--junit-report", p.junit}, {"--json-report", p.json}, {"--html-report", p.html}} {
		if r.path == "" {
			continue
		}
		if err := checkReportPath(r.path); err != nil {
			return usageError(fs, "%s %s: %v", r.flag, r.path, err)
		}
	}
	return nil
}

// write writes each report asked for.
func (p reportPaths) write(rep *suites.CertifyReport) error {
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
		if err := writeFile(r.path, r.write); err != nil {
			return err
		}
	}
	return nil
}

func (f certifyFlags) reports() reportPaths {
	return reportPaths{json: f.jsonReport, junit: f.junit, html: f.html}
}

func (f certifyFlexFlags) reports() reportPaths {
	return reportPaths{json: f.jsonReport, junit: f.junit, html: f.html}
}
