package adversarial

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
)

// cpiCase is one hostile CPI executable.
type cpiCase struct {
	name string
	// script is the body of a /bin/sh script; "" with path set: path is
	// run as it is (a missing file, a directory).
	script string
	path   string
	// ok: a caller must take the answer (a correct answer behind noise);
	// otherwise the call must fail with a typed error.
	ok bool
	// mode is the script's file mode (default 0755).
	mode os.FileMode
}

const okAnswer = `{"result":"disk-1","error":null,"log":""}`

// cpiCases are the hostile CPIs: huge output, children holding stdout
// (setsid or not), hung, malformed, duplicate keys, invalid UTF-8, killed,
// missing or not executable.
func cpiCases(dir string) []cpiCase {
	echo := func(s string) string { return "printf '%s' '" + strings.ReplaceAll(s, "'", `'\''`) + "'\n" }
	cs := []cpiCase{
		{name: "1 GB on stdout", script: "head -c 1000000000 /dev/zero\n"},
		{name: "a huge answer string", script: "printf '{\"result\":\"'; head -c 3000000 /dev/zero | tr '\\0' a; printf '\",\"error\":null,\"log\":\"\"}'\n"},
		{name: "stderr flood then a correct answer", script: "head -c 5000000 /dev/zero >&2\n" + echo(okAnswer), ok: true},
		{name: "a setsid child holding stdout, correct answer", script: "setsid sleep 30 &\n" + echo(okAnswer), ok: true},
		{name: "a setsid child ignoring SIGTERM holding stdout and stderr", script: "setsid sh -c 'trap \"\" TERM; sleep 30' &\n" + echo(okAnswer), ok: true},
		{name: "a setsid child holding stdout, no answer", script: "setsid sleep 30 &\n"},
		{name: "twenty children in the group holding stdout", script: "for i in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do sleep 30 & done\n" + echo(okAnswer), ok: true},
		{name: "hung", script: "sleep 30\n"},
		{name: "hung after answering", script: echo(okAnswer) + "exec sleep 30\n"},
		{name: "hung in a loop ignoring SIGTERM", script: "trap '' TERM\nwhile :; do sleep 1; done\n"},
		{name: "killed by SIGKILL", script: "kill -9 $$\n"},
		{name: "killed after half an answer", script: `printf '{"result":"disk-1",'` + "\nkill -9 $$\n"},
		{name: "answer then exit 3", script: echo(okAnswer) + "exit 3\n", ok: true},
		{name: "no output", script: "exit 0\n"},
		{name: "duplicate error key", script: echo(`{"error":{"type":"Bosh::Clouds::CloudError","message":"m","ok_to_retry":false},"error":null,"result":"disk-1","log":""}`)},
		{name: "duplicate key deep", script: echo(`{"result":{"a":1,"a":2},"error":null,"log":""}`)},
		{name: "invalid UTF-8", script: "printf '{\"result\":\"disk-\\377\\376\",\"error\":null,\"log\":\"\"}'\n"},
		{name: "invalid UTF-8 in a key", script: "printf '{\"result\":null,\"error\":null,\"log\":\"\",\"\\377\":1}'\n"},
		{name: "a NUL in the answer", script: "printf '{\"result\":\"disk-1\",\"error\":null,\"log\":\"\"}\\000'\n"},
		{name: "two objects", script: echo(okAnswer + okAnswer)},
		{name: "trailing garbage", script: echo(okAnswer + "garbage")},
		{name: "truncated", script: echo(`{"result":"disk-1","error":nu`)},
		{name: "not an object", script: echo(`["disk-1"]`)},
		{name: "null", script: echo(`null`)},
		{name: "missing log", script: echo(`{"result":"disk-1","error":null}`)},
		{name: "log not a string", script: echo(`{"result":"disk-1","error":null,"log":7}`)},
		{name: "ok_to_retry a string", script: echo(`{"result":null,"error":{"type":"Bosh::Clouds::CloudError","message":"m","ok_to_retry":"yes"},"log":""}`)},
		{name: "error a string", script: echo(`{"result":null,"error":"boom","log":""}`)},
		{name: "nesting 100000 deep", script: "printf '{\"result\":'; head -c 100000 /dev/zero | tr '\\0' '['; head -c 100000 /dev/zero | tr '\\0' ']'; printf ',\"error\":null,\"log\":\"\"}'\n"},
		{name: "a control byte in a string", script: "printf '{\"result\":\"disk\\001\",\"error\":null,\"log\":\"\"}'\n"},
		{name: "a byte-order mark", script: "printf '\\357\\273\\277'\n" + echo(okAnswer)},
		{name: "HTML", script: echo(`<html><body>502 Bad Gateway</body></html>`)},
		{name: "a missing executable", path: filepath.Join(dir, "no-such-cpi")},
		{name: "a directory", path: dir},
		{name: "not executable", script: echo(okAnswer), mode: 0o644},
		{name: "a binary of garbage", script: "\x7fELF\x02\x01\x01garbage", mode: 0o755},
	}
	return cs
}

