package dynamicdisks

// The clauses the specs cite. Each It text starts with its clause, and each
// failure names the clause that broke. "dynamic disks" clauses are the
// contract of the RFC (community rfc-0053) as upstream's Director implements
// it; "race (x)" clauses the upstream races of docs/upstream.md that a
// correct director must not have; "director API" clauses the request and
// answer rules of upstream's controller (docs/upstream.md).
const (
	ClauseProvideCreates    = "dynamic disks: provide of a missing disk → create_disk + attach_disk to the instance's VM; the task result holds disk_cid"
	ClauseProvideIdempotent = "dynamic disks: provide of a disk attached to this VM → success, idempotent (the same disk_cid)"
	ClauseProvideElsewhere  = "dynamic disks: provide of a disk attached to another VM → the task fails"
	ClauseProvideUnattached = "dynamic disks: provide of an existing unattached disk → attaches it to the requested VM"
	ClauseDetach            = "dynamic disks: detach → success, and again → success (desired state)"
	ClauseDetachUnknown     = "dynamic disks: detach of an unknown disk name → fails"
	ClauseDeleteAbsent      = "dynamic disks: DELETE of an absent disk → success (idempotent)"
	ClauseDeleteDetached    = "dynamic disks: DELETE of an existing detached disk → delete_disk; GET /dynamic_disks no longer lists it"
	ClauseCreateAttach      = "dynamic disks: POST /dynamic_disks creates without attaching; POST /dynamic_disks/:name/attach attaches it"
	ClauseMetadata          = "dynamic disks: provide with metadata new or changed → set_disk_metadata; the IaaS disk holds it"
	ClauseTasks             = "dynamic disks: every endpoint queues a task and answers 302 to /tasks/<id>; provide's and create's task result holds disk_cid"
	ClauseIaaS              = "dynamic disks: the IaaS follows the API: provided → attached to the instance's VM, refused → unchanged, detached → detached, deleted → gone"
	ClauseSymlink           = "dynamic disks: the agent links /var/vcap/data/dynamic_disks/<disk_cid> when the disk is attached and removes the link on detach"
	ClauseNoCredentials     = "director API: no (or invalid) credentials → 401"
	ClauseScopeOnly         = "dynamic disks: credentials with the disk-management scopes alone can do nothing else (401 {\"code\": 600000, \"description\": \"Require one of the scopes: …\"})"
	ClauseScopeAllows       = "dynamic disks: the disk-management scope allows the dynamic disk endpoints"
	ClauseBadBody           = "director API: a missing property, a wrong type or a disk_size below 1 → 400 naming the property, before any task"
	ClauseDiskNames         = "director API: a disk name a path cannot carry (path characters, NUL, over-long) is refused at once, or kept as an opaque name, never another disk"
	ClauseUnknownRefs       = "director API: an unknown instance, disk pool or deployment → a task that fails saying why (or 404/422 at once)"
	ClauseRaceA             = "race (a): concurrent provides of one name to one VM → exactly one disk, every provide succeeds with its disk_cid"
	ClauseQueue             = "race (i), dedicated queue: disk work runs on a dedicated queue: a disk task completes while a deploy task is still running"
	ClauseRaceE             = "race (e): DELETE of an attached disk → detached first (link removed), then deleted; never delete_disk on an in-use disk"
	ClauseCleanup           = "dynamic disks: clean-up: detach and DELETE of every disk the suite made succeed (newest first), then its deployments are deleted"
	ClauseList              = "dynamic disks model: GET /dynamic_disks answers a JSON list (an empty director lists [], never null) naming every disk once"
	ClauseModel             = "dynamic disks model: every request gets one of the answers the model allows, and after it the list, each disk, the task results (and with an oracle the IaaS) match the model"
	ClauseModelZones        = "dynamic disks model: attach across AZs is refused; create in another AZ makes the disk there; provide across AZs attaches (upstream) or is refused"
	ClauseModelDeployments  = "dynamic disks model: attach across deployments is refused; provide across deployments attaches (upstream) or is refused"
	ClauseModelMany         = "dynamic disks model: GET /dynamic_disks lists every disk, more than any page size, each with its metadata"
	ClauseScopeMatrix       = "dynamic disks: every scope on every route: each bosh.dynamic-disks.* scope grants its own routes only (provide needs create and attach), bosh.read none, admin all; no or a forged token → 401"
	ClauseExplore           = "dynamic disks model: random lifecycles (provide, create, attach, detach, DELETE over a few names, instances in two AZs and deployments, and none) get only the answers the model allows, the state matching it after each"
	ClauseSetup             = "(harness) the suite can set up: log in, deploy, find two instances with VMs"
)
