// Package certifier is the one runner behind every cpilab certifier (certify, certify-director, certify-flex, certify-csi): shared flags, verdict, reports and exit status.
//
// A certifier is a Certifier value: its name, what it certifies, its
// matrix's areas, and two functions over the shared suites.RunOptions
// shape (List and Run). Run (this package's) does the rest the same way
// for all of them: --list [--json], the results directory (--report-dir,
// optionally archived), the run with its progress line, cpilab's report
// built once (suites.NewCertifyReport) and written as text, JSON, JUnit
// and HTML to files, a pipe or stdout ("-"), the verdict line (ACCEPTED,
// REJECTED, NOTHING-CHECKED, INTERRUPTED, with PARTIAL for a filtered or
// fail-fast run) and the exit status: 0 accepted, 1 rejected or nothing
// checked, 2 a harness limit (an interrupt, a time limit, a report it
// cannot write, a target it cannot reach).
//
// Adding a certifier is writing its suite and a Certifier for it; its
// command maps its own flags onto the suite's configuration and calls Run.
package certifier
