package adversarial

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cpilab/cpilab/fixtures"
)

// Scale names how many inputs each area tries.
type Scale string

// The scales. ScaleFull is the campaign `cpilab adversarial` runs (≥ 750
// inputs); ScaleTest the slice the package's test runs; ScaleShort the
// slice of `go test -short`.
const (
	ScaleShort Scale = "short"
	ScaleTest  Scale = "test"
	ScaleFull  Scale = "full"
)

// inputsPerArea is the number of generated inputs per area and scale (an
// area adds its fixed inputs, e.g. every hostile name, on top at full
// scale).
var inputsPerArea = map[Scale]map[string]int{
	ScaleShort: {AreaDirector: 24, AreaFakeIaaS: 40, AreaSFTP: 25, AreaAgent: 20, AreaCPI: 10, AreaPeers: 25, AreaCLI: 20},
	ScaleTest:  {AreaDirector: 80, AreaFakeIaaS: 80, AreaSFTP: 50, AreaAgent: 40, AreaCPI: 18, AreaPeers: 50, AreaCLI: 40},
	ScaleFull:  {AreaDirector: 260, AreaFakeIaaS: 220, AreaSFTP: 140, AreaAgent: 100, AreaCPI: 60, AreaPeers: 150, AreaCLI: 90},
}

// The areas, in the order the campaign runs them.
const (
	AreaDirector = "director-api"
	AreaFakeIaaS = "fakeiaas-api"
	AreaSFTP     = "sftp"
	AreaAgent    = "agent"
	AreaCPI      = "cpi-runner"
	AreaPeers    = "peers"
	AreaCLI      = "cli"
)

// Areas lists every area.
var Areas = []string{AreaDirector, AreaFakeIaaS, AreaSFTP, AreaAgent, AreaCPI, AreaPeers, AreaCLI}

// CLIFunc runs cpilab's command line in process, as main does: it returns
// the exit status. cmd/cpilab supplies it.
type CLIFunc func(ctx context.Context, args []string, stdout, stderr io.Writer) int

// Config configures Run. Every field has a default.
type Config struct {
	// Seed is the root seed; each area draws from its own stream derived
	// from it. Default 1.
	Seed int64
	// Scale is how many inputs each area tries. Default ScaleTest.
	Scale Scale
	// Inputs, when > 0, overrides the scale's count of generated inputs
	// per area (fixed set-up inputs such as restarts still run).
	Inputs int
	// Areas selects areas (default: all of Areas; AreaCLI only when CLI is
	// set). An unknown name is an error.
	Areas []string
	// WorkDir is where every area keeps its data dirs, VM roots, scripts
	// and the watched sentinel tree; it is removed at the end. Default: a
	// new directory under os.TempDir().
	WorkDir string
	// FixturesDir holds cpilab's fixtures (director/, scenarios/).
	// Default: the fixtures directory of the source tree containing the
	// working directory.
	FixturesDir string
	// CLI runs cpilab's command line (AreaCLI). Nil: AreaCLI is refused
	// when asked for and left out otherwise.
	CLI CLIFunc
	// Plant plants faults that the oracles must count (tests only).
	Plant []Plant
	// Progress, when set, receives one line per area as it ends.
	Progress io.Writer
}

// Plant is a deliberate fault in one area, to show that an oracle counts
// it: a panicking handler (OracleCrash), an acknowledged disk's data
// overwritten (OracleDataLost), a goroutine or a process left running
// (OracleLeak), a writer that follows a link out of a VM root
// (OracleEscape).
type Plant struct {
	Area   string
	Oracle Oracle
}

// ErrUnknownArea is an Areas entry Run does not know; ErrUnknownScale a
// Scale it does not know.
var (
	ErrUnknownArea  = errors.New("unknown area")
	ErrUnknownScale = errors.New("unknown scale")
)

// areaFunc runs one area's inputs; it returns an error only when the
// campaign itself could not run (a fixture missing, a server that would
// not start), never for a finding.
type areaFunc func(ctx context.Context, e *env, t *tally, n int) error

var areaFuncs = map[string]areaFunc{
	AreaDirector: runDirector,
	AreaFakeIaaS: runFakeIaaS,
	AreaSFTP:     runSFTP,
	AreaAgent:    runAgent,
	AreaCPI:      runCPI,
	AreaPeers:    runPeers,
	AreaCLI:      runCLI,
}

