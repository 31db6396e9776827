package director_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/director"
)

// apiWorld serves a world's director over TLS with token auth.
type apiWorld struct {
	*world
	srv     *director.Server
	auth    *director.Auth
	stemDir string // APIConfig.DataDir: where tarballs are unpacked
}

func newAPIWorld(t testing.TB, opts ...worldOpts) *apiWorld {
	t.Helper()
	var o worldOpts
	if len(opts) > 0 {
		o = opts[0]
	}
	w := newWorld(t, o)
	auth, err := director.NewAuth(director.AuthConfig{Users: []director.User{
		{Name: "admin", Password: "pw", Scopes: []string{director.ScopeAdmin}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	stemDir := t.TempDir()
	api, err := director.NewAPI(director.APIConfig{Director: w.d, Auth: auth, DataDir: stemDir})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := director.Serve(director.ServeConfig{Handler: api.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return &apiWorld{world: w, srv: srv, auth: auth, stemDir: stemDir}
}

// client returns a client with a token holding scopes (none: no credentials).
func (a *apiWorld) client(t testing.TB, user string, scopes ...string) *director.Client {
	t.Helper()
	cfg := director.ClientConfig{URL: a.srv.URL(), CACertPEM: a.srv.CACertPEM()}
	if user != "" {
		tok, _, err := a.auth.Issue(director.Principal{Name: user, Scopes: scopes})
		if err != nil {
			t.Fatal(err)
		}
		cfg.Token = tok
	}
	c, err := director.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func status(err error) int {
	var e *director.APIError
	if errors.As(err, &e) {
		return e.Status
	}
	return 0
}

func TestAPIDynamicDisksOverTLS(t *testing.T) {
	a := newAPIWorld(t)
	ctx := context.Background()
	c, err := director.NewClient(director.ClientConfig{URL: a.srv.URL(), CACertPEM: a.srv.CACertPEM(), Username: "admin", Password: "pw"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Login(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(a.srv.URL(), "https://127.0.0.1:") {
		t.Fatalf("default server URL %s; want TLS on loopback", a.srv.URL())
	}
	inst := a.insts[0]
	cid, err := c.Provide(ctx, director.ProvideRequest{DiskSize: 4, DiskName: "api-disk", DiskPoolName: "small", InstanceID: inst.ID})
	if err != nil || cid == "" {
		t.Fatalf("Provide = %q, %v", cid, err)
	}
	again, err := c.Provide(ctx, director.ProvideRequest{DiskSize: 4, DiskName: "api-disk", DiskPoolName: "small", InstanceID: inst.ID})
	if err != nil || again != cid {
		t.Fatalf("idempotent Provide = %q, %v; want %q", again, err, cid)
	}
	list, err := c.DynamicDisks(ctx)
	if err != nil || len(list) != 1 || list[0].CID != cid || list[0].InstanceName() != inst.Group+"/"+inst.ID || list[0].SizeMiB != 4 {
		t.Fatalf("DynamicDisks = %+v, %v", list, err)
	}
	_, err = c.Provide(ctx, director.ProvideRequest{DiskSize: 4, DiskName: "api-disk", DiskPoolName: "small", InstanceID: a.insts[1].ID})
	var te *director.TaskFailedError
	if !errors.As(err, &te) || !strings.Contains(te.Task.Result, "attached to a different vm") {
		t.Fatalf("Provide to another VM: %v; want a failed task saying why", err)
	}
	if err := c.DetachDynamicDisk(ctx, "api-disk"); err != nil {
		t.Fatal(err)
	}
	if err := c.DetachDynamicDisk(ctx, "api-disk"); err != nil {
		t.Fatalf("second detach: %v", err)
	}
	msg, err := c.AttachDynamicDisk(ctx, "api-disk", inst.ID, map[string]any{"n": 1})
	if err != nil || !strings.HasPrefix(msg, "attached disk `api-disk` to vm ") {
		t.Fatalf("attach = %q, %v; want upstream's message", msg, err)
	}
	if err := c.DeleteDynamicDisk(ctx, "api-disk"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteDynamicDisk(ctx, "api-disk"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if err := c.DetachDynamicDisk(ctx, "never"); !errors.As(err, &te) || te.Task.Result != "disk `never` can not be found in the database" {
		t.Fatalf("detach of an unknown disk: %v; want a failed task", err)
	}
	created, err := c.CreateDynamicDisk(ctx, director.CreateDiskRequest{DiskName: "made", DiskPoolName: "small",
		Deployment: inst.Deployment, AZ: inst.AZ, DiskSize: 8})
	if err != nil || created == "" {
		t.Fatalf("CreateDynamicDisk = %q, %v", created, err)
	}
	if _, err := c.CreateDynamicDisk(ctx, director.CreateDiskRequest{DiskName: "made", DiskPoolName: "small",
		Deployment: inst.Deployment, AZ: inst.AZ, DiskSize: 8}); !errors.As(err, &te) || te.Task.Result != "disk `made` already exists" {
		t.Fatalf("create of an existing name: %v; want upstream's task error", err)
	}
	// create_disk's cloud_properties carry the name.
	var props map[string]any
	if d, ok := a.iaasDisk(created); !ok || json.Unmarshal(d.CloudProperties, &props) != nil || props["name"] != "made" {
		t.Fatalf("IaaS disk %s: %+v; want cloud_properties name=made", created, d)
	}
	// Every mutating call answers 302 to /tasks/:id with an empty body; the
	// output endpoints serve the logs; only provide and create write a result.
	req, _ := http.NewRequest(http.MethodPost, a.srv.URL()+"/dynamic_disks/made/detach", nil)
	tok, _, _ := a.auth.Issue(director.Principal{Name: "admin", Scopes: []string{director.ScopeAdmin}})
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := a.httpClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || len(body) != 0 || !strings.HasPrefix(resp.Header.Get("Location"), "/tasks/") {
		t.Fatalf("detach answered %d Location %q body %q; want 302, /tasks/<id>, empty", resp.StatusCode, resp.Header.Get("Location"), body)
	}
	id, _ := strconv.ParseInt(strings.TrimPrefix(resp.Header.Get("Location"), "/tasks/"), 10, 64)
	tv, err := c.WaitTask(ctx, id)
	if err != nil || tv.Result != "disk `"+created+"` was already detached" {
		t.Fatalf("detach task = %+v, %v", tv, err)
	}
	for _, typ := range []string{"event", "debug"} {
		out, err := c.TaskOutput(ctx, id, typ)
		if err != nil || len(out) == 0 {
			t.Fatalf("output %s = %q, %v", typ, out, err)
		}
	}
	if out, err := c.TaskOutput(ctx, id, "result"); err != nil || len(out) != 0 {
		t.Fatalf("detach's result = %q, %v; want none", out, err)
	}
	if _, err := c.TaskOutput(ctx, id, "bogus"); status(err) != http.StatusBadRequest {
		t.Fatalf("output type bogus: %v; want 400", err)
	}
	var deps []any
	if err := c.GetJSON(ctx, "/deployments", &deps); err != nil || deps == nil {
		t.Fatalf("GET /deployments = %v, %v; want a list", deps, err)
	}
}

// TestAPIEmptyListsAreArrays: an empty director answers [] (not null).
func TestAPIEmptyListsAreArrays(t *testing.T) {
	a := newAPIWorld(t, worldOpts{noDeploy: true})
	tok, _, _ := a.auth.Issue(director.Principal{Name: "admin", Scopes: []string{director.ScopeAdmin}})
	for _, path := range []string{"/deployments", "/dynamic_disks", "/disks?orphaned=true", "/locks", "/vms", "/tasks"} {
		status, b := a.call(t, tok, route{method: "GET", path: path})
		if status != http.StatusOK || strings.TrimSpace(string(b)) != "[]" {
			t.Errorf("GET %s = %d %s; want []", path, status, b)
		}
	}
}

// token is an admin token.
func (a *apiWorld) token(t *testing.T) string {
	tok, _, err := a.auth.Issue(director.Principal{Name: "admin", Scopes: []string{director.ScopeAdmin}})
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// httpClient trusts the server's CA and follows no redirects.
func (a *apiWorld) httpClient(t *testing.T) *http.Client {
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(a.srv.CACertPEM()) {
		t.Fatal("no CA")
	}
	return &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// route is one API route the scope matrix calls.
type route struct {
	name, method, path string
	body               string
}

// TestAPIScopeMatrix calls every dynamic disk route (and a few others) with
// each scope set and checks upstream's answer: allowed, or 401 with code
// 600000 "Require one of the scopes: …".
func TestAPIScopeMatrix(t *testing.T) {
	a := newAPIWorld(t)
	inst := a.insts[0].ID
	uuid := a.d.UUID()
	routes := []route{
		{"list", "GET", "/dynamic_disks", ""},
		{"create", "POST", "/dynamic_disks", `{"deployment_name":"workers","az":"z1","disk_name":"m1","disk_pool_name":"small","disk_size":4}`},
		{"provide", "POST", "/dynamic_disks/provide", `{"instance_id":"` + inst + `","disk_name":"m2","disk_pool_name":"small","disk_size":4}`},
		{"attach", "POST", "/dynamic_disks/m1/attach", `{"instance_id":"` + inst + `"}`},
		{"detach", "POST", "/dynamic_disks/m1/detach", ""},
		{"delete", "DELETE", "/dynamic_disks/m9", ""},
		{"tasks", "GET", "/tasks", ""},
		{"deployments", "GET", "/deployments", ""},
		{"deploy", "POST", "/deployments", "name: [x"},
	}
	want := map[string]string{ // the scope sets each route names in its 401
		"list":        "bosh.admin, bosh." + uuid + ".admin, bosh.dynamic-disks.list",
		"create":      "bosh.admin, bosh." + uuid + ".admin, bosh.dynamic-disks.create",
		"provide":     "bosh.admin, bosh." + uuid + ".admin, (bosh.dynamic-disks.create AND bosh.dynamic-disks.attach)",
		"attach":      "bosh.admin, bosh." + uuid + ".admin, bosh.dynamic-disks.attach",
		"detach":      "bosh.admin, bosh." + uuid + ".admin, bosh.dynamic-disks.detach",
		"delete":      "bosh.admin, bosh." + uuid + ".admin, bosh.dynamic-disks.delete",
		"tasks":       "bosh.admin, bosh." + uuid + ".admin, bosh.read, bosh." + uuid + ".read",
		"deployments": "bosh.admin, bosh." + uuid + ".admin, bosh.read, bosh." + uuid + ".read",
		"deploy":      "bosh.admin, bosh." + uuid + ".admin",
	}
	allowed := map[string][]string{
		director.ScopeAdmin:       {"list", "create", "provide", "attach", "detach", "delete", "tasks", "deployments", "deploy"},
		"bosh." + uuid + ".admin": {"list", "create", "provide", "attach", "detach", "delete", "tasks", "deployments", "deploy"},
		director.ScopeRead:        {"tasks", "deployments"},
		director.ScopeDisksList:   {"list"},
		director.ScopeDisksCreate: {"create"},
		director.ScopeDisksAttach: {"attach"},
		director.ScopeDisksDetach: {"detach"},
		director.ScopeDisksDelete: {"delete"},
		director.ScopeDisksCreate + " " + director.ScopeDisksAttach: {"create", "attach", "provide"},
		"bosh.dynamic_disks.update bosh.dynamic_disks.delete":       {}, // the scopes upstream removed
	}
	for scopes, ok := range allowed {
		tok, _, err := a.auth.Issue(director.Principal{Name: "u", Scopes: strings.Fields(scopes)})
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range routes {
			status, body := a.call(t, tok, rt)
			if slices.Contains(ok, rt.name) {
				if status == http.StatusUnauthorized || status == http.StatusForbidden {
					t.Errorf("scopes %q: %s refused: %d %s", scopes, rt.name, status, body)
				}
				continue
			}
			var eb struct {
				Code        int    `json:"code"`
				Description string `json:"description"`
			}
			if status != http.StatusUnauthorized || json.Unmarshal(body, &eb) != nil || eb.Code != 600000 ||
				eb.Description != "Require one of the scopes: "+want[rt.name] {
				t.Errorf("scopes %q: %s answered %d %s; want 401 {code 600000, Require one of the scopes: %s}", scopes, rt.name, status, body, want[rt.name])
			}
		}
	}
	// No credentials or a bad token: upstream's plain 401.
	for _, tok := range []string{"", "garbage"} {
		status, body := a.call(t, tok, routes[0])
		if status != http.StatusUnauthorized || string(body) != "Not authorized: '/dynamic_disks'\n" {
			t.Errorf("token %q: %d %q; want 401 Not authorized", tok, status, body)
		}
	}
}

// TestAPIDiskScopedTaskReading: a disk-only token reads its own tasks in
// the reference director, none under DiskScopesCannotReadTasks (upstream).
func TestAPIDiskScopedTaskReading(t *testing.T) {
	for _, upstream := range []bool{false, true} {
		a := newAPIWorld(t, worldOpts{knobs: director.Knobs{DiskScopesCannotReadTasks: upstream}})
		ctx := context.Background()
		owner := a.client(t, "csi", director.ScopeDisksCreate, director.ScopeDisksAttach)
		id, err := owner.Start(ctx, http.MethodPost, "/dynamic_disks/provide",
			director.ProvideRequest{DiskSize: 4, DiskName: "own", DiskPoolName: "small", InstanceID: a.insts[0].ID})
		if err != nil {
			t.Fatal(err)
		}
		_, err = owner.Task(ctx, id)
		if got := status(err); upstream && got != http.StatusUnauthorized || !upstream && err != nil {
			t.Errorf("upstream=%v: the owner reading its task: %v", upstream, err)
		}
		if _, err := a.client(t, "other", director.ScopeDisksDetach).Task(ctx, id); status(err) != http.StatusUnauthorized {
			t.Errorf("upstream=%v: another disk-scoped user read the task: %v; want 401", upstream, err)
		}
		if _, err := a.client(t, "admin", director.ScopeAdmin).WaitTask(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
}

// call sends one route with a bearer token ("" : none).
func (a *apiWorld) call(t *testing.T, tok string, rt route) (int, []byte) {
	t.Helper()
	var body io.Reader
	if rt.body != "" {
		body = strings.NewReader(rt.body)
	}
	req, err := http.NewRequest(rt.method, a.srv.URL()+rt.path, body)
	if err != nil {
		t.Fatal(err)
	}
	if rt.body != "" {
		ct := "application/json"
		if !strings.HasPrefix(rt.body, "{") {
			ct = "text/yaml"
		}
		req.Header.Set("Content-Type", ct)
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	resp, err := a.httpClient(t).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func mustClient(t *testing.T, a *apiWorld, cfg director.ClientConfig) *director.Client {
	cfg.URL, cfg.CACertPEM = a.srv.URL(), a.srv.CACertPEM()
	c, err := director.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func getJSON(ctx context.Context, c *director.Client, path string, v any) error {
	return c.GetJSON(ctx, path, v)
}

// TestAPIBadInput: request types are checked at request time (400 with
// upstream's codes); what they name is looked up by the task.
func TestAPIBadInput(t *testing.T) {
	a := newAPIWorld(t)
	ctx := context.Background()
	c := a.client(t, "admin", director.ScopeAdmin)
	inst := a.insts[0].ID
	cases := []struct {
		name, method, path string
		body               any
		status, code       int
		field              string
	}{
		{"wrong type", "POST", "/dynamic_disks/provide", map[string]any{"instance_id": inst, "disk_name": "x", "disk_pool_name": "small", "disk_size": "big"}, 400, 40000, "disk_size"},
		{"missing", "POST", "/dynamic_disks/provide", map[string]any{"disk_name": "x"}, 400, 40001, "instance_id"},
		{"size 0", "POST", "/dynamic_disks/provide", map[string]any{"instance_id": inst, "disk_name": "x", "disk_pool_name": "small", "disk_size": 0}, 400, 40002, "disk_size"},
		{"float size", "POST", "/dynamic_disks", map[string]any{"deployment_name": "workers", "az": "z1", "disk_name": "x", "disk_pool_name": "small", "disk_size": 1.5}, 400, 40000, "disk_size"},
		{"create without az", "POST", "/dynamic_disks", map[string]any{"deployment_name": "workers", "disk_name": "x", "disk_pool_name": "small", "disk_size": 1}, 400, 40001, "az"},
		{"metadata not a hash", "POST", "/dynamic_disks/x/attach", map[string]any{"instance_id": inst, "metadata": []int{1}}, 400, 40000, "metadata"},
		{"not an object", "POST", "/dynamic_disks/provide", []int{1}, 400, 40000, "body"},
		{"path char", "POST", "/dynamic_disks/provide", director.ProvideRequest{DiskSize: 4, DiskName: "../x", DiskPoolName: "small", InstanceID: inst}, 400, 40005, "disk_name"},
		{"escaped slash", "POST", "/dynamic_disks/a%2Fb/detach", nil, 400, 40005, "disk_name"},
		{"NUL", "DELETE", "/dynamic_disks/a%00b", nil, 400, 40005, "disk_name"},
		{"invalid UTF-8", "POST", "/dynamic_disks/a%FFb/detach", nil, 400, 40005, "disk_name"},
		{"unknown disk", "GET", "/dynamic_disks/nope", nil, 404, 100002, ""},
		{"bad state", "PUT", "/deployments/workers/instances/" + inst + "?state=frozen", nil, 400, 40005, "state"},
		{"unknown deployment", "DELETE", "/deployments/nope", nil, 404, 100002, ""},
		{"bad manifest", "POST", "/deployments", []byte("name: [unclosed"), 400, 40005, "manifest"},
	}
	for _, tc := range cases {
		_, err := c.Start(ctx, tc.method, tc.path, tc.body)
		var e *director.APIError
		if !errors.As(err, &e) || e.Status != tc.status || e.Code != tc.code || e.Field != tc.field {
			t.Errorf("%s: %v (%+v); want %d code %d naming %q", tc.name, err, e, tc.status, tc.code, tc.field)
		} else if e.Description == "" {
			t.Errorf("%s: no message", tc.name)
		}
	}
	if st, b := a.call(t, a.token(t), route{method: "POST", path: "/dynamic_disks/provide", body: "{"}); st != http.StatusBadRequest ||
		!strings.Contains(string(b), `"field":"body"`) {
		t.Errorf("not json: %d %s; want 400 naming the body", st, b)
	}
	// A missing instance, pool or deployment is a task error, as upstream.
	var te *director.TaskFailedError
	for _, tc := range []struct {
		path string
		body any
		want string
	}{
		{"/dynamic_disks/provide", director.ProvideRequest{DiskSize: 4, DiskName: "x", DiskPoolName: "small", InstanceID: "nope"}, "instance `nope` not found"},
		{"/dynamic_disks/provide", director.ProvideRequest{DiskSize: 4, DiskName: "x", DiskPoolName: "nope", InstanceID: inst}, "Could not find disk pool by name `nope`"},
		{"/dynamic_disks", director.CreateDiskRequest{DiskSize: 4, DiskName: "x", DiskPoolName: "small", Deployment: "nope", AZ: "z1"}, "deployment `nope` not found"},
		{"/dynamic_disks", director.CreateDiskRequest{DiskSize: 4, DiskName: "x", DiskPoolName: "small", Deployment: "workers", AZ: "z9"}, "no active VM found in deployment `workers` in AZ `z9`"},
		{"/dynamic_disks/nope/attach", map[string]string{"instance_id": inst}, "disk `nope` not found"},
	} {
		if _, err := c.Run(ctx, http.MethodPost, tc.path, tc.body); !errors.As(err, &te) || te.Task.Result != tc.want {
			t.Errorf("POST %s %+v: %v; want a task error %q", tc.path, tc.body, err, tc.want)
		}
	}
	// Under the upstream knobs: any name, and 500 for a body that is not JSON.
	u := newAPIWorld(t, worldOpts{knobs: director.Knobs{AnyDiskName: true, MalformedJSONServerError: true}})
	cu := u.client(t, "admin", director.ScopeAdmin)
	if st, b := u.call(t, u.token(t), route{method: "POST", path: "/dynamic_disks/provide", body: "{"}); st != http.StatusInternalServerError || len(b) != 0 {
		t.Errorf("upstream: not json: %d %q; want 500, empty", st, b)
	}
	if _, err := cu.Start(ctx, http.MethodPost, "/dynamic_disks/a%2Fb/detach", nil); err != nil {
		t.Errorf("upstream: a name with a slash: %v; want a task", err)
	}
}

func TestAPIDeploymentLifecycle(t *testing.T) {
	a := newAPIWorld(t)
	ctx := context.Background()
	c := a.client(t, "admin", director.ScopeAdmin)
	loc, _ := filepath.Abs(filepath.Join(fixtures, "stemcell-v1"))
	if err := c.UploadStemcell(ctx, loc); err != nil {
		t.Fatal(err)
	}
	var stemcells []director.Stemcell
	if err := getJSON(ctx, c, "/stemcells", &stemcells); err != nil {
		t.Fatal(err)
	}
	v1 := false
	for _, s := range stemcells {
		v1 = v1 || (s.OS == "ubuntu-bionic" && s.APIVersion == 1)
	}
	if !v1 {
		t.Fatalf("stemcells %+v: want the v1 stemcell recorded with api_version 1 (absent in stemcell.MF)", stemcells)
	}
	m := strings.Replace(string(readFixture(t, "manifest.yml")), "name: workers", "name: web", 1)
	if err := c.Deploy(ctx, []byte(m)); err != nil {
		t.Fatal(err)
	}
	insts, err := c.Instances(ctx, "web")
	if err != nil || len(insts) != 2 {
		t.Fatalf("Instances = %v, %v", insts, err)
	}
	if _, err := c.Provide(ctx, director.ProvideRequest{DiskSize: 4, DiskName: "w", DiskPoolName: "small", InstanceID: insts[0].ID}); err != nil {
		t.Fatal(err)
	}
	for _, st := range []string{"stopped", "started", "restart", "recreate"} {
		if err := c.ChangeInstanceState(ctx, director.InstanceStateRequest{Deployment: "web", InstanceID: insts[0].ID, State: st}); err != nil {
			t.Fatalf("%s: %v", st, err)
		}
	}
	insts, _ = c.Instances(ctx, "web")
	if err := c.DeleteVM(ctx, insts[1].VMCID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteDeployment(ctx, "web"); err != nil {
		t.Fatal(err)
	}
	if disks, _ := c.DynamicDisks(ctx); len(disks) != 0 {
		t.Fatalf("deployment delete left dynamic disks %+v", disks)
	}
	info, err := c.Info(ctx)
	if err != nil || info["uuid"] == "" {
		t.Fatalf("info = %v, %v", info, err)
	}
}

func TestAPIStemcellTarballAndOrphans(t *testing.T) {
	a := newAPIWorld(t)
	ctx := context.Background()
	c := a.client(t, "admin", director.ScopeAdmin)
	tgz := filepath.Join(t.TempDir(), "stemcell.tgz")
	writeTarball(t, tgz, map[string][]byte{
		"stemcell.MF": readFixture(t, "stemcell-v1/stemcell.MF"),
		"image":       readFixture(t, "stemcell-v1/image"),
	})
	if err := c.UploadStemcell(ctx, tgz); err != nil {
		t.Fatal(err)
	}
	// A truncated tarball is refused and leaves nothing half-unpacked.
	b, err := os.ReadFile(tgz)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.tgz")
	if err := os.WriteFile(cut, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadDir(a.stemDir)
	if err := c.UploadStemcell(ctx, cut); status(err) != http.StatusUnprocessableEntity {
		t.Fatalf("truncated tarball: %v; want 422", err)
	}
	if after, _ := os.ReadDir(a.stemDir); len(after) != len(before) {
		t.Fatalf("a failed unpack left %d entries in %s (had %d)", len(after), a.stemDir, len(before))
	}
	if err := c.UploadStemcell(ctx, "relative/path"); status(err) != http.StatusBadRequest {
		t.Fatalf("relative location: %v; want 400", err)
	}
	var orphans []director.OrphanedDisk
	if err := c.GetJSON(ctx, "/disks?orphaned=true", &orphans); err != nil || len(orphans) != 0 {
		t.Fatalf("orphans %v, %v", orphans, err)
	}
	if _, err := c.Start(ctx, http.MethodDelete, "/disks/disk-nope", nil); status(err) != http.StatusNotFound {
		t.Fatalf("delete of an unknown orphan: %v; want 404", err)
	}
}

func writeTarball(t *testing.T, path string, files map[string][]byte) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw := gzip.NewWriter(f)
	tw := tar.NewWriter(zw)
	for name, b := range files {
		if err := tw.WriteHeader(&tar.Header{Name: "./" + name, Mode: 0o644, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []interface{ Close() error }{tw, zw, f} {
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
