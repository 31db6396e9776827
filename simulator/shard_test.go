package simulator_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/cpilab/cpilab/simulator"
)

// Every seed of a range belongs to exactly one shard: the blocks of shards
// 1..N are contiguous, in order, cover the range, and differ in size by at
// most one; ShardOf finds the shard whose block holds a seed. Ranges reach
// the top of the 64-bit seed space, where a naive k·L/N overflows.
func TestShardsPartitionTheRange(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		length := rapid.Uint64Range(1, 1<<20).Draw(t, "length")
		if rapid.Bool().Draw(t, "huge") {
			length = rapid.Uint64Range(1<<62, 1<<64-1).Draw(t, "hugeLength")
		}
		from := simulator.Seed(rapid.Uint64Range(0, 1<<64-1-(length-1)).Draw(t, "from"))
		r := simulator.SeedRange{From: from, To: from + simulator.Seed(length-1)}
		n := rapid.Uint64Range(1, min(length, 200)).Draw(t, "shards")
		next := r.From
		var smallest, largest uint64
		for k := uint64(1); k <= n; k++ {
			b, err := simulator.Shard{Index: k, Count: n}.Of(r)
			if err != nil {
				t.Fatalf("shard %d/%d of %s: %v", k, n, r, err)
			}
			if b.From != next || b.To < b.From {
				t.Fatalf("shard %d/%d of %s is %s; want it to start at %s", k, n, r, b, next)
			}
			if k == 1 || b.Len() < smallest {
				smallest = b.Len()
			}
			largest = max(largest, b.Len())
			next = b.To + 1
			for _, s := range []simulator.Seed{b.From, b.To, b.From + simulator.Seed((b.Len()-1)/2)} {
				got, err := simulator.ShardOf(s, r, n)
				if err != nil || got.Index != k {
					t.Fatalf("ShardOf(%s, %s, %d) = %v, %v; want shard %d", s, r, n, got, err, k)
				}
			}
		}
		if next-1 != r.To {
			t.Fatalf("the shards of %s end at %s", r, next-1)
		}
		if largest-smallest > 1 {
			t.Fatalf("block sizes from %d to %d", smallest, largest)
		}
	})
}

// Exhaustively, on small ranges: each seed in exactly one block.
func TestEverySeedInExactlyOneShard(t *testing.T) {
	for length := uint64(1); length <= 40; length++ {
		r := simulator.SeedRange{From: 7, To: simulator.Seed(7 + length - 1)}
		for n := uint64(1); n <= length; n++ {
			count := map[simulator.Seed]int{}
			for k := uint64(1); k <= n; k++ {
				b, err := simulator.Shard{Index: k, Count: n}.Of(r)
				if err != nil {
					t.Fatal(err)
				}
				for s := b.From; s <= b.To; s++ {
					count[s]++
				}
			}
			for s := r.From; s <= r.To; s++ {
				if count[s] != 1 {
					t.Fatalf("range %s in %d shards: seed %s is in %d shards", r, n, s, count[s])
				}
			}
			if len(count) != int(length) {
				t.Fatalf("range %s in %d shards: %d seeds covered", r, n, len(count))
			}
		}
	}
}

func TestParseShardRefusesNonsense(t *testing.T) {
	if s, err := simulator.ParseShard("3/16"); err != nil || s.Index != 3 || s.Count != 16 || s.String() != "3/16" {
		t.Fatalf("ParseShard(3/16) = %v, %v", s, err)
	}
	for _, bad := range []string{"", "3", "0/3", "4/3", "3/0", "-1/3", "a/b", "1/2/3", "1.5/3"} {
		if _, err := simulator.ParseShard(bad); !errors.Is(err, simulator.ErrBadShard) {
			t.Errorf("ParseShard(%q) = %v, want ErrBadShard", bad, err)
		}
	}
	if _, err := (simulator.Shard{Index: 1, Count: 16}).Of(simulator.SeedRange{From: 1, To: 10}); !errors.Is(err, simulator.ErrBadShard) {
		t.Errorf("16 shards of 10 seeds: %v, want ErrBadShard", err)
	}
	if b, err := (simulator.Shard{}).Of(simulator.SeedRange{From: 5, To: 9}); err != nil || b.From != 5 || b.To != 9 {
		t.Errorf("the zero shard is the whole range: %v, %v", b, err)
	}
}

// shardReports makes the reports of the n shards of a sweep of r in which
// the seeds in failing fail, and writes them to dir.
func shardReports(t *testing.T, dir string, run simulator.RunConfig, r simulator.SeedRange, n uint64, failing ...simulator.Seed) []string {
	t.Helper()
	var paths []string
	for k := uint64(1); k <= n; k++ {
		sh := simulator.Shard{Index: k, Count: n}
		b, err := sh.Of(r)
		if err != nil {
			t.Fatal(err)
		}
		res := simulator.SweepResult{Runs: int(b.Len()), Steps: 10 * int64(b.Len()), Elapsed: time.Second}
		for _, s := range failing {
			if s >= b.From && s <= b.To {
				res.Failures = append(res.Failures, simulator.Failure{Seed: s, TraceHash: uint64(s),
					Err: &simulator.Violation{Invariant: "no-leaked-disk", Phase: simulator.AtQuiescence, Seed: s, Err: errors.New("leak")}})
			}
		}
		rep, err := simulator.NewSweepReport(run, r, sh, true, res)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, "out-"+sh.String()[:strings.Index(sh.String(), "/")]+".json")
		if err := rep.WriteFile(p); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	return paths
}

