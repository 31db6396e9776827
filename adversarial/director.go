package adversarial

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/lab"
	"github.com/cpilab/cpilab/rt"
)

// dirWorld is a reference Director on a lab (fakeiaas, reference CPI,
// agents), its API served over TLS with token auth, behind a panic
// counter.
type dirWorld struct {
	e      *env
	lab    *lab.Lab
	d      *director.Director
	auth   *director.Auth
	g      *guarded
	srv    *director.Server
	p      *probe
	insts  []director.Instance
	tokens map[string]string // role → bearer token

	mu       sync.Mutex
	tasks    []int64         // every task queued by an input, guarded by mu
	provided map[string]bool // names a provide was queued for, guarded by mu
	acked    map[string]string
}

const taskBound = 60 * time.Second

func startDirWorld(ctx context.Context, e *env) (*dirWorld, error) {
	r := rt.Real(uint64(e.rng.Uint32()))
	l, err := lab.New(lab.Config{Runtime: r, DataDir: filepath.Join(e.dir, "lab")})
	if err != nil {
		return nil, err
	}
	w := &dirWorld{e: e, lab: l, acked: map[string]string{}, tokens: map[string]string{}, provided: map[string]bool{}}
	d, err := director.New(director.Config{Runtime: r, CPI: l.CPI, Agents: l.Agents, Inventory: l,
		AgentTimeout: 10 * time.Second, AgentPingTimeout: time.Second, VMLockTimeout: 20 * time.Second})
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	w.d = d
	if err := w.setup(); err != nil {
		_ = w.close()
		return nil, err
	}
	return w, nil
}

func (w *dirWorld) wait(id int64, err error) error {
	if err != nil {
		return err
	}
	t, err := w.d.WaitTask(id, taskBound)
	if err != nil {
		return err
	}
	if t.State != director.TaskDone {
		return fmt.Errorf("task %d (%s) ended %s: %s", t.ID, t.Description, t.State, t.Result)
	}
	return nil
}

func (w *dirWorld) setup() error {
	fx := filepath.Join(w.e.cfg.FixturesDir, "director")
	read := func(name string) ([]byte, error) { return os.ReadFile(filepath.Join(fx, name)) }
	mf, err := read("stemcell-v2/stemcell.MF")
	if err != nil {
		return err
	}
	img, err := filepath.Abs(filepath.Join(fx, "stemcell-v2", "image"))
	if err != nil {
		return err
	}
	if err := w.wait(w.d.UploadStemcell("admin", mf, img)); err != nil {
		return err
	}
	cc, err := read("cloud-config.yml")
	if err != nil {
		return err
	}
	if err := w.wait(w.d.UpdateCloudConfig("admin", cc)); err != nil {
		return err
	}
	m, err := read("manifest.yml")
	if err != nil {
		return err
	}
	if err := w.wait(w.d.Deploy("admin", m)); err != nil {
		return err
	}
	if w.insts, err = w.d.Instances("workers"); err != nil || len(w.insts) < 2 {
		return fmt.Errorf("instances: %v, %v", w.insts, err)
	}
	if w.auth, err = director.NewAuth(director.AuthConfig{Users: []director.User{{Name: "admin", Password: "pw", Scopes: []string{director.ScopeAdmin}}}}); err != nil {
		return err
	}
	api, err := director.NewAPI(director.APIConfig{Director: w.d, Auth: w.auth, DataDir: filepath.Join(w.e.dir, "stemcells")})
	if err != nil {
		return err
	}
	w.g = &guarded{h: api.Handler(), plantPanic: w.e.planted[OracleCrash]}
	if w.srv, err = director.Serve(director.ServeConfig{Handler: w.g}); err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.srv.CACertPEM())
	w.p = &probe{client: &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(req *http.Request, _ []*http.Request) error {
			// A task's 302 is the answer; the router's own redirects (a
			// path with "." cleaned) are followed as any client does.
			if req.Response != nil && req.Response.StatusCode == http.StatusFound {
				return http.ErrUseLastResponse
			}
			return nil
		}}, base: w.srv.URL()}
	other, err := director.NewAuth(director.AuthConfig{})
	if err != nil {
		return err
	}
	for role, scopes := range map[string][]string{"admin": {director.ScopeAdmin}, "disks": director.DiskScopes,
		"read": {director.ScopeRead}, "foreign": {"bosh.00000000-0000-4000-8000-000000000000.admin"}, "none": nil} {
		tok, _, err := w.auth.Issue(director.Principal{Name: role, Scopes: scopes})
		if err != nil {
			return err
		}
		w.tokens[role] = tok
	}
	if w.tokens["other-key"], _, err = other.Issue(director.Principal{Name: "admin", Scopes: []string{director.ScopeAdmin}}); err != nil {
		return err
	}
	w.p.token = w.tokens["admin"]
	// Acknowledged disks, with canaries.
	for i := range 2 {
		name := fmt.Sprintf("acked-%d", i)
		if err := w.wait(w.d.Provide("admin", director.ProvideRequest{DiskSize: 4, DiskName: name, DiskPoolName: "small", InstanceID: w.insts[i].ID})); err != nil {
			return err
		}
		dd, err := w.d.DynamicDisk(name)
		if err != nil {
			return err
		}
		w.acked[name] = dd.CID
		if err := writeCanary(w.lab.Cloud.DiskFile(cpiv2.MustCID[cpiv2.DiskKind](dd.CID)), dd.CID); err != nil {
			return err
		}
	}
	return nil
}

