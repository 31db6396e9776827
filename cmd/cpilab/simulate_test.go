package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/simulator"
)

// A failing seed prints its replay commands and exits 1; the minimized
// trace it writes replays the same violation.
func TestSimulateReportsAndReplays(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), []string{"simulate", "--seed", "7", "--steps", "200", "--profile", "upstream",
		"--faults", "none", "--out", out}, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("simulate under upstream exited %d, want 1\n%s%s", code, stdout.String(), stderr.String())
	}
	for _, want := range []string{"FAIL seed 7", "violated", "replay: cpilab simulate --seed 7", "replay minimized: cpilab replay",
		"history visualization: " + filepath.Join(out, "seed-7.html")} {
		if !strings.Contains(stdout.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, stdout.String())
		}
	}
	// The visualization the help promises is written, and is porcupine's.
	if html, err := os.ReadFile(filepath.Join(out, "seed-7.html")); err != nil || !strings.Contains(string(html), "<html") {
		t.Errorf("seed-7.html: %v (%d bytes)", err, len(html))
	}
	stdout.Reset()
	if code := run(context.Background(), []string{"replay", filepath.Join(out, "seed-7.txt")}, &stdout, &stderr); code != 0 {
		t.Fatalf("replay of the minimized trace exited %d:\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.Contains(stdout.String(), "violated") {
		t.Errorf("the minimized trace did not reproduce the violation:\n%s", stdout.String())
	}
}

func TestSimulateReferencePassesAndMisuseIsAUsageError(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"simulate", "--seed", "3", "--steps", "100"}, &stdout, &stderr); code != 0 {
		t.Fatalf("reference seed 3 exited %d:\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "PASS seed 3") {
		t.Errorf("want a PASS line, got:\n%s", stdout.String())
	}
	if code := run(context.Background(), []string{"simulate", "--seed", "1", "--seeds", "1..2"}, &stdout, &stderr); code != 2 {
		t.Errorf("--seed with --seeds exited %d, want 2", code)
	}
	if code := run(context.Background(), []string{"replay"}, &stdout, &stderr); code != 2 {
		t.Errorf("replay without FILE exited %d, want 2", code)
	}
}

// Bad numbers are refused before anything runs, naming the flag: --steps 0
// does not quietly mean 200, NaN is not a probability, a think time is not
// negative.
func TestSimulateRefusesBadNumbers(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--steps", "0"}, "-steps"},
		{[]string{"--steps", "-5"}, "-steps"},
		{[]string{"--faults", "cpi-error=NaN"}, "not a number in [0, 1]"},
		{[]string{"--faults", "cpi-error=nan"}, "not a number in [0, 1]"},
		{[]string{"--faults", "latency=Inf"}, "not a number in [0, 1]"},
		{[]string{"--faults", "cpi-error=-Inf"}, "not a number in [0, 1]"},
		{[]string{"--faults", "cpi-error=1.01"}, "not a number in [0, 1]"},
		{[]string{"--max-delay", "-1s"}, "-max-delay"},
		{[]string{"--clients", "-1"}, "-clients"},
		{[]string{"--disks", "-2"}, "-disks"},
	} {
		var stdout, stderr bytes.Buffer
		args := append([]string{"simulate", "--seed", "1"}, tc.args...)
		if code := run(context.Background(), args, &stdout, &stderr); code != 2 {
			t.Errorf("%q exited %d, want 2 (usage error)\n%s%s", tc.args, code, stdout.String(), stderr.String())
			continue
		}
		if !strings.Contains(stderr.String(), tc.want) || stdout.Len() != 0 {
			t.Errorf("%q: stderr %q lacks %q, or something ran (stdout %q)", tc.args, stderr.String(), tc.want, stdout.String())
		}
	}
}

