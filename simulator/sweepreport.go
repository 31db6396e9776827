package simulator

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/cpilab/cpilab/internal/strictjson"
	"github.com/cpilab/cpilab/internal/termsafe"
)

// The JSON report of a sweep (`cpilab simulate --seeds A..B --json-report
// FILE`, one shard or the whole range) and the merge of shard reports
// (`cpilab simulate merge`). docs/simulate-report.md documents the format.

// ReportFormat and ReportVersion identify the JSON report format.
const (
	ReportFormat  = "cpilab-simulate-report"
	ReportVersion = 1
)

// The verdicts of a sweep report.
const (
	// VerdictPass: every seed of the report ran and none failed.
	VerdictPass = "pass"
	// VerdictFail: at least one seed failed.
	VerdictFail = "fail"
	// VerdictIncomplete: no seed failed, but some were not run (the sweep
	// was interrupted).
	VerdictIncomplete = "incomplete"
)

// SweepReport is the JSON report of a sweep or of merged shards.
type SweepReport struct {
	// Format is ReportFormat.
	Format string `json:"format"`
	// Version is ReportVersion.
	Version int `json:"version"`
	// Command is the sweep's command line after "cpilab": the whole range
	// and every flag that shapes a run, the same for every shard of one
	// sweep ("simulate", "--seeds", "1..1000000", "--steps", "200", …).
	Command []string `json:"command"`
	// Seeds is the whole range the shards split.
	Seeds ReportRange `json:"seeds"`
	// KeepGoing reports --keep-going: every seed runs even after a failure.
	KeepGoing bool `json:"keep_going"`
	// Shards lists the shards this report covers: one for a shard's own
	// report, every shard for a merged one.
	Shards []ReportShard `json:"shards"`
	// Runs counts the seeds run.
	Runs uint64 `json:"runs"`
	// Steps sums the runs' runtime steps.
	Steps int64 `json:"steps"`
	// ElapsedSeconds is the wall-clock time of the sweep (merged: the sum
	// over the shards).
	ElapsedSeconds float64 `json:"elapsed_seconds"`
	// Complete reports that every seed of every shard ran (a sweep stopped
	// at its first failure without --keep-going is not complete).
	Complete bool `json:"complete"`
	// Verdict is VerdictPass, VerdictFail or VerdictIncomplete.
	Verdict string `json:"verdict"`
	// Failures lists every failing seed found, by seed.
	Failures []ReportFailure `json:"failures"`
}

// ReportRange is an inclusive seed range; seeds are decimal strings, since
// a 64-bit seed does not fit a JSON number exactly.
type ReportRange struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// ReportShard is one shard of a report.
type ReportShard struct {
	// Index and Count are K and N of --shard K/N (1/1: the whole range).
	Index uint64 `json:"index"`
	Count uint64 `json:"count"`
	// Seeds is the block of the range this shard runs.
	Seeds ReportRange `json:"seeds"`
	// Runs counts the seeds it ran.
	Runs uint64 `json:"runs"`
	// Complete reports that it ran every seed of its block.
	Complete bool `json:"complete"`
	// Source is the report file it was read from (merged reports only).
	Source string `json:"source,omitempty"`
}

// ReportFailure is one failing seed.
type ReportFailure struct {
	// Seed is the root seed, in decimal.
	Seed string `json:"seed"`
	// Invariant is the violated invariant; "" for a run that broke
	// otherwise (a panic, a runtime error).
	Invariant string `json:"invariant,omitempty"`
	// Phase is when the violation was found ("after step", "at quiescence").
	Phase string `json:"phase,omitempty"`
	// Error is the whole error text.
	Error string `json:"error"`
	// TraceHash is the run's trace hash, 16 hexadecimal digits.
	TraceHash string `json:"trace_hash"`
	// Replay is the shell command that replays the seed.
	Replay string `json:"replay"`
}

func reportRange(r SeedRange) ReportRange {
	return ReportRange{From: r.From.String(), To: r.To.String()}
}

