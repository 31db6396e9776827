package dynamicdisks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/internal/httpread"
	. "github.com/onsi/ginkgo/v2"
)

// run is the state of one registration of the suite: filled in by
// BeforeAll, read by the specs.
type run struct {
	cfg        Config
	s          *session
	t          *tracker
	deployment string
	a, b       director.Instance // the two instances disks are provided to
	stemcellOS string
	seq        atomic.Int64
	base       context.Context // the run's context (Run's ctx); specs also stop on their own

	// insts are the instances of the suite's deployments (its own and
	// the second one), as set-up found them.
	insts []director.Instance
	// m is the model of the dynamic disks API the model specs walk.
	m *Model
	// gone are the cids of disks the model deleted (the IaaS must lose
	// them).
	gone []string
	// noGetRoute: the director answered 404 to GET /dynamic_disks/:name of
	// a disk it lists (upstream has no such route); sawGetRoute: it
	// answered 200 once.
	noGetRoute, sawGetRoute bool
	// prepared: the stemcell and cloud config are uploaded.
	prepared bool
	// capped is the first set-up error caused by an answer over its cap
	// (httpread.ErrCapped): the director cannot be certified, Run
	// returns it.
	capped atomic.Pointer[error]
}

// noteCapped records err when a peer's answer broke a read cap.
func (r *run) noteCapped(err error) {
	if errors.Is(err, httpread.ErrCapped) {
		r.capped.CompareAndSwap(nil, &err)
	}
}

// ctx is a spec's context, also cancelled when the run's is.
func (r *run) ctx(spec context.Context) context.Context {
	ctx, cancel := r.merge(spec)
	DeferCleanup(cancel)
	return ctx
}

// merge is ctx of spec, also cancelled when the run's is; call cancel
// when done.
func (r *run) merge(spec context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(spec)
	stop := context.AfterFunc(r.base, cancel)
	return ctx, func() { stop(); cancel() }
}

// name returns a unique disk name for this run, tagged with what it is
// for, and tracks it for clean-up.
func (r *run) name(tag string) string {
	n := fmt.Sprintf("%s-%s-%d", r.cfg.RunID, tag, r.seq.Add(1))
	r.t.add("disk", n)
	return n
}

// setUp connects, deploys when asked to, and picks the two instances.
func (r *run) setUp(ctx context.Context, cfg Config) {
	GinkgoHelper()
	r.cfg = cfg.withDefaults()
	if err := r.cfg.validate(); err != nil {
		violatef(ClauseSetup, nil, "invalid Config: %v", err)
	}
	s, err := newSession(ctx, r.cfg)
	if err != nil {
		r.noteCapped(err)
		violatef(ClauseSetup, nil, "%v", err)
	}
	r.s, r.t = s, &tracker{s: s}
	r.deployment = r.cfg.Deployment
	second := r.cfg.SecondDeployment
	if r.deployment == "" {
		r.deployment = r.cfg.RunID
		r.deploy(ctx, r.deployment, 3)
		if second == "" && r.cfg.Setup.SecondInstances >= 0 {
			second = r.cfg.RunID + "-two"
			r.deploy(ctx, second, max(r.cfg.Setup.SecondInstances, 1))
		}
	}
	insts, err := s.admin.dc.Instances(ctx, r.deployment)
	if err != nil {
		r.noteCapped(err)
		violatef(ClauseSetup, nil, "GET /deployments/%s/instances as admin: %v", r.deployment, err)
	}
	var use []director.Instance
	for _, in := range insts {
		if in.Deployment == "" {
			in.Deployment = r.deployment
		}
		r.insts = append(r.insts, in)
		if in.VMCID == "" {
			continue
		}
		if len(r.cfg.Instances) == 0 || slices.Contains(r.cfg.Instances, in.ID) {
			use = append(use, in)
		}
	}
	if second != "" {
		more, err := s.admin.dc.Instances(ctx, second)
		if err != nil {
			violatef(ClauseSetup, nil, "GET /deployments/%s/instances as admin: %v", second, err)
		}
		for _, in := range more {
			if in.Deployment == "" {
				in.Deployment = second
			}
			r.insts = append(r.insts, in)
		}
	}
	if len(use) < 2 {
		violatef(ClauseSetup, nil, "deployment %s has %d usable instances (with a VM%s); the suite needs two: %+v",
			r.deployment, len(use), map[bool]string{true: ", named by Config.Instances"}[len(r.cfg.Instances) > 0], insts)
	}
	// a and b: two instances in one AZ (the first AZ that has two).
	r.a, r.b = use[0], use[1]
pick:
	for i, in := range use {
		for _, other := range use[i+1:] {
			if other.AZ == in.AZ {
				r.a, r.b = in, other
				break pick
			}
		}
	}
	r.initModel(r.insts)
	GinkgoWriter.Printf("dynamic disks suite: run %s, deployment %s, instances %s (VM %s) and %s (VM %s), pool %s\n",
		r.cfg.RunID, r.deployment, r.a.ID, r.a.VMCID, r.b.ID, r.b.VMCID, r.cfg.DiskPool)
}