// Replay of a file that is empty, holds no run, or was cut short fails
// with exit status 2 and says what is wrong and where; a whole file passes.
func TestReplayRefusesEmptyAndTruncatedFiles(t *testing.T) {
	whole, err := os.ReadFile(filepath.Join("..", "..", "fixtures", "scenarios", "race-e.txt"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(whole)
	firstOutput := strings.Index(text, "\n----\n") + len("\n----\n")
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text, want string
	}{
		{"empty", "", "holds no run command (empty)"},
		{"comments", "# just a comment\n\n", "holds no run command (only comments"},
		{"cut-before-separator", text[:firstOutput-len("----\n")], `has no "----" line`},
		{"cut-after-separator", text[:firstOutput], "ends without a verdict line"},
		{"cut-inside-output", text[:strings.Index(text[firstOutput:], "\n")+firstOutput+1], "ends without a verdict line"},
	} {
		path := filepath.Join(dir, tc.name+".txt")
		if err := os.WriteFile(path, []byte(tc.text), 0o644); err != nil {
			t.Fatal(err)
		}
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), []string{"replay", path}, &stdout, &stderr); code != 2 {
			t.Errorf("%s: replay exited %d, want 2\n%s%s", tc.name, code, stdout.String(), stderr.String())
			continue
		}
		if !strings.Contains(stderr.String(), tc.want) || !strings.Contains(stderr.String(), path) {
			t.Errorf("%s: stderr %q lacks %q or the file name", tc.name, stderr.String(), tc.want)
		}
	}
	path := filepath.Join(dir, "whole.txt")
	if err := os.WriteFile(path, whole, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), []string{"replay", path}, &stdout, &stderr); code != 0 {
		t.Errorf("the whole file: replay exited %d\n%s%s", code, stdout.String(), stderr.String())
	}
}

// A sweep split into shards, each writing its JSON report, merges into one
// verdict listing every failing seed with its replay command; merge refuses
// a missing or repeated shard with exit status 2. Each shard shows its
// progress on stderr, unless --quiet.
func TestSimulateShardsAndMerge(t *testing.T) {
	dir := t.TempDir()
	var reports []string
	for k := 1; k <= 3; k++ {
		var stdout, stderr bytes.Buffer
		rep := filepath.Join(dir, fmt.Sprintf("out-%d.json", k))
		args := []string{"simulate", "--seeds", "1..7", "--shard", fmt.Sprintf("%d/3", k), "--steps", "20", "--profile", "upstream:e",
			"--keep-going", "--no-shrink", "--parallel", "1", "--json-report", rep, "--out", filepath.Join(dir, "traces")}
		if k == 3 {
			args = append(args, "--quiet")
		}
		if code := run(context.Background(), args, &stdout, &stderr); code != 1 {
			t.Fatalf("shard %d/3 exited %d, want 1 (upstream:e fails)\n%s%s", k, code, stdout.String(), stderr.String())
		}
		want := map[int]string{1: "2/2 seeds", 2: "2/2 seeds", 3: ""}[k] // blocks of 2, 2 and 3 seeds
		if k < 3 && !strings.Contains(stderr.String(), "simulate: "+want) {
			t.Errorf("shard %d/3: progress %q lacks %q", k, stderr.String(), want)
		}
		if k == 3 && stderr.Len() != 0 {
			t.Errorf("--quiet printed %q", stderr.String())
		}
		reports = append(reports, rep)
	}
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"simulate", "merge", "--json-report", filepath.Join(dir, "all.json")}, reports...), &stdout, &stderr)
	if code != 1 {
		t.Fatalf("merge exited %d, want 1\n%s%s", code, stdout.String(), stderr.String())
	}
	if !strings.HasPrefix(stdout.String(), "FAIL: 3 shards of seeds 1..7: 7 seeds run, ") {
		t.Errorf("merge verdict:\n%s", stdout.String())
	}
	all, err := simulator.ReadSweepReport(filepath.Join(dir, "all.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Failures) == 0 {
		t.Fatal("the merged report lists no failing seed")
	}
	for _, f := range all.Failures {
		if !strings.Contains(stdout.String(), "replay: "+f.Replay) || !strings.HasPrefix(f.Replay, "cpilab simulate --seed "+f.Seed+" --steps 20 --profile upstream:e") {
			t.Errorf("seed %s: replay %q not printed as such:\n%s", f.Seed, f.Replay, stdout.String())
		}
	}
	// A failing seed's replay command, run as printed, fails the same way.
	f := all.Failures[0]
	stdout.Reset()
	if code := run(context.Background(), append(strings.Fields(f.Replay)[1:], "--no-shrink", "--out", t.TempDir()), &stdout, &stderr); code != 1 ||
		!strings.Contains(stdout.String(), fmt.Sprintf("invariant %q violated", f.Invariant)) {
		t.Errorf("%s exited %d:\n%s", f.Replay, code, stdout.String())
	}
	for name, args := range map[string][]string{
		"missing":  {reports[0], reports[2]},
		"repeated": {reports[0], reports[1], reports[1], reports[2]},
		"no files": {},
		"not json": {filepath.Join(dir, "traces", "seed-1.txt")},
	} {
		stdout.Reset()
		stderr.Reset()
		if code := run(context.Background(), append([]string{"simulate", "merge"}, args...), &stdout, &stderr); code != 2 {
			t.Errorf("merge %s exited %d, want 2\n%s%s", name, code, stdout.String(), stderr.String())
		}
	}
}

