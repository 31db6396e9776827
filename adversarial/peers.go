package adversarial

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/director"
	"github.com/cpilab/cpilab/director/launch"
	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/refcpi"
	"github.com/cpilab/cpilab/flexvolume"
	"github.com/cpilab/cpilab/internal/httpread"
	"github.com/cpilab/cpilab/internal/redact"
	"github.com/cpilab/cpilab/simulator"
	"github.com/cpilab/cpilab/suites"
	"github.com/cpilab/cpilab/suites/dynamicdisks"
)

// The peers area attacks what cpilab reads from, and prints about, the
// peers it trusts least:
//
//   - answers: a Director (what certify-director and the drivers talk
//     to), a fakeiaas and a registry answering every endpoint with an
//     endless, oversize or stalled body. The client must stop at its cap
//     with an error naming the endpoint (httpread), within a time bound
//     (else crash) and within a memory bound (else crash);
//   - duplicate keys: every file decoder of untrusted JSON (FlexVolume
//     config, cpi.json, simulate merge reports) fed a key twice or two
//     spellings differing in case must refuse naming the key;
//   - DSN spellings: a connection string with a password, in every
//     spelling, must not show the password in a redacted form or in the
//     store's connection error (a password shown is a leak);
//   - escape sequences: a CPI's, a Director's or a report's text holding
//     terminal escapes must reach text reports escaped (a raw one is an
//     escape) and JSON reports exact (changed text is data lost);
//   - forged merge reports: a key twice ("verdict":"fail","verdict":"pass"),
//     negative or overflowing counts must be refused.

// peerBound bounds one input: past it, the reader hung.
const peerBound = 15 * time.Second

// peerAllocBound bounds what one hostile answer may make a client
// allocate: the Director client's cap is 1 MiB here, the fakeiaas and
// agent clients' 16 MiB, so a client within a few times its cap is
// bounded; one reading without end passes this within a second.
const (
	peerCap        = 1 << 20
	peerAllocBound = 96 << 20
)

func runPeers(ctx context.Context, e *env, t *tally, n int) error {
	r := e.rng
	srv := map[string]*httptest.Server{}
	for name, h := range map[string]http.Handler{
		"endless":  peerEndless(),
		"oversize": peerOversize(peerCap + 1 + r.IntN(4096)),
		"stalled":  peerStalled(ctx),
	} {
		srv[name] = httptest.NewServer(h)
	}
	defer func() {
		for _, s := range srv {
			s.CloseClientConnections()
			s.Close()
		}
	}()
	base, err := peerBaseReport(e.dir)
	if err != nil {
		return err
	}
	defer os.Remove(filepath.Join(e.dir, "base-report.json"))
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		t.tried()
		switch i % 5 {
		case 0:
			mode := pick(r, []string{"endless", "oversize", "stalled"})
			peerAnswer(ctx, t, r, mode, srv[mode].URL)
		case 1:
			peerDuplicateKeys(t, r, e.dir, base)
		case 2:
			peerDSN(ctx, t, r)
		case 3:
			peerEscapes(t, r)
		default:
			peerForgedReport(t, r, e.dir, base)
		}
	}
	return nil
}

func peerEndless() http.Handler {
	chunk := bytes.Repeat([]byte(`{"state":"processing","x":[`), 2048)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/tasks/1")
		for r.Context().Err() == nil {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
}

func peerOversize(n int) http.Handler {
	body := append(append([]byte(`"`), bytes.Repeat([]byte("x"), n-2)...), '"')
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(body) })
}

// peerStalled sends the start of an answer, then nothing until the client
// goes away (or the campaign ends).
func peerStalled(ctx context.Context) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte(`{"state":`))
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-ctx.Done():
		}
	})
}