// deploy uploads Setup's stemcell and cloud config, then deploys name
// with n instances, tracking it for clean-up.
func (r *run) deploy(ctx context.Context, name string, n int) {
	GinkgoHelper()
	s, su := r.s, r.cfg.Setup
	dctx, cancel := context.WithTimeout(ctx, r.cfg.Timeouts.Deploy)
	defer cancel()
	var err error
	switch {
	case r.prepared:
	case su.StemcellLocation != "":
		err = s.admin.dc.UploadStemcell(dctx, su.StemcellLocation)
	case len(su.StemcellManifest) > 0:
		err = s.admin.dc.UploadStemcellManifest(dctx, su.StemcellManifest, su.StemcellImagePath)
	}
	if err != nil {
		r.noteCapped(err)
		violatef(ClauseSetup, nil, "stemcell upload as admin: %v", err)
	}
	if !su.KeepCloudConfig && !r.prepared {
		if err := s.admin.dc.UpdateCloudConfig(dctx, su.CloudConfig); err != nil {
			r.noteCapped(err)
			violatef(ClauseSetup, nil, "POST /cloud_configs as admin: %v", err)
		}
	}
	r.prepared = true
	r.t.add("deployment", name)
	if err := s.admin.dc.Deploy(dctx, su.Manifest(name, r.osOf(dctx), n)); err != nil {
		r.noteCapped(err)
		violatef(ClauseSetup, nil, "deploy %s as admin: %v", name, err)
	}
}

// vm returns an instance's VM as the director shows it now.
func (r *run) vm(ctx context.Context, id string) VM {
	GinkgoHelper()
	insts, err := r.s.admin.dc.Instances(ctx, r.deployment)
	if err != nil {
		Fail(fmt.Sprintf("GET /deployments/%s/instances as admin: %v", r.deployment, err))
	}
	for _, in := range insts {
		if in.ID == id {
			return VM{InstanceID: id, VMCID: in.VMCID, AgentID: in.AgentID}
		}
	}
	Fail(fmt.Sprintf("instance %s is no longer in deployment %s", id, r.deployment))
	return VM{}
}

// provideBody is POST /dynamic_disks/provide's body.
type provideBody struct {
	DiskName     string            `json:"disk_name"`
	DiskSize     int               `json:"disk_size"`
	DiskPoolName string            `json:"disk_pool_name"`
	InstanceID   string            `json:"instance_id"`
	Metadata     map[string]string `json:"metadata,omitempty"`
}

// createBody is POST /dynamic_disks's body, as upstream takes it: a disk in
// an AZ of a deployment. InstanceID (cpilab's extension) is sent only for
// an instance without an AZ, which upstream cannot create a disk beside.
type createBody struct {
	Deployment   string `json:"deployment_name"`
	AZ           string `json:"az,omitempty"`
	DiskName     string `json:"disk_name"`
	DiskPoolName string `json:"disk_pool_name"`
	DiskSize     int    `json:"disk_size"`
	InstanceID   string `json:"instance_id,omitempty"`
	// Metadata is upstream's optional metadata hash.
	Metadata map[string]string `json:"metadata,omitempty"`
}

func (r *run) provide(ctx context.Context, name, instance string, meta map[string]string) *Exchange {
	return r.s.sendJSON(ctx, r.s.disks, http.MethodPost, "/dynamic_disks/provide", provideBody{
		DiskName: name, DiskSize: r.cfg.DiskSizeMiB, DiskPoolName: r.cfg.DiskPool, InstanceID: instance, Metadata: meta})
}

// create creates a disk in the deployment and AZ of inst.
func (r *run) create(ctx context.Context, name string, inst director.Instance) *Exchange {
	b := createBody{Deployment: r.deployment, AZ: inst.AZ, DiskName: name, DiskSize: r.cfg.DiskSizeMiB, DiskPoolName: r.cfg.DiskPool}
	if inst.AZ == "" {
		b.InstanceID = inst.ID
	}
	return r.s.sendJSON(ctx, r.s.disks, http.MethodPost, "/dynamic_disks", b)
}

func (r *run) attach(ctx context.Context, name, instance string) *Exchange {
	return r.s.sendJSON(ctx, r.s.disks, http.MethodPost, diskPath(name, "/attach"), map[string]string{"instance_id": instance})
}

