package dynamicdisks

import (
	"context"
	"maps"
	"net/http"
	"strings"

	"github.com/cpilab/cpilab/director"
	. "github.com/onsi/ginkgo/v2"
)

// labels of a spec: its area and the endpoints it calls.
func labels(area string, endpoints ...string) Labels {
	l := Labels{"area:" + area}
	for _, e := range endpoints {
		l = append(l, "endpoint:"+e)
	}
	return l
}

// describe registers the suite: one Ordered container (the set-up is
// shared), ContinueOnFailure so that one broken clause does not hide the
// others; every spec uses its own disk names.
func describe(cfg *Config, base context.Context) *run {
	r := &run{base: base}
	Describe("dynamic disks API", Label("suite:dynamicdisks"), Ordered, ContinueOnFailure, func() {
		BeforeAll(func(sctx SpecContext) {
			ctx := r.ctx(sctx)
			DeferCleanup(func(sctx SpecContext) {
				if r.t == nil {
					return
				}
				ctx, cancel := r.merge(sctx)
				defer cancel()
				if err := r.t.cleanup(ctx); err != nil {
					violatef(ClauseCleanup, nil, "%v", err)
				}
			})
			r.setUp(ctx, *cfg)
		})
		BeforeEach(func() { r.requireCaps() })
		modelSpecs(r)
		semanticsSpecs(r)
		iaasSpecs(r)
		authSpecs(r)
		scopeSpecs(r)
		inputSpecs(r)
		concurrencySpecs(r)
		exploreSpecs(r)
		It(ClauseCleanup, labels("cleanup", "detach", "delete"), func(sctx SpecContext) {
			if err := r.t.cleanup(r.ctx(sctx)); err != nil {
				violatef(ClauseCleanup, nil, "%v", err)
			}
		})
	})
	return r
}

func semanticsSpecs(r *run) {
	It(ClauseProvideCreates, labels("provide", "provide", "list"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("provide")
		x := r.provide(ctx, name, r.a.ID, nil)
		cid := r.doneCID(ctx, ClauseProvideCreates, x)
		d, ok := r.listed(ctx, ClauseProvideCreates, name)
		switch {
		case !ok:
			violatef(ClauseProvideCreates, x, "provide succeeded with disk_cid %s, but GET /dynamic_disks does not list %q", cid, name)
		case d.CID != cid:
			violatef(ClauseProvideCreates, x, "GET /dynamic_disks lists %q with disk_cid %q; the task result said %q", name, d.CID, cid)
		case !listedOn(d, r.a):
			violatef(ClauseProvideCreates, x, "GET /dynamic_disks lists %q on instance %q; it was provided to %s/%s (VM %s)",
				name, d.InstanceName(), r.a.Group, r.a.ID, r.a.VMCID)
		}
	})

	It(ClauseDetachUnknown+" (a failed task, or 404)", labels("detach", "detach"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		r.refused(ctx, ClauseDetachUnknown, r.detach(ctx, r.name("never-made")), http.StatusNotFound)
	})

	It(ClauseDeleteAbsent, labels("delete", "delete"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		r.done(ctx, ClauseDeleteAbsent, r.remove(ctx, r.name("absent")))
	})

	It(ClauseTasks, labels("tasks", "create", "attach", "provide", "detach", "delete"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("tasks")
		cid := r.doneCID(ctx, ClauseTasks, r.create(ctx, name, r.a))
		steps := []struct {
			what     string
			send     func() *Exchange
			holdsCID bool // upstream: only provide and create write a result
		}{
			{"attach", func() *Exchange { return r.attach(ctx, name, r.a.ID) }, false},
			{"provide", func() *Exchange { return r.provide(ctx, name, r.a.ID, nil) }, true},
			{"detach", func() *Exchange { return r.detach(ctx, name) }, false},
			{"delete", func() *Exchange { return r.remove(ctx, name) }, false},
		}
		for _, st := range steps {
			x := st.send()
			if loc := x.Location; x.taskID() != 0 && !strings.HasPrefix(loc, "/") && !strings.HasPrefix(loc, r.s.base+"/") {
				violatef(ClauseTasks, x, "%s redirects to %q, not to this director's /tasks/<id>", st.what, loc)
			}
			if !st.holdsCID {
				if got := r.done(ctx, ClauseTasks, x); got != "" && got != cid {
					violatef(ClauseTasks, x, "the %s task result holds disk_cid %q; the disk is %q", st.what, got, cid)
				}
				continue
			}
			if got := r.doneCID(ctx, ClauseTasks, x); got != cid {
				violatef(ClauseTasks, x, "the %s task result holds disk_cid %q; the disk is %q", st.what, got, cid)
			}
		}
	})
}

// listedOn reports whether a GET /dynamic_disks entry shows the disk
// attached to inst: its "instance" is upstream's "<group>/<instance id>".
// An entry attached nowhere (instance null) is not on inst.
func listedOn(d director.DiskInfo, inst director.Instance) bool {
	n := d.InstanceName()
	return n != "" && (n == inst.Group+"/"+inst.ID || strings.HasSuffix(n, "/"+inst.ID))
}

// metadataOf is the metadata the suite sets, marked with the run.
func (r *run) metadataOf(purpose string) map[string]string {
	return map[string]string{"cpilab-run": r.cfg.RunID, "purpose": purpose}
}