func TestSimulateShardMisuse(t *testing.T) {
	for _, args := range [][]string{
		{"--seed", "1", "--shard", "1/2"},
		{"--seed", "1", "--json-report", "x.json"},
		{"--seeds", "1..10", "--shard", "0/2"},
		{"--seeds", "1..10", "--shard", "3/2"},
		{"--seeds", "1..10", "--shard", "1/11"},
		{"--seeds", "1..10", "--shard", "x"},
		{"--seeds", "1..10", "--parallel", "-1"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append([]string{"simulate"}, args...), &stdout, &stderr); code != 2 || stdout.Len() != 0 {
			t.Errorf("%q exited %d, want 2 before running anything\n%s%s", args, code, stdout.String(), stderr.String())
		}
	}
}

// The progress line: seeds done of the total, failing seeds, rate and time
// left, from the injected clock.
func TestSweepProgressLine(t *testing.T) {
	var buf bytes.Buffer
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p := newSweepProgress(&buf, 1000)
	p.now = func() time.Time { return now }
	p.began = now
	for i := range 250 {
		rep := simulator.RunReport{}
		if i%100 == 0 {
			rep.Err = errors.New("violated")
		}
		p.ran(simulator.Seed(i), rep)
	}
	now = now.Add(50 * time.Second)
	p.print(false)
	if got, want := buf.String(), "simulate: 250/1000 seeds (25.0%), 3 failing, 5.0 seeds/s, about 2m30s left\n"; got != want {
		t.Errorf("progress line %q, want %q", got, want)
	}
}

// fakeCPILab is a stand-in for the cpilab binary in the CI templates'
// scripts: it appends its arguments, one per line, then a blank line, to
// the file $CALLS, and exits 1 as a sweep with a failing seed does (which
// the scripts must not treat as an error).
const fakeCPILab = "#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done >> \"$CALLS\"\necho >> \"$CALLS\"\nexit 1\n"

// runCITemplate runs a CI template's shell script with the cpilab binary
// replaced by fakeCPILab, and returns the argument lists it was called with.
func runCITemplate(t *testing.T, script string, env ...string) [][]string {
	t.Helper()
	dir := t.TempDir()
	fake := filepath.Join(dir, "cpilab")
	if err := os.WriteFile(fake, []byte(fakeCPILab), 0o755); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(dir, "calls")
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = dir
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "CALLS=" + calls, "CPILAB=" + fake}, env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the template's script failed: %v\n%s\n%s", err, script, out)
	}
	data, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for _, block := range strings.Split(strings.TrimSpace(string(data)), "\n\n") {
		out = append(out, strings.Split(block, "\n"))
	}
	return out
}

// templateBlock returns the literal block (`key: |`) that follows the line
// holding marker in a YAML template, dedented.
func templateBlock(t *testing.T, text, marker string) string {
	t.Helper()
	i := strings.Index(text, marker)
	if i < 0 {
		t.Fatalf("template lacks %q", marker)
	}
	lines := strings.Split(text[i:], "\n")
	var block []string
	indent := -1
	for _, l := range lines[1:] {
		trimmed := strings.TrimLeft(l, " ")
		if trimmed == "" {
			break
		}
		if n := len(l) - len(trimmed); indent < 0 {
			indent = n
		} else if n < indent {
			break
		}
		block = append(block, l[indent:])
	}
	return strings.Join(block, "\n")
}

// templateValue returns the value after `key:` on the first line holding it.
func templateValue(t *testing.T, text, key string) string {
	t.Helper()
	for _, l := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), key+":"); ok {
			v, _, _ = strings.Cut(v, "#")
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	t.Fatalf("template lacks %s:", key)
	return ""
}