func (r ReportRange) parse() (SeedRange, error) { return ParseSeedRange(r.From + ".." + r.To) }

// SweepArgs are the arguments of the `cpilab simulate` command that sweeps
// r with c as the template run: Args with --seeds A..B for --seed N.
func (c RunConfig) SweepArgs(r SeedRange) []string {
	args := c.Args()
	args[1], args[2] = "--seeds", r.String()
	return args
}

// NewSweepReport builds the report of a sweep of seeds (the whole range)
// run as shard (zero: the whole range), with run as the template run.
func NewSweepReport(run RunConfig, seeds SeedRange, shard Shard, keepGoing bool, res SweepResult) (SweepReport, error) {
	shard = shard.orWhole()
	block, err := shard.Of(seeds)
	if err != nil {
		return SweepReport{}, err
	}
	complete := !res.Stopped && uint64(res.Runs) == block.Len()
	rep := SweepReport{Format: ReportFormat, Version: ReportVersion, Command: run.SweepArgs(seeds), Seeds: reportRange(seeds),
		KeepGoing: keepGoing, Runs: uint64(res.Runs), Steps: res.Steps, ElapsedSeconds: res.Elapsed.Seconds(), Complete: complete,
		Shards:   []ReportShard{{Index: shard.Index, Count: shard.Count, Seeds: reportRange(block), Runs: uint64(res.Runs), Complete: complete}},
		Failures: []ReportFailure{}}
	for _, f := range res.Failures {
		rf := ReportFailure{Seed: f.Seed.String(), Error: f.Err.Error(), TraceHash: fmt.Sprintf("%016x", f.TraceHash), Replay: f.Replay}
		if v, ok := AsViolation(f.Err); ok {
			rf.Invariant, rf.Phase = v.Invariant, string(v.Phase)
		}
		if rf.Replay == "" {
			c := run
			c.Seed = f.Seed
			rf.Replay = c.Command()
		}
		rep.Failures = append(rep.Failures, rf)
	}
	rep.Verdict = verdict(rep)
	return rep, nil
}

func verdict(r SweepReport) string {
	switch {
	case len(r.Failures) > 0:
		return VerdictFail
	case !r.Complete:
		return VerdictIncomplete
	}
	return VerdictPass
}

// WriteFile writes the report as indented JSON, through a temporary file
// renamed into place, so a reader never sees half a report.
func (r SweepReport) WriteFile(path string) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".cpilab-report-*.json")
	if err != nil {
		return fmt.Errorf("writing the JSON report: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(append(data, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("writing the JSON report: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("writing the JSON report: %w", err)
	}
	return os.Rename(tmp.Name(), path)
}

// The errors of ReadSweepReport and MergeSweepReports; each names the file
// and what is wrong.
var (
	// ErrBadReport: not a cpilab sweep report (unreadable, not JSON of
	// this format and version, or inconsistent in itself).
	ErrBadReport = errors.New("not a valid sweep report")
	// ErrShardMismatch: the reports are not shards of one sweep (different
	// command, range or shard count).
	ErrShardMismatch = errors.New("reports of different sweeps")
	// ErrShardOverlap: a shard is covered by two reports.
	ErrShardOverlap = errors.New("overlapping shards")
	// ErrShardMissing: some shard of the sweep has no report.
	ErrShardMissing = errors.New("missing shards")
)

// ReadSweepReport reads and checks a report file: its format and version,
// its shards' blocks against the sharding rule, its counts and verdict, and
// that every failure lies in one of its blocks.
func ReadSweepReport(path string) (SweepReport, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return SweepReport{}, fmt.Errorf("%w: %w", ErrBadReport, err)
	}
	var r SweepReport
	if err := strictjson.Decode(data, &r, strictjson.Options{DisallowUnknownFields: true}); err != nil {
		return SweepReport{}, fmt.Errorf("%w: %s: %v", ErrBadReport, path, err)
	}
	if err := r.check(); err != nil {
		return SweepReport{}, fmt.Errorf("%w: %s: %v", ErrBadReport, path, err)
	}
	return r, nil
}

