package dynamicdisks

import (
	"strings"
	"testing"

	"github.com/cpilab/cpilab/director"
)

func testModel() *Model {
	m := NewModel()
	m.Pools["p"] = true
	m.AddInstance(ModelInstance{ID: "a", Group: "g", Deployment: "d1", AZ: "z1"})
	m.AddInstance(ModelInstance{ID: "b", Group: "g", Deployment: "d1", AZ: "z1"})
	m.AddInstance(ModelInstance{ID: "c", Group: "g", Deployment: "d1", AZ: "z2"})
	m.AddInstance(ModelInstance{ID: "e", Group: "h", Deployment: "d2", AZ: "z1"})
	return m
}

// The model allows exactly upstream's answers along a lifecycle, with the
// documented latitude for provide across deployments and AZs.
func TestModelLifecycle(t *testing.T) {
	m := testModel()
	steps := []struct {
		op   Op
		want Verdict
		cid  string // given on success
	}{
		{Op{Kind: OpProvide, Name: "n", Instance: "a", Pool: "p", SizeMiB: 1}, MustSucceed, "cid-1"},
		{Op{Kind: OpProvide, Name: "n", Instance: "a", Pool: "p", SizeMiB: 1}, MustSucceed, "cid-1"},
		{Op{Kind: OpProvide, Name: "n", Instance: "b", Pool: "p", SizeMiB: 1}, MustFail, ""},
		{Op{Kind: OpProvide, Name: "n", Instance: "a", Pool: "nope", SizeMiB: 1}, MustFail, ""},
		{Op{Kind: OpCreate, Name: "n", Deployment: "d1", AZ: "z1", Pool: "p", SizeMiB: 1}, MustFail, ""},
		{Op{Kind: OpCreate, Name: "k", Deployment: "d1", AZ: "z9", Pool: "p", SizeMiB: 1}, MustFail, ""},
		{Op{Kind: OpCreate, Name: "k", Deployment: "d9", AZ: "z1", Pool: "p", SizeMiB: 1}, MustFail, ""},
		{Op{Kind: OpCreate, Name: "k", Deployment: "d1", AZ: "z1", Pool: "p", SizeMiB: 1}, MustSucceed, "cid-2"},
		{Op{Kind: OpAttach, Name: "k", Instance: "c"}, MustFail, ""},
		{Op{Kind: OpAttach, Name: "k", Instance: "e"}, MustFail, ""},
		{Op{Kind: OpAttach, Name: "k", Instance: "b"}, MustSucceed, ""},
		{Op{Kind: OpAttach, Name: "k", Instance: "a"}, MustFail, ""},
		{Op{Kind: OpDetach, Name: "k"}, MustSucceed, ""},
		{Op{Kind: OpProvide, Name: "k", Instance: "e", Pool: "p", SizeMiB: 1}, MaySucceed, ""},
		{Op{Kind: OpDetach, Name: "gone"}, MustFail, ""},
		{Op{Kind: OpDelete, Name: "gone"}, MustSucceed, ""},
		{Op{Kind: OpDelete, Name: "n"}, MustSucceed, ""},
	}
	for i, s := range steps {
		w := m.Expect(s.op)
		if w.Verdict != s.want {
			t.Fatalf("step %d %s: verdict %d (%s); want %d", i, s.op, w.Verdict, w.Why, s.want)
		}
		m.Apply(s.op, w.Verdict == MustSucceed, s.cid)
	}
	if _, ok := m.Disks["n"]; ok {
		t.Error("n still exists after DELETE")
	}
	k := m.Disks["k"]
	if k == nil || k.Instance != "" || k.CID != "cid-2" || k.Deployment != "d1" {
		t.Errorf("k = %+v; want cid-2 of d1, detached (the refused provide changed nothing)", k)
	}
}

