package suites

import (
	"slices"
	"testing"

	"github.com/onsi/ginkgo/v2/types"
)

// TestShareFilter: a share's filter selects its rows within the user's
// filter.
func TestShareFilter(t *testing.T) {
	f := shareFilter("area:errors", []string{"d1.c1.s1", "cli.api2"})
	m, err := types.ParseLabelFilter(f)
	if err != nil {
		t.Fatal(err)
	}
	if !m([]string{"row:cli.api2", "area:errors"}) || m([]string{"row:cli.api2", "area:shapes"}) || m([]string{"row:d2.c2.s2", "area:errors"}) {
		t.Fatalf("filter %q selects the wrong specs", f)
	}
}

func TestProgressHubWaitsForEveryTotal(t *testing.T) {
	var got []int
	h := &progressHub{n: 2, totals: map[int]int{}, out: func(done, total int, sr *types.SpecReport) {
		got = append(got, done, total)
	}}
	h.total(0, 3)
	h.spec(types.SpecReport{})
	if len(got) != 0 {
		t.Fatalf("progress before every worker said its total: %v", got)
	}
	h.total(1, 2)
	h.spec(types.SpecReport{})
	if want := []int{0, 5, 1, 5, 2, 5}; !slices.Equal(got, want) {
		t.Fatalf("progress %v, want %v", got, want)
	}
}