// sweepWithArgs runs the recorded sweep commands in process, on a small
// range, and merges their reports: the shards must cover the range exactly.
func sweepWithArgs(t *testing.T, calls [][]string, dir string) {
	t.Helper()
	var reports []string
	for _, args := range calls {
		for i, a := range args {
			if i > 0 && args[i-1] == "--json-report" {
				args[i] = filepath.Join(dir, filepath.Base(a))
				reports = append(reports, args[i])
			}
			if i > 0 && args[i-1] == "--out" {
				args[i] = filepath.Join(dir, "traces")
			}
		}
		var stdout, stderr bytes.Buffer
		if code := run(context.Background(), append(args, "--steps", "5", "--quiet"), &stdout, &stderr); code != 0 {
			t.Fatalf("cpilab %q exited %d\n%s%s", args, code, stdout.String(), stderr.String())
		}
	}
	var stdout, stderr bytes.Buffer
	if code := run(context.Background(), append([]string{"simulate", "merge"}, reports...), &stdout, &stderr); code != 0 {
		t.Fatalf("merge of the template's shards exited %d\n%s%s", code, stdout.String(), stderr.String())
	}
}

// The Kubernetes Indexed Job maps JOB_COMPLETION_INDEX 0..N-1 onto --shard
// 1/N..N/N with N = completions, one report each, and the reports merge.
func TestSweepKubernetesJobTemplate(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "ci", "sweep-k8s-job.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	if templateValue(t, text, "completionMode") != "Indexed" {
		t.Fatal("the Job is not Indexed")
	}
	n, err := strconv.Atoi(templateValue(t, text, "completions"))
	if err != nil || n < 2 {
		t.Fatalf("completions: %v", err)
	}
	shards := text[strings.Index(text, "name: SHARDS"):]
	if got := templateValue(t, shards, "value"); got != strconv.Itoa(n) {
		t.Fatalf("SHARDS %s differs from completions %d", got, n)
	}
	script := strings.ReplaceAll(templateBlock(t, text, "args:"), "/cpilab ", `"$CPILAB" `)
	script = strings.TrimPrefix(script, "- |\n")
	script = strings.ReplaceAll(script, "\n  ", "\n")
	script = strings.TrimPrefix(script, "  ")
	var calls [][]string
	for i := range n {
		c := runCITemplate(t, script, "JOB_COMPLETION_INDEX="+strconv.Itoa(i), fmt.Sprintf("SEEDS=1..%d", 2*n),
			"SHARDS="+strconv.Itoa(n), "FAULTS=none")
		if len(c) != 1 || !slices.Contains(c[0], fmt.Sprintf("%d/%d", i+1, n)) {
			t.Fatalf("index %d ran %q, want --shard %d/%d", i, c, i+1, n)
		}
		calls = append(calls, c...)
	}
	sweepWithArgs(t, calls, t.TempDir())
}

// The GitHub Actions matrix lists shards 1..N with N = SHARDS, and each
// matrix job's command runs its shard; the reports merge.
func TestSweepGitHubActionsTemplate(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "ci", "sweep-github-actions.yml"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	n, err := strconv.Atoi(templateValue(t, text, "SHARDS"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for k := 1; k <= n; k++ {
		want = append(want, strconv.Itoa(k))
	}
	if got := templateValue(t, text[strings.Index(text, "matrix:"):], "shard"); got != "["+strings.Join(want, ", ")+"]" {
		t.Fatalf("matrix shard %s, want 1..%d", got, n)
	}
	step := text[strings.Index(text, "- name: Sweep shard"):]
	script := strings.ReplaceAll(templateBlock(t, step, "run: |"), "bin/cpilab ", `"$CPILAB" `)
	var calls [][]string
	for k := 1; k <= n; k++ {
		c := runCITemplate(t, strings.ReplaceAll(script, "${{ matrix.shard }}", strconv.Itoa(k)),
			fmt.Sprintf("SEEDS=1..%d", 2*n), "SHARDS="+strconv.Itoa(n), "FAULTS=none")
		if len(c) != 1 || !slices.Contains(c[0], fmt.Sprintf("%d/%d", k, n)) {
			t.Fatalf("matrix shard %d ran %q", k, c)
		}
		calls = append(calls, c...)
	}
	sweepWithArgs(t, calls, t.TempDir())
	if !strings.Contains(text, "bin/cpilab simulate merge --json-report sweep.json out-*.json") {
		t.Error("the merge job does not merge the shards' reports")
	}
}

// An interrupted sweep still writes its report, marked incomplete, and
// exits 1: it did not show that every seed passes.
func TestInterruptedSweepReportsIncomplete(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rep := filepath.Join(t.TempDir(), "out.json")
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"simulate", "--seeds", "1..50", "--shard", "2/2", "--json-report", rep, "--quiet"}, &stdout, &stderr); code != 1 {
		t.Fatalf("interrupted sweep exited %d\n%s%s", code, stdout.String(), stderr.String())
	}
	r, err := simulator.ReadSweepReport(rep)
	if err != nil {
		t.Fatal(err)
	}
	if r.Verdict != simulator.VerdictIncomplete || r.Complete || r.Shards[0].Seeds.From != "26" || r.Shards[0].Seeds.To != "50" {
		t.Fatalf("report of an interrupted sweep: %+v", r)
	}
}