func (r *run) detach(ctx context.Context, name string) *Exchange {
	return r.s.send(ctx, r.s.disks, http.MethodPost, diskPath(name, "/detach"), nil, "")
}

func (r *run) remove(ctx context.Context, name string) *Exchange {
	return r.s.send(ctx, r.s.disks, http.MethodDelete, diskPath(name, ""), nil, "")
}

// task requires x to be a 302 to /tasks/<id> and waits for that task.
func (r *run) task(ctx context.Context, clause string, x *Exchange) director.TaskView {
	GinkgoHelper()
	id := x.taskID()
	if id == 0 {
		violatef(clause, x, "answered no 302 redirect to /tasks/<id>")
	}
	tv, err := r.s.waitTask(ctx, id, r.cfg.Timeouts.Task)
	var st *errStuck
	switch {
	case errors.As(err, &st):
		violatef(clause, x, "%v; the dynamic_disks queue has no worker (race (i), docs/upstream.md): %s", err, taskString(tv))
	case err != nil:
		violatef(clause, x, "%v", err)
	}
	return tv
}

// done requires x's task to succeed and returns the disk_cid its result
// holds ("" when it holds none).
func (r *run) done(ctx context.Context, clause string, x *Exchange) string {
	GinkgoHelper()
	cid, _, _ := r.result(ctx, clause, x)
	return cid
}

// doneCID is done, and the result must hold a non-empty disk_cid.
func (r *run) doneCID(ctx context.Context, clause string, x *Exchange) string {
	GinkgoHelper()
	cid, tv, raw := r.result(ctx, clause, x)
	if cid == "" {
		violatef(clause, x, "task %d succeeded, but its result %q holds no disk_cid", tv.ID, strings.TrimSpace(string(raw)))
	}
	return cid
}

// result requires x's task to succeed and returns the disk_cid its result
// holds ("" when none), the task and the result as the director wrote it.
func (r *run) result(ctx context.Context, clause string, x *Exchange) (string, director.TaskView, []byte) {
	GinkgoHelper()
	tv := r.task(ctx, clause, x)
	if tv.State != director.TaskDone {
		violatef(clause, x, "the task failed: %s", taskString(tv))
	}
	cid, _, raw, err := r.s.resultCID(ctx, tv.ID) // cid is "" when the result holds none
	if err != nil {
		violatef(clause, x, "%v", err)
	}
	return cid, tv, raw
}

// refused requires the director to refuse x: a 302 whose task fails
// saying why (upstream), or (when refusals is not empty) one of those
// statuses at once, with a message.
func (r *run) refused(ctx context.Context, clause string, x *Exchange, refusals ...int) {
	GinkgoHelper()
	if x.Err == nil && slices.Contains(refusals, x.Status) {
		if strings.TrimSpace(x.message()) == "" {
			violatef(clause, x, "the %d carries no message", x.Status)
		}
		return
	}
	if x.taskID() == 0 {
		violatef(clause, x, "answered neither a 302 to a task nor a refusal (HTTP %v)", refusals)
	}
	tv := r.task(ctx, clause, x)
	if tv.State != director.TaskError {
		violatef(clause, x, "the task ended %s, not in error: %s", tv.State, taskString(tv))
	}
	if strings.TrimSpace(tv.Result) == "" {
		violatef(clause, x, "the task failed without saying why: %s", taskString(tv))
	}
}

// listed returns GET /dynamic_disks's entry for name (ok false: absent).
func (r *run) listed(ctx context.Context, clause, name string) (director.DiskInfo, bool) {
	GinkgoHelper()
	x := r.s.send(ctx, r.s.disks, http.MethodGet, "/dynamic_disks", nil, "")
	if x.Err != nil || x.Status != http.StatusOK {
		violatef(clause, x, "GET /dynamic_disks did not answer 200")
	}
	var all []director.DiskInfo
	if err := json.Unmarshal(x.Answer, &all); err != nil {
		violatef(clause, x, "GET /dynamic_disks answered no list of disks: %v", err)
	}
	n := 0
	var out director.DiskInfo
	for _, d := range all {
		if d.Name == name {
			n++
			out = d
		}
	}
	if n > 1 {
		violatef(clause, x, "GET /dynamic_disks lists %q %d times", name, n)
	}
	return out, n == 1
}

// oracleDisk returns the IaaS disk cid (ok false: none).
func (r *run) oracleDisk(ctx context.Context, cid string) (OracleDisk, bool) {
	GinkgoHelper()
	d, ok, err := r.cfg.Oracle.Disk(ctx, cid)
	if err != nil {
		Fail(fmt.Sprintf("oracle: disk %s: %v", cid, err))
	}
	return d, ok
}