func writeCanary(path, cid string) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteAt(canary(cid), canaryOffset)
	return errors.Join(err, f.Close())
}

func (w *dirWorld) close() error {
	var errs []error
	if w.p != nil {
		w.p.client.CloseIdleConnections()
	}
	if w.srv != nil {
		errs = append(errs, w.srv.Close())
	}
	errs = append(errs, w.d.Close(), w.lab.Close())
	return errors.Join(errs...)
}

// dirClear: a clear Director refusal is a JSON body with a description,
// upstream's "Not authorized" text for a missing or bad token, or the
// router's own not-found.
func dirClear(r reply) bool {
	var b struct {
		Description string `json:"description"`
	}
	if json.Unmarshal(r.body, &b) == nil && b.Description != "" {
		return true
	}
	return (r.status == http.StatusUnauthorized && bytes.HasPrefix(r.body, []byte("Not authorized"))) || isMuxNotFound(r)
}

// badDirectorName mirrors the names the Director refuses
// (docs/security.md: path characters, NUL, control and space characters,
// invalid UTF-8, longer than director.MaxNameLen).
func badDirectorName(s string) bool {
	if s == "" || s == "." || s == ".." || len(s) > director.MaxNameLen || strings.ContainsAny(s, "/\\\x00") || !utf8.ValidString(s) {
		return true
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) {
			return true
		}
	}
	return false
}

// record notes a task an input queued (from its Location header).
func (w *dirWorld) record(r reply) {
	if r.status != http.StatusFound {
		return
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(r.header.Get("Location"), "/tasks/"), 10, 64)
	if err == nil {
		w.mu.Lock()
		w.tasks = append(w.tasks, id)
		w.mu.Unlock()
	}
}

// taskRefused waits for a queued task and reports whether it failed with
// a result saying why (a refusal made as a failed task, as upstream does
// for names it does not know).
func (w *dirWorld) taskRefused(t *tally, input string, r reply) bool {
	if r.status != http.StatusFound {
		return false
	}
	id, err := strconv.ParseInt(strings.TrimPrefix(r.header.Get("Location"), "/tasks/"), 10, 64)
	if err != nil {
		return false
	}
	task, err := w.d.WaitTask(id, taskBound)
	if err != nil {
		t.add(OracleCrash, input, "task %d did not end within %v: %v", id, taskBound, err)
		return false
	}
	return task.State == director.TaskError && (len(task.Result) > 0 || task.Error != "")
}

