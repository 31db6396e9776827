// Package cpisuite holds cpilab's Ginkgo v2 suites for BOSH CPIs, as a
// library with a thin binary (the csi-test pkg/sanity shape): the CPI
// contract suite and the reference-table matrix suite. Specs are registered
// once and run under go test (Test), inside someone else's Ginkgo tree
// (Register), or from `cpilab certify` (Run).
//
// Every spec's It text starts with the id and title of the clause it
// checks ("errors.delete-disk-missing: delete_disk of a missing disk →
// success or DiskNotFound, never a generic CloudError"); the ids are listed
// in AllClauses and documented in docs/contracts.md. Every failure says
// what the CPI did instead, with the request and response of the call that
// showed it (a suites.Violation, report entry suites.EntryViolation). Each
// spec also carries its clause (suites.EntryClause), the CPI methods it
// really called (suites.EntryMethods) and every call with its times
// (suites.EntryCalls); what a caller tolerates but the documentation
// advises against is a suites.Warning (suites.EntryWarning), never a
// failure. Specs are labelled suite:, row: (caller profile × version),
// profile:, api:, area:, method: (the methods the spec calls; a test
// checks them against the recorded calls), resolver: and
// cap:, so that any subset can be run with a label filter; List shows them
// without running anything.
//
// Each container (a contract context, a reference-table row) starts with
// its setup spec (setup.context) and ends with its teardown
// (cleanup.teardown) and leak check (cleanup.no-leak), so that their
// failures are reported where they happen. When the setup spec is filtered
// out (a focused rerun), the setup runs before the first spec that runs;
// when the teardown and leak specs are, they run after the last spec that
// runs, once its own clean-up is done, so a filter never shows as a leak.
// Every create_vm retries as the Director does (MaxVMCreateTries).
//
// Run spreads the containers over worker processes
// (suites.RunOptions.Workers, suites.RunWorkers), each with its own
// resources; Config.Strict turns "not checked" into failures and
// Config.RequireAPIVersion fails CPIs reporting less.
//
// # The CPI contract suite
//
// Runs once per ContractContext (by default: director-current at
// api_version 3, director-v2 at 2, director-v2 against a CPI capped at 1,
// director-v1, and the bosh CLI). It checks result shapes per version,
// error types (delete_vm/delete_disk/detach_disk of missing things, unknown
// methods, malformed requests, known types only), has_vm/has_disk
// truthfulness, get_disks, disk hints, protocol strictness on every single
// call (one JSON object on stdout, the three keys, log a string,
// ok_to_retry a bool, exit status 0; a result beside an error is a warning), at least
// 8 calls held in flight at once without crossed results, the Director's
// create_vm retry on VMCreationFailed with ok_to_retry, and, with an
// Oracle, the IaaS state behind each answer: disks of the size and
// cloud_properties asked, stemcells and snapshots that exist (each
// snapshot of the disk it was asked for), VMs with at least the CPUs, RAM
// and ephemeral disk asked of calculate_vm_cloud_properties, hints that
// name the device the IaaS attached for that disk, disks (and their data)
// kept when the VM they are attached to is deleted.
//
// # The reference-table matrix suite
//
// Runs every Row of ReferenceTable end to end, each row's stemcell with
// its own agent device resolver (identity, mapped, virtio, scsi): stemcell
// upload and create_vm; registry and user-data exactly as the table says;
// the agent answers ping over the mbus; attach_disk, then the agent
// resolves the hint (add_persistent_disk, mount_disk, add_dynamic_disk);
// the dynamic disk link, read over SFTP, leads to the disk the IaaS
// attached; data written there is read back on a second VM after detach and
// attach; clean-up leaves nothing in the IaaS. The current Director's CPI 1
// row checks the refusal, and its stemcell 1 row (no registry) checks that
// create_vm fails clearly.
//
// # Capabilities, skips and clean-up
//
// What a spec needs beyond the CPI is a "cap:" label (oracle, agent, ssh,
// faults); Config.Capabilities turns the Config into the set of present
// capabilities, and a spec whose capability is absent is skipped with the
// reason. Skips are never passes: reports list them apart, with their
// reasons. Every VM, disk, stemcell, snapshot and attachment a spec creates
// is recorded by a Tracker and removed in reverse order after the spec,
// failed or not (NotFound counts as done); names are unique per run.
//
// # Embedding
//
//	var cfg = cpisuite.Config{CPI: cpisuite.Target{Command: []string{"bin/my-cpi"}, …}}
//	var _ = cpisuite.Register(&cfg) // in your own Ginkgo suite
//
// # How to certify a CPI (README text)
//
// Build and certify the reference CPI on the embedded fake cloud, across
// every caller profile and every row of the reference table:
//
//	make certify            # = make build && bin/cpilab certify
//
// Certify your own CPI executable on the same embedded fake cloud. cpilab
// writes one cpi.json per setup (docs/seams.md format, with
// debug.cpi.api_version for the rows that need an older CPI) and runs your
// CPI as `PATH -configPath FILE`, one process per call, with the Director's
// scrubbed environment:
//
//	bin/cpilab certify --cpi ./my-cpi
//
// Rows your CPI cannot be switched into (it ignores debug.cpi.api_version)
// are skipped with the reason; add --expect-version-switch to make them
// failures instead. Certify against a real cloud with a YAML file naming
// the CPI command and config, stemcells, cloud properties, networks and
// (optionally) the agents' mbus; the oracle checks are then skipped and
// the output says so:
//
//	bin/cpilab certify --config my-cloud.yml
//
// Narrow a run with --label-filter ('area:errors && api:2',
// 'row:d2.c2.s2', 'method:attach_disk', '!cap:ssh'), write reports with
// --junit-report, --json-report and --html-report (a matrix readable at a
// glance), and bound a hanging CPI with --call-timeout. cpilab prints a
// live progress line, then a summary table (caller profile × version rows,
// areas as columns: ✔ passed, ✘ failed, – not checked), and for each
// failure the clause, what the CPI did instead, the request and response,
// and a command that reruns only that spec (--focus). The exit status is 1
// on any failure, or when nothing was checked at all.
//
// Inside go test:
//
//	func TestMyCPI(t *testing.T) {
//		tb, _ := testbed.Start(testbed.Config{})
//		defer tb.Close()
//		cfg, _ := tb.SuiteConfig([]string{"bin/my-cpi"})
//		cpisuite.Test(t, cfg)
//	}
package cpisuite
