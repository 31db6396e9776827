package adversarial

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// cliInput is one hostile command line.
type cliInput struct {
	args []string
	// refuse: the command must fail with a clear error (exit status 1 or 2
	// and a message); otherwise any exit status in {0,1,2} is fine.
	refuse bool
	// secret, when set, must appear nowhere in the command's output (a
	// leak otherwise).
	secret string
	// safeText: the input carries terminal escapes; a raw control
	// character in the output is an escape.
	safeText bool
}

// cliBound bounds one command: past it (plus the time it gets to stop
// once cancelled) the command hung.
const (
	cliBound = 20 * time.Second
	cliStop  = 10 * time.Second
)

// cliInputs draws n hostile command lines: malformed flags for certify,
// simulate, replay and the servers, and scenario files half-written or
// hostile.
func cliInputs(e *env, n int) ([]cliInput, error) {
	r := e.rng
	files := filepath.Join(e.dir, "files")
	if err := os.MkdirAll(files, 0o755); err != nil {
		return nil, err
	}
	scen, err := filepath.Glob(filepath.Join(e.cfg.FixturesDir, "scenarios", "*.txt"))
	if err != nil || len(scen) == 0 {
		return nil, fmt.Errorf("no scenario files under %s: %v", filepath.Join(e.cfg.FixturesDir, "scenarios"), err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(files, name)
		_ = os.WriteFile(p, b, 0o644)
		return p
	}
	out := filepath.Join(e.dir, "out")
	fixed := []cliInput{
		{args: []string{"simulate", "--steps", "0"}, refuse: true},
		{args: []string{"simulate", "--steps", "-1"}, refuse: true},
		{args: []string{"simulate", "--steps", "99999999999999999999999"}, refuse: true},
		{args: []string{"simulate", "--seed", "x"}, refuse: true},
		{args: []string{"simulate", "--max-delay", "-1s"}, refuse: true},
		{args: []string{"simulate", "--max-delay", "1y"}, refuse: true},
		{args: []string{"simulate", "--profile", "../../etc"}, refuse: true},
		{args: []string{"simulate", "--faults", "cpi-error=NaN"}, refuse: true},
		{args: []string{"simulate", "--faults", "cpi-error=2"}, refuse: true},
		{args: []string{"simulate", "--faults", "latency=0.1:2s..1ms"}, refuse: true},
		{args: []string{"simulate", "--faults", "no-such-fault=0.1"}, refuse: true},
		{args: []string{"simulate", "--mix", "provide=-1"}, refuse: true},
		{args: []string{"simulate", "--mix", "nonsense"}, refuse: true},
		{args: []string{"simulate", "--clients", "-3"}, refuse: true},
		{args: []string{"simulate", "--seeds", "10..1"}, refuse: true},
		{args: []string{"simulate", "--seeds", "a..b"}, refuse: true},
		{args: []string{"simulate", "--seeds", "1..2", "--shard", "0/0"}, refuse: true},
		{args: []string{"simulate", "--seeds", "1..2", "--shard", "5/3"}, refuse: true},
		{args: []string{"simulate", "--seeds", "1..2", "--parallel", "-1", "--out", out}, refuse: true},
		{args: []string{"simulate", "--shard", "1/2"}, refuse: true},
		{args: []string{"simulate", "--seed", "1", "--seeds", "1..2"}, refuse: true},
		{args: []string{"simulate", "--nope"}, refuse: true},
		{args: []string{"simulate", "merge"}, refuse: true},
		{args: []string{"simulate", "merge", filepath.Join(files, "no-such.json")}, refuse: true},
		{args: []string{"simulate", "merge", write("bad.json", []byte(`{"seeds":"x"`))}, refuse: true},
		{args: []string{"simulate", "merge", write("empty.json", nil)}, refuse: true},
		{args: []string{"replay"}, refuse: true},
		{args: []string{"replay", "a", "b"}, refuse: true},
		{args: []string{"replay", filepath.Join(files, "missing.txt")}, refuse: true},
		{args: []string{"replay", files}, refuse: true},
		{args: []string{"replay", write("empty.txt", nil)}, refuse: true},
		{args: []string{"replay", write("garbage.txt", []byte("\x00\xff\xfe\x7fELF"))}, refuse: true},
		{args: []string{"replay", write("long.txt", bytes.Repeat([]byte("c0 provide disk=d vm=0 "), 100000))}, refuse: true},
		{args: []string{"replay", write("hostile.txt", []byte("run profile=../../x\nc0 provide disk=../../x vm=999999\n----\nok\n"))}, refuse: true},
		{args: []string{"replay", write("hold.txt", []byte("run profile=reference\nc0 recreate vm=0\nhold at=agent:stop until=c0 timeout=-1s\n----\nok\n"))}, refuse: true},
		{args: []string{"replay", write("noexpect.txt", []byte("run profile=reference\nc0 recreate vm=0\n"))}, refuse: true},
		{args: []string{"certify", "--call-timeout", "abc"}, refuse: true},
		{args: []string{"certify", "--call-timeout", "-1s"}, refuse: true},
		{args: []string{"certify", "--label-filter", "((", "--list"}, refuse: true},
		{args: []string{"certify", "--focus", "[", "--list"}, refuse: true},
		{args: []string{"certify", "--config", filepath.Join(files, "missing.yml")}, refuse: true},
		{args: []string{"certify", "--config", write("cloud.yml", []byte("cpi: [\n"))}, refuse: true},
		{args: []string{"certify", "--config", write("cloud2.yml", []byte("cpi:\n  command: ../../bin/sh\n"))}, refuse: true},
		{args: []string{"certify", "--cpi", filepath.Join(files, "no-such-cpi")}, refuse: true},
		{args: []string{"certify", "--cpi", files}, refuse: true},
		{args: []string{"certify", "--cpi", "x", "--config", "y"}, refuse: true},
		{args: []string{"certify", "--nope"}, refuse: true},
		{args: []string{"certify", "stray-argument"}, refuse: true},
		{args: []string{"fakeiaas", "--listen", "0.0.0.0:0", "--data-dir", filepath.Join(e.dir, "fk")}, refuse: true},
		{args: []string{"fakeiaas", "--listen", "not-an-address"}, refuse: true},
		{args: []string{"director", "--listen", "0.0.0.0:0", "--plain-http", "--data-dir", filepath.Join(e.dir, "dir")}, refuse: true},
		{args: []string{"director", "--profile", "nonsense", "--data-dir", filepath.Join(e.dir, "dir")}, refuse: true},
		{args: []string{"agent"}, refuse: true},
		{args: []string{"agent", "--root", filepath.Join(files, "missing"), "--vm-cid", "vm-1"}, refuse: true},
		{args: []string{"certify-director", "--profile", "nonsense"}, refuse: true},
		{args: []string{"simulate", "--seeds", "1..100000", "--out", "/proc/cpilab-nope"}, refuse: true},
		{args: []string{"simulate", "merge", write("forged-dup.json", forgedReport(e, `"verdict": "fail", "verdict": "pass"`))}, refuse: true, safeText: true},
		{args: []string{"simulate", "merge", write("forged-case.json", forgedReport(e, `"verdict": "fail", "Verdict": "pass"`))}, refuse: true},
		{args: []string{"simulate", "merge", write("forged-esc.json", forgedReport(e, `"verdict": "fail", "x\u001b]0;pwned\u0007": 1`))}, refuse: true, safeText: true},
		{args: []string{"director", "--role", "api", "--database", "host=db user=u password=Cli-S3cret dbname=d", "--data-dir", filepath.Join(e.dir, "dir")},
			refuse: true, secret: "Cli-S3cret"},
		{args: []string{"director", "--role", "api", "--database", "mysql://u:Cli-S3cret@db/d?password=Cli-S3cret", "--data-dir", filepath.Join(e.dir, "dir")},
			refuse: true, secret: "Cli-S3cret"},
		{args: []string{"no-such-command"}, refuse: true},
		{args: []string{"--nope"}, refuse: true},
	}
	var ins []cliInput
	for _, i := range r.Perm(len(fixed)) {
		ins = append(ins, fixed[i])
	}
	// Scenario files cut at a random byte (not at a line's end: a cut
	// there may leave a shorter valid file), and fixtures with a hostile
	// name or value spliced in.
	for k := 0; len(ins) < n; k++ {
		src := pick(r, scen)
		b, err := os.ReadFile(src)
		if err != nil || len(b) < 10 {
			continue
		}
		name := fmt.Sprintf("cut-%d.txt", k)
		switch r.IntN(3) {
		case 0, 1:
			cut := 1 + r.IntN(len(b)-2)
			for cut < len(b) && (b[cut-1] == '\n' || b[cut] == '\n') {
				cut++
			}
			if cut >= len(b)-1 {
				continue
			}
			// A cut inside a comment may leave a shorter valid file (every
			// run before it complete); anywhere else it must be refused.
			lineStart := bytes.LastIndexByte(b[:cut], '\n') + 1
			inComment := bytes.HasPrefix(bytes.TrimSpace(b[lineStart:cut]), []byte("#"))
			ins = append(ins, cliInput{args: []string{"replay", write(name, b[:cut])}, refuse: !inComment})
		default:
			lines := strings.Split(string(b), "\n")
			i := r.IntN(len(lines))
			hostile := pick(r, []string{"disk=" + pick(r, hostileNames), "vm=-1", "vm=99999999999999999999", "timeout=NaN", "after=" + pick(r, hostileNames), "\x00", "profile=upstream:zz"})
			lines[i] += " " + hostile
			ins = append(ins, cliInput{args: []string{"replay", write(name, []byte(strings.Join(lines, "\n")))}})
		}
	}
	return ins[:n], nil
}

// forgedReport is a one-shard sweep report with its first `"verdict":
// "fail"` replaced by edit (the base is written by peerBaseReport).
func forgedReport(e *env, edit string) []byte {
	b, err := peerBaseReport(e.dir)
	_ = os.Remove(filepath.Join(e.dir, "base-report.json"))
	if err != nil {
		return []byte(err.Error())
	}
	return bytes.Replace(b, []byte(`"verdict": "fail"`), []byte(edit), 1)
}

func runCLI(ctx context.Context, e *env, t *tally, n int) error {
	tmp := filepath.Join(e.dir, "tmp")
	if err := os.MkdirAll(tmp, 0o755); err != nil {
		return err
	}
	// Whatever a command leaves in the temporary directory or the working
	// directory is a leak.
	oldTmp, hadTmp := os.LookupEnv("TMPDIR")
	_ = os.Setenv("TMPDIR", tmp)
	defer func() {
		if hadTmp {
			_ = os.Setenv("TMPDIR", oldTmp)
		} else {
			_ = os.Unsetenv("TMPDIR")
		}
	}()
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	cwdBefore, err := listDir(cwd)
	if err != nil {
		return err
	}
	ins, err := cliInputs(e, n)
	if err != nil {
		return err
	}
	outside, err := hashTree(e.outside, "")
	if err != nil {
		return err
	}
	fds := countFDs()
	for _, in := range ins {
		if err := ctx.Err(); err != nil {
			return err
		}
		t.tried()
		input := "cpilab " + strings.Join(in.args, " ")
		code, stdout, stderr, crash := e.runCLIOnce(ctx, in.args)
		if _, n := settle(1<<30, fds); n > fds {
			t.add(OracleLeak, input, "%d open descriptors after the command, %d before: %s", n, fds, openFDs())
			fds = n
		}
		switch {
		case crash != "":
			t.add(OracleCrash, input, crash)
		case code < 0 || code > 2:
			t.add(OracleCrash, input, "exit status %d (want 0, 1 or 2); stderr %s", code, shorten(stderr))
		}
		if in.secret != "" && strings.Contains(stdout+stderr, in.secret) {
			t.add(OracleLeak, input, "the output shows the secret %q", in.secret)
		}
		if in.safeText && rawControl(stdout+stderr) {
			t.add(OracleEscape, input, "a raw control character reached the output: %q", shorten(stdout+stderr))
		}
		if in.refuse {
			clear := crash == "" && ((code == 2 && strings.TrimSpace(stderr) != "") || (code == 1 && strings.TrimSpace(stdout+stderr) != ""))
			t.expectError(input, clear, fmt.Sprintf("exit status %d; stderr %s", code, shorten(stderr)))
		}
		outside = e.checkOutside(t, input, outside)
	}
	if after, err := listDir(cwd); err == nil {
		for _, name := range after {
			if !containsString(cwdBefore, name) {
				t.add(OracleLeak, "the whole area", "a command left %s in the working directory", filepath.Join(cwd, name))
			}
		}
	}
	if err := os.RemoveAll(filepath.Join(e.dir, "files")); err != nil {
		return err
	}
	for _, d := range []string{"out", "fk", "dir"} {
		_ = os.Remove(filepath.Join(e.dir, d)) // only when empty
	}
	_ = os.Remove(tmp)
	return nil
}

// runCLIOnce runs one command line in process with a bound; a panic or a
// command that does not stop is a crash.
func (e *env) runCLIOnce(ctx context.Context, args []string) (code int, stdout, stderr, crash string) {
	ctx, cancel := context.WithTimeout(ctx, cliBound)
	defer cancel()
	type result struct {
		code     int
		out, err string
		panicked string
	}
	done := make(chan result, 1)
	go func() {
		var o, er bytes.Buffer
		res := result{}
		defer func() {
			if v := recover(); v != nil {
				res.panicked = fmt.Sprint(v)
			}
			res.out, res.err = o.String(), er.String()
			done <- res
		}()
		res.code = e.cfg.CLI(ctx, args, &o, &er)
	}()
	select {
	case res := <-done:
		if res.panicked != "" {
			return -1, res.out, res.err, "panic: " + res.panicked
		}
		return res.code, res.out, res.err, ""
	case <-time.After(cliBound + cliStop):
		return -1, "", "", fmt.Sprintf("still running %v after it was cancelled", cliStop)
	}
}

func listDir(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ents))
	for i, d := range ents {
		out[i] = d.Name()
	}
	return out, nil
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