var dirRoutes = []struct{ method, path string }{
	{"GET", "/dynamic_disks"}, {"POST", "/dynamic_disks"}, {"POST", "/dynamic_disks/provide"}, {"POST", "/dynamic_disks/acked-0/attach"},
	{"POST", "/dynamic_disks/acked-0/detach"}, {"DELETE", "/dynamic_disks/acked-0"}, {"POST", "/dynamic_disks/acked-0/resize"},
	{"GET", "/tasks"}, {"GET", "/stemcells"}, {"POST", "/stemcells"}, {"POST", "/cloud_configs"}, {"POST", "/deployments"},
	{"DELETE", "/deployments/workers"}, {"PUT", "/deployments/workers/instances/x"}, {"DELETE", "/vms/x"}, {"DELETE", "/disks/x"}, {"GET", "/locks"},
}

func runDirector(ctx context.Context, e *env, t *tally, n int) error {
	w, err := startDirWorld(ctx, e)
	if err != nil {
		return err
	}
	defer func() { _ = w.close() }()
	outside, err := hashTree(e.outside, "")
	if err != nil {
		return err
	}
	r := e.rng
	bodies := hostileBodies(r)
	routes := []string{"/dynamic_disks/provide", "/dynamic_disks", "/dynamic_disks/acked-1/attach", "/dynamic_disks/acked-1/resize"}
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t.tried()
		name := pick(r, hostileNames)
		var input string
		k := r.IntN(10)
		switch {
		case i%25 == 12:
			k = 10
		case i%25 == 24:
			k = 11
		}
		switch k {
		case 0: // bad or missing tokens, and scopes that do not reach the route
			input = w.badTokens(ctx, e, t, name)
		case 1, 2: // bodies that are not what the route wants
			path := pick(r, routes)
			body := pick(r, bodies)
			input = fmt.Sprintf("POST %s body %.60q", path, body)
			rep := w.p.do(ctx, http.MethodPost, path, nil, body)
			w.record(rep)
			judge(t, input, rep, true, dirClear)
		case 3, 4: // hostile disk names in a provide, otherwise valid
			inst := w.insts[r.IntN(len(w.insts))].ID
			body := mustJSON(map[string]any{"disk_name": name, "disk_size": 4, "disk_pool_name": "small", "instance_id": inst})
			input = fmt.Sprintf("provide disk %q", name)
			rep := w.p.do(ctx, http.MethodPost, "/dynamic_disks/provide", nil, body)
			if badDirectorName(name) {
				judge(t, input, rep, true, dirClear)
			} else {
				judge(t, input, rep, false, dirClear)
				w.record(rep)
				w.mu.Lock()
				w.provided[name] = true
				w.mu.Unlock()
			}
		case 5: // hostile names in the path
			input = w.hostilePath(ctx, e, t, name)
		case 6: // sizes and metadata past their bounds, wrong types
			input = w.outOfBounds(ctx, e, t, name)
		case 7: // queries, task ids
			path := pick(r, []string{"/tasks?limit=" + pathSegment(name) + "x", "/tasks?limit=-1", "/tasks?limit=1000000000",
				"/tasks?state=" + pathSegment(strings.Repeat("q", 2000)), "/tasks/" + pathSegment(name) + "x", "/tasks/-1",
				"/tasks/99999999999999999999", "/tasks/999999/output?type=" + pathSegment(name)})
			input = "GET " + path
			judge(t, input, w.p.do(ctx, http.MethodGet, path, nil, nil), true, dirClear)
		case 8: // stemcells, cloud configs, manifests that must be refused
			input = w.refusedUploads(ctx, e, t, name)
		case 9: // the token endpoint
			form := pick(r, []string{"grant_type=password&username=admin&password=" + pathSegment(name), "grant_type=" + pathSegment(name),
				"%zz", strings.Repeat("a=b&", 50000), "grant_type=client_credentials&client_id=admin&client_secret="})
			input = fmt.Sprintf("POST /oauth/token %.60q", form)
			judge(t, input, w.p.do(ctx, http.MethodPost, "/oauth/token", map[string]string{"Content-Type": "application/x-www-form-urlencoded", "Authorization": ""}, []byte(form)), true, dirClear)
		case 10:
			input = "a 32 MiB body"
			judge(t, input, w.p.do(ctx, http.MethodPost, "/dynamic_disks/provide", nil, hugeBody()), true, dirClear)
		default:
			input = w.duplicates(ctx, t, i)
		}
		outside = e.checkOutside(t, input, outside)
	}
	if e.planted[OracleCrash] {
		t.tried()
		rep := w.p.do(ctx, http.MethodGet, "/dynamic_disks", map[string]string{"X-Cpilab-Plant": "panic"}, nil)
		judge(t, "planted panic", rep, true, dirClear)
	}
	// Every queued task ends within its bound.
	w.mu.Lock()
	tasks := append([]int64(nil), w.tasks...)
	w.mu.Unlock()
	for _, id := range tasks {
		if _, err := w.d.WaitTask(id, taskBound); err != nil {
			t.add(OracleCrash, fmt.Sprintf("task %d", id), "did not end within %v: %v", taskBound, err)
		}
	}
	w.verify(ctx, t)
	if g := w.g.panics.Load(); g > 0 {
		t.add(OracleCrash, "the whole area", "%d handler panics, the last: %s", g, w.g.last)
	}
	err = w.close()
	w.srv, w.p = nil, nil
	return errors.Join(err, os.RemoveAll(filepath.Join(e.dir, "lab")), os.RemoveAll(filepath.Join(e.dir, "stemcells")))
}

