package dockerapi_test

import (
	"net/http"
	"strings"
	"testing"
)

// A body with a key twice, or two spellings differing in case, is a 400
// naming the key (the lenient reader would take the last Image); a bind
// onto an existing file of the container's tree is the client's mistake:
// 400, not 500, and nothing is left bound.
func TestHostileBodiesAndBindsAre400(t *testing.T) {
	env := newFaceEnv(t, "memory")
	c := env.c
	env.importImage(t, "bosh.io/stemcells:img-1")
	for _, body := range []string{
		`{"Image":"bosh.io/stemcells:img-1","Image":"bosh.io/stemcells:img-2"}`,
		`{"Image":"bosh.io/stemcells:img-1","image":"bosh.io/stemcells:img-2"}`,
		`{"Image":"bosh.io/stemcells:img-1","HostConfig":{"Binds":["a:/a"],"binds":["b:/b"]}}`,
	} {
		st, out := c.do("POST", "/v1.44/containers/create?name=dup", []byte(body))
		if st != http.StatusBadRequest || !strings.Contains(string(out), "duplicate key") {
			t.Errorf("%s: HTTP %d %s; want 400 naming the duplicate key", body, st, out)
		}
	}
	st, out := c.do("POST", "/v1.44/volumes/create", []byte(`{"Name":"v-a","Name":"v-b"}`))
	if st != http.StatusBadRequest || !strings.Contains(string(out), "Name") {
		t.Errorf("volume create with Name twice: HTTP %d %s; want 400", st, out)
	}
	c.want(http.StatusCreated, "POST", "/v1.44/volumes/create", map[string]any{"Name": "vol-x"}, nil)
	for _, target := range []string{"/dev/sdc", "/dev/sdc/sub"} {
		st, out := c.do("POST", "/v1.44/containers/create?name=c-bad", map[string]any{
			"Image": "bosh.io/stemcells:img-1", "HostConfig": map[string]any{"Binds": []string{"vol-x:" + target}}})
		if st != http.StatusBadRequest || !strings.Contains(string(out), target) {
			t.Errorf("bind vol-x:%s: HTTP %d %s; want 400 naming the mount point", target, st, out)
		}
	}
	if st := env.state(t); len(st.VMs) != 0 {
		t.Fatalf("VMs left after refused binds: %+v", st.VMs)
	}
}
