package simulator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cpilab/cpilab/simulator/faults"
	"github.com/cpilab/cpilab/vmroot"
)

// The world's VM roots and disk files live in memory by default, and a run
// is the same run, step for step, as with them on disk: the memory file
// system answers the fake cloud, the agents and the checkers as the
// machine's does.
func TestWorldFilesInMemoryOrOnDisk(t *testing.T) {
	spec, err := faults.ParseSpec("default")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		profile string
		seed    Seed
	}{{"reference", 1}, {"upstream:h", 1}} {
		type run struct {
			steps  int64
			hash   uint64
			err    string
			onDisk bool // the VM roots were on disk when an operation ended
			ops    int
			// what the checkers read in the VM roots after each operation:
			// the dynamic disk links and whether each reaches its disk
			seen  string
			links int
		}
		do := func(files vmroot.Host) run {
			var r run
			cfg := SimConfig{RunConfig: RunConfig{Seed: c.seed, Steps: 200, Faults: spec, Profile: c.profile}, files: files}
			cfg.tamper.afterOp = func(w *World, o Op) {
				r.ops++
				_, err := os.Lstat(filepath.Join(w.Cloud.DataDir(), "vms"))
				r.onDisk = r.onDisk || !errors.Is(err, fs.ErrNotExist)
				st, err := w.Cloud.State(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				for _, vm := range st.VMs {
					links := w.readLinks(vm.Root)
					for _, cid := range slices.Sorted(maps.Keys(links)) {
						r.links++
						r.seen += fmt.Sprintf("%s %s → %s %v\n", vm.CID, cid, links[cid], w.linkReachesDisk(vm.Root, cid))
					}
				}
			}
			rep := Simulate(cfg).Report()
			r.steps, r.hash = rep.Steps, rep.TraceHash
			if rep.Err != nil {
				r.err = rep.Err.Error()
			}
			return r
		}
		mem, disk := do(nil), do(vmroot.OS)
		if mem.ops == 0 || disk.links < 20 || mem.onDisk || !disk.onDisk {
			t.Errorf("%s seed %d: %d operations, %d links seen on disk; VM roots on disk: %v in memory, %v on disk",
				c.profile, c.seed, mem.ops, disk.links, mem.onDisk, disk.onDisk)
		}
		mem.onDisk, disk.onDisk = false, false
		if mem.seen != disk.seen {
			t.Errorf("%s seed %d: the checkers saw in the VM roots (- on disk, + in memory):\n%s", c.profile, c.seed, lineDiff(disk.seen, mem.seen))
		}
		mem.seen, disk.seen = "", ""
		if mem != disk {
			t.Errorf("%s seed %d: in memory %+v; on disk %+v", c.profile, c.seed, mem, disk)
		}
	}
}

// lineDiff lists the lines of a not in b (-) and of b not in a (+).
func lineDiff(a, b string) string {
	count := func(s string) map[string]int {
		m := map[string]int{}
		for _, l := range strings.Split(s, "\n") {
			m[l]++
		}
		return m
	}
	ca, cb := count(a), count(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if ca[l] > cb[l] {
			out = append(out, "- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if cb[l] > ca[l] {
			out = append(out, "+ "+l)
		}
	}
	return strings.Join(out, "\n")
}
