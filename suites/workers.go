package suites

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/onsi/ginkgo/v2/reporters"
	"github.com/onsi/ginkgo/v2/types"
)

// Worker processes. Ginkgo runs the specs of one process one after the
// other, so Run spreads independent containers (contract contexts and
// reference-table rows, each with its own resources) over several
// processes, as `ginkgo -p` does: this process runs one share itself and
// starts the others by running the same program again with the same
// arguments, plus an environment variable naming the share. Each worker
// builds its own Config (the cpilab CLI: its own embedded cloud), runs its
// share with the same label filter and focus, streams each finished spec
// back for the progress line, and writes its report; Run merges the
// reports. Verdicts do not depend on the split: no container shares
// anything with another.
const (
	// WorkersEnv, when set to a positive number, is the default worker
	// count of Run (RunOptions.Workers still wins); 1 runs everything in
	// one process.
	WorkersEnv = "CPILAB_SUITES_WORKERS"
	// workerEnv names a worker's share: "<index>/<count>/<report file>".
	workerEnv = "CPILAB_SUITES_WORKER"
	// shareEnv lists the rows (container "row:" labels) of the share.
	shareEnv = "CPILAB_SUITES_SHARE"
	// cpiTmpEnv names the TMPDIR a worker gives the CPI processes it runs.
	cpiTmpEnv = "CPILAB_SUITES_CPI_TMPDIR"
)

// Each worker is a Director of its own cloud, and a Director's CPI
// processes share its host's temporary directory: a CPI that keeps a cache
// or a counter in TMPDIR sees the calls made on its own cloud only, as it
// would on one Director, whatever the split. So a worker gives its CPI
// processes a TMPDIR of their own (cpiTmpEnv); the first share, run by
// the starting process, keeps the caller's.
func cpiEnv() []string {
	dir := os.Getenv(cpiTmpEnv)
	if dir == "" {
		return nil // cpiv2.ScrubbedEnv(nil)
	}
	env := slices.DeleteFunc(cpiv2.ScrubbedEnv(nil), func(kv string) bool { return strings.HasPrefix(kv, "TMPDIR=") })
	return append(env, "TMPDIR="+dir)
}

// workerCount is how many processes a run uses: opts.Workers, else
// $CPILAB_SUITES_WORKERS, else NumCPU + 1 (a CPI call waits on its process
// and the IaaS about half the time), at most one per contract context; and
// 1 inside a test binary (which cannot be run again as a certify command).
func (opts RunOptions) workerCount(cfg Config) int {
	if opts.Workers > 0 {
		return opts.Workers
	}
	if testing.Testing() || opts.DryRun {
		return 1
	}
	if n, err := strconv.Atoi(os.Getenv(WorkersEnv)); err == nil && n > 0 {
		return n
	}
	return max(1, min(len(cfg.Contexts), runtime.NumCPU()+1))
}

// weight estimates a container's run time, for a fair split.
func shareWeights(cfg Config) (names []string, weights []int) {
	for _, c := range cfg.Contexts {
		w := 5
		if c.Thorough {
			w = 9
		}
		names, weights = append(names, c.Name), append(weights, w)
	}
	for _, r := range cfg.Rows {
		w := 1
		if r.Refused || r.FailsClearly {
			w = 0
		}
		names, weights = append(names, r.Name), append(weights, w)
	}
	if !cfg.Explore.Off {
		names, weights = append(names, ExploreRow), append(weights, 4)
	}
	return names, weights
}

// shares splits the containers over n processes: heaviest first, each to
// the lightest share so far.
func shares(cfg Config, n int) [][]string {
	names, weights := shareWeights(cfg)
	order := make([]int, len(names))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return weights[b] - weights[a] })
	out := make([][]string, n)
	load := make([]int, n)
	for _, i := range order {
		j := slices.Index(load, slices.Min(load))
		out[j] = append(out[j], names[i])
		load[j] += weights[i] + 1
	}
	return out
}

// shareFilter is a label filter selecting the containers of one share
// within the user's filter.
func shareFilter(user string, rows []string) string {
	if len(rows) == 0 {
		return "cpilab-empty-share"
	}
	terms := make([]string, len(rows))
	for i, r := range rows {
		terms[i] = "row:" + r
	}
	f := "(" + strings.Join(terms, " || ") + ")"
	if strings.TrimSpace(user) != "" {
		f = "(" + user + ") && " + f
	}
	return f
}