func (r SweepReport) check() error {
	if r.Format != ReportFormat || r.Version != ReportVersion {
		return fmt.Errorf("format %q version %d, want %q version %d", r.Format, r.Version, ReportFormat, ReportVersion)
	}
	seeds, err := r.Seeds.parse()
	if err != nil {
		return fmt.Errorf("seeds: %v", err)
	}
	if len(r.Command) < 3 || r.Command[0] != "simulate" || r.Command[1] != "--seeds" || r.Command[2] != seeds.String() {
		return fmt.Errorf("command %q does not sweep the seeds %s", r.Command, seeds)
	}
	if len(r.Shards) == 0 {
		return errors.New("no shards")
	}
	if r.Steps < 0 || r.ElapsedSeconds < 0 || math.IsInf(r.ElapsedSeconds, 0) || math.IsNaN(r.ElapsedSeconds) {
		return fmt.Errorf("steps %d and elapsed_seconds %v: want counts ≥ 0", r.Steps, r.ElapsedSeconds)
	}
	var runs uint64
	complete := true
	var blocks []SeedRange
	for _, s := range r.Shards {
		want, err := (Shard{Index: s.Index, Count: s.Count}).Of(seeds)
		if err != nil {
			return err
		}
		got, err := s.Seeds.parse()
		if err != nil || got != want {
			return fmt.Errorf("shard %d/%d covers %s..%s, but the sharding rule gives it %s", s.Index, s.Count, s.Seeds.From, s.Seeds.To, want)
		}
		if s.Runs > got.Len() || (s.Complete && s.Runs != got.Len()) {
			return fmt.Errorf("shard %d/%d: %d runs in a block of %d seeds (complete %v)", s.Index, s.Count, s.Runs, got.Len(), s.Complete)
		}
		runs += s.Runs
		complete = complete && s.Complete
		blocks = append(blocks, got)
	}
	if runs != r.Runs || complete != r.Complete {
		return fmt.Errorf("runs %d and complete %v disagree with its shards' (%d, %v)", r.Runs, r.Complete, runs, complete)
	}
	for _, f := range r.Failures {
		seed, err := ParseSeed(f.Seed)
		if err != nil {
			return fmt.Errorf("failure: %v", err)
		}
		if !slices.ContainsFunc(blocks, func(b SeedRange) bool { return seed >= b.From && seed <= b.To }) {
			return fmt.Errorf("failing seed %s lies outside its shards", f.Seed)
		}
	}
	if v := verdict(r); r.Verdict != v {
		return fmt.Errorf("verdict %q, but its failures and completeness give %q", r.Verdict, v)
	}
	return nil
}