// env is what an area works with.
type env struct {
	cfg     Config
	area    string
	rng     *rand.Rand
	dir     string // the area's scratch dir (under WorkDir)
	outside string // the watched sentinel tree (under WorkDir)
	marker  string // NAME=VALUE in the environment of every process started
	planted map[Oracle]bool
	// release ends what a plant left running, after the leak check.
	release []func()
}

// Run runs the campaign and returns its report. The error is for a
// campaign that could not run; findings are in the report.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	start := time.Now()
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.Scale == "" {
		cfg.Scale = ScaleTest
	}
	counts, ok := inputsPerArea[cfg.Scale]
	if !ok {
		return nil, fmt.Errorf("adversarial: scale %q: %w (want short, test or full)", cfg.Scale, ErrUnknownScale)
	}
	areas := cfg.Areas
	if len(areas) == 0 {
		for _, a := range Areas {
			if a != AreaCLI || cfg.CLI != nil {
				areas = append(areas, a)
			}
		}
	}
	for _, a := range areas {
		if _, ok := areaFuncs[a]; !ok {
			return nil, fmt.Errorf("adversarial: area %q: %w (want one of %s)", a, ErrUnknownArea, strings.Join(Areas, ", "))
		}
		if a == AreaCLI && cfg.CLI == nil {
			return nil, errors.New("adversarial: area cli needs Config.CLI")
		}
	}
	own := false
	if cfg.WorkDir == "" {
		d, err := os.MkdirTemp("", "cpilab-adversarial-")
		if err != nil {
			return nil, fmt.Errorf("adversarial: %w", err)
		}
		cfg.WorkDir, own = d, true
	}
	if own {
		defer os.RemoveAll(cfg.WorkDir)
	}
	if cfg.FixturesDir == "" {
		d, err := findFixtures()
		if err != nil {
			// No source tree around: the fixtures built into cpilab.
			d = filepath.Join(cfg.WorkDir, "fixtures")
			if err := fixtures.WriteTo(d); err != nil {
				return nil, fmt.Errorf("adversarial: the built-in fixtures: %w", err)
			}
		}
		cfg.FixturesDir = d
	}
	outside := filepath.Join(cfg.WorkDir, "outside")
	if err := makeSentinel(outside); err != nil {
		return nil, err
	}
	var mark [8]byte
	seedRNG := rand.New(rand.NewPCG(uint64(cfg.Seed), 0x5eed))
	for i := range mark {
		mark[i] = byte(seedRNG.Uint32())
	}
	marker := "CPILAB_ADVERSARIAL=" + hex.EncodeToString(mark[:]) + strconv.Itoa(os.Getpid())
	rep := &Report{Seed: cfg.Seed, Scale: string(cfg.Scale),
		Replay: fmt.Sprintf("cpilab adversarial --seed %d --scale %s --areas %s", cfg.Seed, cfg.Scale, strings.Join(areas, ","))}
	for i, a := range areas {
		if err := ctx.Err(); err != nil {
			return rep, err
		}
		e := &env{cfg: cfg, area: a, outside: outside, marker: marker, planted: map[Oracle]bool{},
			rng: rand.New(rand.NewPCG(uint64(cfg.Seed), uint64(i+1)*0x9e3779b97f4a7c15)),
			dir: filepath.Join(cfg.WorkDir, a)}
		for _, p := range cfg.Plant {
			if p.Area == a {
				e.planted[p.Oracle] = true
			}
		}
		if err := os.MkdirAll(e.dir, 0o755); err != nil {
			return rep, fmt.Errorf("adversarial: %w", err)
		}
		t := newTally(a)
		n := counts[a]
		if cfg.Inputs > 0 {
			n = cfg.Inputs
		}
		if err := e.runArea(ctx, areaFuncs[a], t, n); err != nil {
			return rep, fmt.Errorf("adversarial: area %s: %w", a, err)
		}
		rep.Rows = append(rep.Rows, t.row)
		if cfg.Progress != nil {
			r := t.row
			fmt.Fprintf(cfg.Progress, "%s: %d inputs, %d crashes, %d data lost, %d leaks, %d escapes, %d/%d clear errors (%.1f s)\n",
				a, r.Tried, r.Crashes, r.DataLost, r.Leaks, r.Escapes, r.ClearErrors, r.ErrorsExpected, r.Seconds)
		}
	}
	rep.sum()
	rep.Seconds = time.Since(start).Seconds()
	return rep, nil
}