// badTokens sends a request with a bad or missing token, or one whose
// scopes do not reach the route, which must be refused (401/403).
func (w *dirWorld) badTokens(ctx context.Context, e *env, t *tally, name string) string {
	r := e.rng
	rt := pick(r, dirRoutes)
	hdr := map[string]string{}
	switch r.IntN(6) {
	case 0:
		hdr["Authorization"] = ""
	case 1:
		hdr["Authorization"] = "Bearer " + w.tokens["other-key"]
	case 2:
		hdr["Authorization"] = "Bearer " + noneAlg()
	case 3:
		hdr["Authorization"] = "Bearer " + pathSegment(name) // a header carries no control bytes
	case 4:
		hdr["Authorization"] = "Basic " + base64.StdEncoding.EncodeToString([]byte("admin:wrong"))
	default:
		hdr["Authorization"] = "Bearer " + w.tokens[pick(r, []string{"none", "foreign", "read"})]
		if rt.method == "GET" && !strings.HasPrefix(rt.path, "/dynamic_disks") && strings.Contains(hdr["Authorization"], w.tokens["read"]) {
			rt = dirRoutes[1] // bosh.read may read; aim at a write instead
		}
	}
	if rt.method != "GET" && r.IntN(2) == 0 {
		hdr["Authorization"] = "Bearer " + w.tokens["disks"]
		rt = pick(r, dirRoutes[9:])
	}
	input := fmt.Sprintf("%s %s with %.50s", rt.method, rt.path, hdr["Authorization"])
	rep := w.p.do(ctx, rt.method, rt.path, hdr, []byte(`{}`))
	w.record(rep)
	judge(t, input, rep, true, dirClear)
	return input
}

