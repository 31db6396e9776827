package store_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/cpilab/cpilab/director/store"
)

// deep is a record with every shape the director's records have and more:
// nested structs, pointers, slices and maps that are nil or empty, values
// of any type, raw JSON, times, a recursive type, a custom decoder and an
// unexported field.
type deep struct {
	Name   string            `json:"name"`
	N      int64             `json:"n,omitempty"`
	F      float64           `json:"f"`
	OK     bool              `json:"ok"`
	Tags   []string          `json:"tags"`
	Opt    []string          `json:"opt,omitempty"`
	Meta   map[string]any    `json:"meta"`
	Labels map[string]string `json:"labels,omitempty"`
	Raw    json.RawMessage   `json:"raw,omitempty"`
	At     time.Time         `json:"at"`
	Ptr    *inner            `json:"ptr"`
	Items  []inner           `json:"items"`
	Arr    [2]inner          `json:"arr"`
	Tree   *node             `json:"tree,omitempty"`
	Any    any               `json:"any"`
	Up     upper             `json:"up"`
	hidden int
}

type inner struct {
	K    string         `json:"k"`
	Vals []int          `json:"vals"`
	M    map[string]int `json:"m,omitempty"`
	When *time.Time     `json:"when,omitempty"`
}

type node struct {
	V    int     `json:"v"`
	Kids []*node `json:"kids,omitempty"`
}

// upper decodes a string upper-cased, keeping the count of decodes in an
// unexported (flat) field.
type upper struct {
	S     string
	count int
}

func (u upper) MarshalJSON() ([]byte, error) { return json.Marshal(u.S) }

func (u *upper) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	u.S, u.count = s+"!", u.count+1
	return nil
}

// withRef has an unexported field holding a reference: the copier cannot
// reach into it, so Memory decodes it on every read.
type withRef struct {
	A   []int `json:"a"`
	ref *int
}

func genJSONValue(depth int) *rapid.Generator[any] {
	return rapid.Custom(func(t *rapid.T) any {
		kinds := 4
		if depth > 0 {
			kinds = 7
		}
		switch rapid.IntRange(0, kinds-1).Draw(t, "kind") {
		case 0:
			return nil
		case 1:
			return rapid.Bool().Draw(t, "b")
		case 2:
			return float64(rapid.IntRange(-1000, 1000).Draw(t, "f"))
		case 3:
			return rapid.StringMatching(`[a-z]{0,4}`).Draw(t, "s")
		case 4:
			return rapid.SliceOfN(genJSONValue(depth-1), 0, 3).Draw(t, "slice")
		case 5:
			return []any{}
		default:
			return rapid.MapOfN(rapid.StringMatching(`[a-z]{1,3}`), genJSONValue(depth-1), 0, 3).Draw(t, "map")
		}
	})
}

func genStrings(label string) *rapid.Generator[[]string] {
	return rapid.Custom(func(t *rapid.T) []string {
		switch rapid.IntRange(0, 2).Draw(t, label+"-shape") {
		case 0:
			return nil
		case 1:
			return []string{}
		default:
			return rapid.SliceOfN(rapid.StringMatching(`[a-z]{0,3}`), 1, 3).Draw(t, label)
		}
	})
}

func genInner(t *rapid.T, label string) inner {
	in := inner{K: rapid.StringMatching(`[a-z]{0,3}`).Draw(t, label+"-k")}
	if rapid.Bool().Draw(t, label+"-vals") {
		in.Vals = rapid.SliceOfN(rapid.IntRange(0, 9), 0, 3).Draw(t, label+"-v")
	}
	if rapid.Bool().Draw(t, label+"-m") {
		in.M = rapid.MapOfN(rapid.StringMatching(`[a-z]{1,2}`), rapid.IntRange(0, 9), 0, 2).Draw(t, label+"-mm")
	}
	if rapid.Bool().Draw(t, label+"-when") {
		w := time.Unix(rapid.Int64Range(0, 1<<32).Draw(t, label+"-w"), 0).In(time.FixedZone("X", 3600))
		in.When = &w
	}
	return in
}

func genNode(depth int) *rapid.Generator[*node] {
	return rapid.Custom(func(t *rapid.T) *node {
		n := &node{V: rapid.IntRange(0, 9).Draw(t, "v")}
		if depth > 0 {
			n.Kids = rapid.SliceOfN(genNode(depth-1), 0, 2).Draw(t, "kids")
		}
		return n
	})
}

