// Package director is cpilab's reference BOSH Director for disks. It serves
// the dynamic disks API and its tasks (as upstream's, docs/upstream.md),
// deployments just deep enough to own VMs (stemcells, cloud config, instance
// groups, instance state changes, VM delete, deployment delete), normal,
// urgent and dynamic_disks queues with their own workers, lease locks on
// deployments, VMs and disk names, and restart recovery that reconciles the
// IaaS.
//
// The director reaches the cloud through a CPI (any cpiv2.CPI) and the agents
// through Agents (a *mbus.Client). All time, randomness and concurrency come
// from the injected rt.Runtime, so the simulator can run it deterministically.
// Where it deliberately differs from upstream (the races, and API details
// where it is stricter or kinder) the behaviour is a Knob, each listed in
// docs/upstream.md: Profile("reference") is safe, Profile("upstream")
// restores upstream's behaviour everywhere.
//
//	d, err := director.New(director.Config{CPI: cpi, Agents: agents, Store: st})
//	if err != nil { … }
//	defer d.Close()
//	id, err := d.Provide("csi", director.ProvideRequest{
//		DiskName: "pgdata", DiskPoolName: "fast", InstanceID: instanceID})
//	if err != nil { … }                          // *Error: 400, 404, 422
//	task, err := d.WaitTask(id, time.Minute)     // task.Result: {"disk_cid": …}
//
// Over HTTP, NewAPI serves the same operations with token auth (NewAuth,
// scopes Scope*), Serve listens with TLS on loopback, and Client calls the API
// and waits on tasks. Package director/lab wires a director to fakeiaas, the
// reference CPI and agents; package director/launch runs it all for
// `cpilab director`; package director/store holds the SQLite and memory
// stores.
//
// Lock order: a job's locks are taken as sets, atomically (lockTable), never
// one while waiting for another; lockTable.mu and Director.mu are leaf locks.
// A VM lock is named by its instance, so it also covers a recreate's window.
package director
