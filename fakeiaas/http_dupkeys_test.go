package fakeiaas_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
)

// The API reads bodies under cpilab's JSON policy: a key twice, or two
// spellings differing in case, is a 400 naming the key and creates
// nothing.
func TestAPIRefusesDuplicateKeys(t *testing.T) {
	s, c := serveMem(t)
	for _, tc := range []struct{ op, body, key string }{
		{"create_disk", `{"size_mib":1,"size_mib":100000}`, "size_mib"},
		{"create_disk", `{"size_mib":1,"Size_MiB":100000}`, "Size_MiB"},
		{"create_disk", `{"size_mib":1,"cloud_properties":{"type":"a","type":"b"}}`, "cloud_properties.type"},
	} {
		resp, err := http.Post(s.URL()+"/api/v1/"+tc.op, "application/json", strings.NewReader(tc.body))
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), tc.key) || !strings.Contains(string(b), "duplicate key") {
			t.Errorf("%s %s: HTTP %d %s; want 400 naming %q", tc.op, tc.body, resp.StatusCode, b, tc.key)
		}
	}
	resp, err := http.Post(s.URL()+"/faults", "application/json", strings.NewReader(`{"op":"create_disk","op":"delete_disk"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "duplicate key") {
		t.Errorf("fault rule with a key twice: HTTP %d %s; want 400", resp.StatusCode, b)
	}
	st, err := c.State(context.Background())
	if err != nil || len(st.Disks) != 0 {
		t.Fatalf("disks after refused bodies: %+v, %v; want none", st.Disks, err)
	}
}
