package director_test

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"

	"github.com/cpilab/cpilab/director"
)

// A request body holding a key twice, or two spellings of one key that
// differ in case, is ambiguous: 400 naming the key, nothing queued. Under
// Knobs.LenientDuplicateKeys the last value wins, as upstream's JSON.parse
// takes it.
func TestAPIRefusesDuplicateKeys(t *testing.T) {
	a := newAPIWorld(t)
	tok := a.token(t)
	inst := a.insts[0].ID
	for _, tc := range []struct {
		path, body, key string
	}{
		{"/dynamic_disks/provide", `{"instance_id":"` + inst + `","disk_name":"xa","disk_name":"xb","disk_pool_name":"small","disk_size":4}`, "disk_name"},
		{"/dynamic_disks/provide", `{"instance_id":"` + inst + `","disk_name":"xa","Disk_Name":"xb","disk_pool_name":"small","disk_size":4}`, "Disk_Name"},
		{"/dynamic_disks/provide", `{"instance_id":"` + inst + `","disk_name":"xa","disk_pool_name":"small","disk_size":4,"disk_size":40}`, "disk_size"},
		{"/dynamic_disks", `{"deployment_name":"workers","az":"z1","disk_name":"m1","disk_pool_name":"small","disk_size":4,"metadata":{"k":"a","k":"b"}}`, "metadata.k"},
		{"/dynamic_disks/xa/attach", `{"instance_id":"` + inst + `","INSTANCE_ID":"other"}`, "INSTANCE_ID"},
		{"/dynamic_disks/xa/resize", `{"disk_size":8,"disk_size":9}`, "disk_size"},
	} {
		st, b := a.call(t, tok, route{method: "POST", path: tc.path, body: tc.body})
		var eb struct {
			Field       string `json:"field"`
			Description string `json:"description"`
		}
		_ = json.Unmarshal(b, &eb)
		if st != http.StatusBadRequest || eb.Field != tc.key {
			t.Errorf("POST %s %s: %d %s; want 400 naming %q", tc.path, tc.body, st, b, tc.key)
		}
	}
	tasks, err := a.client(t, "admin", director.ScopeAdmin).DynamicDisks(context.Background())
	if err != nil || len(tasks) != 0 {
		t.Fatalf("disks after refused bodies: %+v, %v; want none", tasks, err)
	}
	// Metadata keys are data: two differing in case are two tags.
	if st, b := a.call(t, tok, route{method: "POST", path: "/dynamic_disks/provide",
		body: `{"instance_id":"` + inst + `","disk_name":"ok","disk_pool_name":"small","disk_size":4,"metadata":{"Name":"a","name":"b"}}`}); st != http.StatusFound {
		t.Fatalf("metadata keys differing in case: %d %s; want 302", st, b)
	}

	u := newAPIWorld(t, worldOpts{knobs: director.Knobs{LenientDuplicateKeys: true}})
	cu := u.client(t, "admin", director.ScopeAdmin)
	id, err := cu.Start(context.Background(), http.MethodPost, "/dynamic_disks/provide", json.RawMessage(
		`{"instance_id":"`+u.insts[0].ID+`","disk_name":"xa","disk_name":"xb","disk_pool_name":"small","disk_size":4}`))
	if err != nil {
		t.Fatalf("upstream knob: %v; want a task", err)
	}
	if _, err := cu.WaitTask(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	list, err := cu.DynamicDisks(context.Background())
	if err != nil || len(list) != 1 || list[0].Name != "xb" {
		t.Fatalf("upstream knob: disks %+v, %v; want xb (the last value)", list, err)
	}
}