func readAll(t *testing.T, paths []string) []simulator.SweepReport {
	t.Helper()
	var out []simulator.SweepReport
	for _, p := range paths {
		r, err := simulator.ReadSweepReport(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r)
	}
	return out
}

// Shard reports merge into one verdict with every failing seed and its
// replay command, in seed order; a merged report merges again.
func TestMergeShardReports(t *testing.T) {
	dir := t.TempDir()
	run := simulator.RunConfig{Steps: 50, Profile: "upstream:a"}
	r := simulator.SeedRange{From: 1, To: 100}
	paths := shardReports(t, dir, run, r, 4, 77, 3, 40)
	merged, err := simulator.MergeSweepReports(readAll(t, paths), paths)
	if err != nil {
		t.Fatal(err)
	}
	if merged.Verdict != simulator.VerdictFail || merged.Runs != 100 || !merged.Complete || len(merged.Shards) != 4 || len(merged.Failures) != 3 {
		t.Fatalf("merged: %+v", merged)
	}
	for i, want := range []string{"3", "40", "77"} {
		f := merged.Failures[i]
		if f.Seed != want || f.Replay != "cpilab simulate --seed "+want+" --steps 50 --profile upstream:a --faults none" || f.Invariant != "no-leaked-disk" {
			t.Errorf("failure %d: %+v", i, f)
		}
	}
	text := merged.String()
	if !strings.HasPrefix(text, "FAIL: 4 shards of seeds 1..100: 100 seeds run, 3 failing\n") || !strings.Contains(text, "replay: cpilab simulate --seed 77 ") {
		t.Errorf("merged text:\n%s", text)
	}
	// Written and read back, the merged report merges to itself.
	out := filepath.Join(dir, "merged.json")
	if err := merged.WriteFile(out); err != nil {
		t.Fatal(err)
	}
	again, err := simulator.MergeSweepReports(readAll(t, []string{out}), []string{out})
	if err != nil || again.String() != text || again.Shards[2].Source != paths[2] {
		t.Fatalf("re-merge of the merged report: %v\n%s", err, again)
	}
	// A passing sweep passes.
	passing := shardReports(t, t.TempDir(), run, r, 3)
	if m, err := simulator.MergeSweepReports(readAll(t, passing), passing); err != nil || m.Verdict != simulator.VerdictPass {
		t.Fatalf("passing merge: %v %v", m.Verdict, err)
	}
}

// Merge refuses, naming the files, reports that do not make one sweep.
func TestMergeRefusesBadShardSets(t *testing.T) {
	dir := t.TempDir()
	run := simulator.RunConfig{Steps: 50}
	r := simulator.SeedRange{From: 1, To: 100}
	four := shardReports(t, filepath.Join(mkdir(t, dir, "four")), run, r, 4, 5)
	five := shardReports(t, filepath.Join(mkdir(t, dir, "five")), run, r, 5)
	other := shardReports(t, filepath.Join(mkdir(t, dir, "other")), simulator.RunConfig{Steps: 60}, r, 4)
	for _, tc := range []struct {
		name  string
		paths []string
		want  error
		says  string
	}{
		{"missing", []string{four[0], four[1], four[3]}, simulator.ErrShardMissing, "3/4"},
		{"overlap", []string{four[0], four[1], four[1], four[2], four[3]}, simulator.ErrShardOverlap, "shard 2/4 is in both"},
		{"counts", []string{four[0], five[1]}, simulator.ErrShardMismatch, "into 4 shards"},
		{"command", []string{four[0], other[1], four[2], four[3]}, simulator.ErrShardMismatch, "--steps 60"},
		{"none", nil, simulator.ErrShardMissing, "no reports"},
	} {
		_, err := simulator.MergeSweepReports(readAll(t, tc.paths), tc.paths)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want %v saying %q", tc.name, err, tc.want, tc.says)
		}
	}
	// Reports that are not what they claim are refused on reading.
	good, err := os.ReadFile(four[0])
	if err != nil {
		t.Fatal(err)
	}
	for name, text := range map[string]string{
		"truncated":     string(good[:len(good)/2]),
		"empty":         "",
		"unknown field": strings.Replace(string(good), `"runs"`, `"rusn"`, 1),
		"moved block":   strings.Replace(string(good), `"to": "25"`, `"to": "26"`, 1),
		"wrong verdict": strings.Replace(string(good), `"verdict": "fail"`, `"verdict": "pass"`, 1),
		"other format":  strings.Replace(string(good), `"cpilab-simulate-report"`, `"ginkgo"`, 1),
	} {
		p := filepath.Join(dir, "bad.json")
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := simulator.ReadSweepReport(p); !errors.Is(err, simulator.ErrBadReport) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s report: %v, want ErrBadReport naming the file", name, err)
		}
	}
}

func mkdir(t *testing.T, parent, name string) string {
	t.Helper()
	p := filepath.Join(parent, name)
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}