// peerAnswer makes one client call against a hostile server and judges
// it: a clear capped error, in bounded time and memory.
func peerAnswer(ctx context.Context, t *tally, r *rand.Rand, mode, url string) {
	dc, err := director.NewClient(director.ClientConfig{URL: url, Token: "t", MaxAnswerBytes: peerCap, AnswerTimeout: 300 * time.Millisecond})
	if err != nil {
		t.add(OracleCrash, "director client", "%v", err)
		return
	}
	calls := []struct {
		name string
		call func(context.Context) error
	}{
		{"GET /tasks/1", func(ctx context.Context) error { _, err := dc.Task(ctx, 1); return err }},
		{"GET /tasks/1/output?type=result", func(ctx context.Context) error { _, err := dc.TaskOutput(ctx, 1, "result"); return err }},
		{"GET /tasks/1/output?type=debug", func(ctx context.Context) error { _, err := dc.TaskOutput(ctx, 1, "debug"); return err }},
		{"GET /deployments/d/instances", func(ctx context.Context) error { _, err := dc.Instances(ctx, "d"); return err }},
		{"GET /dynamic_disks", func(ctx context.Context) error { _, err := dc.DynamicDisks(ctx); return err }},
		{"GET /info", func(ctx context.Context) error { _, err := dc.Info(ctx); return err }},
		{"POST /dynamic_disks/provide", func(ctx context.Context) error {
			_, err := dc.Start(ctx, http.MethodPost, "/dynamic_disks/provide", map[string]any{"disk_name": "d"})
			return err
		}},
		{"POST /api/v1/get_disk", func(ctx context.Context) error {
			cid, _ := cpiv2.NewDiskCID("disk-1")
			_, err := fakeiaas.NewClient(url).Disk(ctx, cid)
			return err
		}},
		{"GET /instances/vm-1/settings", func(context.Context) error {
			_, err := agent.HTTPFetcher(&http.Client{Timeout: 2 * time.Second}).Get(url+"/instances/vm-1/settings", nil)
			return err
		}},
	}
	c := pick(r, calls)
	if mode != "endless" && (c.name == "POST /api/v1/get_disk" || c.name == "GET /instances/vm-1/settings") {
		// Those two read under their own 16 MiB caps (an oversize answer
		// here is within them) and are bounded in time by their caller's
		// context and client time-out.
		c = calls[r.IntN(7)]
	}
	input := fmt.Sprintf("%s answer to %s", mode, c.name)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	cctx, cancel := context.WithTimeout(ctx, peerBound)
	start := time.Now()
	err = c.call(cctx)
	took := time.Since(start)
	cancel()
	runtime.ReadMemStats(&after)
	if took >= peerBound {
		t.add(OracleCrash, input, "the client read for %v: no time cap", took.Round(time.Millisecond))
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > peerAllocBound {
		t.add(OracleCrash, input, "the client allocated %d MiB for one answer (cap %s)", alloc>>20, httpread.Size(peerCap))
	}
	clear := err != nil && (errors.Is(err, httpread.ErrCapped) || strings.Contains(err.Error(), "cap")) &&
		strings.Contains(err.Error(), strings.SplitN(c.name, "?", 2)[0][strings.Index(c.name, " ")+1:])
	t.expectError(input, clear, fmt.Sprintf("%v", err))
}

// peerBaseReport writes a valid one-shard sweep report with one failing
// seed, the base of the forged ones.
func peerBaseReport(dir string) ([]byte, error) {
	rep, err := simulator.NewSweepReport(simulator.RunConfig{Steps: 50}, simulator.SeedRange{From: 1, To: 10}, simulator.Shard{Index: 1, Count: 1}, true,
		simulator.SweepResult{Runs: 10, Steps: 500, Elapsed: time.Second, Failures: []simulator.Failure{{Seed: 3, TraceHash: 3,
			Err: &simulator.Violation{Invariant: "no-leaked-disk", Phase: simulator.AtQuiescence, Seed: 3, Err: errors.New("leak")}}}})
	if err != nil {
		return nil, err
	}
	p := filepath.Join(dir, "base-report.json")
	if err := rep.WriteFile(p); err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if _, err := simulator.ReadSweepReport(p); err != nil {
		return nil, fmt.Errorf("the base report does not read back: %w", err)
	}
	return b, nil
}

// dupKey inserts, after the first `"key": value` of doc, the same key (or
// a case variant) again with another value.
func dupKey(r *rand.Rand, doc, key, other string) (string, string) {
	spelled := key
	if r.IntN(2) == 0 {
		spelled = strings.ToUpper(key[:1]) + key[1:]
	}
	re := regexp.MustCompile(`"` + regexp.QuoteMeta(key) + `":\s*("[^"]*"|[-0-9.eE+]+|true|false|null)`)
	loc := re.FindStringIndex(doc)
	if loc == nil {
		return doc, spelled
	}
	return doc[:loc[1]] + `, "` + spelled + `": ` + other + doc[loc[1]:], spelled
}

func peerDuplicateKeys(t *tally, r *rand.Rand, dir string, base []byte) {
	type target struct {
		name, doc, key, other string
		read                  func(path string) error
	}
	flexCfg := `{"director": {"url": "https://d", "client": "c", "client_secret": "s"}, "disk_pool": "p", "disk_size_mib": 16, "task_timeout_seconds": 30, "nodes": {"n": {"instance_id": "i"}}}`
	cpiCfg := `{"cloud": {"plugin": "fakeiaas", "properties": {"fakeiaas": {"url": "http://127.0.0.1:1"}, "agent": {"mbus": "nats://127.0.0.1:1"}}}}`
	tg := pick(r, []target{
		{"FlexVolume config", flexCfg, pick(r, []string{"url", "disk_pool", "instance_id", "task_timeout_seconds"}), `"x2"`,
			func(p string) error { _, err := flexvolume.LoadConfig(p); return err }},
		{"cpi.json", cpiCfg, pick(r, []string{"plugin", "url", "mbus"}), `"other"`,
			func(p string) error { _, err := refcpi.LoadFileConfig(p); return err }},
		{"merge report", string(base), pick(r, []string{"verdict", "seed", "replay", "runs", "complete"}), `"pass"`,
			func(p string) error { _, err := simulator.ReadSweepReport(p); return err }},
	})
	doc, spelled := dupKey(r, tg.doc, tg.key, tg.other)
	input := fmt.Sprintf("%s with %q beside %q", tg.name, spelled, tg.key)
	if doc == tg.doc {
		t.add(OracleCrash, input, "the campaign found no %q to repeat", tg.key)
		return
	}
	p := filepath.Join(dir, "dup.json")
	if err := os.WriteFile(p, []byte(doc), 0o644); err != nil {
		t.add(OracleCrash, input, "%v", err)
		return
	}
	defer os.Remove(p)
	err := tg.read(p)
	t.expectError(input, err != nil && strings.Contains(err.Error(), "duplicate key") && strings.Contains(err.Error(), spelled), fmt.Sprint(err))
}

// peerPassword draws a password with characters that need quoting or
// escaping somewhere.
func peerPassword(r *rand.Rand) string {
	const alphabet = "abcdefXYZ0123456789!#$%^*()-_=+[]{}:;,.<>?~ '\\@/"
	b := []byte("Pw")
	for range 6 + r.IntN(14) {
		b = append(b, alphabet[r.IntN(len(alphabet))])
	}
	return string(b)
}

func peerDSN(ctx context.Context, t *tally, r *rand.Rand) {
	pw := peerPassword(r)
	esc := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(pw)
	forms := []struct{ name, dsn string }{
		{"URL user info", "postgres://cpilab:" + urlEscape(pw) + "@127.0.0.1:1/director?connect_timeout=2"},
		{"postgresql scheme", "postgresql://cpilab:" + urlEscape(pw) + "@127.0.0.1:1/director?sslmode=disable&connect_timeout=2"},
		{"?password= query", "postgres://cpilab@127.0.0.1:1/director?connect_timeout=2&password=" + urlEscape(pw)},
		{"?PASSWORD= first", "postgres://cpilab@127.0.0.1:1/director?PASSWORD=" + urlEscape(pw) + "&connect_timeout=2"},
		{"key=value quoted", "host=127.0.0.1 port=1 user=cpilab password='" + esc + "' dbname=director connect_timeout=2"},
		{"key=value spaced", "host=127.0.0.1 port=1 password = '" + esc + "' dbname=director connect_timeout=2"},
	}
	f := pick(r, forms)
	if !strings.ContainsAny(pw, ` '\`) && r.IntN(2) == 0 {
		f = struct{ name, dsn string }{"key=value bare", "host=127.0.0.1 port=1 user=cpilab password=" + pw + " dbname=director connect_timeout=2"}
	}
	input := fmt.Sprintf("DSN as %s", f.name)
	leaked := func(s string) bool {
		return strings.Contains(s, pw) || (len(urlEscape(pw)) > 6 && strings.Contains(s, urlEscape(pw)))
	}
	if red := redact.DSN(f.dsn); leaked(red) {
		t.add(OracleLeak, input, "redacted form shows the password: %s", red)
	}
	cctx, cancel := context.WithTimeout(ctx, peerBound)
	_, err := launch.OpenPostgres(cctx, f.dsn)
	cancel()
	if err != nil && leaked(err.Error()) {
		t.add(OracleLeak, input, "the store's error shows the password")
	}
	t.expectError(input, err != nil, "connecting to a closed port succeeded")
}

func urlEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// hostileText draws text a terminal would obey.
func hostileText(r *rand.Rand) string {
	seqs := []string{"\x1b[2J\x1b[H", "\x1b]0;pwned\x07", "\x1b]52;c;cm0gLXJmIH4=\x07", "\x00", "\r", "\x1b[31m", "\x9b6n",
		"\u202e", "\x1bP+q\x1b\\", "\x08\x08\x08", "\xff\xfe", "\x7f"}
	var b strings.Builder
	b.WriteString("error")
	for range 1 + r.IntN(4) {
		b.WriteString(pick(r, seqs))
		b.WriteString("text")
	}
	return b.String()
}

// rawControl reports a byte or code point a terminal would act on.
func rawControl(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < 0x20 && c != '\n' && c != '\t') || c == 0x7f {
			return true
		}
	}
	return strings.ContainsAny(s, "\u009b\u202e") || !utf8Valid(s)
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "") == s }

func peerEscapes(t *tally, r *rand.Rand) {
	text := hostileText(r)
	where := pick(r, []string{"certify failure", "certify warning", "certify-director summary", "merge report"})
	input := fmt.Sprintf("%s holding %q", where, text)
	var out bytes.Buffer
	var js []byte
	var back func([]byte) string
	switch where {
	case "certify failure", "certify warning":
		v := suites.Violation{Clause: "errors.delete-disk-missing", Did: text, Response: text, Stderr: text, ExitCode: 1}
		rep := &suites.CertifyReport{Specs: []suites.SpecResult{{Name: "spec", State: suites.StateFailed, Violations: []suites.Violation{v},
			Warnings: []suites.Warning{{Clause: "c", Text: text}}}}}
		rep.WriteFailuresText(&out)
		rep.WriteWarningsText(&out)
		var jb bytes.Buffer
		_ = rep.WriteJSON(&jb)
		js = jb.Bytes()
		back = func(b []byte) string {
			var x struct {
				Specs []struct {
					Violations []suites.Violation `json:"violations"`
				} `json:"specs"`
			}
			if json.Unmarshal(b, &x) != nil || len(x.Specs) == 0 || len(x.Specs[0].Violations) == 0 {
				return ""
			}
			return x.Specs[0].Violations[0].Did
		}
	case "certify-director summary":
		s := dynamicdisks.Summary{Failed: 1, Specs: []dynamicdisks.SpecResult{{Text: "spec", State: "failed", Reason: text}}, SuiteFailure: text}
		s.WriteText(&out)
		js, _ = json.Marshal(s)
		back = func(b []byte) string {
			var x dynamicdisks.Summary
			if json.Unmarshal(b, &x) != nil {
				return ""
			}
			return x.SuiteFailure
		}
	default:
		rep := simulator.SweepReport{Verdict: "fail", Failures: []simulator.ReportFailure{{Seed: "3", Error: text, Replay: "cpilab simulate --seed 3" + text}}}
		out.WriteString(rep.String())
		js, _ = json.Marshal(rep)
		back = func(b []byte) string {
			var x simulator.SweepReport
			if json.Unmarshal(b, &x) != nil || len(x.Failures) == 0 {
				return ""
			}
			return x.Failures[0].Error
		}
	}
	if rawControl(out.String()) {
		t.add(OracleEscape, input, "a raw control sequence reached the text output: %q", out.String())
	}
	if got := back(js); !strings.HasPrefix(text, "error") || (got != text && utf8Valid(text)) {
		t.add(OracleDataLost, input, "the JSON report holds %q, not the text as it came", got)
	}
}

func peerForgedReport(t *tally, r *rand.Rand, dir string, base []byte) {
	doc := string(base)
	forgeries := []struct {
		name string
		edit func(string) string
	}{
		{"verdict fail then pass", func(s string) string {
			return strings.Replace(s, `"verdict": "fail"`, `"verdict": "fail", "verdict": "pass"`, 1)
		}},
		{"Verdict beside verdict", func(s string) string {
			return strings.Replace(s, `"verdict": "fail"`, `"verdict": "fail", "Verdict": "pass"`, 1)
		}},
		{"negative steps", func(s string) string {
			return regexp.MustCompile(`"steps": [0-9]+`).ReplaceAllString(s, fmt.Sprintf(`"steps": -%d`, 1+r.IntN(1<<30)))
		}},
		{"negative elapsed", func(s string) string {
			return regexp.MustCompile(`"elapsed_seconds": [0-9.e+-]+`).ReplaceAllString(s, `"elapsed_seconds": -`+fmt.Sprint(1+r.IntN(9999)))
		}},
		{"steps past int64", func(s string) string {
			return regexp.MustCompile(`"steps": [0-9]+`).ReplaceAllString(s, `"steps": 9223372036854775808`)
		}},
		{"failures emptied twice", func(s string) string {
			return strings.Replace(s, `"failures": [`, `"failures": [], "failures": [`, 1)
		}},
	}
	f := pick(r, forgeries)
	forged := f.edit(doc)
	input := "merge report forged: " + f.name
	if forged == doc {
		t.add(OracleCrash, input, "the forgery changed nothing")
		return
	}
	p := filepath.Join(dir, "forged.json")
	if err := os.WriteFile(p, []byte(forged), 0o644); err != nil {
		t.add(OracleCrash, input, "%v", err)
		return
	}
	defer os.Remove(p)
	rep, err := simulator.ReadSweepReport(p)
	if err == nil {
		if m, merr := simulator.MergeSweepReports([]simulator.SweepReport{rep}, []string{p}); merr == nil && m.Verdict == simulator.VerdictPass {
			t.add(OracleDataLost, input, "a failing sweep merged as PASS")
		}
	}
	t.expectError(input, errors.Is(err, simulator.ErrBadReport) && strings.Contains(err.Error(), p), fmt.Sprint(err))
}
