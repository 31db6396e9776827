package director_test

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
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
	inst := a.insts[0].ID
	cid, err := c.Provide(ctx, director.ProvideRequest{DiskName: "api-disk", DiskPoolName: "small", InstanceID: inst})
	if err != nil || cid == "" {
		t.Fatalf("Provide = %q, %v", cid, err)
	}
	again, err := c.Provide(ctx, director.ProvideRequest{DiskName: "api-disk", DiskPoolName: "small", InstanceID: inst})
	if err != nil || again != cid {
		t.Fatalf("idempotent Provide = %q, %v; want %q", again, err, cid)
	}
	list, err := c.DynamicDisks(ctx)
	if err != nil || len(list) != 1 || list[0].CID != cid || list[0].InstanceID != inst {
		t.Fatalf("DynamicDisks = %+v, %v", list, err)
	}
	_, err = c.Provide(ctx, director.ProvideRequest{DiskName: "api-disk", DiskPoolName: "small", InstanceID: a.insts[1].ID})
	var te *director.TaskFailedError
	if !errors.As(err, &te) {
		t.Fatalf("Provide to another VM: %v; want a failed task", err)
	}
	if err := c.DetachDynamicDisk(ctx, "api-disk"); err != nil {
		t.Fatal(err)
	}
	if err := c.DetachDynamicDisk(ctx, "api-disk"); err != nil {
		t.Fatalf("second detach: %v", err)
	}
	if _, err := c.AttachDynamicDisk(ctx, "api-disk", a.insts[1].ID); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteDynamicDisk(ctx, "api-disk"); err != nil {
		t.Fatal(err)
	}
	if err := c.DeleteDynamicDisk(ctx, "api-disk"); err != nil {
		t.Fatalf("second delete: %v", err)
	}
	if err := c.DetachDynamicDisk(ctx, "never"); !errors.As(err, &te) {
		t.Fatalf("detach of an unknown disk: %v; want a failed task", err)
	}
	created, err := c.CreateDynamicDisk(ctx, director.CreateDiskRequest{DiskName: "made", DiskPoolName: "small", InstanceID: inst})
	if err != nil || created == "" {
		t.Fatalf("CreateDynamicDisk = %q, %v", created, err)
	}
	// Every mutating call answers 302 to /tasks/:id; the output endpoints
	// serve the logs.
	id, err := c.Start(ctx, http.MethodPost, "/dynamic_disks/made/detach", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitTask(ctx, id); err != nil {
		t.Fatal(err)
	}
	for _, typ := range []string{"event", "debug", "result"} {
		out, err := c.TaskOutput(ctx, id, typ)
		if err != nil || len(out) == 0 {
			t.Fatalf("output %s = %q, %v", typ, out, err)
		}
	}
	if _, err := c.TaskOutput(ctx, id, "bogus"); status(err) != http.StatusBadRequest {
		t.Fatalf("output type bogus: %v; want 400", err)
	}
}

