package main

import (
	"bufio"
	"bytes"
	"context"
	"image"
	"image/png"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cpilab/cpilab/suites"
	"go.yaml.in/yaml/v3"
)

// These tests drive the cpilab binary as a user or a CI job does.

// TestCtrlCEndsCertifyAsInterrupted interrupts a running default certify
// the three ways a user or a CI runner does: Ctrl-C at a terminal (SIGINT
// to the whole foreground process group), SIGINT to the cpilab process
// alone (kill -INT), and SIGTERM to it alone (a CI runner's time-out). Each
// must end as INTERRUPTED with exit status 2 (never as a CPI failure),
// after cleaning up what the specs created in the cloud, with no worker
// process left running and nothing left in its TMPDIR (the testbed's
// directory included).
func TestCtrlCEndsCertifyAsInterrupted(t *testing.T) {
	dir := buildCPIs(t)
	for _, tc := range []struct {
		name  string
		group bool
		sig   syscall.Signal
	}{
		{"ctrl-c to the process group", true, syscall.SIGINT},
		{"SIGINT to cpilab alone", false, syscall.SIGINT},
		{"SIGTERM to cpilab alone", false, syscall.SIGTERM},
	} {
		t.Run(tc.name, func(t *testing.T) {
			interruptCertify(t, dir, tc.group, tc.sig)
		})
	}
}