// progressEvent is one line a worker streams to Run: first its total, then
// each finished spec.
type progressEvent struct {
	Total int               `json:"total,omitempty"`
	Spec  *types.SpecReport `json:"spec,omitempty"`
}

// progressHub merges the progress of every process into opts.Progress:
// the start once every process has said how many specs it runs, then each
// finished spec with a run-wide count.
type progressHub struct {
	mu      sync.Mutex
	out     func(done, total int, sr *types.SpecReport)
	n       int
	totals  map[int]int
	started bool
	done    int
	pending []types.SpecReport
}

func (h *progressHub) total(worker, t int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.totals[worker] = t
	if len(h.totals) == h.n {
		h.startLocked()
	}
}

func (h *progressHub) startLocked() {
	if h.started {
		return
	}
	h.started = true
	if h.out != nil {
		h.out(0, h.sumLocked(), nil)
	}
	for _, sr := range h.pending {
		h.specLocked(sr)
	}
	h.pending = nil
}

func (h *progressHub) sumLocked() int {
	s := 0
	for _, t := range h.totals {
		s += t
	}
	return s
}

func (h *progressHub) spec(sr types.SpecReport) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started {
		h.pending = append(h.pending, sr)
		return
	}
	h.specLocked(sr)
}

func (h *progressHub) specLocked(sr types.SpecReport) {
	h.done++
	if h.out != nil {
		h.out(h.done, h.sumLocked(), &sr)
	}
}

// runShared runs the suites over n processes and merges their reports.
func runShared(cfg Config, opts RunOptions, n int) (types.Report, error) {
	parts := shares(cfg.withDefaults(), n)
	exe, err := os.Executable()
	if err != nil {
		return types.Report{}, fmt.Errorf("suites: starting workers: %w", err)
	}
	dir, err := os.MkdirTemp("", "cpilab-workers-")
	if err != nil {
		return types.Report{}, fmt.Errorf("suites: starting workers: %w", err)
	}
	defer os.RemoveAll(dir)
	hub := &progressHub{out: opts.Progress, n: n, totals: map[int]int{}}

	type worker struct {
		cmd    *exec.Cmd
		report string
		stderr *tailWriter
		events *os.File
		read   sync.WaitGroup
	}
	var workers []*worker
	var procsMu sync.Mutex // guards procs: the workers started so far
	var procs []*os.Process
	defer forwardInterrupts(func() []*os.Process {
		procsMu.Lock()
		defer procsMu.Unlock()
		return slices.Clone(procs)
	})()
	for i := 1; i < n; i++ {
		w := &worker{report: filepath.Join(dir, fmt.Sprintf("worker-%d.json", i)), stderr: &tailWriter{max: 4096}}
		pr, pw, err := os.Pipe()
		if err != nil {
			return types.Report{}, fmt.Errorf("suites: starting workers: %w", err)
		}
		cpiTmp := filepath.Join(dir, fmt.Sprintf("worker-%d-tmp", i))
		if err := os.Mkdir(cpiTmp, 0o700); err != nil {
			return types.Report{}, fmt.Errorf("suites: starting workers: %w", err)
		}
		w.cmd = exec.Command(exe, os.Args[1:]...)
		w.cmd.Env = append(os.Environ(),
			fmt.Sprintf("%s=%d/%d/%s", workerEnv, i, n, w.report),
			shareEnv+"="+strings.Join(parts[i], ","),
			cpiTmpEnv+"="+cpiTmp)
		w.cmd.Stdout, w.cmd.Stderr = io.Discard, w.stderr
		w.cmd.ExtraFiles = []*os.File{pw}
		startWorkerGroup(w.cmd)
		if err := w.cmd.Start(); err != nil {
			pr.Close()
			pw.Close()
			return types.Report{}, fmt.Errorf("suites: starting worker %d: %w", i, err)
		}
		procsMu.Lock()
		procs = append(procs, w.cmd.Process)
		procsMu.Unlock()
		pw.Close()
		w.events = pr
		w.read.Add(1)
		go func(i int) {
			defer w.read.Done()
			defer pr.Close()
			sc := bufio.NewScanner(pr)
			sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
			for sc.Scan() {
				var ev progressEvent
				if json.Unmarshal(sc.Bytes(), &ev) != nil {
					continue
				}
				if ev.Spec != nil {
					hub.spec(*ev.Spec)
				} else {
					hub.total(i, ev.Total)
				}
			}
		}(i)
		workers = append(workers, w)
	}

	own := opts
	own.LabelFilter = shareFilter(opts.LabelFilter, parts[0])
	own.JSONReport, own.JUnitReport = "", ""
	own.Progress = func(done, total int, sr *types.SpecReport) {
		if sr == nil {
			hub.total(0, total)
			return
		}
		hub.spec(*sr)
	}
	start := time.Now()
	merged, runErr := runTree(cfg, own)

	var errs []error
	if runErr != nil {
		errs = append(errs, runErr)
	}
	for i, w := range workers {
		werr := w.cmd.Wait()
		w.read.Wait()
		b, err := os.ReadFile(w.report)
		if err != nil {
			errs = append(errs, fmt.Errorf("suites: worker %d wrote no report (%v): %s", i+1, werr, w.stderr.String()))
			continue
		}
		var r types.Report
		if err := json.Unmarshal(b, &r); err != nil {
			errs = append(errs, fmt.Errorf("suites: worker %d's report: %w", i+1, err))
			continue
		}
		merged = mergeReports(merged, r)
	}
	hub.mu.Lock()
	hub.startLocked()
	hub.mu.Unlock()
	merged.RunTime = time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return merged, err
	}
	if opts.JSONReport != "" {
		if err := reporters.GenerateJSONReport(merged, opts.JSONReport); err != nil {
			return merged, fmt.Errorf("suites: writing %s: %w", opts.JSONReport, err)
		}
	}
	if opts.JUnitReport != "" {
		if err := reporters.GenerateJUnitReport(merged, opts.JUnitReport); err != nil {
			return merged, fmt.Errorf("suites: writing %s: %w", opts.JUnitReport, err)
		}
	}
	return merged, nil
}