// Diff names a disk missing from the list, one listed twice, one the
// model lacks, and wrong metadata or attachment.
func TestModelDiff(t *testing.T) {
	m := testModel()
	m.Apply(Op{Kind: OpProvide, Name: "x-1", Instance: "a", Pool: "p", SizeMiB: 1, Metadata: map[string]string{"k": "v"}}, true, "c1")
	m.Apply(Op{Kind: OpCreate, Name: "x-2", Deployment: "d1", AZ: "z1", Pool: "p", SizeMiB: 1}, true, "c2")
	s := func(v string) *string { return &v }
	good := []director.DiskInfo{
		{Name: "x-1", CID: "c1", Deployment: s("d1"), Instance: s("g/a"), AZ: s("z1"), SizeMiB: 1, DiskPoolName: "p", Metadata: map[string]any{"k": "v"}},
		{Name: "x-2", CID: "c2", Deployment: s("d1"), AZ: s("z1"), SizeMiB: 1, DiskPoolName: "p"},
		{Name: "other", CID: "c9"},
	}
	owned := func(n string) bool { return strings.HasPrefix(n, "x-") }
	if d := m.Diff(good, owned); len(d) != 0 {
		t.Fatalf("a faithful list differs: %v", d)
	}
	bad := []director.DiskInfo{good[0], good[0], {Name: "x-3", CID: "c3"}}
	bad[1].Metadata = map[string]any{}
	d := strings.Join(m.Diff(bad, owned), "\n")
	for _, want := range []string{`does not list "x-2"`, `lists "x-1" 2 times`, `lists "x-3"`} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
	meta := []director.DiskInfo{good[0], good[1]}
	meta[0].Metadata, meta[1].Instance = nil, s("g/b")
	d = strings.Join(m.Diff(meta, owned), "\n")
	for _, want := range []string{`"x-1" with metadata {}`, `"x-2" with instance "g/b"`} {
		if !strings.Contains(d, want) {
			t.Errorf("diff lacks %q:\n%s", want, d)
		}
	}
}

// Each scope grants its own routes only; bosh.read grants no disk route;
// provide needs create and attach.
func TestAuthorized(t *testing.T) {
	for _, c := range []struct {
		route  Route
		scopes []string
		want   bool
	}{
		{RouteList, []string{director.ScopeDisksList}, true},
		{RouteDelete, []string{director.ScopeDisksList}, false},
		{RouteList, []string{director.ScopeRead}, false},
		{RouteTasks, []string{director.ScopeRead}, true},
		{RouteProvide, []string{director.ScopeDisksCreate}, false},
		{RouteProvide, []string{director.ScopeDisksCreate, director.ScopeDisksAttach}, true},
		{RouteAttach, []string{director.ScopeDisksCreate}, false},
		{RouteDetach, []string{director.ScopeAdmin}, true},
		{RouteGet, nil, false},
	} {
		if got := Authorized(c.route, c.scopes); got != c.want {
			t.Errorf("Authorized(%s, %v) = %v; want %v", c.route, c.scopes, got, c.want)
		}
	}
}

// A users file gives the scope matrix the user holding exactly each scope
// set; a user with more scopes is no set's.
func TestScopeCredentialsFor(t *testing.T) {
	users := append([]director.User{
		{Name: "all-disks", Password: "p", Scopes: director.DiskScopes},
		{Name: "lister", Password: "q", Scopes: []string{director.ScopeDisksList, director.ScopeDisksList}},
	}, ScopeUsers("s-", "pw")...)
	got := ScopeCredentialsFor(users)
	if len(got) != len(ScopeSets) {
		t.Fatalf("%d scope sets with credentials; want %d: %v", len(got), len(ScopeSets), got)
	}
	if c := got[director.ScopeDisksList]; c.Username != "lister" || c.Password != "q" {
		t.Errorf("the list set's user is %+v; want lister, the first holding exactly it", c)
	}
	if c := got["create+attach"]; c.Username != "s-create-attach" {
		t.Errorf("the create+attach set's user is %+v", c)
	}
}
