// Package refcpi is the reference CPI: every CPI method on top
// of fakeiaas, as a cpiv2.CPI. It runs in process over a *fakeiaas.Cloud
// (the simulator, fast tests) or in the fakeiaas-cpi executable over a
// *fakeiaas.Client.
//
// It honours the request's api_version (1 to Config.MaxAPIVersion, which
// is cpi.json's debug.cpi.api_version, default 3) and the stemcell
// api_version in the context: agent settings go into the VM's user-data
// only when both are ≥ 2; otherwise user-data holds the registry endpoint
// and the settings are PUT to the registry, attach_disk and detach_disk
// keep the settings' disks.persistent up to date, and delete_vm deletes
// them. The disk hint follows the VM's disk_hint cloud
// property (docs/seams.md). Rate-limited IaaS calls are retried inside the
// call with exponential back-off on the runtime clock, each retry logged.
//
// In process:
//
//	cloud, _ := fakeiaas.New(fakeiaas.Config{DataDir: dir, Store: "memory"})
//	cpi := refcpi.New(refcpi.Config{Registry: cloud, RegistryEndpoint: "http://registry"}, cloud)
//	caller := cpiv2.NewLoopback(cpi, cpiv2.LoopbackConfig{MaxAPIVersion: cpi.MaxAPIVersion()})
//	res, err := caller.CreateVM(cpiv2.WithStemcellAPIVersion(ctx, 2), args)
package refcpi
