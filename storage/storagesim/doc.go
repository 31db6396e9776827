// Package storagesim runs the storage-sizing controller for weeks of virtual
// time in milliseconds. It holds a model of the Director's dynamic disks
// with its resize extension, a provider with modification quotas and
// latency, fill workloads, and faults (controller restarts, Director
// outages, failed resizes, a VM recreate in the middle of a resize), all
// drawn from one seed. Checkers outside the controller watch the invariants
// of convergent storage sizing after every tick and attribute every
// disk-full to the gate that allowed it.
//
//	res := storagesim.Run(storagesim.Config{Seed: 42})
//	for _, v := range res.Violations { fmt.Println(v) }
//
// A violation can be shrunk (Shrink) to a minimal Config and written as a
// scenario file (WriteScenario) that `cpilab replay` runs again.
package storagesim
