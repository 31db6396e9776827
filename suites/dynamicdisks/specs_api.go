package dynamicdisks

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
)

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
			if x.Err != nil || x.Status != http.StatusForbidden {
				violatef(ClauseScopeOnly, x, "answered HTTP %d to the disk-scoped credentials, not 403", x.Status)
			}
		}
	})

	It(ClauseScopeAllows, labels("auth", "list", "provide", "detach", "delete"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		x := r.s.send(ctx, r.s.disks, http.MethodGet, "/dynamic_disks", nil, "")
		if x.Err != nil || x.Status != http.StatusOK {
			violatef(ClauseScopeAllows, x, "answered HTTP %d to the disk-scoped credentials, not 200", x.Status)
		}
		name := r.name("scope")
		for _, send := range []func() *Exchange{
			func() *Exchange { return r.provide(ctx, name, r.a.ID, nil) },
			func() *Exchange { return r.detach(ctx, name) },
			func() *Exchange { return r.remove(ctx, name) },
		} {
			x := send()
			if x.Status == http.StatusUnauthorized || x.Status == http.StatusForbidden {
				violatef(ClauseScopeAllows, x, "refused the disk-scoped credentials")
			}
			r.done(ctx, ClauseScopeAllows, x)
		}
	})
}

func inputSpecs(r *run) {
	It(ClauseBadBody, labels("input", "provide", "create", "attach"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("bad-body")
		pool, inst := r.cfg.DiskPool, r.a.ID
		cases := []struct {
			field string
			q     request
		}{
			{"disk_name", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_pool_name":%q,"instance_id":%q}`, pool, inst)}},
			{"disk_name", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":7,"disk_pool_name":%q,"instance_id":%q}`, pool, inst)}},
			{"disk_size", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"disk_size":"ten","disk_pool_name":%q,"instance_id":%q}`, name, pool, inst)}},
			{"disk_size", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"disk_size":-1,"disk_pool_name":%q,"instance_id":%q}`, name, pool, inst)}},
			{"disk_pool_name", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"instance_id":%q}`, name, inst)}},
			{"instance_id", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"disk_pool_name":%q}`, name, pool)}},
			{"metadata", request{path: "/dynamic_disks/provide", body: fmt.Appendf(nil, `{"disk_name":%q,"disk_pool_name":%q,"instance_id":%q,"metadata":["not","a","hash"]}`, name, pool, inst)}},
			{"disk_pool_name", request{path: "/dynamic_disks", body: fmt.Appendf(nil, `{"disk_name":%q,"instance_id":%q}`, name, inst)}},
			{"instance_id", request{path: diskPath(name, "/attach"), body: []byte(`{"instance_id":5}`)}},
			{"", request{path: "/dynamic_disks/provide", body: []byte(`{"disk_name": `)}},
			{"", request{path: "/dynamic_disks/provide", body: []byte(`not json`)}},
		}
		for _, c := range cases {
			x := r.s.send(ctx, r.s.disks, http.MethodPost, c.q.path, c.q.body, "")
			if x.Err != nil || x.Status != http.StatusBadRequest {
				violatef(ClauseBadBody, x, "answered HTTP %d, not 400", x.Status)
			}
			if c.field != "" && !x.names(c.field) {
				violatef(ClauseBadBody, x, "the 400 does not name the field %s", c.field)
			}
		}
		if d, ok := r.listed(ctx, ClauseBadBody, name); ok {
			violatef(ClauseBadBody, nil, "after bad bodies only, GET /dynamic_disks lists %+v", d)
		}
	})

	It(ClauseDiskNames+" (in a body: 400/422; in a path: 400/404/422)", labels("input", "provide", "create", "detach", "delete"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		hostile := []string{"../x", "a/b", "nul\x00byte", strings.Repeat("n", 300), "..", `back\slash`}
		for _, name := range hostile {
			for _, x := range []*Exchange{r.provide(ctx, name, r.a.ID, nil), r.create(ctx, name, r.a.ID)} {
				if x.Err != nil || (x.Status != http.StatusBadRequest && x.Status != http.StatusUnprocessableEntity) {
					violatef(ClauseDiskNames, x, "answered HTTP %d to disk_name %q, not 400 or 422", x.Status, name)
				}
			}
			if name == ".." {
				continue // a path segment ".." is resolved by HTTP clients and servers, never sent as a name
			}
			for _, x := range []*Exchange{r.detach(ctx, name), r.remove(ctx, name), r.attach(ctx, name, r.a.ID)} {
				if x.Err != nil || !slices.Contains([]int{http.StatusBadRequest, http.StatusNotFound, http.StatusUnprocessableEntity}, x.Status) {
					violatef(ClauseDiskNames, x, "answered HTTP %d to disk name %q in the path, not 400, 404 or 422", x.Status, name)
				}
			}
			if d, ok := r.listed(ctx, ClauseDiskNames, name); ok {
				violatef(ClauseDiskNames, nil, "GET /dynamic_disks lists a disk named %q: %+v", name, d)
			}
		}
	})

	It(ClauseUnknownRefs, labels("input", "provide", "create", "attach"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("unknown-refs")
		ghost := r.cfg.RunID + "-no-such-instance"
		cases := []*Exchange{
			r.provide(ctx, name, ghost, nil),
			r.s.sendJSON(ctx, r.s.disks, http.MethodPost, "/dynamic_disks/provide", provideBody{
				DiskName: name, DiskPoolName: r.cfg.RunID + "-no-such-pool", InstanceID: r.a.ID}),
			r.create(ctx, name, ghost),
		}
		for _, x := range cases {
			if x.Err != nil || (x.Status != http.StatusNotFound && x.Status != http.StatusUnprocessableEntity) {
				violatef(ClauseUnknownRefs, x, "answered HTTP %d, not 404 or 422", x.Status)
			}
			if strings.TrimSpace(x.message()) == "" {
				violatef(ClauseUnknownRefs, x, "the %d carries no message", x.Status)
			}
		}
		// attach of an existing disk to an unknown instance.
		r.doneCID(ctx, ClauseUnknownRefs, r.create(ctx, name, r.a.ID))
		x := r.attach(ctx, name, ghost)
		if x.Err != nil || (x.Status != http.StatusNotFound && x.Status != http.StatusUnprocessableEntity) {
			violatef(ClauseUnknownRefs, x, "answered HTTP %d, not 404 or 422", x.Status)
		}
		if strings.TrimSpace(x.message()) == "" {
			violatef(ClauseUnknownRefs, x, "the %d carries no message", x.Status)
		}
	})
}
