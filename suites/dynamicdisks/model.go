package dynamicdisks

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"sort"
	"strings"

	"github.com/cpilab/cpilab/director"
)

// Model is the dynamic disks API as a pure state machine: the disks a
// client made, the instances and deployments they may go to, and for every
// request the set of legal answers and the state that follows. It follows
// docs/upstream.md (upstream's dynamic_disks_controller.rb and
// jobs/dynamic_disks/*.rb), with cpilab's documented latitude: a request
// upstream fails in a task may be refused at once (400, 404, 409, 422).
//
// The model knows no time, no I/O and no director: the suite asks it what
// a request may do (Expect), checks what the director did, tells it the
// outcome (Apply), and compares the director's list with it (Diff).
type Model struct {
	// Disks are the disks that exist, by name.
	Disks map[string]*ModelDisk
	// Instances are the instances disks may be provided to, by ID.
	Instances map[string]ModelInstance
	// Deployments and Pools are the names the director knows.
	Deployments map[string]bool
	Pools       map[string]bool
}

// ModelDisk is a disk as the model holds it. CID is learnt from the task
// result of the request that made it.
type ModelDisk struct {
	Name, CID, Deployment, AZ, Pool string
	SizeMiB                         int
	// Metadata is the metadata last set (nil: never set).
	Metadata map[string]string
	// Instance is the ID of the instance the disk is attached to ("":
	// detached).
	Instance string
}

// ModelInstance is an instance with a VM.
type ModelInstance struct {
	ID, Group, Deployment, AZ string
}

// NewModel returns an empty model.
func NewModel() *Model {
	return &Model{Disks: map[string]*ModelDisk{}, Instances: map[string]ModelInstance{},
		Deployments: map[string]bool{}, Pools: map[string]bool{}}
}

// AddInstance records an instance (and its deployment).
func (m *Model) AddInstance(in ModelInstance) {
	m.Instances[in.ID] = in
	m.Deployments[in.Deployment] = true
}

// OpKind is a mutating route of the dynamic disks API.
type OpKind string

// The mutating routes.
const (
	OpProvide OpKind = "provide"
	OpCreate  OpKind = "create"
	OpAttach  OpKind = "attach"
	OpDetach  OpKind = "detach"
	OpDelete  OpKind = "delete"
)

// Op is one mutating request.
type Op struct {
	Kind OpKind
	Name string
	// Instance is provide's and attach's instance_id.
	Instance string
	// Deployment and AZ are create's deployment_name and az.
	Deployment, AZ string
	// Pool and SizeMiB are provide's and create's disk_pool_name and
	// disk_size.
	Pool    string
	SizeMiB int
	// Metadata is provide's and create's metadata (nil: none sent).
	Metadata map[string]string
}

func (o Op) String() string {
	switch o.Kind {
	case OpProvide:
		return fmt.Sprintf("provide %q to instance %s (pool %s)", o.Name, o.Instance, o.Pool)
	case OpCreate:
		return fmt.Sprintf("create %q in deployment %s AZ %s (pool %s)", o.Name, o.Deployment, o.AZ, o.Pool)
	case OpAttach:
		return fmt.Sprintf("attach %q to instance %s", o.Name, o.Instance)
	}
	return fmt.Sprintf("%s %q", o.Kind, o.Name)
}

// Verdict is what the model allows a request's task to end as.
type Verdict int

// The verdicts.
const (
	// MustSucceed: a 302 to a task that succeeds.
	MustSucceed Verdict = iota
	// MustFail: a task that fails saying why, or one of Want.Refusals at
	// once.
	MustFail
	// MaySucceed: either, both documented as legal (Want.Why says which
	// latitude).
	MaySucceed
)

// CIDRule is what a successful task's result must hold.
type CIDRule int

// The rules.
const (
	// CIDNone: no result, or a result holding the disk's cid.
	CIDNone CIDRule = iota
	// CIDNew: a disk_cid no disk of the model has.
	CIDNew
	// CIDSame: the disk's disk_cid.
	CIDSame
)

// Want is the set of legal answers to one request.
type Want struct {
	Verdict Verdict
	// Why is the rule, for a failure message.
	Why string
	// Refusals are the statuses a director may answer at once instead of a
	// failed task.
	Refusals []int
	// CID is what a successful task's result must hold; Disk the disk it
	// names (CIDSame).
	CID  CIDRule
	Disk string
	// Clause is the clause the rule is ("" : the spec's own).
	Clause string
}

// citing is w citing clause.
func (w Want) citing(clause string) Want { w.Clause = clause; return w }

// refusals every failing disk request may answer at once (cpilab's
// latitude: a director may refuse what upstream fails in a task).
var refusals = []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity}

