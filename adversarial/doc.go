// Package adversarial is cpilab's seeded adversarial campaign against every
// boundary docs/security.md names.
//
// It throws hostile inputs at the Director's HTTP API, fakeiaas's HTTP API
// with restarts between creates, SFTP onto a VM root, the agent, the CPI
// process runner and the CLI's front doors, and decides each input with
// oracles outside the system under test:
//
//   - crash: a panic, a 5xx or a dropped connection, a process that hangs
//     past its bound, a non-zero exit where a clear error was expected;
//   - data lost: an acknowledged object (a disk, a VM, the bytes written to
//     a disk) gone or changed;
//   - leak: a process still running, a goroutine or an open descriptor more
//     than before, a file left outside the campaign's temporary directories,
//     an IaaS disk no record owns;
//   - escape: a file created or changed outside the VM root or the
//     temporary directory under attack (a sentinel tree watched by hash).
//
// Every input that should be refused is also checked for a clear error: a
// 4xx with a JSON body saying what was wrong, a typed error, an exit status
// 2 with a message. The result is a Tally per area, printed as a table and
// as JSON (`cpilab adversarial`, docs/security.md).
//
//	rep, err := adversarial.Run(ctx, adversarial.Config{Seed: 1, Scale: adversarial.ScaleFull})
//	if err != nil { … }
//	rep.WriteTable(os.Stdout)
//	if !rep.Clean() { … }
//
// One root seed drives every area through a derived sub-seed, so a run is
// reproduced by its seed and scale; Report.Replay is the command line.
// Faults can be planted (Config.Plant) to show each oracle can fail.
package adversarial
