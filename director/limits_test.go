package director_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/director"
)

// Every size, count and length accepted from outside is bounded: past its
// limit, the request is refused before any task is queued, with a 400 (422
// for a stemcell tarball's contents) that names the field and the limit.
func TestAPILimits(t *testing.T) {
	a := newAPIWorld(t)
	ctx := context.Background()
	c := a.client(t, "admin", director.ScopeAdmin)
	inst := a.insts[0].ID
	long := func(n int) string { return strings.Repeat("x", n) }
	provide := func(mod func(*director.ProvideRequest)) director.ProvideRequest {
		r := director.ProvideRequest{DiskName: "lim", DiskSize: 4, DiskPoolName: "small", InstanceID: inst}
		mod(&r)
		return r
	}
	manyKeys := map[string]any{}
	for i := range director.MaxMetadataKeys + 1 {
		manyKeys[fmt.Sprintf("k%d", i)] = "v"
	}
	cc := string(readFixture(t, "cloud-config.yml"))
	var manyVMTypes strings.Builder
	manyVMTypes.WriteString("vm_types:\n")
	for i := range director.MaxCloudConfigEntries + 1 {
		fmt.Fprintf(&manyVMTypes, "- name: t%d\n", i)
	}
	manifest := string(manifestWith(t, 2))
	tgzEntries := filepath.Join(t.TempDir(), "entries.tgz")
	files := map[string][]byte{"stemcell.MF": readFixture(t, "stemcell-v1/stemcell.MF"), "image": readFixture(t, "stemcell-v1/image")}
	for i := range director.MaxStemcellTarEntries {
		files[fmt.Sprintf("pad/%d", i)] = nil
	}
	writeTarball(t, tgzEntries, files)
	tgzMF := filepath.Join(t.TempDir(), "mf.tgz")
	writeTarball(t, tgzMF, map[string][]byte{"stemcell.MF": []byte(long(director.MaxStemcellManifestBytes + 1)), "image": []byte("{}")})

	cases := []struct {
		name, method, path string
		body               any
		status             int
		field              string
	}{
		{"disk_size 2^44 MiB", "POST", "/dynamic_disks/provide", provide(func(r *director.ProvideRequest) { r.DiskSize = 1 << 44 }), 400, "disk_size"},
		{"disk_size just past 64 TiB", "POST", "/dynamic_disks/provide", provide(func(r *director.ProvideRequest) { r.DiskSize = director.MaxDiskSizeMiB + 1 }), 400, "disk_size"},
		{"create disk_size", "POST", "/dynamic_disks", director.CreateDiskRequest{DiskName: "lim", DiskPoolName: "small", Deployment: "dep", AZ: "z1", DiskSize: 1 << 62}, 400, "disk_size"},
		{"disk_name length", "POST", "/dynamic_disks/provide", provide(func(r *director.ProvideRequest) { r.DiskName = long(director.MaxNameLen + 1) }), 400, "disk_name"},
		{"instance_id length", "POST", "/dynamic_disks/provide", provide(func(r *director.ProvideRequest) { r.InstanceID = long(director.MaxIDLen + 1) }), 400, "instance_id"},
		{"disk_pool_name length", "POST", "/dynamic_disks/provide", provide(func(r *director.ProvideRequest) { r.DiskPoolName = long(director.MaxIDLen + 1) }), 400, "disk_pool_name"},
		{"metadata keys", "POST", "/dynamic_disks/provide", provide(func(r *director.ProvideRequest) { r.Metadata = manyKeys }), 400, "metadata"},
		{"metadata key length", "POST", "/dynamic_disks/provide", provide(func(r *director.ProvideRequest) {
			r.Metadata = map[string]any{long(director.MaxMetadataKeyLen + 1): "v"}
		}), 400, "metadata"},
		{"metadata value length", "POST", "/dynamic_disks/provide", provide(func(r *director.ProvideRequest) {
			r.Metadata = map[string]any{"k": long(director.MaxMetadataValueLen + 1)}
		}), 400, "metadata.k"},
		{"deployment_name length", "POST", "/dynamic_disks", director.CreateDiskRequest{DiskName: "lim", DiskPoolName: "small", DiskSize: 4, AZ: "z1", Deployment: long(director.MaxIDLen + 1)}, 400, "deployment_name"},
		{"cloud config size", "POST", "/cloud_configs", []byte(cc + "\n#" + long(director.MaxCloudConfigBytes)), 400, "cloud_config"},
		{"cloud config entries", "POST", "/cloud_configs", []byte(manyVMTypes.String()), 400, "vm_types"},
		{"cloud config disk_size", "POST", "/cloud_configs", []byte(strings.Replace(cc, "disk_size: 16", "disk_size: 17592186044416", 1)), 400, "disk_types[1].disk_size"},
		{"manifest size", "POST", "/deployments", []byte(manifest + "\n#" + long(director.MaxManifestBytes)), 400, "manifest"},
		{"manifest instances", "POST", "/deployments", []byte(strings.Replace(manifest, "instances: 2", "instances: 1000000", 1)), 400, "instance_groups[0].instances"},
		{"stemcell.MF size", "POST", "/stemcells", map[string]string{"manifest": long(director.MaxStemcellManifestBytes + 1), "image_path": "/x"}, 400, "stemcell.MF"},
		{"stemcell name length", "POST", "/stemcells", map[string]string{"manifest": "name: " + long(director.MaxIDLen+1) + "\nversion: '1'\n", "image_path": "/x"}, 400, "stemcell.MF name"},
		{"image_path length", "POST", "/stemcells", map[string]string{"manifest": "name: s\nversion: '1'\n", "image_path": "/" + long(director.MaxPathLen)}, 400, "image_path"},
		{"location length", "POST", "/stemcells", map[string]string{"location": "/" + long(director.MaxPathLen)}, 400, "location"},
		{"tarball entries", "POST", "/stemcells", map[string]string{"location": tgzEntries}, 422, "location"},
		{"tarball stemcell.MF size", "POST", "/stemcells", map[string]string{"location": tgzMF}, 422, "location"},
		{"tasks limit", "GET", "/tasks?limit=" + fmt.Sprint(director.MaxTaskListLimit+1), nil, 400, "limit"},
		{"query value length", "GET", "/tasks?deployment=" + long(director.MaxQueryValueLen+1), nil, 400, "deployment"},
		{"vm_cid length", "DELETE", "/vms/" + long(director.MaxIDLen+1), nil, 400, "vm_cid"},
	}
	before, _ := a.d.Tasks(0, nil)
	for _, tc := range cases {
		var err error
		if tc.method == "GET" {
			err = c.GetJSON(ctx, tc.path, &[]director.TaskView{})
		} else {
			_, err = c.Start(ctx, tc.method, tc.path, tc.body)
		}
		var e *director.APIError
		if !errors.As(err, &e) || e.Status != tc.status || e.Field != tc.field {
			t.Errorf("%s: %v; want %d naming %q", tc.name, err, tc.status, tc.field)
		} else if !strings.Contains(e.Description, "at most") && !strings.Contains(e.Description, "from 1 to") {
			t.Errorf("%s: %q does not give the limit", tc.name, e.Description)
		}
	}
	if after, _ := a.d.Tasks(0, nil); len(after) != len(before) {
		t.Errorf("refused requests queued %d tasks", len(after)-len(before))
	}
	// At the limit, accepted.
	if _, err := a.d.Provide("admin", provide(func(r *director.ProvideRequest) {
		r.DiskName, r.Metadata = long(director.MaxNameLen), map[string]any{long(director.MaxMetadataKeyLen): long(director.MaxMetadataValueLen)}
	})); err != nil {
		t.Errorf("a request at every limit was refused: %v", err)
	}
	cids := make([]string, director.MaxOrphanCIDs+1)
	for i := range cids {
		cids[i] = fmt.Sprintf("disk-%d", i)
	}
	if _, err := a.d.DeleteOrphanedDisks("admin", cids); !errors.Is(err, director.ErrBadRequest) {
		t.Errorf("deleting %d orphans at once: %v; want a 400", len(cids), err)
	}
}

