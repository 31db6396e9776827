// Package suites is the machinery every cpilab suite shares: running a
// Ginkgo tree, listing it, and its reports as text, JSON, JUnit and HTML.
//
// A suite (suites/cpisuite for CPIs, suites/dynamicdisks for a
// Director's dynamic disks API, suites/flex for FlexVolume drivers,
// suites/csisuite for CSI drivers) registers its specs in a function and
// hands it to RunTree, or to ListTree to list them without running
// anything; both take the same RunOptions (label filter, focus, skip,
// --fail-fast, progress, time limit). RunWorkers spreads a suite's
// containers (its "row:" labels, in the shares the suite picks) over
// worker processes that run the program again, and merges their reports
// and progress. NewCertifyReport turns Ginkgo's
// report into cpilab's report format (CertifyReport: docs/report.schema.json,
// checked by ValidateJSONSchema), which writes itself as text, JSON, JUnit
// and HTML; a ReportRun carries what the suite knows of its own words: its
// clause titles, its areas (the matrix's columns) and the order of its
// rows.
//
// Specs speak to the reports through report entries (EntryClause,
// EntryMethods, EntryCalls, EntryViolation, EntryWarning,
// EntryExploreSequence): a Violation says which clause broke, what the
// target did instead and the call that showed it; a Warning is what a
// caller tolerates, never a failure. Failures and SpecFocus build the
// command that reruns one failed spec.
//
// This package imports no suite: a test keeps it so.
package suites
