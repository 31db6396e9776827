// Package diskmodel is the linearizability model of the dynamic-disk API per
// disk name, for github.com/anishathalye/porcupine, with the semantics of
// the dynamic_disks API:
//
//   - provide(vm): attached to another VM → fails; attached to vm → ok
//     (idempotent); detached → attaches; absent → creates and attaches.
//   - attach(vm): as provide, except that an unknown name fails.
//   - detach: already detached → ok; unknown name (no disk) → fails.
//   - delete: absent → ok; otherwise deletes (detaching first).
//   - create: absent → creates; an existing name → ok, nothing changes
//     (idempotent; a reported CID must be the disk's).
//   - evict(vm): an operator's recreate, VM delete or hard stop as one disk
//     name sees it: attached to vm → detached; otherwise nothing.
//
// Each operation's answer is ok, failed or unknown. An ok operation completed
// (and a CID it reports must be the disk's CID); a failed one made at most
// part of its progress; an unknown one (time-out, crash) may have taken effect
// fully, partly or not at all, at any time after its call.
//
// Record a workload's history and check it:
//
//	var rec diskmodel.Recorder
//	id := rec.Call(client, diskmodel.Input{Kind: diskmodel.Provide, Disk: "data", VM: "vm-1"})
//	// … the API call …
//	rec.Return(id, diskmodel.Output{Outcome: diskmodel.OK, CID: cid})
//	res, err := diskmodel.Check(rec.History(), diskmodel.Options{Visualization: "lin.html"})
//	if !res.Linearizable() { /* res.Illegal names the disks; lin.html shows why */ }
package diskmodel