// runArea runs one area between the resource checks every area gets: no
// goroutine, descriptor or marked process more after than before, nothing
// left in the area's scratch dir, the sentinel tree unchanged.
func (e *env) runArea(ctx context.Context, fn areaFunc, t *tally, n int) error {
	start := time.Now()
	beforeOutside, err := hashTree(e.outside, "")
	if err != nil {
		return err
	}
	_, pwnedErr := os.Lstat(pwned)
	g0, fd0 := runtime.NumGoroutine(), countFDs()
	err = fn(ctx, e, t, n)
	if err != nil {
		return err
	}
	if g, fd := settle(g0, fd0); g > g0 || fd > fd0 {
		t.add(OracleLeak, "the whole area", "%d goroutines and %d open descriptors after the area's servers closed, %d and %d before; goroutines by creator: %s",
			g, fd, g0, fd0, goroutineCreators())
	}
	if pids := e.markedProcesses(); len(pids) > 0 {
		t.add(OracleLeak, "the whole area", "processes still running after the area: %v", pids)
		e.kill(pids)
	}
	if left := leftovers(e.dir); len(left) > 0 {
		t.add(OracleLeak, "the whole area", "files left in the area's temporary directory after every server closed: %s", strings.Join(left, ", "))
	}
	if after, err := hashTree(e.outside, ""); err != nil || after != beforeOutside {
		t.add(OracleEscape, "the whole area", "the sentinel tree outside every VM root and data dir changed: %v", diffLines(beforeOutside, after))
	}
	if _, err := os.Lstat(pwned); err == nil && pwnedErr != nil {
		t.add(OracleEscape, "the whole area", "%s appeared: a hostile name reached a shell", pwned)
	}
	for _, r := range e.release {
		r()
	}
	_ = os.RemoveAll(e.dir)
	t.row.Seconds = time.Since(start).Seconds()
	return nil
}

// pwned is what the hostile name "$(touch /tmp/pwned)" creates if any
// component hands it to a shell.
const pwned = "/tmp/pwned"

// settle waits up to 3 s for goroutines and descriptors to come back to
// their counts before (servers close asynchronously) and returns the last
// counts.
func settle(g0, fd0 int) (int, int) {
	deadline := time.Now().Add(3 * time.Second)
	for {
		g, fd := runtime.NumGoroutine(), countFDs()
		if (g <= g0 && fd <= fd0) || time.Now().After(deadline) {
			return g, fd
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// countFDs counts this process's open descriptors (0 where /proc is
// missing: the check is then vacuous).
func countFDs() int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0
	}
	return len(ents)
}

// markedProcesses lists the processes whose environment holds the
// campaign's marker: every process an area starts carries it, and so do
// their children.
func (e *env) markedProcesses() []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, d := range ents {
		pid, err := strconv.Atoi(d.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", d.Name(), "environ"))
		if err != nil {
			continue
		}
		if slices.Contains(strings.Split(string(b), "\x00"), e.marker) {
			if st, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat")); err == nil && isZombie(st) {
				continue
			}
			out = append(out, pid)
		}
	}
	return out
}

