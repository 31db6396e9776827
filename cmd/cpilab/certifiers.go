package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"

	"github.com/cpilab/cpilab/certifier"
	"github.com/cpilab/cpilab/suites"
)

// runCertifier runs certifier c with the shared flags f that fs parsed,
// printing as every cpilab command does (colour on a terminal, --quiet,
// ASCII glyphs off UTF-8): the one path of certify, certify-director,
// certify-flex and certify-csi after their own flags are mapped.
func runCertifier(ctx context.Context, fs *flag.FlagSet, f *certifier.Flags, c certifier.Certifier, stdout, stderr io.Writer) error {
	u := newUI(fs, stdout, stderr)
	if f.Reports.ToStdout() {
		u = newUI(fs, stderr, stderr) // stdout holds the report alone
	}
	mod, commit, _ := version()
	o := certifier.Output{Out: u.out, Err: u.err, Stdout: stdout, Quiet: u.quiet,
		Progress: func(w io.Writer) certifier.Progress { return newProgress(w) },
		Tool:     suites.ToolInfo{Name: "cpilab", Version: mod, Commit: commit}, Command: append([]string{invokedAs()}, os.Args[1:]...)}
	if u.color {
		o.Paint = u.paint
	}
	code, err := certifier.Run(ctx, c, *f, o)
	var usage *certifier.UsageError
	switch {
	case errors.As(err, &usage):
		return usageError(fs, "%s", usage.Msg)
	case err != nil:
		return err
	case code != exitAccepted:
		return exitError(code)
	}
	return nil
}