func TestAPIAuthScopes(t *testing.T) {
	a := newAPIWorld(t)
	ctx := context.Background()
	inst := a.insts[0].ID
	provide := func(c *director.Client) error {
		_, err := c.Start(ctx, http.MethodPost, "/dynamic_disks/provide",
			director.ProvideRequest{DiskName: "s", DiskPoolName: "small", InstanceID: inst})
		return err
	}
	calls := map[string]func(c *director.Client) error{
		"provide": provide,
		"create": func(c *director.Client) error {
			_, err := c.Start(ctx, http.MethodPost, "/dynamic_disks", director.CreateDiskRequest{DiskName: "s2", DiskPoolName: "small", InstanceID: inst})
			return err
		},
		"attach": func(c *director.Client) error {
			_, err := c.Start(ctx, http.MethodPost, "/dynamic_disks/s/attach", map[string]string{"instance_id": inst})
			return err
		},
		"detach": func(c *director.Client) error {
			_, err := c.Start(ctx, http.MethodPost, "/dynamic_disks/s/detach", nil)
			return err
		},
		"delete": func(c *director.Client) error {
			_, err := c.Start(ctx, http.MethodDelete, "/dynamic_disks/zzz", nil)
			return err
		},
		"list": func(c *director.Client) error { _, err := c.DynamicDisks(ctx); return err },
		"deploy": func(c *director.Client) error {
			_, err := c.Start(ctx, http.MethodPost, "/deployments", readFixture(t, "manifest.yml"))
			return err
		},
		"tasks": func(c *director.Client) error { var v any; return getJSON(ctx, c, "/tasks", &v) },
		"vms":   func(c *director.Client) error { var v any; return getJSON(ctx, c, "/vms", &v) },
		"deletevm": func(c *director.Client) error {
			_, err := c.Start(ctx, http.MethodDelete, "/vms/nope", nil)
			return err
		},
	}
	// Which calls each scope set may make (everything else: 403).
	allowed := map[string][]string{
		director.ScopeAdmin:                                     {"provide", "create", "attach", "detach", "delete", "list", "deploy", "tasks", "vms", "deletevm"},
		director.ScopeRead:                                      {"list", "tasks", "vms"},
		director.ScopeDisksUpdate:                               {"provide", "create", "attach", "detach", "list"},
		director.ScopeDisksDelete:                               {"delete", "list"},
		director.ScopeRFCCreate:                                 {"create"},
		director.ScopeRFCAttach:                                 {"attach"},
		director.ScopeRFCDetach:                                 {"detach"},
		director.ScopeRFCList:                                   {"list"},
		director.ScopeRFCDelete:                                 {"delete"},
		director.ScopeRFCCreate + " " + director.ScopeRFCAttach: {"provide", "create", "attach"},
	}
	for scopes, ok := range allowed {
		c := a.client(t, "u-"+scopes, strings.Fields(scopes)...)
		for name, call := range calls {
			err := call(c)
			got := status(err)
			may := false
			for _, x := range ok {
				may = may || x == name
			}
			if may && (got == http.StatusForbidden || got == http.StatusUnauthorized) {
				t.Errorf("scopes %q: %s refused with %d: %v", scopes, name, got, err)
			}
			if !may && got != http.StatusForbidden {
				t.Errorf("scopes %q: %s answered %d (%v); want 403", scopes, name, got, err)
			}
		}
	}
	// No credentials, a bad token, a bad password: 401.
	for _, c := range []*director.Client{a.client(t, ""), mustClient(t, a, director.ClientConfig{Token: "garbage"}),
		mustClient(t, a, director.ClientConfig{Username: "admin", Password: "wrong"})} {
		if err := provide(c); status(err) != http.StatusUnauthorized {
			t.Errorf("unauthenticated provide: %v; want 401", err)
		}
	}
	// A disk-scoped caller reads its own tasks only.
	owner := a.client(t, "csi", director.ScopeDisksUpdate)
	id, err := owner.Start(ctx, http.MethodPost, "/dynamic_disks/provide", director.ProvideRequest{DiskName: "own", DiskPoolName: "small", InstanceID: inst})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.WaitTask(ctx, id); err != nil {
		t.Fatalf("owner waiting on its task: %v", err)
	}
	if _, err := a.client(t, "other", director.ScopeDisksUpdate).Task(ctx, id); status(err) != http.StatusForbidden {
		t.Fatalf("another disk-scoped user read the task: %v; want 403", err)
	}
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

func TestAPIBadInput(t *testing.T) {
	a := newAPIWorld(t)
	ctx := context.Background()
	c := a.client(t, "admin", director.ScopeAdmin)
	inst := a.insts[0].ID
	cases := []struct {
		name, method, path string
		body               any
		status             int
		field              string
	}{
		{"unknown field", "POST", "/dynamic_disks/provide", map[string]any{"disk_name": "x", "bogus": 1}, 400, "bogus"},
		{"wrong type", "POST", "/dynamic_disks/provide", map[string]any{"disk_name": "x", "disk_size": "big"}, 400, "disk_size"},
		{"not json", "POST", "/dynamic_disks/provide", []byte("{"), 400, "body"},
		{"empty body", "POST", "/dynamic_disks/provide", nil, 400, "body"},
		{"path char", "POST", "/dynamic_disks/provide", director.ProvideRequest{DiskName: "../x", DiskPoolName: "small", InstanceID: inst}, 400, "disk_name"},
		{"escaped slash", "POST", "/dynamic_disks/a%2Fb/detach", nil, 400, "disk_name"},
		{"NUL", "DELETE", "/dynamic_disks/a%00b", nil, 400, "disk_name"},
		{"invalid UTF-8", "POST", "/dynamic_disks/a%FFb/detach", nil, 400, "disk_name"},
		{"unknown instance", "POST", "/dynamic_disks/provide", director.ProvideRequest{DiskName: "x", DiskPoolName: "small", InstanceID: "nope"}, 404, ""},
		{"unknown pool", "POST", "/dynamic_disks/provide", director.ProvideRequest{DiskName: "x", DiskPoolName: "nope", InstanceID: inst}, 422, ""},
		{"unknown disk", "GET", "/dynamic_disks/nope", nil, 404, ""},
		{"missing pool", "POST", "/dynamic_disks/provide", director.ProvideRequest{DiskName: "x", InstanceID: inst}, 400, "disk_pool_name"},
		{"bad state", "PUT", "/deployments/workers/instances/" + inst + "?state=frozen", nil, 400, "state"},
		{"unknown deployment", "DELETE", "/deployments/nope", nil, 404, ""},
		{"bad task id", "GET", "/tasks/abc", nil, 400, "id"},
		{"bad manifest", "POST", "/deployments", []byte("name: [unclosed"), 400, "manifest"},
		{"manifest vm_type", "POST", "/deployments", []byte("name: x\nstemcells: [{alias: d, os: ubuntu-jammy}]\ninstance_groups: [{name: g, instances: 1, vm_type: huge, stemcell: d}]\n"), 422, ""},
	}
	for _, tc := range cases {
		_, err := c.Start(ctx, tc.method, tc.path, tc.body)
		var e *director.APIError
		if !errors.As(err, &e) || e.Status != tc.status || e.Field != tc.field {
			t.Errorf("%s: %v; want %d naming %q", tc.name, err, tc.status, tc.field)
		} else if e.Description == "" {
			t.Errorf("%s: no message", tc.name)
		}
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
	if _, err := c.Provide(ctx, director.ProvideRequest{DiskName: "w", DiskPoolName: "small", InstanceID: insts[0].ID}); err != nil {
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