// waitForCloudObjects waits until a fakeiaas data dir under tmp holds a VM
// and a disk (vms/<cid> and disks/<cid>.img), polling the file system.
func waitForCloudObjects(tmp string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		vms, disks := false, false
		_ = filepath.WalkDir(tmp, func(p string, d os.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			switch filepath.Base(filepath.Dir(p)) {
			case "vms":
				vms = vms || d.IsDir()
			case "disks":
				disks = disks || strings.HasSuffix(p, ".img")
			}
			return nil
		})
		if vms && disks {
			return true
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

func interruptCertify(t *testing.T, dir string, group bool, sig syscall.Signal) {
	tmp := t.TempDir()
	cmd := certifyCmd(t, dir, tmp, "--json-report", filepath.Join(t.TempDir(), "r.json"))
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	errPipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a process group of its own, as a shell's job
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	started := make(chan struct{})
	copied := make(chan struct{})
	go func() { // the test's reader of the child's stderr
		defer close(copied)
		sc := bufio.NewScanner(errPipe)
		once := false
		for sc.Scan() {
			stderr.WriteString(sc.Text() + "\n")
			if !once && strings.HasPrefix(sc.Text(), "running ") {
				once = true
				close(started)
			}
		}
	}()
	select {
	case <-started:
	case <-time.After(60 * time.Second):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatal("certify did not start its specs within 60 s")
	}
	// Interrupt once the specs have made something to clean up: a VM and a
	// disk in the embedded cloud's data dir (under the child's TMPDIR).
	if !waitForCloudObjects(tmp, 60*time.Second) {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		t.Fatal("certify made no VM and no disk in its embedded cloud within 60 s")
	}
	target := cmd.Process.Pid
	if group {
		target = -target // the terminal signals the whole foreground process group
	}
	if err := syscall.Kill(target, sig); err != nil {
		t.Fatal(err)
	}
	<-copied
	err = cmd.Wait()
	code := cmd.ProcessState.ExitCode()
	out := stdout.String()
	if code != exitUsage {
		t.Fatalf("exit %d (%v), want 2\nstdout:\n%s\nstderr:\n%s", code, err, out, stderr.String())
	}
	last := lastLine(out)
	if !strings.HasPrefix(last, "INTERRUPTED: ") || !strings.Contains(out, "left in the embedded fakeiaas after the run: nothing") {
		t.Errorf("want the INTERRUPTED verdict last and nothing left in the cloud:\n%s", out)
	}
	if strings.Contains(out, "Interrupted by User") || strings.Contains(out, "REJECTED") {
		t.Errorf("the interrupt is reported as a CPI failure:\n%s", out)
	}
	r := readReport(t, cmd.Args[len(cmd.Args)-1])
	if r.Verdict != suites.VerdictInterrupted {
		t.Errorf("JSON verdict %s", r.Verdict)
	}
	// Every process of the run (cpilab and its workers, each running a
	// share of the specs) was stopped in a spec: a worker the interrupt did
	// not reach runs its share to the end instead.
	interrupted := 0
	for _, s := range r.Specs {
		if s.State == suites.StateInterrupted {
			interrupted++
		}
	}
	if interrupted < 2 {
		t.Errorf("%d spec(s) interrupted, want one per process (cpilab and its workers): the workers did not stop", interrupted)
	}
	if left := processesRunning(t, cmd.Path); len(left) != 0 {
		t.Errorf("still running after cpilab ended: pids %v", left)
		for _, pid := range left {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if left := dirEntries(t, tmp); len(left) != 0 {
		t.Errorf("left in TMPDIR after the interrupt: %q", left)
	}
}

// processesRunning lists the processes whose program is exe (a worker
// certify started runs the same binary), from /proc.
func processesRunning(t *testing.T, exe string) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Skipf("no /proc to look for processes left: %v", err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if target, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err == nil && target == exe {
			pids = append(pids, pid)
		}
	}
	return pids
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

func dirEntries(t *testing.T, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}

// TestCertifyExitPathsLeaveTmpClean runs certify's quick exit paths as a
// process (usage errors, a malformed label filter, an interrupted start is
// covered above, a filtered run, --list) and checks exit codes, that
// --quiet prints only the verdict, that NO_COLOR output has no escape
// codes, and that nothing is left in TMPDIR.
func TestCertifyExitPathsLeaveTmpClean(t *testing.T) {
	dir := buildCPIs(t)
	for _, tc := range []struct {
		name string
		args []string
		env  []string
		code int
		want string
	}{
		{"bad label filter", []string{"--label-filter", "area:(errors"}, nil, exitUsage, ""},
		{"missing report dir", []string{"--html-report", filepath.Join("no-such-dir", "r.html")}, nil, exitUsage, ""},
		{"list", []string{"--list", "--label-filter", "method:get_disks"}, nil, 0, "specs\n"},
		// Whole contexts (a label filter or --skip that cuts a context leaves
		// its shared set-up without its teardown).
		{"quiet and no colour", []string{"--quiet", "--label-filter", "row:cli.api2"}, []string{"NO_COLOR=1"}, 0, "ACCEPTED: "},
		{"nothing selected", []string{"--label-filter", "method:no_such_method"}, nil, exitRejected, "NOTHING-CHECKED: "},
		{"strict", []string{"--strict", "--require-api-version", "2", "--label-filter", "row:cli.api2"}, nil, 0, "ACCEPTED: "},
		{"skip", []string{"--skip", "(director-current|director-v1|director-v2)", "--label-filter", "suite:contract"}, nil, 0, "ACCEPTED: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			cmd := certifyCmd(t, dir, tmp, tc.args...)
			cmd.Env = append(cmd.Env, tc.env...)
			code, stdout, stderr := runCmd(t, cmd)
			if code != tc.code || !strings.Contains(stdout, tc.want) {
				t.Fatalf("exit %d, want %d and %q\nstdout:\n%s\nstderr:\n%s", code, tc.code, tc.want, stdout, stderr)
			}
			if code == exitUsage && (stdout != "" || !strings.Contains(stderr, "--help' for usage")) {
				t.Errorf("a usage error must be said on stderr only:\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
			}
			if tc.name == "quiet and no colour" {
				if strings.Count(strings.TrimSpace(stdout), "\n") != 0 || stderr != "" || strings.Contains(stdout, "\x1b[") {
					t.Errorf("--quiet with NO_COLOR: want one plain line and nothing on stderr\nstdout:\n%q\nstderr:\n%q", stdout, stderr)
				}
			}
			if tc.name == "skip" && (!strings.Contains(stdout, "\ncli.api2 ") || strings.Contains(stdout, "\ndirector-v1.api1 ")) {
				t.Errorf("--skip ran the wrong contexts:\n%s", stdout)
			}
			if left := dirEntries(t, tmp); len(left) != 0 {
				t.Errorf("left in TMPDIR: %q", left)
			}
		})
	}
}

// checkHTMLInChromium renders the HTML report in headless Chromium: a
// screenshot that shows the coloured matrix, and a DOM in which every
// matrix cell's link leads to an element that exists.
func checkHTMLInChromium(t *testing.T, htmlPath string, r *suites.CertifyReport) {
	chromium := findChromium(t)
	// A short directory of its own: Chromium's profile socket path must
	// stay under the Unix socket limit, and nothing may stay in /tmp.
	tmp, err := os.MkdirTemp("", "crm")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	shot := filepath.Join(tmp, "report.png")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--no-first-run",
		"--user-data-dir=" + filepath.Join(tmp, "profile"), "--window-size=1400,1600"}
	env := append(os.Environ(), "TMPDIR="+tmp, "HOME="+tmp)
	cmd := exec.CommandContext(ctx, chromium, append(base, "--screenshot="+shot, "file://"+htmlPath)...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("chromium --screenshot: %v\n%s", err, out)
	}
	t.Logf("screenshot of %s taken: %s (set CPILAB_SCREENSHOT_DIR to keep it)", htmlPath, shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	img, err := png.Decode(f)
	f.Close()
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if b := img.Bounds(); b.Dx() != 1400 || b.Dy() != 1600 {
		t.Errorf("screenshot %v, want 1400×1600", b)
	}
	// The matrix's colours, as the page's style sheet gives them.
	for _, want := range []struct {
		name    string
		r, g, b uint8
		needed  bool
	}{
		{"passed (green)", 0xd4, 0xf4, 0xd2, r.Counts.Passed > 0},
		{"failed (red)", 0xf8, 0xc9, 0xc4, r.Counts.Failed > 0},
	} {
		if want.needed && !hasColor(img, want.r, want.g, want.b) {
			t.Errorf("the screenshot shows no %s matrix cell: the page did not render its table", want.name)
		}
	}
	if d := os.Getenv("CPILAB_SCREENSHOT_DIR"); d != "" {
		b, _ := os.ReadFile(shot)
		_ = os.WriteFile(filepath.Join(d, "certify-report.png"), b, 0o644)
	}
	cmd = exec.CommandContext(ctx, chromium, append(base, "--dump-dom", "file://"+htmlPath)...)
	cmd.Env = env
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v", err)
	}
	links := regexp.MustCompile(`href="#([^"]+)"`).FindAllSubmatch(dom, -1)
	cells := 0
	for _, m := range r.Matrix {
		cells += len(m.Cells)
	}
	if len(links) != cells {
		t.Errorf("%d links in the rendered matrix, want one per cell (%d)", len(links), cells)
	}
	for _, l := range links {
		if !bytes.Contains(dom, []byte(`id="`+string(l[1])+`"`)) {
			t.Errorf("matrix link #%s leads nowhere", l[1])
		}
	}
	if !bytes.Contains(dom, []byte(`<dl class="legend" id="legend">`)) {
		t.Error("the rendered page has no legend of areas")
	}
}

// findChromium returns a headless browser, installing Chromium from the
// distribution's packages (scripts/install-deps.sh) when it is missing; the
// test is skipped, saying why, when that cannot be done.
func findChromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome-stable", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	out, err := exec.Command(filepath.Join("..", "..", "scripts", "install-deps.sh"), "chromium").Output()
	if err != nil {
		msg := ""
		if ee, ok := err.(*exec.ExitError); ok {
			msg = string(ee.Stderr)
		}
		t.Skipf("no Chromium, and scripts/install-deps.sh could not install it (%v): %s", err, msg)
	}
	return strings.TrimSpace(lastLine(string(out)))
}

func hasColor(img image.Image, r, g, b uint8) bool {
	bd := img.Bounds()
	for y := bd.Min.Y; y < bd.Max.Y; y += 2 {
		for x := bd.Min.X; x < bd.Max.X; x += 2 {
			cr, cg, cb, _ := img.At(x, y).RGBA()
			if uint8(cr>>8) == r && uint8(cg>>8) == g && uint8(cb>>8) == b {
				return true
			}
		}
	}
	return false
}

// TestCITemplates lints the GitHub Actions workflow with actionlint (a
// tool dependency in go.mod, so the version is pinned) and checks that the
// Concourse task names its image and publishes the reports.
func TestCITemplates(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: actionlint is built with go run")
	}
	ci := filepath.Join("..", "..", "ci")
	wf := filepath.Join(ci, "github-actions.yml")
	workflows := []string{wf, filepath.Join(ci, "github-actions-report.yml"), filepath.Join(ci, "sweep-github-actions.yml")}
	cmd := exec.Command("go", append([]string{"run", "github.com/rhysd/actionlint/cmd/actionlint", "-shellcheck=", "-pyflakes="}, workflows...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("actionlint %s: %v\n%s", workflows, err, out)
	}
	b, err := os.ReadFile(wf)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"workflow_call:", "cpilab-version:", "CPILAB_VERSION", "upload-artifact"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("%s lacks %q", wf, want)
		}
	}
	// Fork-safe: the job that runs a pull request's code writes nothing;
	// the workflow_run job that publishes the check does not check it out.
	if bytes.Contains(b, []byte("checks: write")) {
		t.Errorf("%s asks for checks: write, which a pull request from a fork does not get", wf)
	}
	rb, err := os.ReadFile(filepath.Join(ci, "github-actions-report.yml"))
	if err != nil || !bytes.Contains(rb, []byte("workflow_run:")) || !bytes.Contains(rb, []byte("checks: write")) || bytes.Contains(rb, []byte("checkout")) {
		t.Errorf("github-actions-report.yml: %v; want a workflow_run job with checks: write that checks nothing out", err)
	}
	// Every action pinned to a commit, its tag in a comment; no cpilab
	// version that does not exist.
	uses := regexp.MustCompile(`uses:\s*([^\s#]+)(\s*#\s*(\S+))?`)
	entries, err := os.ReadDir(ci)
	if err != nil {
		t.Fatal(err)
	}
	var commands []string // the cpilab commands the templates run
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".yml") && !strings.HasSuffix(e.Name(), ".yaml") && !strings.HasSuffix(e.Name(), ".sh") {
			continue
		}
		tb, err := os.ReadFile(filepath.Join(ci, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(tb, []byte("v0.1.0")) {
			t.Errorf("%s names cpilab v0.1.0, a version that does not exist", e.Name())
		}
		for _, l := range strings.Split(string(tb), "\n") {
			if strings.HasPrefix(strings.TrimSpace(l), "#") {
				continue
			}
			if m := uses.FindStringSubmatch(l); m != nil && !strings.HasPrefix(m[1], "./") {
				_, ref, _ := strings.Cut(m[1], "@")
				if !regexp.MustCompile(`^[0-9a-f]{40}$`).MatchString(ref) || !strings.HasPrefix(m[3], "v") {
					t.Errorf("%s: %q is not pinned to a commit with its tag in a comment", e.Name(), strings.TrimSpace(l))
				}
			}
			code, _, _ := strings.Cut(l, " #")
			for _, m := range regexp.MustCompile(`(?:bin/cpilab|/cpilab|^\s*(?:-\s+|run:\s+)?cpilab)\s+([a-z][a-z-]+)(?:\s|$)`).FindAllStringSubmatch(code, -1) {
				commands = append(commands, m[1])
			}
		}
		if strings.HasSuffix(e.Name(), ".yml") || strings.HasSuffix(e.Name(), ".yaml") {
			var doc any
			if err := yaml.Unmarshal(tb, &doc); err != nil {
				t.Errorf("%s does not parse as YAML: %v", e.Name(), err)
			}
		}
	}
	// Every cpilab command the templates run is one `cpilab --help` lists.
	if len(commands) < 3 {
		t.Errorf("found %q as the cpilab commands the templates run; want certify, simulate and merge's", commands)
	}
	_, help, _ := runArgs("--help")
	for _, c := range commands {
		if !strings.Contains(help, "\n  "+c+" ") {
			t.Errorf("the CI templates run 'cpilab %s', which cpilab --help does not list", c)
		}
	}
	// The GitLab template publishes the JUnit report.
	var gl map[string]struct {
		Script    []string `yaml:"script"`
		Artifacts struct {
			Reports struct {
				JUnit string `yaml:"junit"`
			} `yaml:"reports"`
		} `yaml:"artifacts"`
	}
	gb, err := os.ReadFile(filepath.Join(ci, "gitlab-ci.yml"))
	if err == nil {
		err = yaml.Unmarshal(gb, &gl)
	}
	if err != nil || gl["cpilab-certify"].Artifacts.Reports.JUnit != "reports/junit.xml" || len(gl["cpilab-certify"].Script) == 0 {
		t.Errorf("gitlab-ci.yml: %v; want a cpilab-certify job with a JUnit report artifact", err)
	}
	var task struct {
		Platform      string `yaml:"platform"`
		ImageResource struct {
			Type   string `yaml:"type"`
			Source struct {
				Repository string `yaml:"repository"`
				Tag        string `yaml:"tag"`
			} `yaml:"source"`
		} `yaml:"image_resource"`
		Inputs  []struct{ Name string } `yaml:"inputs"`
		Outputs []struct{ Name string } `yaml:"outputs"`
		Params  map[string]string       `yaml:"params"`
		Run     struct {
			Path string   `yaml:"path"`
			Args []string `yaml:"args"`
		} `yaml:"run"`
	}
	tb, err := os.ReadFile(filepath.Join("..", "..", "ci", "concourse-task.yml"))
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(tb))
	dec.KnownFields(true)
	if err := dec.Decode(&task); err != nil && err != io.EOF {
		t.Fatalf("concourse-task.yml: %v", err)
	}
	if task.Platform != "linux" || task.ImageResource.Type != "registry-image" || task.ImageResource.Source.Repository == "" ||
		task.ImageResource.Source.Tag == "" || task.Run.Path == "" || len(task.Outputs) == 0 || task.Params["CPILAB_VERSION"] == "" {
		t.Errorf("concourse task: %+v", task)
	}
	// certify.sh is valid shell.
	if out, err := exec.Command("bash", "-n", filepath.Join("..", "..", "ci", "certify.sh")).CombinedOutput(); err != nil {
		t.Errorf("bash -n ci/certify.sh: %v\n%s", err, out)
	}
}