// hostilePath sends a hostile disk name in the path of a disk route: an
// absent name is refused, or its task fails saying why.
func (w *dirWorld) hostilePath(ctx context.Context, e *env, t *tally, name string) string {
	r := e.rng
	op := pick(r, []struct{ method, suffix string }{{"POST", "/attach"}, {"POST", "/detach"}, {"DELETE", ""}, {"GET", ""}, {"POST", "/resize"}})
	path := "/dynamic_disks/" + pathSegment(name) + op.suffix
	body := mustJSON(map[string]any{"instance_id": w.insts[0].ID, "new_size": 8})
	input := fmt.Sprintf("%s %.80s", op.method, path)
	rep := w.p.do(ctx, op.method, path, nil, body)
	if c, why := rep.crashed(); c {
		t.add(OracleCrash, input, why)
		return input
	}
	w.mu.Lock()
	exists := w.provided[name]
	w.mu.Unlock()
	if (op.method == "DELETE" && rep.status == http.StatusFound && !badDirectorName(name)) || exists || name == "." || name == ".." {
		// Deleting an absent disk succeeds, as upstream; a name an
		// earlier input provided is no longer hostile here; "." and
		// ".." are URL dot segments, removed before routing.
		w.record(rep)
		return input
	}
	clear := (rep.status >= 400 && rep.status < 500 && dirClear(rep)) || w.taskRefused(t, input, rep)
	t.expectError(input, clear, fmt.Sprintf("HTTP %d %s", rep.status, shorten(string(rep.body))))
	return input
}

// outOfBounds provides with a size or metadata past their bounds, or of
// the wrong type, which must be refused.
func (w *dirWorld) outOfBounds(ctx context.Context, e *env, t *tally, name string) string {
	r := e.rng
	size := pick(r, []any{-1, 1 << 44, 1 << 62, director.MaxDiskSizeMiB + 1, "4", 4.5, nil, true, "1e309", []int{4}})
	meta := oversizedMetadata(r, director.MaxMetadataKeys, director.MaxMetadataKeyLen, director.MaxMetadataValueLen)
	body := map[string]any{"disk_name": "sized", "disk_size": size, "disk_pool_name": "small", "instance_id": w.insts[0].ID}
	what := fmt.Sprintf("disk_size %v", size)
	if size == nil || r.IntN(3) == 0 {
		body["disk_size"], body["metadata"], what = 4, meta, fmt.Sprintf("metadata of %d keys", len(meta))
	}
	var b []byte
	if size == "1e309" && body["disk_size"] != 4 {
		b = []byte(`{"disk_name":"sized","disk_size":1e309,"disk_pool_name":"small","instance_id":"` + w.insts[0].ID + `"}`)
	} else {
		b, _ = json.Marshal(body)
	}
	input := "provide with " + what
	judge(t, input, w.p.do(ctx, http.MethodPost, "/dynamic_disks/provide", nil, b), true, dirClear)
	return input
}

// refusedUploads sends a stemcell location outside what the Director may
// read, or a cloud config or manifest that is not YAML it can take.
func (w *dirWorld) refusedUploads(ctx context.Context, e *env, t *tally, name string) string {
	r := e.rng
	var input string
	switch r.IntN(3) {
	case 0:
		loc := pick(r, []string{"../../../../" + strings.TrimPrefix(e.outside, "/"), e.outside + "/file", e.outside, "/proc/self/environ", "/dev/zero", name})
		input = "upload stemcell from " + loc
		rep := w.p.do(ctx, http.MethodPost, "/stemcells", nil, mustJSON(map[string]any{"location": loc}))
		clear := (rep.status >= 400 && rep.status < 500 && dirClear(rep)) || w.taskRefused(t, input, rep)
		if c, why := rep.crashed(); c {
			t.add(OracleCrash, input, why)
		}
		t.expectError(input, clear, fmt.Sprintf("HTTP %d %s", rep.status, shorten(string(rep.body))))
	default:
		path := pick(r, []string{"/cloud_configs", "/deployments"})
		body := pick(r, [][]byte{[]byte("{"), []byte("- ["), []byte("\tazs: 5"), []byte("azs: 5"), []byte("name: [x"), bytes.Repeat([]byte("a: "), 1<<20)})
		input = fmt.Sprintf("POST %s %.40q", path, body)
		rep := w.p.do(ctx, http.MethodPost, path, map[string]string{"Content-Type": "text/yaml"}, body)
		clear := (rep.status >= 400 && rep.status < 500 && dirClear(rep)) || w.taskRefused(t, input, rep)
		if c, why := rep.crashed(); c {
			t.add(OracleCrash, input, why)
		}
		t.expectError(input, clear, fmt.Sprintf("HTTP %d %s", rep.status, shorten(string(rep.body))))
	}
	return input
}

