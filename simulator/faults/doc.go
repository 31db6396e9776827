// Package faults holds the simulator's faults as values that print as one
// line and parse back. A Fault names what happens (Kind) and at which
// operation of its seam (At), so a run's fault schedule can be logged,
// replayed and shrunk.
//
// A run draws its faults from the seed under a Spec, the --faults flag:
//
//	spec, _ := faults.ParseSpec("cpi-error=0.05,lost-response=0.02,latency=0.1:10ms..2s")
//	in := faults.NewRandom(spec, rt.StreamSeed(seed, "faults"))
//	// in the in-process CPI wrapper, once per call:
//	for _, f := range in.Next(faults.SeamCPI, "attach_disk") {
//		switch f.Kind {
//		case faults.Latency:
//			r.Sleep(f.Duration)
//		case faults.CPIError:
//			return &cpiv2.Error{Type: f.ErrType, Message: "injected: " + f.String(), OkToRetry: f.OkToRetry}
//		case faults.LostResponse:
//			// call through, then report a time-out
//		}
//	}
//	// on failure:
//	fmt.Print(in.Fired()) // cpi-error@12 on=attach_disk type=Bosh::Clouds::CloudError …
//
// and a replay fires exactly that schedule:
//
//	sched, _ := faults.ParseSchedule(text)
//	in := faults.NewScripted(sched)
//
// The seams count their operations (CPI calls, agent requests, mbus
// messages, VMs created, workload steps) in the order they happen, which in a
// deterministic simulation depends only on the seed; each kind draws from a
// stream of its own, so changing one kind's rate leaves the others' faults
// where they were.
package faults
