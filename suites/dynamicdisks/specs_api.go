package dynamicdisks

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/cpilab/cpilab/director"
	. "github.com/onsi/ginkgo/v2"
)

// scopeErrorCode is the Director's UnauthorizedToAccessDeployment code, the
// code of a 401 for a missing scope.
const scopeErrorCode = 600000

// request is one request of a table-driven spec.
type request struct {
	method, path string
	body         []byte
	ctype        string // "" : JSON when there is a body
}

func authSpecs(r *run) {
	It(ClauseNoCredentials, labels("auth"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("anonymous")
		provide := fmt.Appendf(nil, `{"disk_name":%q,"disk_pool_name":%q,"instance_id":%q}`, name, r.cfg.DiskPool, r.a.ID)
		reqs := []request{
			{method: http.MethodGet, path: "/dynamic_disks"},
			{method: http.MethodPost, path: "/dynamic_disks/provide", body: provide},
			{method: http.MethodPost, path: "/dynamic_disks", body: provide},
			{method: http.MethodPost, path: diskPath(name, "/attach"), body: fmt.Appendf(nil, `{"instance_id":%q}`, r.a.ID)},
			{method: http.MethodPost, path: diskPath(name, "/detach")},
			{method: http.MethodDelete, path: diskPath(name, "")},
			{method: http.MethodGet, path: "/deployments"},
			{method: http.MethodGet, path: "/tasks"},
		}
		bad, err := r.s.newCaller("an invalid token", "not-a-token")
		if err != nil {
			Fail(err.Error())
		}
		for _, who := range []*caller{r.s.anon, bad} {
			for _, q := range reqs {
				x := r.s.send(ctx, who, q.method, q.path, q.body, q.ctype)
				if x.Err != nil || x.Status != http.StatusUnauthorized {
					violatef(ClauseNoCredentials, x, "answered HTTP %d, not 401", x.Status)
				}
			}
		}
	})

	It(ClauseScopeOnly, labels("auth"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		ghost := r.cfg.RunID + "-no-such-deployment"
		// Harmless if a broken director accepted them: a manifest on a
		// stemcell that does not exist, an unparsable cloud config, and
		// deletes of things that do not exist; the recreate is real.
		manifest := r.cfg.Setup.Manifest(r.cfg.RunID+"-forbidden", r.cfg.RunID+"-no-such-os", 1)
		reqs := []request{
			{method: http.MethodPost, path: "/deployments", body: manifest, ctype: "text/yaml"},
			{method: http.MethodDelete, path: "/deployments/" + url.PathEscape(ghost)},
			{method: http.MethodPost, path: "/stemcells", body: []byte(`{"location":"/nonexistent/stemcell.tgz"}`)},
			{method: http.MethodPost, path: "/cloud_configs", body: []byte("azs: [unparsable"), ctype: "text/yaml"},
			{method: http.MethodPut, path: "/deployments/" + url.PathEscape(r.deployment) + "/instances/" + url.PathEscape(r.a.ID) + "?state=recreate"},
			{method: http.MethodDelete, path: "/vms/" + url.PathEscape(r.cfg.RunID+"-no-such-vm")},
			{method: http.MethodGet, path: "/deployments"},
			{method: http.MethodGet, path: "/tasks"},
		}
		for _, q := range reqs {
			x := r.s.send(ctx, r.s.disks, q.method, q.path, q.body, q.ctype)
			if x.Err != nil || x.Status != http.StatusUnauthorized {
				violatef(ClauseScopeOnly, x, "answered HTTP %d to the disk-scoped credentials, not 401", x.Status)
			}
			var eb errorBody
			if json.Unmarshal(x.Answer, &eb) != nil || eb.Code != scopeErrorCode || !strings.HasPrefix(eb.Description, "Require one of the scopes: ") {
				violatef(ClauseScopeOnly, x, "the 401 is not the Director's {\"code\": %d, \"description\": \"Require one of the scopes: …\"}", scopeErrorCode)
			}
		}
	})
}

