package disksm

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

var azs = []string{"z1", "z1", "z2"}

// The model's rules, one call at a time.
func TestApply(t *testing.T) {
	m := Model{}
	steps := []struct {
		op   Op
		ok   bool
		want string
	}{
		{Op{Kind: "detach", Name: "a"}, false, "map[]"},
		{Op{Kind: "delete", Name: "a"}, true, "map[]"},
		{Op{Kind: "attach", Name: "a", Inst: 0}, false, "map[]"},
		{Op{Kind: "provide", Name: "a", Inst: 0}, true, "map[a:{0 z1 4}]"},
		{Op{Kind: "provide", Name: "a", Inst: 0}, true, "map[a:{0 z1 4}]"},
		{Op{Kind: "provide", Name: "a", Inst: 1}, false, "map[a:{0 z1 4}]"},
		{Op{Kind: "detach", Name: "a"}, true, "map[a:{-1 z1 4}]"},
		{Op{Kind: "attach", Name: "a", Inst: 2}, false, "map[a:{-1 z1 4}]"}, // another AZ
		{Op{Kind: "attach", Name: "a", Inst: 1}, true, "map[a:{1 z1 4}]"},
		{Op{Kind: "provide", Name: "../x", Inst: 1}, false, "map[a:{1 z1 4}]"},
		{Op{Kind: "delete", Name: "a"}, true, "map[]"},
	}
	for i, s := range steps {
		if got := m.Apply(s.op, azs); got != s.ok || fmt.Sprint(m) != s.want {
			t.Fatalf("step %d, %v: %v, %v; want %v, %s", i, s.op, got, m, s.ok, s.want)
		}
	}
}

// A call taken over part way may leave any step of its effect.
func TestPartial(t *testing.T) {
	attached := Model{"a": {0, "z1", 4}}
	cases := []struct {
		from Model
		op   Op
		want string
	}{
		{Model{}, Op{Kind: "provide", Name: "a", Inst: 0}, "[map[] map[a:{-1  4}] map[a:{0 z1 4}]]"},
		{attached, Op{Kind: "delete", Name: "a"}, "[map[a:{0 z1 4}] map[a:{-1 z1 4}] map[]]"},
		{attached, Op{Kind: "detach", Name: "a"}, "[map[a:{0 z1 4}] map[a:{-1 z1 4}]]"},
		{attached, Op{Kind: "provide", Name: "a", Inst: 1}, "[map[a:{0 z1 4}]]"}, // refused: no effect
	}
	for _, c := range cases {
		if got := fmt.Sprint(c.from.Partial(c.op, azs)); got != c.want {
			t.Errorf("%v from %v: %s; want %s", c.op, c.from, got, c.want)
		}
	}
	if fmt.Sprint(attached) != "map[a:{0 z1 4}]" {
		t.Fatalf("Partial changed its model: %v", attached)
	}
}

// Linearizable finds a serial order when one exists, and only then.
func TestLinearizable(t *testing.T) {
	p0 := Op{Kind: "provide", Name: "a", Inst: 0}
	p1 := Op{Kind: "provide", Name: "a", Inst: 1}
	// Two provides to two instances: one wins, the other fails.
	if why, ok := Linearizable(Model{}, []Op{p0, p1}, []Outcome{Failed, Done}, Model{"a": {1, "z1", 4}}, azs); !ok {
		t.Fatalf("one provide won: %s", why)
	}
	// Both succeeding cannot be.
	if _, ok := Linearizable(Model{}, []Op{p0, p1}, []Outcome{Done, Done}, Model{"a": {1, "z1", 4}}, azs); ok {
		t.Fatal("two provides of one disk to two instances both succeeded, and Linearizable accepted it")
	}
	// A final state no order gives (a leaked attachment).
	if _, ok := Linearizable(Model{}, []Op{p0}, []Outcome{Failed}, Model{"a": {0, "z1", 4}}, azs); ok {
		t.Fatal("a failed provide left the disk attached, and Linearizable accepted it")
	}
	// An unknown provide may have stopped after its create.
	for _, final := range []Model{{}, {"a": {-1, "", 4}}, {"a": {0, "z1", 4}}} {
		if why, ok := Linearizable(Model{}, []Op{p0}, []Outcome{Unknown}, final, azs); !ok {
			t.Errorf("an unknown provide ending in %v: %s", final, why)
		}
	}
	if _, ok := Linearizable(Model{}, []Op{p0}, []Outcome{Unknown}, Model{"a": {1, "z1", 4}}, azs); ok {
		t.Error("an unknown provide to instance 0 left the disk on instance 1, and Linearizable accepted it")
	}
}

// The generator draws hostile names only when asked, and instances in range.
func TestOpGen(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		o := OpGen(GenConfig{Kinds: []string{"provide"}, Names: Names, Instances: 2}).Draw(t, "op")
		if !o.Valid() || o.Inst < 0 || o.Inst > 1 {
			t.Fatalf("drew %v", o)
		}
	})
	hostile := 0
	rapid.Check(t, func(t *rapid.T) {
		if !OpGen(GenConfig{Kinds: Kinds, Names: Names, Hostile: HostileNames, Instances: 3}).Draw(t, "op").Valid() {
			hostile++
		}
	})
	if hostile == 0 {
		t.Error("no hostile name drawn in 100 checks")
	}
	for _, n := range HostileNames {
		if (Op{Name: n}).Valid() {
			t.Errorf("hostile name %q is valid", n)
		}
	}
}