// POST /stemcells with a tarball unpacks into the configured directory even
// when it does not exist yet (it used to answer 500).
func TestAPIStemcellTarballCreatesItsDirectory(t *testing.T) {
	w := newWorld(t, worldOpts{noDeploy: true})
	auth, err := director.NewAuth(director.AuthConfig{Users: []director.User{{Name: "admin", Password: "pw", Scopes: []string{director.ScopeAdmin}}}})
	if err != nil {
		t.Fatal(err)
	}
	stemDir := filepath.Join(t.TempDir(), "data", "stemcells") // neither exists
	api, err := director.NewAPI(director.APIConfig{Director: w.d, Auth: auth, DataDir: stemDir})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := director.Serve(director.ServeConfig{Handler: api.Handler()})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	c := mustClient(t, &apiWorld{srv: srv}, director.ClientConfig{Username: "admin", Password: "pw"})
	tgz := filepath.Join(t.TempDir(), "stemcell.tgz")
	writeTarball(t, tgz, map[string][]byte{"stemcell.MF": readFixture(t, "stemcell-v1/stemcell.MF"), "image": readFixture(t, "stemcell-v1/image")})
	if err := c.UploadStemcell(context.Background(), tgz); err != nil {
		t.Fatalf("upload into a directory that does not exist yet: %v (status %d)", err, status(err))
	}
}