func genDeep(t *rapid.T) deep {
	d := deep{
		Name: rapid.String().Draw(t, "name"), N: rapid.Int64().Draw(t, "n"),
		F: rapid.Float64Range(-1e9, 1e9).Draw(t, "f"), OK: rapid.Bool().Draw(t, "ok"),
		Tags: genStrings("tags").Draw(t, "tags"), Opt: genStrings("opt").Draw(t, "opt"),
		At:    time.Unix(0, rapid.Int64Range(0, 1<<60).Draw(t, "at")).UTC(),
		Items: rapid.SliceOfN(rapid.Custom(func(t *rapid.T) inner { return genInner(t, "item") }), 0, 3).Draw(t, "items"),
		Arr:   [2]inner{genInner(t, "a0"), genInner(t, "a1")},
		Any:   genJSONValue(2).Draw(t, "any"),
		Up:    upper{S: rapid.StringMatching(`[a-z]{0,3}`).Draw(t, "up")},
	}
	if rapid.Bool().Draw(t, "has-meta") {
		d.Meta = rapid.MapOfN(rapid.StringMatching(`[a-z]{1,3}`), genJSONValue(2), 0, 3).Draw(t, "meta")
	}
	if rapid.Bool().Draw(t, "has-labels") {
		d.Labels = rapid.MapOfN(rapid.StringMatching(`[a-z]{1,3}`), rapid.String(), 0, 3).Draw(t, "labels")
	}
	if rapid.Bool().Draw(t, "has-raw") {
		d.Raw = json.RawMessage(fmt.Sprintf(`{"x":%d}`, rapid.IntRange(0, 99).Draw(t, "raw")))
	}
	if rapid.Bool().Draw(t, "has-ptr") {
		p := genInner(t, "ptr")
		d.Ptr = &p
	}
	if rapid.Bool().Draw(t, "has-tree") {
		d.Tree = genNode(2).Draw(t, "tree")
	}
	return d
}

// scribble changes everything reachable from d that a shared reference
// would carry back into the store.
func scribble(d *deep) {
	d.Name += "x"
	for i := range d.Tags {
		d.Tags[i] = "scribbled"
	}
	for k := range d.Meta {
		if m, ok := d.Meta[k].(map[string]any); ok {
			m["scribbled"] = true
		}
		if s, ok := d.Meta[k].([]any); ok && len(s) > 0 {
			s[0] = "scribbled"
		}
		d.Meta[k] = "scribbled"
	}
	for k := range d.Labels {
		d.Labels[k] = "scribbled"
	}
	for i := range d.Raw {
		d.Raw[i] = ' '
	}
	scribbleInner := func(in *inner) {
		in.K = "scribbled"
		for i := range in.Vals {
			in.Vals[i] = -1
		}
		for k := range in.M {
			in.M[k] = -1
		}
		if in.When != nil {
			*in.When = time.Time{}
		}
	}
	if d.Ptr != nil {
		scribbleInner(d.Ptr)
	}
	for i := range d.Items {
		scribbleInner(&d.Items[i])
	}
	for i := range d.Arr {
		scribbleInner(&d.Arr[i])
	}
	var walk func(n *node)
	walk = func(n *node) {
		if n == nil {
			return
		}
		n.V = -1
		for _, k := range n.Kids {
			walk(k)
		}
	}
	walk(d.Tree)
	switch a := d.Any.(type) {
	case map[string]any:
		a["scribbled"] = true
	case []any:
		if len(a) > 0 {
			a[0] = "scribbled"
		}
	}
}

func get[T any](t *testing.T, s store.Store, key string) (T, error) {
	t.Helper()
	var v T
	err := s.View(func(tx store.Tx) error {
		ok, err := tx.Get(store.Disks, key, &v)
		if err == nil && !ok {
			err = fmt.Errorf("%s absent", key)
		}
		return err
	})
	return v, err
}