func inputSpecs(r *run) {
	It(ClauseBadBody, labels("input", "provide", "create", "attach"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("bad-body")
		pool, inst := r.cfg.DiskPool, r.a.ID
		size, dep := r.cfg.DiskSizeMiB, r.deployment
		cases := []struct {
			field string
			q     request
		}{
			{"disk_name", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_pool_name":%q,"instance_id":%q,"disk_size":%d}`, pool, inst, size)}},
			{"disk_size", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"disk_size":"ten","disk_pool_name":%q,"instance_id":%q}`, name, pool, inst)}},
			{"disk_size", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"disk_size":-1,"disk_pool_name":%q,"instance_id":%q}`, name, pool, inst)}},
			{"disk_size", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"disk_size":0,"disk_pool_name":%q,"instance_id":%q}`, name, pool, inst)}},
			{"disk_size", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"disk_pool_name":%q,"instance_id":%q}`, name, pool, inst)}},
			{"disk_pool_name", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"instance_id":%q,"disk_size":%d}`, name, inst, size)}},
			{"instance_id", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"disk_pool_name":%q,"disk_size":%d}`, name, pool, size)}},
			{"metadata", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"disk_pool_name":%q,"instance_id":%q,"disk_size":%d,"metadata":["not","a","hash"]}`, name, pool, inst, size)}},
			{"disk_pool_name", request{path: "/dynamic_disks", body: fmt.Appendf(nil, `{"deployment_name":%q,"az":"z","disk_name":%q,"disk_size":%d}`, dep, name, size)}},
			{"deployment_name", request{path: "/dynamic_disks", body: fmt.Appendf(nil, `{"az":"z","disk_name":%q,"disk_pool_name":%q,"disk_size":%d}`, name, pool, size)}},
			{"instance_id", request{path: diskPath(name, "/attach"), body: []byte(`{"instance_id":["x"]}`)}},
			{"instance_id", request{path: diskPath(name, "/attach"), body: []byte(`{}`)}},
		}
		for _, c := range cases {
			x := r.s.send(ctx, r.s.disks, http.MethodPost, c.q.path, c.q.body, "")
			if x.Err != nil || x.Status != http.StatusBadRequest {
				violatef(ClauseBadBody, x, "answered HTTP %d, not 400", x.Status)
			}
			if !x.names(c.field) {
				violatef(ClauseBadBody, x, "the 400 does not name the property %s", c.field)
			}
		}
		// A body that is not JSON: 400 (cpilab) or 500 with no body
		// (upstream's JSON.parse error); never a task.
		for _, body := range []string{`{"disk_name": `, `not json`} {
			x := r.s.send(ctx, r.s.disks, http.MethodPost, "/dynamic_disks/provide", []byte(body), "")
			if x.Err != nil || (x.Status != http.StatusBadRequest && x.Status != http.StatusInternalServerError) {
				violatef(ClauseBadBody, x, "answered HTTP %d to a body that is not JSON, not 400 (or upstream's 500)", x.Status)
			}
		}
		if d, ok := r.listed(ctx, ClauseBadBody, name); ok {
			violatef(ClauseBadBody, nil, "after bad bodies only, GET /dynamic_disks lists %+v", d)
		}
	})

	It(ClauseDiskNames, labels("input", "provide", "create", "detach", "delete"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		// (Not ".." itself: a director that took it as a name would keep a
		// disk no path can name, so none could delete it.)
		hostile := []string{"../x", "a/b", "nul\x00byte", strings.Repeat("n", 300), `back\slash`}
		for _, name := range hostile {
			// One at a time: each request's task ends before the next is sent.
			for _, send := range []func() *Exchange{
				func() *Exchange { return r.provide(ctx, name, r.a.ID, nil) },
				func() *Exchange { return r.create(ctx, name, r.a) },
			} {
				r.opaqueName(ctx, send(), name, http.StatusBadRequest, http.StatusUnprocessableEntity)
			}
			for _, send := range []func() *Exchange{
				func() *Exchange { return r.detach(ctx, name) },
				func() *Exchange { return r.remove(ctx, name) },
				func() *Exchange { return r.attach(ctx, name, r.a.ID) },
			} {
				r.opaqueName(ctx, send(), name, http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity)
			}
			if d, ok := r.listed(ctx, ClauseDiskNames, name); ok && !r.t.has("disk", name) {
				violatef(ClauseDiskNames, nil, "GET /dynamic_disks lists a disk named %q that no request made: %+v", name, d)
			}
		}
	})

	It(ClauseUnknownRefs, labels("input", "provide", "create", "attach"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("unknown-refs")
		ghost := director.Instance{ID: r.cfg.RunID + "-no-such-instance", AZ: r.a.AZ}
		ghostDep := createBody{Deployment: r.cfg.RunID + "-no-such-deployment", AZ: r.a.AZ, DiskName: name,
			DiskPoolName: r.cfg.DiskPool, DiskSize: r.cfg.DiskSizeMiB}
		if ghostDep.AZ == "" {
			ghostDep.AZ = "z1"
		}
		cases := []*Exchange{
			r.provide(ctx, name, ghost.ID, nil),
			r.s.sendJSON(ctx, r.s.disks, http.MethodPost, "/dynamic_disks/provide", provideBody{
				DiskName: name, DiskPoolName: r.cfg.RunID + "-no-such-pool", InstanceID: r.a.ID, DiskSize: r.cfg.DiskSizeMiB}),
			r.s.sendJSON(ctx, r.s.disks, http.MethodPost, "/dynamic_disks", ghostDep),
		}
		for _, x := range cases {
			r.refused(ctx, ClauseUnknownRefs, x, http.StatusNotFound, http.StatusUnprocessableEntity)
		}
		if d, ok := r.listed(ctx, ClauseUnknownRefs, name); ok {
			violatef(ClauseUnknownRefs, nil, "after refused requests only, GET /dynamic_disks lists %+v", d)
		}
		// attach of an existing disk to an unknown instance.
		r.doneCID(ctx, ClauseUnknownRefs, r.create(ctx, name, r.a))
		r.refused(ctx, ClauseUnknownRefs, r.attach(ctx, name, ghost.ID), http.StatusNotFound, http.StatusUnprocessableEntity)
	})
}

// opaqueName accepts a request naming a disk a path cannot carry when the
// director refuses it at once (one of refusals, cpilab's stricter names) or
// queues a task that ends (upstream takes any non-empty name); a disk that
// task made is tracked for clean-up under exactly that name.
func (r *run) opaqueName(ctx context.Context, x *Exchange, name string, refusals ...int) {
	GinkgoHelper()
	if x.Err == nil && slices.Contains(refusals, x.Status) {
		return
	}
	if x.taskID() == 0 {
		violatef(ClauseDiskNames, x, "answered HTTP %d to disk name %q: neither a refusal %v nor a 302 to a task", x.Status, name, refusals)
	}
	tv := r.task(ctx, ClauseDiskNames, x)
	if tv.State != director.TaskDone {
		return
	}
	r.t.add("disk", name)
	// Kept as an opaque name: the disk is listed under exactly that name
	// (not cut short, not rewritten), and a later request naming it
	// reaches it.
	if x.Method == http.MethodPost && (x.Path == "/dynamic_disks/provide" || x.Path == "/dynamic_disks") {
		if _, ok := r.listed(ctx, ClauseDiskNames, name); !ok {
			violatef(ClauseDiskNames, x, "the task succeeded for disk name %q, but GET /dynamic_disks lists no disk of exactly that name", name)
		}
	}
}