// Bounds of the runner the area checks.
const (
	cpiTimeout   = 1500 * time.Millisecond
	cpiWaitDelay = 300 * time.Millisecond
	cpiMaxOutput = 1 << 20
	// cpiHang: a call that takes longer than this hung past its bound.
	cpiHang = cpiTimeout + cpiWaitDelay + 6*time.Second
)

func runCPI(ctx context.Context, e *env, t *tally, n int) error {
	dir := filepath.Join(e.dir, "cpis")
	tmp := filepath.Join(e.dir, "tmp")
	for _, d := range []string{dir, tmp} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	cases := cpiCases(dir)
	paths := make([]string, len(cases))
	for i, c := range cases {
		if c.path != "" {
			paths[i] = c.path
			continue
		}
		paths[i] = filepath.Join(dir, fmt.Sprintf("cpi-%02d", i))
		body := "#!/bin/sh\n" + c.script
		if strings.HasPrefix(c.script, "\x7fELF") {
			body = c.script
		}
		mode := c.mode
		if mode == 0 {
			mode = 0o755
		}
		if err := os.WriteFile(paths[i], []byte(body), mode); err != nil {
			return err
		}
	}
	env := append(cpiv2.ScrubbedEnv(nil), e.marker, "TMPDIR="+tmp)
	outside, err := hashTree(e.outside, "")
	if err != nil {
		return err
	}
	order := e.rng.Perm(len(cases))
	for i := 0; i < n; i++ {
		if err := ctx.Err(); err != nil {
			return err
		}
		k := order[i%len(order)]
		if i >= len(order) {
			k = e.rng.IntN(len(cases))
		}
		c := cases[k]
		input := "CPI: " + c.name
		t.tried()
		stdin := []byte(`{"method":"create_disk","arguments":[1024,{},null],"context":{"director_uuid":"adversarial"},"api_version":2}`)
		if e.rng.IntN(3) == 0 {
			stdin = pick(e.rng, hostileBodies(e.rng))
		}
		start := time.Now()
		err := func() (err error) {
			defer func() {
				if v := recover(); v != nil {
					err = fmt.Errorf("panic: %v", v)
					t.add(OracleCrash, input, "%v", err)
				}
			}()
			res, err := cpiv2.RunProcess(ctx, cpiv2.ProcessConfig{Command: []string{paths[k]}, Env: env, Timeout: cpiTimeout,
				WaitDelay: cpiWaitDelay, MaxOutput: cpiMaxOutput}, stdin)
			if err != nil {
				return err
			}
			_, err = cpiv2.DecodeResponse(res.Stdout)
			return err
		}()
		if el := time.Since(start); el > cpiHang {
			t.add(OracleCrash, input, "the call took %v, past its bound of %v", el.Round(time.Millisecond), cpiHang)
		}
		switch {
		case c.ok && err != nil:
			t.add(OracleCrash, input, "a correct answer was refused: %v", err)
		case !c.ok:
			var ire *cpiv2.InvalidResponseError
			var se *cpiv2.StartError
			clear := err != nil && (errors.As(err, &ire) || errors.As(err, &se)) && err.Error() != ""
			t.expectError(input, clear, fmt.Sprintf("got %v", err))
		}
		if left := e.awaitNoMarked(2 * time.Second); len(left) > 0 {
			t.add(OracleLeak, input, "processes the CPI started still run after the call: %v", left)
			e.kill(left)
		}
		outside = e.checkOutside(t, input, outside)
	}
	if e.planted[OracleLeak] {
		// A daemon that leaves the session and closes its output (given
		// time to do so before the CPI exits): no runner can see it; the
		// process oracle must.
		t.tried()
		p := filepath.Join(dir, "planted-daemon")
		_ = os.WriteFile(p, []byte("#!/bin/sh\nsetsid sleep 30 </dev/null >/dev/null 2>&1 &\nsleep 0.3\n"+"printf '%s' '"+okAnswer+"'\n"), 0o755)
		_, _ = cpiv2.RunProcess(ctx, cpiv2.ProcessConfig{Command: []string{p}, Env: env, Timeout: cpiTimeout, WaitDelay: cpiWaitDelay}, nil)
		if left := e.awaitNoMarked(time.Second); len(left) > 0 {
			t.add(OracleLeak, "planted daemon", "processes the CPI started still run after the call: %v", left)
			e.kill(left)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	_ = os.Remove(tmp) // only when empty: what a CPI left there is a leak
	return nil
}