// The replay lines simulate prints and the ones simulate merge prints run
// as printed, pasted into a shell in another directory: they start with
// the cpilab that ran (not a bare "cpilab", which need not be on PATH)
// and fail the same way.
func TestSimulatePrintedCommandsRunAsPrinted(t *testing.T) {
	cpilab := filepath.Join(buildCPIs(t), "cpilab")
	dir := t.TempDir()
	sim := exec.Command(cpilab, "simulate", "--seed", "7", "--steps", "200", "--profile", "upstream", "--faults", "none", "--out", "traces")
	sim.Dir = dir
	if err := os.Mkdir(filepath.Join(dir, "traces"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errs := runCmd(t, sim)
	replay, minimized := printedAfter(out, "replay: "), printedAfter(out, "replay minimized: ")
	violated, _, _ := strings.Cut(out[strings.Index(out, "invariant "):], " violated")
	if code != 1 || len(replay) != 1 || len(minimized) != 1 || !strings.HasPrefix(replay[0], cpilab+" simulate ") {
		t.Fatalf("simulate: exit %d, replay lines %q and %q; want 1, each starting with %s:\n%s\n%s", code, replay, minimized, cpilab, out, errs)
	}
	code, again, errs := runPrinted(t, replay[0], "--no-shrink", "--out", t.TempDir())
	if code != 1 || !strings.Contains(again, violated+" violated") {
		t.Errorf("%s: exit %d, want 1 and %s violated:\n%s\n%s", replay[0], code, violated, again, errs)
	}
	// The minimized trace's path is relative to where simulate ran.
	sh := exec.Command("sh", "-c", minimized[0])
	sh.Dir = dir
	name := strings.Trim(strings.TrimPrefix(violated, "invariant "), `"`)
	if code, again, errs := runCmd(t, sh); code != 0 || !strings.Contains(again, "violated: "+name) {
		t.Errorf("%s: exit %d, want 0 and %s violated again:\n%s\n%s", minimized[0], code, violated, again, errs)
	}

	var reports []string
	for k := 1; k <= 2; k++ {
		rep := filepath.Join(dir, fmt.Sprintf("out-%d.json", k))
		shard := exec.Command(cpilab, "simulate", "--seeds", "1..4", "--shard", fmt.Sprintf("%d/2", k), "--steps", "20", "--profile", "upstream:e",
			"--keep-going", "--no-shrink", "--parallel", "1", "--quiet", "--json-report", rep, "--out", filepath.Join(dir, "traces"))
		if code, out, errs := runCmd(t, shard); code != 1 {
			t.Fatalf("shard %d/2: exit %d, want 1:\n%s\n%s", k, code, out, errs)
		}
		reports = append(reports, rep)
	}
	code, out, errs = runCmd(t, exec.Command(cpilab, append([]string{"simulate", "merge"}, reports...)...))
	replay = printedAfter(out, "replay: ")
	if code != 1 || len(replay) == 0 || !strings.HasPrefix(replay[0], cpilab+" simulate ") {
		t.Fatalf("merge: exit %d, replay lines %q; want 1 and lines starting with %s:\n%s\n%s", code, replay, cpilab, out, errs)
	}
	if code, again, errs := runPrinted(t, replay[0], "--no-shrink", "--out", t.TempDir()); code != 1 || !strings.Contains(again, "violated") {
		t.Errorf("%s: exit %d, want 1 and a violation:\n%s\n%s", replay[0], code, again, errs)
	}
}

// printedAfter returns what follows prefix on each line of out that has it.
func printedAfter(out, prefix string) []string {
	var got []string
	for _, l := range strings.Split(out, "\n") {
		if c, ok := strings.CutPrefix(strings.TrimSpace(l), prefix); ok {
			got = append(got, c)
		}
	}
	return got
}