// A read of Memory is what decoding the record's JSON gives, on the first
// read of a version as on the later ones, and a read is the caller's own:
// changing everything in it changes nothing in the store.
func TestMemoryReadsAreDecodedCopies(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s := store.NewMemory()
		d := genDeep(rt)
		raw, err := json.Marshal(d)
		if err != nil {
			rt.Fatal(err)
		}
		var want deep
		if err := json.Unmarshal(raw, &want); err != nil {
			rt.Fatal(err)
		}
		if err := s.Update(func(tx store.Tx) error { return tx.Put(store.Disks, "d", d) }); err != nil {
			rt.Fatal(err)
		}
		scribble(&d) // the caller's value after Put is not the store's either
		for read := 1; read <= 3; read++ {
			got, err := get[deep](t, s, "d")
			if err != nil {
				rt.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				rt.Fatalf("read %d:\n got %#v\nwant %#v", read, got, want)
			}
			if got.Up.count != 1 {
				rt.Fatalf("read %d: the custom decoder's own field is %d; want 1 (one decode)", read, got.Up.count)
			}
			scribble(&got)
		}
		// The same version read as another type decodes as that type.
		var m map[string]any
		if err := json.Unmarshal(raw, &m); err != nil {
			rt.Fatal(err)
		}
		gotMap, err := get[map[string]any](t, s, "d")
		if err != nil {
			rt.Fatal(err)
		}
		if !reflect.DeepEqual(gotMap, m) {
			rt.Fatalf("read as a map:\n got %#v\nwant %#v", gotMap, m)
		}
	})
}

// A new version is read as itself, not as what an earlier one decoded to,
// and a failed transaction's version is never read.
func TestMemoryReadsFollowVersions(t *testing.T) {
	s := store.NewMemory()
	put := func(v deep) error { return s.Update(func(tx store.Tx) error { return tx.Put(store.Disks, "d", v) }) }
	if err := put(deep{Name: "one", Tags: []string{"a"}}); err != nil {
		t.Fatal(err)
	}
	if got, err := get[deep](t, s, "d"); err != nil || got.Name != "one" {
		t.Fatalf("first version read as %q, %v", got.Name, err)
	}
	boom := errors.New("boom")
	err := s.Update(func(tx store.Tx) error {
		if err := tx.Put(store.Disks, "d", deep{Name: "lost"}); err != nil {
			return err
		}
		var in deep
		if ok, err := tx.Get(store.Disks, "d", &in); !ok || err != nil || in.Name != "lost" {
			t.Errorf("a transaction reads its own write as %q (%v, %v)", in.Name, ok, err)
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatal(err)
	}
	if got, _ := get[deep](t, s, "d"); got.Name != "one" {
		t.Fatalf("after a failed Update the record reads as %q; want one", got.Name)
	}
	if err := put(deep{Name: "two"}); err != nil {
		t.Fatal(err)
	}
	got, err := get[deep](t, s, "d")
	if err != nil || got.Name != "two" || got.Tags != nil {
		t.Fatalf("second version read as %q %v, %v; want two with no tags", got.Name, got.Tags, err)
	}
	if err := s.Update(func(tx store.Tx) error { return tx.Delete(store.Disks, "d") }); err != nil {
		t.Fatal(err)
	}
	if _, err := get[deep](t, s, "d"); err == nil {
		t.Fatal("a deleted record was read")
	}
}

// Reading into a value that already holds something merges, as
// json.Unmarshal does; a type the copier cannot reach into, and a record
// that does not decode, read as json.Unmarshal reads them.
func TestMemoryReadsAsJSONUnmarshalDoes(t *testing.T) {
	s := store.NewMemory()
	err := s.Update(func(tx store.Tx) error {
		return errors.Join(tx.Put(store.Disks, "d", deep{Name: "n", Labels: map[string]string{"a": "1"}}),
			tx.Put(store.Disks, "ref", withRef{A: []int{1, 2}}),
			tx.Put(store.Disks, "bad", map[string]any{"name": 7, "n": 3}))
	})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		_ = s.View(func(tx store.Tx) error {
			pre := deep{N: 9, Labels: map[string]string{"b": "2"}}
			if _, err := tx.Get(store.Disks, "d", &pre); err != nil {
				t.Fatal(err)
			}
			if pre.Name != "n" || pre.N != 9 || len(pre.Labels) != 2 {
				t.Errorf("read into a filled value gave %+v; want name n, n 9 and both labels (merged)", pre)
			}
			var r withRef
			if _, err := tx.Get(store.Disks, "ref", &r); err != nil || !reflect.DeepEqual(r.A, []int{1, 2}) {
				t.Errorf("read of a type with an unexported reference gave %v, %v", r.A, err)
			}
			r.A[0] = 9
			var bad, want deep
			_, err := tx.Get(store.Disks, "bad", &bad)
			wantErr := json.Unmarshal([]byte(`{"n":3,"name":7}`), &want)
			if err == nil || !errors.As(err, new(*json.UnmarshalTypeError)) || !reflect.DeepEqual(bad, want) {
				t.Errorf("read of a record that does not decode gave %+v, %v; want %+v, %v", bad, err, want, wantErr)
			}
			return nil
		})
	}
}