// mergeReports adds the specs and counts of r to into.
func mergeReports(into, r types.Report) types.Report {
	if into.SuiteDescription == "" {
		into = r
		return into
	}
	into.SuiteSucceeded = into.SuiteSucceeded && r.SuiteSucceeded
	into.SpecialSuiteFailureReasons = append(into.SpecialSuiteFailureReasons, r.SpecialSuiteFailureReasons...)
	// Every worker registers the whole tree and runs its share through a
	// label filter: the tree's size is each one's, not their sum.
	into.PreRunStats.TotalSpecs = max(into.PreRunStats.TotalSpecs, r.PreRunStats.TotalSpecs)
	into.PreRunStats.SpecsThatWillRun += r.PreRunStats.SpecsThatWillRun
	into.SpecReports = append(into.SpecReports, r.SpecReports...)
	return into
}

// worker is this process's share when it runs as a worker ("" when not).
func workerShare() (index int, report string, rows []string, ok bool) {
	v := os.Getenv(workerEnv)
	if v == "" {
		return 0, "", nil, false
	}
	parts := strings.SplitN(v, "/", 3)
	if len(parts) != 3 {
		return 0, "", nil, false
	}
	index, err := strconv.Atoi(parts[0])
	if err != nil {
		return 0, "", nil, false
	}
	if s := os.Getenv(shareEnv); s != "" {
		rows = strings.Split(s, ",")
	}
	return index, parts[2], rows, true
}

// runWorker runs this process's share and writes its report for the
// process that started it; the report is also returned, as Run returns it.
func runWorker(cfg Config, opts RunOptions, report string, rows []string) (types.Report, error) {
	events := os.NewFile(3, "cpilab-progress")
	var mu sync.Mutex
	enc := json.NewEncoder(events)
	send := func(ev progressEvent) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev)
	}
	defer interruptWhenOrphaned()()
	opts.LabelFilter = shareFilter(opts.LabelFilter, rows)
	opts.JSONReport, opts.JUnitReport = "", ""
	opts.Verbose = false
	opts.Progress = func(done, total int, sr *types.SpecReport) {
		if sr == nil {
			send(progressEvent{Total: total})
			return
		}
		send(progressEvent{Spec: sr})
	}
	r, err := runTree(cfg, opts)
	if events != nil {
		events.Close()
	}
	if err != nil {
		return r, err
	}
	b, err := json.Marshal(r)
	if err != nil {
		return r, fmt.Errorf("suites: worker report: %w", err)
	}
	if err := os.WriteFile(report, b, 0o600); err != nil {
		return r, fmt.Errorf("suites: worker report: %w", err)
	}
	return r, nil
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
