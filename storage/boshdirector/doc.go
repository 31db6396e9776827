// Package boshdirector connects the storage controller to a real Director
// and its agents. It holds Director (storage.Director over the Director's
// HTTP API, with cpilab's resize extension), Usage (storage.UsageSource over
// the agents' dynamic_disk_usage through the mbus), FileStore (a
// storage.StatusStore in one JSON file, written atomically) and LoadVolumes
// (the volumes and their policies, from YAML).
//
//	c, _ := director.NewClient(director.ClientConfig{URL: url, Username: "admin", Password: pw})
//	agents, _ := mbus.NewClient(mbus.ClientConfig{Transport: nats, DirectorUUID: "storage"})
//	vols, _ := boshdirector.LoadVolumes("policy.yml")
//	st, _ := boshdirector.OpenFileStore("status.json")
//	ctl, _ := storage.New(storage.Config{Director: boshdirector.NewDirector(c),
//		Usage: boshdirector.NewUsage(c, agents), Store: st})
//	for _, v := range vols { ctl.Reconcile(ctx, v, now) }
package boshdirector