// MergeSweepReports combines the reports of the shards of one sweep (named
// by names, for the errors) into one report: every shard exactly once (a
// merged report counts as the shards it lists).
func MergeSweepReports(reports []SweepReport, names []string) (SweepReport, error) {
	if len(reports) == 0 {
		return SweepReport{}, fmt.Errorf("%w: no reports to merge", ErrShardMissing)
	}
	first := reports[0]
	out := SweepReport{Format: ReportFormat, Version: ReportVersion, Command: first.Command, Seeds: first.Seeds,
		KeepGoing: first.KeepGoing, Complete: true, Failures: []ReportFailure{}}
	count := first.Shards[0].Count
	byIndex := map[uint64]string{}
	for i, r := range reports {
		name := names[i]
		if err := r.check(); err != nil {
			return SweepReport{}, fmt.Errorf("%w: %s: %v", ErrBadReport, name, err)
		}
		if !slices.Equal(r.Command, first.Command) {
			return SweepReport{}, fmt.Errorf("%w: %s runs `cpilab %s`, %s runs `cpilab %s`", ErrShardMismatch,
				names[0], strings.Join(first.Command, " "), name, strings.Join(r.Command, " "))
		}
		if r.KeepGoing != first.KeepGoing {
			return SweepReport{}, fmt.Errorf("%w: %s has keep_going %v, %s %v", ErrShardMismatch, names[0], first.KeepGoing, name, r.KeepGoing)
		}
		for _, s := range r.Shards {
			if s.Count != count {
				return SweepReport{}, fmt.Errorf("%w: %s splits the sweep into %d shards, %s into %d", ErrShardMismatch, names[0], count, name, s.Count)
			}
			if other, dup := byIndex[s.Index]; dup {
				return SweepReport{}, fmt.Errorf("%w: shard %d/%d is in both %s and %s", ErrShardOverlap, s.Index, s.Count, other, name)
			}
			byIndex[s.Index] = name
			if s.Source == "" {
				s.Source = name
			}
			out.Shards = append(out.Shards, s)
		}
		if out.Steps > math.MaxInt64-r.Steps {
			return SweepReport{}, fmt.Errorf("%w: %s: steps %d overflow the sum", ErrBadReport, name, r.Steps)
		}
		out.Runs += r.Runs
		out.Steps += r.Steps
		if out.ElapsedSeconds += r.ElapsedSeconds; math.IsInf(out.ElapsedSeconds, 0) {
			return SweepReport{}, fmt.Errorf("%w: %s: elapsed_seconds %v overflow the sum", ErrBadReport, name, r.ElapsedSeconds)
		}
		out.Complete = out.Complete && r.Complete
		out.Failures = append(out.Failures, r.Failures...)
	}
	if uint64(len(byIndex)) != count {
		var missing []string
		for k := uint64(1); k <= count && len(missing) < 20; k++ {
			if _, ok := byIndex[k]; !ok {
				missing = append(missing, fmt.Sprintf("%d/%d", k, count))
			}
		}
		more := ""
		if n := count - uint64(len(byIndex)); n > uint64(len(missing)) {
			more = fmt.Sprintf(" and %d more", n-uint64(len(missing)))
		}
		return SweepReport{}, fmt.Errorf("%w: %d of %d shards have no report: %s%s", ErrShardMissing, count-uint64(len(byIndex)), count,
			strings.Join(missing, ", "), more)
	}
	slices.SortFunc(out.Shards, func(a, b ReportShard) int { return cmpUint(a.Index, b.Index) })
	slices.SortFunc(out.Failures, func(a, b ReportFailure) int {
		x, _ := strconv.ParseUint(a.Seed, 10, 64)
		y, _ := strconv.ParseUint(b.Seed, 10, 64)
		return cmpUint(x, y)
	})
	out.Verdict = verdict(out)
	return out, nil
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// String is the verdict line, then one block per failing seed with its
// replay command:
//
//	FAIL: 16 shards of seeds 1..1000000: 1000000 seeds run, 2 failing
//	seed 4711: invariant "no-leaked-disk" violated at quiescence 200 (seed 4711): …
//	  replay: cpilab simulate --seed 4711 --steps 200 --profile reference --faults none
func (r SweepReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d shard", strings.ToUpper(r.Verdict), len(r.Shards))
	if len(r.Shards) != 1 {
		b.WriteString("s")
	}
	fmt.Fprintf(&b, " of seeds %s..%s: %d seeds run, %d failing", r.Seeds.From, r.Seeds.To, r.Runs, len(r.Failures))
	if !r.Complete {
		b.WriteString(" (not every seed ran)")
	}
	b.WriteString("\n")
	for _, f := range r.Failures {
		// A report may be forged: its text is shown escaped.
		first, _, _ := strings.Cut(f.Error, "\n")
		fmt.Fprintf(&b, "seed %s: %s\n  replay: %s\n", termsafe.String(f.Seed), termsafe.String(first), termsafe.String(f.Replay))
	}
	return b.String()
}