func isZombie(stat []byte) bool {
	i := strings.LastIndexByte(string(stat), ')')
	return i > 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

// kill ends processes this campaign started (found by its marker).
func (e *env) kill(pids []int) {
	for _, p := range pids {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
}

// awaitNoMarked waits up to d for marked processes to end and returns
// those still running.
func (e *env) awaitNoMarked(d time.Duration) []int {
	deadline := time.Now().Add(d)
	for {
		p := e.markedProcesses()
		if len(p) == 0 || time.Now().After(deadline) {
			return p
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leftovers lists what is left under dir (relative paths).
func leftovers(dir string) []string {
	var out []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		out = append(out, rel)
		if d.IsDir() {
			return filepath.SkipDir
		}
		return nil
	})
	return out
}

// sentinelFiles are planted outside every root: named like what an
// attacker would aim at.
var sentinelFiles = map[string]string{
	"file":                  "keep me",
	"dir/file":              "keep me too",
	"settings.json.tmp":     "not the agent's",
	"settings.json":         "not the agent's either",
	"dynamic_disks/victim":  "a file in a directory named like the agent's",
	"disk-victim-0000.img":  "a file named like a backing file",
	"scripts/hello.sh":      "#!/bin/sh\necho hello\n",
	"vms/vm-victim/root/x":  "a VM root that is not the one under attack",
	"etc/passwd":            "root:x:0:0::/root:/bin/sh\n",
	"var/vcap/bosh/keep.me": "deep",
}

func makeSentinel(dir string) error {
	for p, content := range sentinelFiles {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			return fmt.Errorf("adversarial: sentinel: %w", err)
		}
		if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
			return fmt.Errorf("adversarial: sentinel: %w", err)
		}
	}
	return nil
}

// hashTree describes every name under dir (but skip, when set, and what
// is under it): path, type, mode, and a hash of contents or link target.
// Two equal descriptions mean nothing was created, removed or changed.
func hashTree(dir, skip string) (string, error) {
	var lines []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if skip != "" && p == skip {
			return filepath.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return nil
		}
		line := fmt.Sprintf("%s %v", strings.TrimPrefix(p, dir), fi.Mode())
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			line += " -> " + target
		case fi.Mode().IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return nil
			}
			h := sha256.New()
			_, _ = io.Copy(h, io.LimitReader(f, 1<<20))
			_ = f.Close()
			line += fmt.Sprintf(" %d %x", fi.Size(), h.Sum(nil)[:8])
		}
		lines = append(lines, line)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("adversarial: watch %s: %w", dir, err)
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n"), nil
}

// diffLines says which lines of two tree descriptions differ.
func diffLines(a, b string) string {
	as, bs := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out []string
	for _, l := range bs {
		if !slices.Contains(as, l) {
			out = append(out, "+"+l)
		}
	}
	for _, l := range as {
		if !slices.Contains(bs, l) {
			out = append(out, "-"+l)
		}
	}
	return strings.Join(out, "; ")
}

// findFixtures looks for fixtures/director from the working directory up.
func findFixtures() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("adversarial: %w", err)
	}
	for {
		p := filepath.Join(dir, "fixtures")
		if fi, err := os.Stat(filepath.Join(p, "director", "manifest.yml")); err == nil && fi.Mode().IsRegular() {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("adversarial: no fixtures/director/manifest.yml in the working directory or above it (give --fixtures DIR)")
		}
		dir = parent
	}
}

// pick returns a random element.
func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// checkOutside records an escape when the sentinel tree no longer matches
// before, and returns the new description so that one escape is counted
// once.
func (e *env) checkOutside(t *tally, input, before string) string {
	after, err := hashTree(e.outside, "")
	if err != nil {
		t.add(OracleEscape, input, "the sentinel tree could not be read: %v", err)
		return before
	}
	if after != before {
		t.add(OracleEscape, input, "the sentinel tree outside the root changed: %s", diffLines(before, after))
	}
	return after
}

// goroutineCreators summarizes the running goroutines by the function
// that created them (for a leak's finding).
func goroutineCreators() string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	counts := map[string]int{}
	for _, l := range strings.Split(string(buf), "\n") {
		if c, ok := strings.CutPrefix(l, "created by "); ok {
			if i := strings.Index(c, " in goroutine"); i > 0 {
				c = c[:i]
			}
			counts[c]++
		}
	}
	var out []string
	for c, n := range counts {
		out = append(out, fmt.Sprintf("%s ×%d", c, n))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// openFDs lists where this process's open descriptors point (for a leak's
// finding).
func openFDs() string {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return ""
	}
	counts := map[string]int{}
	for _, d := range ents {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", d.Name()))
		if err == nil {
			counts[target]++
		}
	}
	var out []string
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%s ×%d", k, n))
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// oversizedMetadata is a metadata hash one past one of a server's bounds,
// drawn by r: one entry too many, one key too long or one value too long.
func oversizedMetadata(r *rand.Rand, maxEntries, maxKey, maxValue int) map[string]string {
	meta := map[string]string{}
	switch r.IntN(3) {
	case 0:
		for k := range maxEntries + 1 {
			meta[fmt.Sprint("k", k)] = "v"
		}
	case 1:
		meta[strings.Repeat("k", maxKey+1)] = "v"
	default:
		meta["k"] = strings.Repeat("v", maxValue+1)
	}
	return meta
}