func must(why string) Want   { return Want{Verdict: MustSucceed, Why: why} }
func fails(why string) Want  { return Want{Verdict: MustFail, Why: why, Refusals: refusals} }
func either(why string) Want { return Want{Verdict: MaySucceed, Why: why, Refusals: refusals} }

// Expect returns the legal answers to op in the current state.
func (m *Model) Expect(op Op) Want {
	d := m.Disks[op.Name]
	switch op.Kind {
	case OpProvide:
		in, ok := m.Instances[op.Instance]
		switch {
		case !ok:
			return fails(fmt.Sprintf("instance `%s` not found", op.Instance)).citing(ClauseUnknownRefs)
		case !m.Pools[op.Pool]:
			// Upstream reads the disk pool before it looks the disk up.
			return fails(fmt.Sprintf("Could not find disk pool by name `%s`", op.Pool)).citing(ClauseUnknownRefs)
		case d == nil:
			w := must("provide of a missing disk creates and attaches it")
			w.CID = CIDNew
			return w.citing(ClauseProvideCreates)
		case d.Instance == op.Instance:
			w := must("provide of a disk attached to this instance is idempotent")
			w.CID, w.Disk = CIDSame, d.Name
			return w.citing(ClauseProvideIdempotent)
		case d.Instance != "":
			return fails(fmt.Sprintf("disk `%s` is attached to a different vm (instance %s)", d.Name, d.Instance)).citing(ClauseProvideElsewhere)
		case d.Deployment != in.Deployment || d.AZ != in.AZ:
			// Upstream's provide checks neither (provide_dynamic_disk.rb);
			// attach does. A director refusing it too is legal.
			w := either(fmt.Sprintf("provide of disk `%s` (deployment %s, AZ %s) to instance %s (deployment %s, AZ %s): upstream attaches it, a director may refuse as attach does",
				d.Name, d.Deployment, d.AZ, in.ID, in.Deployment, in.AZ))
			w.CID, w.Disk = CIDSame, d.Name
			return w
		default:
			w := must("provide of an existing unattached disk attaches it")
			w.CID, w.Disk = CIDSame, d.Name
			return w.citing(ClauseProvideUnattached)
		}
	case OpCreate:
		switch {
		case d != nil:
			return fails(fmt.Sprintf("disk `%s` already exists", op.Name))
		case !m.Deployments[op.Deployment]:
			return fails(fmt.Sprintf("deployment `%s` not found", op.Deployment)).citing(ClauseUnknownRefs)
		case !m.Pools[op.Pool]:
			return fails(fmt.Sprintf("Could not find disk pool by name `%s`", op.Pool)).citing(ClauseUnknownRefs)
		case !m.hasVMIn(op.Deployment, op.AZ):
			return fails(fmt.Sprintf("no active VM found in deployment `%s` in AZ `%s`", op.Deployment, op.AZ))
		}
		w := must("create of a new name in a deployment's AZ creates the disk, attached nowhere")
		w.CID = CIDNew
		return w.citing(ClauseCreateAttach)
	case OpAttach:
		in, ok := m.Instances[op.Instance]
		switch {
		case d == nil:
			return fails(fmt.Sprintf("disk `%s` not found", op.Name)).citing(ClauseUnknownRefs)
		case !ok:
			return fails(fmt.Sprintf("instance `%s` not found", op.Instance)).citing(ClauseUnknownRefs)
		case d.Deployment != in.Deployment:
			return fails(fmt.Sprintf("disk `%s` belongs to deployment `%s` and cannot be attached to deployment `%s`", d.Name, d.Deployment, in.Deployment))
		case d.AZ != in.AZ:
			return fails(fmt.Sprintf("disk `%s` is in AZ `%s` but instance `%s` is in AZ `%s`", d.Name, d.AZ, in.ID, in.AZ))
		case d.Instance == op.Instance:
			return must("attach of a disk attached to this instance succeeds")
		case d.Instance != "":
			return fails(fmt.Sprintf("disk `%s` is already attached to a different vm (instance %s)", d.Name, d.Instance))
		}
		return must("attach of an unattached disk attaches it").citing(ClauseCreateAttach)
	case OpDetach:
		if d == nil {
			return fails(fmt.Sprintf("disk `%s` can not be found", op.Name)).citing(ClauseDetachUnknown)
		}
		return must("detach succeeds, attached or not (desired state)").citing(ClauseDetach)
	case OpDelete:
		if d == nil {
			return must("DELETE of an absent disk succeeds (idempotent)").citing(ClauseDeleteAbsent)
		}
		return must("DELETE of a disk removes it (detached first when attached)").citing(ClauseDeleteDetached)
	}
	return fails("unknown operation " + string(op.Kind))
}

