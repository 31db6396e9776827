// Package dynamicdisks is cpilab's Ginkgo v2 suite for the dynamic disks API
// of a running BOSH Director. It checks the dynamic disks RFC as upstream
// implements it, and the races of docs/upstream.md, over HTTPS, through the
// API alone: it knows a director by its URL, CA certificate and two sets of
// credentials, so the same suite runs against the reference director,
// `cpilab director`, or another director.
//
// It is a library with a thin binary (STYLE 1): the specs are registered
// once and run under go test (Test), inside someone else's Ginkgo tree
// (Register), or from a CLI (Run, which returns a Summary).
//
// # What it checks
//
// Every It text starts with the clause it checks (the Clause* constants)
// and every failure says what the director did instead, with the request
// and the response (a Violation, also stored as a report entry). Specs are
// labelled area:, endpoint:, race: and queue:, and cap: for what they need
// beyond the API.
//
//   - the model (Model): a pure state machine of disks, instances,
//     deployments and pools giving, for every request, the answers
//     docs/upstream.md allows and the state that follows. The model specs
//     run first: a director the suite has not touched lists a JSON list
//     (null is refused); a lifecycle of provide, create, attach, detach and
//     DELETE, valid and invalid, with metadata; attach and provide across
//     AZs and across deployments (the suite deploys three instances over
//     two AZs and a second deployment); more disks than any page size
//     (Config.ManyDisks). After every request the list, each disk (GET
//     /dynamic_disks/:name when the director has it), the task results
//     and, with an Oracle, the IaaS are compared with the model;
//   - every scope on every route (Config.ScopeCredentials, one user per
//     ScopeSets entry, plus no credentials and a forged token) against
//     the model's authorisation table (Authorized);
//   - clients behave like clients: a request safe to repeat (reads,
//     DELETE, detach, attach, provide) is sent again after a dropped
//     connection or a 5xx, and the last answer judged; a director that
//     cannot be reached even so is a HarnessError, never a violation;
//   - provide creates and attaches, and its task result holds disk_cid;
//     provide again to the same VM returns the same disk_cid; provide to
//     another VM while attached fails; provide of an existing unattached
//     disk attaches that disk;
//   - detach succeeds, and again (desired state); detach of an unknown name
//     fails; DELETE of an absent disk succeeds; DELETE of a detached disk
//     removes it from GET /dynamic_disks; POST /dynamic_disks creates
//     without attaching and /:name/attach attaches;
//   - every mutating endpoint answers 302 to /tasks/<id>; the task result
//     (GET /tasks/<id>/output?type=result) of provide and create holds
//     disk_cid (upstream writes none for attach, detach and delete);
//   - auth: no or invalid credentials → 401; disk-scoped credentials → 401
//     {"code": 600000, "description": "Require one of the scopes: …"} on
//     deploy, deployment delete, stemcell upload, cloud config, instance
//     state, VM delete, and reads outside dynamic disks; and they may use
//     every disk endpoint. Tasks are read as the admin: upstream gives
//     disk-only tokens no access to tasks;
//   - input: a missing property, a wrong type or disk_size < 1 → 400 naming
//     the property; a body that is not JSON → 400 (or upstream's 500);
//     hostile disk names (../x, a/b, NUL, 300 bytes) refused at once, or
//     kept as opaque names (upstream takes any name); unknown instances,
//     pools and deployments → a task that fails saying why (upstream), or
//     404/422 at once;
//   - race (a): concurrent provides of one name to one VM make exactly one
//     disk (by the Oracle when there is one, else by the API); race (e):
//     DELETE of an attached disk detaches it first;
//   - the dedicated queue (i): a disk task completes while a deploy is held
//     in create_vm (needs Gates). A disk task still queued after
//     Timeouts.Task fails its spec as a queue without a worker, and later
//     specs then fail fast instead of each waiting the full timeout.
//
// FakeCloud and SFTPLinks give the Oracle, Gates and Links of a fake cloud
// served by `cpilab fakeiaas` (certify-director --cloud). With an Oracle
// the IaaS is checked behind the API (attachments, deletes,
// metadata); with Links, the agent's /var/vcap/data/dynamic_disks links.
// A spec whose capability is absent is skipped with the reason, and the
// Summary lists it as not checked, never as passed (STYLE 2).
//
// # Set-up and clean-up
//
// With Config.Deployment empty the suite sets up a deployment of its own:
// it uploads Setup's stemcell, replaces the cloud config with
// DefaultCloudConfig (disk pool "dynamic"; meant for a director set up for
// certification), and deploys two instances. Every disk name and
// deployment the suite creates is unique to the run (RunID), recorded
// before it is requested, and removed newest first by the last spec (and
// again after the suite, should that spec be filtered out): a disk by
// detach, then DELETE, an unknown name counting as done; a deployment by
// deployment delete; the suite's own deployment, made first, goes last.
//
// # Example
//
// Certify `cpilab director` (it prints the URL, the CA file and the admin
// password; give it a second user holding only the dynamic-disk scopes):
//
//	sum, err := dynamicdisks.Run(ctx, dynamicdisks.Config{
//		URL:       "https://127.0.0.1:25555",
//		CACertPEM: caPEM, // the ca_cert file `cpilab director` printed
//		Admin:     dynamicdisks.Credentials{Username: "admin", Password: adminPassword},
//		Disks:     dynamicdisks.Credentials{Username: "csi", Password: csiPassword},
//		Setup:     dynamicdisks.Setup{StemcellLocation: "/path/on/the/director/stemcell.tgz"},
//	}, dynamicdisks.RunOptions{JUnitReport: "dynamic-disks.xml"})
//	if err != nil { … }
//	sum.WriteText(os.Stdout)
//	if !sum.OK() { os.Exit(1) }
//
// Against a director with a deployment already in place:
//
//	cfg := dynamicdisks.Config{URL: url, CACertPEM: ca, Admin: admin, Disks: csi,
//		Deployment: "k8s", DiskPool: "fast"}
//
// Inside go test (one suite per process):
//
//	func TestMyDirector(t *testing.T) { dynamicdisks.Test(t, cfg) }
//
// The package's own tests run the suite against the reference director
// (director/lab), against its upstream profile (which must fail the race
// and queue specs), against a director with broken auth and input handling,
// against `cpilab director` known only by URL and credentials, and on a
// served fake cloud; and every entry of fixtures/directorbugs (realistic
// Director bugs, each rejected, and legal variants, each accepted).
package dynamicdisks
