package adversarial

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// hostileNames are names (disk names, CIDs, instance IDs, path segments)
// an attacker would try: path separators, dot segments, NUL and control
// bytes, invalid UTF-8, unicode tricks, shell and glob syntax, 10 KB.
var hostileNames = []string{
	"", ".", "..", "/", "../x", "a/b", "../../../../etc/passwd", "..\\..\\x", "a\x00b", "\x00",
	strings.Repeat("n", 10<<10), strings.Repeat("d", 256), "名前-ディスク", "disk\u202eexe.txt", "\xff\xfe\xfd",
	"a\nb", "a\rb", " ", "\t", "%2e%2e", "..%2f..%2fetc", "%00", "C:\\x", "disk?x=1", "#frag", "~root",
	"$(touch /tmp/pwned)", "`id`", "*", "[a-z]", "disk;rm -rf /", "\u0001\u0002", "💾", "\u200b", "disk/../disk",
	"./disk", "disk/.", "//disk", "disk\u0085", "\ufeffdisk", "CON", "disk-" + strings.Repeat("é", 200),
}

// hostileBodies are request bodies that are not what any API wants.
func hostileBodies(r *rand.Rand) [][]byte {
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	return [][]byte{
		nil, []byte("{"), []byte("null"), []byte("[]"), []byte("1"), []byte(`"x"`), []byte("{}{}"), []byte(`{"a":1} trailing`),
		[]byte(deep), []byte("\xff\xfe{}"), []byte(`{"a":"\xff"}`), []byte(`{"a":1,"a":2}`), []byte("{\"\x00\":1}"),
		[]byte(`{"disk_size":1e309}`), []byte(strings.Repeat(" ", 1<<20) + "{}"),
		// A key twice, or spelled twice in different cases, in an
		// otherwise plausible body: refused naming the key, never the last
		// value taken.
		[]byte(`{"disk_name":"dup-a","disk_name":"dup-b","disk_size":4,"disk_pool_name":"small"}`),
		[]byte(`{"disk_name":"dup-a","Disk_Name":"dup-b","disk_size":4,"disk_pool_name":"small"}`),
		[]byte(`{"disk_size":4,"DISK_SIZE":400000,"size_mib":1,"size_mib":100000}`),
		[]byte(`{"instance_id":"a","instance_id":"b","new_size":8}`),
		bytes.Repeat([]byte("A"), 1+r.IntN(4096)),
	}
}

// hugeBody is a body past every documented bound (32 MiB of a JSON string).
func hugeBody() []byte {
	b := make([]byte, 0, 32<<20+16)
	b = append(b, `{"disk_name":"`...)
	b = append(b, bytes.Repeat([]byte("x"), 32<<20)...)
	return append(b, `"}`...)
}

// mustJSON marshals v, keeping invalid UTF-8 as it is (json.Marshal would
// replace it): hostile names travel as their bytes.
func mustJSON(v map[string]any) []byte {
	var b bytes.Buffer
	b.WriteByte('{')
	first := true
	for k, x := range v {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteString(rawString(k))
		b.WriteByte(':')
		if s, ok := x.(string); ok {
			b.WriteString(rawString(s))
			continue
		}
		j, err := json.Marshal(x)
		if err != nil {
			panic(err)
		}
		b.Write(j)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// rawString quotes s as a JSON string, escaping what JSON needs and
// keeping other bytes (invalid UTF-8 included) as they are.
func rawString(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20:
			fmt.Fprintf(&b, "\\u%04x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}

// pathSegment escapes a name for a URL path (so that "/" stays in the
// segment, as a client library would send it).
func pathSegment(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '~' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "%%%02X", c)
	}
	return b.String()
}

// guarded serves a handler and counts its panics (net/http would recover
// them and drop the connection; a crash must not go unseen).
type guarded struct {
	h      http.Handler
	panics atomic.Int64
	mu     sync.Mutex
	last   string // guarded by mu
	// plantPanic, when set, makes requests carrying the header
	// X-Cpilab-Plant: panic panic (Plant with OracleCrash).
	plantPanic bool
}

func (g *guarded) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			g.panics.Add(1)
			g.mu.Lock()
			g.last = fmt.Sprint(v)
			g.mu.Unlock()
			w.WriteHeader(http.StatusInternalServerError)
		}
	}()
	if g.plantPanic && r.Header.Get("X-Cpilab-Plant") == "panic" {
		panic("planted panic")
	}
	g.h.ServeHTTP(w, r)
}

// serveHTTP serves h on a loopback port with net/http (the I/O edge).
func serveHTTP(h http.Handler) (url string, closeFn func() error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: nil}
	done := make(chan struct{})
	go func() { _ = srv.Serve(ln); close(done) }()
	return "http://" + ln.Addr().String(), func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := srv.Shutdown(ctx)
		<-done
		return err
	}, nil
}

// probe sends hostile requests to one server.
type probe struct {
	client *http.Client
	base   string
	token  string // bearer token sent unless a request sets Authorization
}

// reply is what came back.
type reply struct {
	status int
	header http.Header
	body   []byte
	err    error // transport error: connection dropped, time-out
}

// requestTimeout bounds one request: past it the server is hung.
const requestTimeout = 30 * time.Second

func (p *probe) do(ctx context.Context, method, path string, hdr map[string]string, body []byte) reply {
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, p.base+path, bytes.NewReader(body))
	if err != nil {
		return reply{err: err}
	}
	if body == nil {
		req.Body = http.NoBody
	}
	if p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return reply{err: err}
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return reply{status: resp.StatusCode, header: resp.Header, body: b, err: err}
}

// crashed reports whether a reply is a crash: no answer, or a 5xx.
func (r reply) crashed() (bool, string) {
	switch {
	case r.err != nil:
		return true, "no answer: " + r.err.Error()
	case r.status >= 500:
		return true, fmt.Sprintf("HTTP %d %s", r.status, shorten(string(r.body)))
	}
	return false, ""
}

// judge applies the crash oracle, and for an input that must be refused
// the clear-error oracle (clear decides what a clear body is).
func judge(t *tally, input string, r reply, mustRefuse bool, clear func(reply) bool) {
	if c, why := r.crashed(); c {
		t.add(OracleCrash, input, why)
		if mustRefuse {
			t.expectError(input, false, why)
		}
		return
	}
	if !mustRefuse {
		return
	}
	ok := r.status >= 400 && r.status < 500 && clear(r)
	t.expectError(input, ok, fmt.Sprintf("HTTP %d %s", r.status, shorten(string(r.body))))
}

// isMuxNotFound: net/http's own answer to a path no route matches, which
// says what is wrong (no such path) in its status.
func isMuxNotFound(r reply) bool {
	return (r.status == http.StatusNotFound || r.status == http.StatusMethodNotAllowed) && len(r.body) > 0
}