func (m *Model) hasVMIn(dep, az string) bool {
	for _, in := range m.Instances {
		if in.Deployment == dep && in.AZ == az {
			return true
		}
	}
	return false
}

// Apply moves the model to the state after op, which succeeded (ok) or
// failed; cid is the disk_cid its result held ("" : none).
func (m *Model) Apply(op Op, ok bool, cid string) {
	if !ok {
		return // a failed request changes nothing
	}
	d := m.Disks[op.Name]
	switch op.Kind {
	case OpProvide:
		in := m.Instances[op.Instance]
		if d == nil {
			d = &ModelDisk{Name: op.Name, CID: cid, Deployment: in.Deployment, AZ: in.AZ, Pool: op.Pool, SizeMiB: op.SizeMiB}
			m.Disks[op.Name] = d
		}
		d.Instance, d.AZ = in.ID, in.AZ
		if op.Metadata != nil {
			d.Metadata = maps.Clone(op.Metadata)
		}
	case OpCreate:
		m.Disks[op.Name] = &ModelDisk{Name: op.Name, CID: cid, Deployment: op.Deployment, AZ: op.AZ, Pool: op.Pool,
			SizeMiB: op.SizeMiB, Metadata: maps.Clone(op.Metadata)}
	case OpAttach:
		if d != nil {
			d.Instance = op.Instance
		}
	case OpDetach:
		if d != nil {
			d.Instance = ""
		}
	case OpDelete:
		delete(m.Disks, op.Name)
	}
}

// CIDTaken reports whether a disk of the model other than name has cid.
func (m *Model) CIDTaken(cid, name string) bool {
	for _, d := range m.Disks {
		if d.CID == cid && d.Name != name {
			return true
		}
	}
	return false
}

// Diff compares GET /dynamic_disks with the model: every disk whose name
// owned accepts must be the model's, listed once, with its cid,
// deployment, AZ, instance, size, pool and metadata; every disk of the
// model must be listed. It returns one line per difference, sorted.
func (m *Model) Diff(list []director.DiskInfo, owned func(name string) bool) []string {
	var out []string
	seen := map[string]int{}
	for _, e := range list {
		if !owned(e.Name) {
			continue
		}
		seen[e.Name]++
		d, ok := m.Disks[e.Name]
		if !ok {
			out = append(out, fmt.Sprintf("lists %q (disk_cid %s), which does not exist", e.Name, e.CID))
			continue
		}
		if seen[e.Name] > 1 {
			out = append(out, fmt.Sprintf("lists %q %d times", e.Name, seen[e.Name]))
			continue
		}
		out = append(out, m.diffDisk(d, e)...)
	}
	for name := range m.Disks {
		if seen[name] == 0 {
			out = append(out, fmt.Sprintf("does not list %q (disk_cid %s), which exists", name, m.Disks[name].CID))
		}
	}
	sort.Strings(out)
	return out
}

// DiffDisk compares one entry (GET /dynamic_disks/:name) with the model.
func (m *Model) DiffDisk(e director.DiskInfo) []string {
	d, ok := m.Disks[e.Name]
	if !ok {
		return []string{fmt.Sprintf("shows %q, which does not exist", e.Name)}
	}
	return m.diffDisk(d, e)
}

func (m *Model) diffDisk(d *ModelDisk, e director.DiskInfo) []string {
	var out []string
	bad := func(field, got, want string) {
		out = append(out, fmt.Sprintf("lists %q with %s %s; want %s", d.Name, field, got, want))
	}
	str := func(p *string) string {
		if p == nil {
			return "null"
		}
		return strconvQuote(*p)
	}
	if d.CID != "" && e.CID != d.CID {
		bad("disk_cid", strconvQuote(e.CID), strconvQuote(d.CID))
	}
	if got := str(e.Deployment); got != strconvQuote(d.Deployment) {
		bad("deployment", got, strconvQuote(d.Deployment))
	}
	if d.AZ != "" && str(e.AZ) != strconvQuote(d.AZ) {
		bad("availability_zone", str(e.AZ), strconvQuote(d.AZ))
	}
	want := "null"
	if d.Instance != "" {
		in := m.Instances[d.Instance]
		want = strconvQuote(in.Group + "/" + in.ID)
	}
	if got := str(e.Instance); got != want {
		bad("instance", got, want+" ("+map[bool]string{true: "detached", false: "attached"}[d.Instance == ""]+")")
	}
	if e.SizeMiB != d.SizeMiB {
		bad("size", fmt.Sprint(e.SizeMiB), fmt.Sprint(d.SizeMiB))
	}
	if e.DiskPoolName != d.Pool {
		bad("disk_pool_name", strconvQuote(e.DiskPoolName), strconvQuote(d.Pool))
	}
	if got, want := metaString(e.Metadata), metaWant(d.Metadata); got != want {
		bad("metadata", got, want)
	}
	return out
}

func strconvQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// metaString is listed metadata as sorted JSON ({} for null or empty: a
// disk never given metadata may show either).
func metaString(m map[string]any) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m) // encoding/json sorts map keys
	return string(b)
}

func metaWant(m map[string]string) string {
	if len(m) == 0 {
		return "{}"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// Route is one route of the dynamic disks API (and the task routes) as the
// authorisation table names it.
type Route string

// The routes the scope matrix walks.
const (
	RouteList    Route = "GET /dynamic_disks"
	RouteGet     Route = "GET /dynamic_disks/:name"
	RouteCreate  Route = "POST /dynamic_disks"
	RouteProvide Route = "POST /dynamic_disks/provide"
	RouteAttach  Route = "POST /dynamic_disks/:name/attach"
	RouteDetach  Route = "POST /dynamic_disks/:name/detach"
	RouteDelete  Route = "DELETE /dynamic_disks/:name"
	RouteTasks   Route = "GET /tasks"
)

// Routes are the routes of the matrix, in the order it walks them.
var Routes = []Route{RouteList, RouteCreate, RouteGet, RouteProvide, RouteAttach, RouteDetach, RouteDelete, RouteTasks}

// routeScopes are the scope sets that grant each route besides admin
// (permission_authorizer.rb): any one set, all of its scopes.
var routeScopes = map[Route][][]string{
	RouteList:    {{director.ScopeDisksList}},
	RouteGet:     {{director.ScopeDisksList}},
	RouteCreate:  {{director.ScopeDisksCreate}},
	RouteProvide: {{director.ScopeDisksCreate, director.ScopeDisksAttach}},
	RouteAttach:  {{director.ScopeDisksAttach}},
	RouteDetach:  {{director.ScopeDisksDetach}},
	RouteDelete:  {{director.ScopeDisksDelete}},
	RouteTasks:   {{director.ScopeRead}},
}

// Authorized reports whether a token holding scopes may call route: admin
// may call every route; bosh.read only the task list; each dynamic-disk
// scope only its own routes, provide needing create and attach.
func Authorized(route Route, scopes []string) bool {
	if slices.Contains(scopes, director.ScopeAdmin) {
		return true
	}
	for _, set := range routeScopes[route] {
		all := true
		for _, s := range set {
			all = all && slices.Contains(scopes, s)
		}
		if all {
			return true
		}
	}
	return false
}

// ScopeSets are the scope sets the matrix mints (or is given) one token
// for, by name: each dynamic-disk scope alone, provide's pair, bosh.read,
// admin. ("none" and "forged" need no user.)
var ScopeSets = map[string][]string{
	director.ScopeDisksCreate: {director.ScopeDisksCreate},
	director.ScopeDisksAttach: {director.ScopeDisksAttach},
	director.ScopeDisksDetach: {director.ScopeDisksDetach},
	director.ScopeDisksList:   {director.ScopeDisksList},
	director.ScopeDisksDelete: {director.ScopeDisksDelete},
	"create+attach":           {director.ScopeDisksCreate, director.ScopeDisksAttach},
	director.ScopeRead:        {director.ScopeRead},
	director.ScopeAdmin:       {director.ScopeAdmin},
}

// ScopeSetNames are ScopeSets' names, sorted.
func ScopeSetNames() []string {
	return slices.Sorted(maps.Keys(ScopeSets))
}

// ScopeUsers returns one local user per scope set, named
// "<prefix><set name>" with password, for a director the suite launches
// itself.
func ScopeUsers(prefix, password string) []director.User {
	var out []director.User
	for _, n := range ScopeSetNames() {
		out = append(out, director.User{Name: prefix + strings.ReplaceAll(n, "+", "-"), Password: password, Scopes: ScopeSets[n]})
	}
	return out
}

// ScopeCredentialsFor picks, for each scope set, a user of users holding
// exactly that set (the users file `cpilab director --users` reads), as
// Config.ScopeCredentials.
func ScopeCredentialsFor(users []director.User) map[string]Credentials {
	out := map[string]Credentials{}
	for _, n := range ScopeSetNames() {
		want := slices.Sorted(slices.Values(ScopeSets[n]))
		for _, u := range users {
			got := slices.Compact(slices.Sorted(slices.Values(u.Scopes)))
			if _, done := out[n]; !done && slices.Equal(got, want) {
				out[n] = Credentials{Username: u.Name, Password: u.Password}
			}
		}
	}
	return out
}