// duplicates sends 8 concurrent provides of one new name: one IaaS disk
// must come of it, and every success names it.
func (w *dirWorld) duplicates(ctx context.Context, t *tally, i int) string {
	name := fmt.Sprintf("dup-%d", i)
	input := "8 concurrent provides of " + name
	inst := w.insts[w.e.rng.IntN(len(w.insts))].ID
	body := mustJSON(map[string]any{"disk_name": name, "disk_size": 4, "disk_pool_name": "small", "instance_id": inst})
	var wg sync.WaitGroup
	reps := make([]reply, 8)
	for k := range reps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reps[k] = w.p.do(ctx, http.MethodPost, "/dynamic_disks/provide", nil, body)
		}()
	}
	wg.Wait()
	for _, rep := range reps {
		judge(t, input, rep, false, dirClear)
		if rep.status == http.StatusFound {
			if id, err := strconv.ParseInt(strings.TrimPrefix(rep.header.Get("Location"), "/tasks/"), 10, 64); err == nil {
				if _, err := w.d.WaitTask(id, taskBound); err != nil {
					t.add(OracleCrash, input, "task %d: %v", id, err)
				}
			}
		}
	}
	return input
}

// verify: the acknowledged disks are where they were with their data,
// and every IaaS disk is owned by a director record (no leak).
func (w *dirWorld) verify(ctx context.Context, t *tally) {
	st, err := w.lab.Cloud.State(ctx)
	if err != nil {
		t.add(OracleDataLost, "end of area", "cloud state: %v", err)
		return
	}
	for name, cid := range w.acked {
		dd, err := w.d.DynamicDisk(name)
		if err != nil || dd.CID != cid {
			t.add(OracleDataLost, name, "the acknowledged disk is now %+v, %v; was %s", dd, err, cid)
			continue
		}
		attached := false
		for _, d := range st.Disks {
			if d.CID.String() == cid && d.VMCID.String() == dd.VMCID && dd.VMCID != "" {
				attached = true
			}
		}
		if !attached {
			t.add(OracleDataLost, name, "disk %s is no longer attached to %s in the cloud", cid, dd.VMCID)
		}
		b := make([]byte, len(canary(cid)))
		if f, err := os.Open(w.lab.Cloud.DiskFile(cpiv2.MustCID[cpiv2.DiskKind](cid))); err != nil {
			t.add(OracleDataLost, name, "backing file: %v", err)
		} else {
			_, err = f.ReadAt(b, canaryOffset)
			_ = f.Close()
			if err != nil || !bytes.Equal(b, canary(cid)) {
				t.add(OracleDataLost, name, "disk %s lost its canary: %q, %v", cid, b, err)
			}
		}
		if _, err := os.Lstat(filepath.Join(w.lab.Cloud.VMRoot(cpiv2.MustCID[cpiv2.VMKind](dd.VMCID)), agent.DynamicDiskLink(cid))); err != nil {
			t.add(OracleDataLost, name, "the agent's link to %s is gone: %v", cid, err)
		}
	}
	owned := map[string]bool{}
	dds, _ := w.d.DynamicDisks()
	for _, dd := range dds {
		owned[dd.CID] = true
	}
	orphans, _ := w.d.OrphanedDisks()
	for _, o := range orphans {
		owned[o.CID] = true
	}
	for _, d := range st.Disks {
		if !owned[d.CID.String()] {
			t.add(OracleLeak, "end of area", "IaaS disk %s belongs to no dynamic disk and no orphan record", d.CID)
		}
	}
}

// noneAlg is a JWT with "alg": "none" claiming bosh.admin.
func noneAlg() string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"none","typ":"JWT"}`)) + "." + enc([]byte(`{"sub":"admin","scope":["bosh.admin"],"exp":9999999999}`)) + "."
}
