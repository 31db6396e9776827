// Package testbed starts, on loopback, everything a CPI certification run
// needs. That is an embedded fakeiaas (HTTP API, registry, metadata service,
// oracle, fault rules) whose VM hooks boot the reference agent in-process on
// each VM root, an embedded NATS server for the mbus, and an SSH/SFTP server
// onto the VM roots with a generated client key. It writes the cpi.json
// files for the reference CPI (docs/seams.md), one per setup
// (debug.cpi.api_version, with or without a registry), and the stemcell
// images of api_version 1 and 2.
//
//	tb, err := testbed.Start(testbed.Config{})
//	if err != nil { … }
//	defer tb.Close()
//	path, err := tb.CPIConfig(testbed.CPISetup{APIVersionCap: 2})
//	// bin/fakeiaas-cpi -configPath path < request.json
//	cfg, err := tb.SuiteConfig([]string{"bin/fakeiaas-cpi"}) // for package suites/cpisuite
//
// testbed is the process-per-part world; director/lab is the in-process one
// (docs/seams.md, "Worlds", says which to use when).
//
// Agents boot through agent/boothook: a VM's agent starts with create_vm and keeps trying to
// read its settings until AgentBootTimeout, because a v1 CPI writes the
// registry only after create_vm returned the VM CID. Close halts every
// agent and removes the directory Start created.
package testbed