func iaasSpecs(r *run) {
	It(ClauseIaaS, labels("iaas", "provide", "detach", "delete"), Label("cap:oracle"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("iaas")
		vmA := r.vm(ctx, r.a.ID)
		x := r.provide(ctx, name, r.a.ID, nil)
		cid := r.doneCID(ctx, ClauseIaaS, x)
		r.wantAttached(ctx, x, cid, vmA.VMCID, "after provide to instance "+r.a.ID)
		x = r.provide(ctx, name, r.b.ID, nil)
		r.refused(ctx, ClauseProvideElsewhere, x, http.StatusConflict, http.StatusUnprocessableEntity)
		r.wantAttached(ctx, x, cid, vmA.VMCID, "after a refused provide to instance "+r.b.ID)
		x = r.detach(ctx, name)
		r.done(ctx, ClauseIaaS, x)
		r.wantAttached(ctx, x, cid, "", "after detach")
		vmB := r.vm(ctx, r.b.ID)
		x = r.provide(ctx, name, r.b.ID, nil)
		r.doneCID(ctx, ClauseIaaS, x)
		r.wantAttached(ctx, x, cid, vmB.VMCID, "after provide to instance "+r.b.ID)
		x = r.detach(ctx, name)
		r.done(ctx, ClauseIaaS, x)
		r.wantAttached(ctx, x, cid, "", "after detach")
		x = r.remove(ctx, name)
		r.done(ctx, ClauseIaaS, x)
		if d, ok := r.oracleDisk(ctx, cid); ok {
			violatef(ClauseIaaS, x, "the delete task succeeded, but the IaaS still has disk %s (attached to %q)", cid, d.AttachedTo)
		}
	})

	It(ClauseMetadata, labels("metadata", "provide"), Label("cap:oracle"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("metadata")
		for _, purpose := range []string{"metadata-spec", "metadata-changed"} {
			want := r.metadataOf(purpose)
			x := r.provide(ctx, name, r.a.ID, want)
			cid := r.doneCID(ctx, ClauseMetadata, x)
			d, ok := r.oracleDisk(ctx, cid)
			if !ok {
				violatef(ClauseMetadata, x, "the IaaS has no disk %s", cid)
			}
			got := map[string]string{}
			for k := range want {
				if v, ok := d.Metadata[k]; ok {
					got[k] = v
				}
			}
			if !maps.Equal(got, want) {
				violatef(ClauseMetadata, x, "the IaaS disk %s holds metadata %v; want at least %v", cid, d.Metadata, want)
			}
		}
	})

	It(ClauseSymlink, labels("agent", "provide", "detach"), Label("cap:links"), func(sctx SpecContext) {
		ctx := r.ctx(sctx)
		name := r.name("link")
		vm := r.vm(ctx, r.a.ID)
		x := r.provide(ctx, name, r.a.ID, nil)
		cid := r.doneCID(ctx, ClauseSymlink, x)
		target, ok, err := r.cfg.Links.DynamicDiskLink(ctx, vm, cid)
		if err != nil {
			Fail("links: " + err.Error())
		}
		if !ok {
			violatef(ClauseSymlink, x, "provide succeeded, but VM %s has no dynamic disk link for %s", vm.VMCID, cid)
		}
		if target == "" {
			violatef(ClauseSymlink, x, "the link for %s on VM %s leads nowhere", cid, vm.VMCID)
		}
		x = r.detach(ctx, name)
		r.done(ctx, ClauseSymlink, x)
		if target, ok, err = r.cfg.Links.DynamicDiskLink(ctx, vm, cid); err != nil {
			Fail("links: " + err.Error())
		}
		if ok {
			violatef(ClauseSymlink, x, "detach succeeded, but VM %s still links %s → %s", vm.VMCID, cid, target)
		}
	})
}

// wantAttached fails unless the IaaS has disk cid attached to vmCID ("":
// detached).
func (r *run) wantAttached(ctx context.Context, x *Exchange, cid, vmCID, when string) {
	GinkgoHelper()
	d, ok := r.oracleDisk(ctx, cid)
	switch {
	case !ok:
		violatef(ClauseIaaS, x, "%s the IaaS has no disk %s", when, cid)
	case d.AttachedTo != vmCID && vmCID == "":
		violatef(ClauseIaaS, x, "%s the IaaS has disk %s still attached to VM %s", when, cid, d.AttachedTo)
	case d.AttachedTo != vmCID:
		violatef(ClauseIaaS, x, "%s the IaaS has disk %s attached to %q; want VM %s", when, cid, d.AttachedTo, vmCID)
	}
}

// requireCaps skips the current spec when a capability it is labelled
// with is absent, saying why (STYLE 2).
func (r *run) requireCaps() {
	for _, l := range CurrentSpecReport().Labels() {
		switch l {
		case "cap:oracle":
			if r.cfg.Oracle == nil {
				Skip("not checked: IaaS state: cpilab cannot inspect this cloud (no oracle for a real cloud or a remote director)")
			}
		case "cap:links":
			if r.cfg.Links == nil {
				Skip("not checked: agent symlinks: no SFTP or file system access to the VMs")
			}
		case "cap:gates":
			if r.cfg.Gates == nil {
				Skip("not checked: dedicated queue: cpilab cannot hold this cloud's create_vm to make a deploy slow")
			}
		}
	}
}
