package shrink_test

import (
	"slices"
	"testing"

	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/simulator/shrink"
	"pgregory.net/rapid"
)

func TestMinimizeFindsTheCulprits(t *testing.T) {
	var items []int
	for i := range 200 {
		items = append(items, i)
	}
	fails := func(s []int) bool { return slices.Contains(s, 17) && slices.Contains(s, 142) }
	got, st := shrink.Minimize(items, fails, shrink.Options{})
	if !slices.Equal(got, []int{17, 142}) || st.From != 200 || st.To != 2 || st.Capped {
		t.Fatalf("Minimize = %v, %+v", got, st)
	}
	if st.Tests > 200 {
		t.Fatalf("%d predicate calls for two culprits among 200", st.Tests)
	}
	if len(items) != 200 || items[17] != 17 {
		t.Fatal("Minimize modified its input")
	}
}

func TestMinimizeIsOneMinimal(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		items := rapid.SliceOfN(rapid.IntRange(0, 20), 1, 60).Draw(t, "items")
		need := rapid.SliceOfN(rapid.IntRange(0, 20), 0, 4).Draw(t, "need")
		// fails: the input holds at least as many of each needed value.
		fails := func(s []int) bool {
			for _, v := range need {
				if count(s, v) < count(need, v) {
					return false
				}
			}
			return true
		}
		if !fails(items) {
			t.Skip("the input does not fail")
		}
		got, _ := shrink.Minimize(items, fails, shrink.Options{})
		if !fails(got) {
			t.Fatalf("result %v does not fail", got)
		}
		for i := range got {
			if fails(slices.Delete(slices.Clone(got), i, i+1)) {
				t.Fatalf("result %v is not 1-minimal: item %d can go", got, i)
			}
		}
	})
}

func count(s []int, v int) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

func TestMinimizeRespectsMaxTestsAndEmpty(t *testing.T) {
	items := make([]int, 1000)
	for i := range items {
		items[i] = i
	}
	calls := 0
	got, st := shrink.Minimize(items, func(s []int) bool { calls++; return slices.Contains(s, 999) && slices.Contains(s, 3) }, shrink.Options{MaxTests: 5})
	if calls != 5 || st.Tests != 5 || !st.Capped || !slices.Contains(got, 999) {
		t.Fatalf("capped: %d calls, %+v, %d items", calls, st, len(got))
	}
	got, st = shrink.Minimize(items, func([]int) bool { return true }, shrink.Options{})
	if len(got) != 0 || st.Tests != 1 {
		t.Fatalf("an always-failing predicate: %v %+v", got, st)
	}
}

func TestMinimizeASchedule(t *testing.T) {
	sched, err := faults.ParseSchedule(`
latency@1 d=1s
cpi-error@4 on=attach_disk type=Bosh::Clouds::CloudError
mbus-lost@2
lost-response@9 on=detach_disk
agent-old@0`)
	if err != nil {
		t.Fatal(err)
	}
	fails := func(s faults.Schedule) bool {
		return slices.ContainsFunc(s, func(f faults.Fault) bool { return f.Kind == faults.LostResponse })
	}
	got, _ := shrink.Minimize(sched, fails, shrink.Options{})
	if got.String() != "lost-response@9 on=detach_disk\n" {
		t.Fatalf("minimized schedule:\n%s", got)
	}
}