// TestBinaryAsAUserRunsIt runs the built cpilab the way a person tries a
// new tool: --help piped to grep, --version, a typo in a flag.
func TestBinaryAsAUserRunsIt(t *testing.T) {
	dir := buildCPIs(t)
	cpilab := filepath.Join(dir, "cpilab")
	out, err := exec.Command("sh", "-c", shellWord(cpilab)+" certify -h | grep -c -- --junit-report").Output()
	if err != nil || strings.TrimSpace(string(out)) == "0" {
		t.Errorf("cpilab certify -h | grep --junit-report: %v, %q", err, out)
	}
	for _, c := range allCommands {
		code, stdout, stderr := runCmd(t, exec.Command(cpilab, c, "--help"))
		if code != 0 || !strings.HasPrefix(stdout, "Usage:\n  cpilab "+c) || stderr != "" {
			t.Errorf("cpilab %s --help: exit %d, stderr %q, stdout %.80q", c, code, stderr, stdout)
		}
		code, stdout, stderr = runCmd(t, exec.Command(cpilab, c, "--colour"))
		if code != exitUsage || stdout != "" || !strings.Contains(stderr, "-colour") {
			t.Errorf("cpilab %s --colour: exit %d, stdout %q, stderr %q", c, code, stdout, stderr)
		}
	}
	code, stdout, _ := runCmd(t, exec.Command(cpilab, "--version"))
	if code != 0 || !regexp.MustCompile(`^cpilab \S+, commit \S+`).MatchString(stdout) {
		t.Errorf("cpilab --version: exit %d, %q", code, stdout)
	}
}

// --fail-fast stops the whole run at the first failure: one failed spec,
// the rest not run (and not reported), the verdict REJECTED.
func TestFailFastStopsAtTheFirstFailure(t *testing.T) {
	dir := buildCPIs(t)
	link := filepath.Join(dir, "buggy-get-disks-null")
	if err := os.Symlink(filepath.Join(dir, "buggy-cpi"), link); err != nil && !os.IsExist(err) {
		t.Fatal(err)
	}
	js := filepath.Join(t.TempDir(), "r.json")
	code, stdout, stderr := certify(t, dir, "--cpi", link, "--fail-fast", "--json-report", js)
	r := readReport(t, js)
	// Ginkgo randomizes the order of top-level containers, so how many
	// specs passed before the failure varies; the rest never run.
	if code != exitRejected || r.Counts.Failed != 1 || len(r.Specs) >= 300 {
		t.Fatalf("--fail-fast: exit %d, counts %+v, %d specs reported; want 1, one failure and the run stopped\nstdout:\n%s\nstderr:\n%s",
			code, r.Counts, len(r.Specs), stdout, stderr)
	}
}
