package dockerapi_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cpilab/cpilab/internal/dockertest"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/cpilab/cpilab/fakeiaas"
	"github.com/cpilab/cpilab/fakeiaas/dockerapi"
)

// The differential test: one recorded sequence of Docker Engine API
// requests — the ones the upstream BOSH Docker CPI sends (its own client at
// the daemon's API version), plus the error cases around them — sent to the
// Docker face and to a real Docker daemon (a private one, scripts/dockerd.sh),
// comparing, row by row, the status codes, the error messages a client
// matches on and the fields a client reads. A row the face answers
// differently on purpose names its id in docs/docker.md's table of
// deviations, with the reason; any other difference fails the test.

// diffRow is one request of the sequence.
type diffRow struct {
	id  string
	cpi bool // the upstream Docker CPI sends this request (or relies on this answer)
	// method and path (without the /vX.Y prefix); {var} is replaced by a
	// value captured earlier on the same side.
	method, path string
	version      string // API version prefix (default: the daemon's maximum); "-" for none
	header       map[string]string
	body         any // nil: none; []byte or string: raw; else JSON with Content-Type application/json
	// fields are the JSON paths compared (dot-separated; {var} replaced).
	fields []string
	// capture stores JSON paths of the answer as side variables.
	capture map[string]string
	// exec, when set, runs an exec through the hijacked stream instead.
	exec *diffExec
	// contentType compares the answer's Content-Type (after ";").
	contentType bool
}

// diffExec is one exec: create, start with Upgrade (hijacked), inspect.
type diffExec struct {
	container string
	cmd       []string
	stdin     []byte
	upgrade   bool // Upgrade: tcp (ContainerExecAttach); else a plain start (ContainerExecStart)
}

// diffAnswer is what one side answered to one row, normalized.
type diffAnswer struct {
	Status      int
	Message     string            `json:",omitempty"`
	Fields      map[string]string `json:",omitempty"`
	ContentType string            `json:",omitempty"`
	Exec        *execAnswer       `json:",omitempty"`
}

type execAnswer struct {
	CreateStatus int
	StartStatus  int
	ContentType  string
	Stdout       string // for a tar: its members, name=content
	Stderr       string
	ExitCode     int
	Running      bool
}

// diffSide is one Docker API endpoint under test.
type diffSide struct {
	name string
	sock string
	http *http.Client
	vars map[string]string
}

func newDiffSide(name, sock string) *diffSide {
	return &diffSide{name: name, sock: sock, vars: map[string]string{}, http: &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}}
}

var varRef = regexp.MustCompile(`\{([a-z0-9_]+)\}`)

func (s *diffSide) subst(tb testing.TB, in string) string {
	return varRef.ReplaceAllStringFunc(in, func(m string) string {
		v, ok := s.vars[m[1:len(m)-1]]
		if !ok {
			tb.Fatalf("%s: no variable %s captured", s.name, m)
		}
		return v
	})
}

var (
	hex64     = regexp.MustCompile(`\b[0-9a-f]{64}\b`)
	timestamp = regexp.MustCompile(`\b[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9:]+)\b`)
)

// normalize replaces this side's captured values by their names, then any
// other 64-hex ID and timestamp by a placeholder.
func (s *diffSide) normalize(v string) string {
	names := make([]string, 0, len(s.vars))
	for n := range s.vars {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return len(s.vars[names[i]]) > len(s.vars[names[j]]) })
	for _, n := range names {
		if val := s.vars[n]; len(val) >= 12 {
			v = strings.ReplaceAll(v, val, "<"+n+">")
		}
	}
	v = hex64.ReplaceAllString(v, "<hex64>")
	return timestamp.ReplaceAllString(v, "<time>")
}

func (s *diffSide) do(tb testing.TB, api string, r diffRow) diffAnswer {
	tb.Helper()
	if r.exec != nil {
		return diffAnswer{Exec: s.exec(tb, api, r)}
	}
	var body io.Reader
	ctype := ""
	switch b := r.body.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(b)
	case string:
		body = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			tb.Fatal(err)
		}
		body, ctype = strings.NewReader(s.subst(tb, string(j))), "application/json"
	}
	req, err := http.NewRequest(r.method, "http://docker"+s.prefix(r, api)+s.subst(tb, r.path), body)
	if err != nil {
		tb.Fatal(err)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for k, v := range r.header {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	resp, err := s.http.Do(req)
	if err != nil {
		tb.Fatalf("%s: row %s: %v", s.name, r.id, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatalf("%s: row %s: reading the answer: %v", s.name, r.id, err)
	}
	a := diffAnswer{Status: resp.StatusCode}
	if r.contentType {
		a.ContentType, _, _ = strings.Cut(resp.Header.Get("Content-Type"), ";")
	}
	var doc any
	if len(out) > 0 && strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		dec := json.NewDecoder(bytes.NewReader(out))
		if err := dec.Decode(&doc); err != nil {
			tb.Fatalf("%s: row %s: answer %q is not JSON: %v", s.name, r.id, out, err)
		}
	}
	if resp.StatusCode >= 400 {
		// A Docker client reads {"message": …}, or the body as text.
		if m, ok := doc.(map[string]any); ok {
			a.Message, _ = m["message"].(string)
		} else {
			a.Message = strings.TrimSpace(string(out))
		}
		a.Message = s.normalize(a.Message)
	}
	for name, p := range r.capture {
		if resp.StatusCode < 300 {
			if v, ok := lookupJSON(doc, p); ok {
				s.vars[name] = fmt.Sprint(v)
			}
		}
	}
	if len(r.fields) > 0 {
		a.Fields = map[string]string{}
		for _, f := range r.fields {
			p := s.subst(tb, f)
			v, ok := lookupJSON(doc, p)
			if f == "Mounts" { // Docker lists a container's mounts in map order
				v, ok = mountsOf(doc), true
			}
			if n, isShape := strings.CutPrefix(p, "shape:"); isShape {
				v, ok = addressShape(doc, n), true
			}
			switch {
			case !ok:
				a.Fields[f] = "<absent>"
			default:
				j, _ := json.Marshal(v)
				a.Fields[f] = s.normalize(string(j))
			}
		}
	}
	// Import answers a stream of JSON messages; an error is one of them.
	if r.path == "/images/create" && resp.StatusCode == http.StatusOK {
		var msgs []string
		dec := json.NewDecoder(bytes.NewReader(out))
		for {
			var m struct {
				Error       string `json:"error"`
				ErrorDetail *struct {
					Message string `json:"message"`
				} `json:"errorDetail"`
			}
			if err := dec.Decode(&m); err != nil {
				break
			}
			if m.ErrorDetail != nil {
				msgs = append(msgs, m.ErrorDetail.Message)
			}
		}
		a.Message = s.normalize(strings.Join(msgs, "; "))
	}
	return a
}

// mountsOf is a container's mounts as sorted "type name destination rw" lines.
func mountsOf(doc any) []string {
	var out []string
	ms, _ := lookupJSON(doc, "Mounts")
	list, _ := ms.([]any)
	for _, m := range list {
		mm, _ := m.(map[string]any)
		out = append(out, fmt.Sprintf("%v %v %v %v", mm["Type"], mm["Name"], mm["Destination"], mm["RW"]))
	}
	sort.Strings(out)
	return out
}

// addressShape describes, for a network with a subnet from Docker's
// default pools, how the addresses relate rather than which pool was
// taken (Docker's allocator goes round the pools and skips those the
// host's routes and other daemons' bridges already use, so a busy machine
// gets a /20 of 192.168.0.0/16 where a quiet one gets a /16 of
// 172.16.0.0/12; the face takes the first pool none of its own networks
// overlaps): "Networks.NAME" of a container's inspect, or "IPAM" of a
// network's.
func addressShape(doc any, p string) string {
	if p == "IPAM" {
		c, _ := lookupJSON(doc, "IPAM.Config.0")
		m, _ := c.(map[string]any)
		pfx, err := netip.ParsePrefix(fmt.Sprint(m["Subnet"]))
		if err != nil {
			return fmt.Sprintf("no subnet: %v", m)
		}
		gw, _ := netip.ParseAddr(fmt.Sprint(m["Gateway"]))
		return fmt.Sprintf("a default pool, whole: %v, gateway the first address: %v",
			isDefaultPool(pfx), gw == pfx.Masked().Addr().Next())
	}
	ep, _ := lookupJSON(doc, "NetworkSettings."+p)
	m, _ := ep.(map[string]any)
	gw, err1 := netip.ParseAddr(fmt.Sprint(m["Gateway"]))
	ip, err2 := netip.ParseAddr(fmt.Sprint(m["IPAddress"]))
	if err1 != nil || err2 != nil || !ip.Is4() {
		return fmt.Sprintf("no address: %v", m)
	}
	a := ip.As4()
	bits, _ := m["IPPrefixLen"].(float64)
	return fmt.Sprintf("address the one after the gateway: %v, prefix a default pool's: %v, MAC %v",
		ip == gw.Next(), isDefaultPool(netip.PrefixFrom(ip, int(bits)).Masked()), m["MacAddress"] == fmt.Sprintf("02:42:%02x:%02x:%02x:%02x", a[0], a[1], a[2], a[3]))
}

// isDefaultPool says whether p is one whole pool of Docker's default
// address pools (libnetwork ipamutils): a /16 of 172.16.0.0/12 from
// 172.17.0.0 on, or a /20 of 192.168.0.0/16.
func isDefaultPool(p netip.Prefix) bool {
	switch {
	case netip.MustParsePrefix("172.16.0.0/12").Contains(p.Addr()):
		return p.Bits() == 16 && p.Addr().As4()[1] >= 17 && p == p.Masked()
	case netip.MustParsePrefix("192.168.0.0/16").Contains(p.Addr()):
		return p.Bits() == 20 && p == p.Masked()
	}
	return false
}

func (s *diffSide) prefix(r diffRow, api string) string {
	switch r.version {
	case "-":
		return ""
	case "":
		return "/v" + api
	default:
		return "/v" + r.version
	}
}

// lookupJSON follows a dot-separated path through decoded JSON; a
// numeric element indexes an array, "#" is an array's length.
func lookupJSON(doc any, p string) (any, bool) {
	cur := doc
	for _, k := range strings.Split(p, ".") {
		switch c := cur.(type) {
		case map[string]any:
			v, ok := c[k]
			if !ok {
				return nil, false
			}
			cur = v
		case []any:
			if k == "#" {
				cur = len(c)
				continue
			}
			var i int
			if _, err := fmt.Sscanf(k, "%d", &i); err != nil || i < 0 || i >= len(c) {
				return nil, false
			}
			cur = c[i]
		default:
			return nil, false
		}
	}
	return cur, true
}

func (s *diffSide) exec(tb testing.TB, api string, r diffRow) *execAnswer {
	tb.Helper()
	e := r.exec
	ans := &execAnswer{}
	create, _ := json.Marshal(map[string]any{"Cmd": e.cmd, "AttachStdin": e.stdin != nil, "AttachStdout": e.upgrade, "AttachStderr": e.upgrade})
	req, _ := http.NewRequest("POST", "http://docker/v"+api+"/containers/"+s.subst(tb, e.container)+"/exec", bytes.NewReader(create))
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.http.Do(req)
	if err != nil {
		tb.Fatalf("%s: row %s: exec create: %v", s.name, r.id, err)
	}
	var id struct {
		ID string `json:"Id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&id)
	resp.Body.Close()
	ans.CreateStatus = resp.StatusCode
	if resp.StatusCode != http.StatusCreated {
		return ans
	}
	conn, err := net.Dial("unix", s.sock)
	if err != nil {
		tb.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(60 * time.Second))
	start, _ := http.NewRequest("POST", "http://docker/v"+api+"/exec/"+id.ID+"/start", strings.NewReader(`{"Detach":false,"Tty":false}`))
	start.Header.Set("Content-Type", "application/json")
	if e.upgrade {
		start.Header.Set("Connection", "Upgrade")
		start.Header.Set("Upgrade", "tcp")
	}
	if err := start.Write(conn); err != nil {
		tb.Fatal(err)
	}
	br := bufio.NewReader(conn)
	sresp, err := http.ReadResponse(br, start)
	if err != nil {
		tb.Fatalf("%s: row %s: exec start: %v", s.name, r.id, err)
	}
	ans.StartStatus = sresp.StatusCode
	ans.ContentType = sresp.Header.Get("Content-Type")
	if e.stdin != nil {
		if _, err := conn.Write(e.stdin); err != nil {
			tb.Fatalf("%s: row %s: exec stdin: %v", s.name, r.id, err)
		}
	}
	_ = conn.(*net.UnixConn).CloseWrite()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, br); err != nil {
		tb.Fatalf("%s: row %s: exec output: %v", s.name, r.id, err)
	}
	ans.Stdout, ans.Stderr = tarMembers(stdout.Bytes()), stderr.String()
	for i := 0; ; i++ { // the exec's end can lag the stream's end on a daemon
		var insp struct {
			Running  bool
			ExitCode *int
		}
		iresp, err := s.http.Get("http://docker/v" + api + "/exec/" + id.ID + "/json")
		if err != nil {
			tb.Fatal(err)
		}
		_ = json.NewDecoder(iresp.Body).Decode(&insp)
		iresp.Body.Close()
		if insp.Running && i < 200 {
			time.Sleep(25 * time.Millisecond) // a real daemon's exec end: test-side wall clock
			continue
		}
		ans.Running = insp.Running
		if insp.ExitCode != nil {
			ans.ExitCode = *insp.ExitCode
		}
		return ans
	}
}

// tarMembers lists a tar stream's members as name=content lines (a tar's
// headers carry owners and times that differ between machines); other
// output is returned as is.
func tarMembers(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	tr := tar.NewReader(bytes.NewReader(b))
	var out []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return strings.Join(out, "\n")
		}
		if err != nil {
			return "not a tar: " + string(b)
		}
		c, _ := io.ReadAll(tr)
		out = append(out, fmt.Sprintf("%s %c %o=%s", h.Name, h.Typeflag, h.Mode&0o777, c))
	}
}

// realDocker is the socket of a real Docker daemon for the test
// (internal/dockertest).
func realDocker(t *testing.T) string { return dockertest.Socket(t) }

// rootfsTar is a tiny root file system for the containers: bash, sleep,
// tar and chgrp of this machine with the shared libraries they load, and
// a group vcap (the Docker CPI's chgrp).
func rootfsTar(tb testing.TB) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	seen := map[string]bool{}
	add := func(name string, mode int64, content []byte) {
		if seen[name] {
			return
		}
		seen[name] = true
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(content))}); err != nil {
			tb.Fatal(err)
		}
		if _, err := tw.Write(content); err != nil {
			tb.Fatal(err)
		}
	}
	for _, d := range []string{"bin/", "etc/", "lib/", "lib64/", "tmp/", "usr/", "usr/lib/", "var/", "var/vcap/", "var/vcap/bosh/", "proc/", "sys/", "dev/"} {
		if err := tw.WriteHeader(&tar.Header{Name: d, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			tb.Fatal(err)
		}
	}
	for _, tool := range []string{"bash", "sleep", "tar", "chgrp"} {
		p, err := exec.LookPath(tool)
		if err != nil {
			tb.Skipf("no %s on this machine to build the test image from: %v", tool, err)
		}
		p, _ = filepath.EvalSymlinks(p)
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		add("bin/"+tool, 0o755, b)
		out, err := exec.Command("ldd", p).Output()
		if err != nil {
			tb.Skipf("ldd %s: %v (the test image needs the libraries it loads)", p, err)
		}
		for _, lib := range regexp.MustCompile(`(/[^ \t\n]+)`).FindAllString(string(out), -1) {
			real, err := filepath.EvalSymlinks(lib)
			if err != nil {
				continue
			}
			b, err := os.ReadFile(real)
			if err != nil {
				tb.Fatal(err)
			}
			add(strings.TrimPrefix(lib, "/"), 0o755, b)
		}
	}
	add("etc/group", 0o644, []byte("root:x:0:\nvcap:x:1000:\n"))
	add("etc/passwd", 0o644, []byte("root:x:0:0:root:/root:/bin/bash\n"))
	add("var/vcap/bosh/settings.json", 0o640, []byte(`{"agent_id":"a1"}`))
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

// diffRows is the recorded sequence. It follows the upstream Docker CPI
// (cloudfoundry/bosh-docker-cpi-release, src/bosh-docker-cpi) through a
// stemcell import (stemcell/fs_importer.go), a network (vm/networks.go), a
// VM (vm/factory.go), its files (vm/file_service.go), an attach by
// recreate (vm/container.go), disks (disk/) and the deletes, with the
// requests its client (docker/docker/client v28) sends at the daemon's API
// version, and puts the error cases around each call in between.
func diffRows(image []byte, name string) []diffRow {
	img := "bosh.io/stemcells:img-" + name
	net := "cpilab-diff-net-" + name
	c1, c2, c3, c4 := "c-1-"+name, "c-2-"+name, "c-3-"+name, "c-4-"+name
	dyn := "cpilab-diff-dyn-" + name
	eph := "vol-eph-" + c1
	disk := "vol-disk-" + name
	json := map[string]string{"Content-Type": "application/json"}
	cmd := []string{"/bin/bash", "-c", "exec /bin/sleep 100000"}
	createBody := func(ip string, binds ...string) map[string]any {
		return map[string]any{
			"Image": img, "Cmd": cmd, "Env": []string{"reschedule:on-node-failure"}, "ExposedPorts": map[string]any{},
			"HostConfig": map[string]any{"Binds": binds, "Privileged": true, "PublishAllPorts": true},
			"NetworkingConfig": map[string]any{"EndpointsConfig": map[string]any{
				net: map[string]any{"IPAMConfig": map[string]any{"IPv4Address": ip}}}},
		}
	}
	inspectFields := []string{"Name", "State.Status", "State.Running", "Config.Image", "Config.Cmd", "Config.Env",
		"HostConfig.Binds", "HostConfig.Privileged", "HostConfig.PublishAllPorts",
		"Mounts",
		"NetworkSettings.Networks." + net + ".IPAMConfig",
		"NetworkSettings.Networks." + net + ".NetworkID", "NetworkSettings.Networks." + net + ".EndpointID",
		"NetworkSettings.Networks." + net + ".Gateway", "NetworkSettings.Networks." + net + ".IPAddress",
		"NetworkSettings.Networks." + net + ".IPPrefixLen", "NetworkSettings.Networks." + net + ".MacAddress",
		"Node"}
	return []diffRow{
		// The daemon and its API versions.
		{id: "ping", cpi: true, method: "GET", path: "/_ping", version: "-"},
		{id: "ping.head", method: "HEAD", path: "/_ping", version: "-"},
		{id: "version", method: "GET", path: "/version", fields: []string{"ApiVersion", "MinAPIVersion"}},
		{id: "version.too-new", cpi: true, method: "GET", path: "/version", version: "1.99"},
		{id: "version.too-old", method: "GET", path: "/version", version: "1.11"},
		{id: "route.unknown", method: "GET", path: "/no/such/route"},

		// Stemcell import (stemcell/fs_importer.go).
		{id: "image.import", cpi: true, method: "POST", path: "/images/create?fromSrc=-&message=bosh&platform=linux%2Famd64&repo=bosh.io%2Fstemcells&tag=img-" + name, body: image, header: map[string]string{"Content-Type": "text/plain"}},
		{id: "image.import.not-tar", method: "POST", path: "/images/create?fromSrc=-&repo=bosh.io%2Fstemcells&tag=bad-" + name, body: "this is not a tar", header: map[string]string{"Content-Type": "text/plain"}},
		{id: "image.inspect", method: "GET", path: "/images/" + img + "/json", fields: []string{"RepoTags", "Os", "Architecture"}, capture: map[string]string{"imageid": "Id"}},
		{id: "image.inspect.missing", method: "GET", path: "/images/bosh.io/stemcells:img-missing/json"},

		// The network (vm/networks.go createManualNetwork: CheckDuplicate below API 1.44).
		{id: "network.create", cpi: true, method: "POST", path: "/networks/create", body: map[string]any{
			"Name": net, "CheckDuplicate": true, "Driver": "bridge", "EnableIPv6": false, "Internal": false, "Attachable": false,
			"IPAM": map[string]any{"Driver": "default", "Config": []any{map[string]any{"Subnet": "10.250.17.0/24"}}}},
			capture: map[string]string{"netid": "Id"}},
		{id: "network.create.exists", cpi: true, method: "POST", path: "/networks/create", body: map[string]any{
			"Name": net, "CheckDuplicate": true, "Driver": "bridge",
			"IPAM": map[string]any{"Driver": "default", "Config": []any{map[string]any{"Subnet": "10.250.17.0/24"}}}}},
		{id: "network.create.overlap", cpi: true, method: "POST", path: "/networks/create", body: map[string]any{
			"Name": net + "-2", "CheckDuplicate": true, "Driver": "bridge",
			"IPAM": map[string]any{"Driver": "default", "Config": []any{map[string]any{"Subnet": "10.250.17.0/24"}}}}},
		{id: "network.inspect", method: "GET", path: "/networks/" + net, fields: []string{"Name", "Id", "Driver", "Scope", "IPAM.Config"}},
		// A dynamic network (vm/networks.go createDynamicNetwork): no subnet
		// given, Docker takes one from its default pools.
		{id: "network.create.dynamic", cpi: true, method: "POST", path: "/networks/create", body: map[string]any{
			"Name": dyn, "CheckDuplicate": true, "Driver": "bridge", "EnableIPv6": false, "Internal": false, "Attachable": false},
			capture: map[string]string{"dynid": "Id"}},
		{id: "network.inspect.dynamic", method: "GET", path: "/networks/" + dyn, fields: []string{"Name", "Driver", "shape:IPAM"}},
		{id: "network.inspect.missing", method: "GET", path: "/networks/no-such-net-" + name},

		// Volumes (disk/factory.go, disk/volume.go).
		{id: "volume.create", cpi: true, method: "POST", path: "/volumes/create", body: map[string]any{"Name": disk, "Driver": "local"},
			fields: []string{"Name", "Driver", "Scope", "Labels", "Options"}},
		{id: "volume.create.again", method: "POST", path: "/volumes/create", body: map[string]any{"Name": disk, "Driver": "local"}, fields: []string{"Name"}},
		{id: "volume.create.no-content-type", method: "POST", path: "/volumes/create", body: `{"Name":"vol-x-` + name + `"}`},
		{id: "volume.create.text-plain", method: "POST", path: "/volumes/create", body: `{"Name":"vol-x-` + name + `"}`, header: map[string]string{"Content-Type": "text/plain"}},
		{id: "volume.create.empty-body", method: "POST", path: "/volumes/create", body: "", header: json},
		{id: "network.create.empty-body", method: "POST", path: "/networks/create", body: "", header: json},
		{id: "container.create.empty-body", method: "POST", path: "/containers/create?name=" + c3, body: "", header: json},
		{id: "volume.create.bad-json", method: "POST", path: "/volumes/create", body: `{"Name":`, header: json},
		{id: "volume.inspect", cpi: true, method: "GET", path: "/volumes/" + disk, fields: []string{"Name", "Driver", "Scope"}},
		{id: "volume.inspect.missing", cpi: true, method: "GET", path: "/volumes/vol-missing-" + name},
		{id: "volume.list", cpi: true, method: "GET", path: "/volumes", fields: []string{"Volumes.#", "Volumes.0.Name"}},

		// A VM (vm/factory.go Create).
		{id: "container.create", cpi: true, method: "POST", path: "/containers/create?name=" + c1 + "&platform=linux%2Famd64",
			body: createBody("10.250.17.5", eph+":/var/vcap/data/", "/lib/modules:/usr/lib/modules"), fields: []string{"Warnings"}, capture: map[string]string{"ctrid": "Id"}},
		{id: "container.create.name-in-use", method: "POST", path: "/containers/create?name=" + c1, body: createBody("10.250.17.6")},
		{id: "container.create.no-image", method: "POST", path: "/containers/create?name=" + c3, body: map[string]any{"Image": "nope:1", "Cmd": cmd}},
		{id: "container.create.no-content-type", method: "POST", path: "/containers/create?name=" + c3, body: `{"Image":"` + img + `","Cmd":["/bin/sleep","1"]}`},
		{id: "container.create.bad-name", method: "POST", path: "/containers/create?name=bad%20name", body: createBody("10.250.17.6")},
		{id: "container.create.dup-mount", cpi: true, method: "POST", path: "/containers/create?name=" + c3,
			body: map[string]any{"Image": img, "Cmd": cmd, "HostConfig": map[string]any{"Binds": []string{"vol-eph-" + c3 + ":/var/vcap/data/", disk + ":/var/vcap/data"}}}},
		{id: "container.create.dup-mount.volume-left", cpi: true, method: "GET", path: "/volumes/vol-eph-" + c3, fields: []string{"Name"}},
		{id: "container.inspect.created", cpi: true, method: "GET", path: "/containers/" + c1 + "/json", fields: inspectFields},
		{id: "volume.created-by-bind", cpi: true, method: "GET", path: "/volumes/" + eph, fields: []string{"Name", "Driver"}},
		{id: "container.start", cpi: true, method: "POST", path: "/containers/" + c1 + "/start"},
		{id: "container.start.again", method: "POST", path: "/containers/" + c1 + "/start"},
		{id: "container.start.missing", method: "POST", path: "/containers/c-missing-" + name + "/start"},
		{id: "container.inspect", cpi: true, method: "GET", path: "/containers/" + c1 + "/json", fields: inspectFields},
		{id: "container.create.dynamic", cpi: true, method: "POST", path: "/containers/create?name=" + c4 + "&platform=linux%2Famd64",
			body: map[string]any{"Image": img, "Cmd": cmd, "HostConfig": map[string]any{"Privileged": true},
				"NetworkingConfig": map[string]any{"EndpointsConfig": map[string]any{dyn: map[string]any{"IPAMConfig": map[string]any{}}}}}},
		{id: "container.start.dynamic", cpi: true, method: "POST", path: "/containers/" + c4 + "/start"},
		{id: "container.inspect.dynamic", cpi: true, method: "GET", path: "/containers/" + c4 + "/json", fields: []string{
			"NetworkSettings.Networks." + dyn + ".NetworkID", "NetworkSettings.Networks." + dyn + ".EndpointID", "shape:Networks." + dyn}},
		{id: "container.remove.dynamic", cpi: true, method: "DELETE", path: "/containers/" + c4 + "?force=1"},
		{id: "container.inspect.missing", cpi: true, method: "GET", path: "/containers/c-missing-" + name + "/json"},
		{id: "volume.remove.in-use", method: "DELETE", path: "/volumes/" + eph + "?force=1"},

		// A second VM with the same static IP.
		{id: "container.create.same-ip", cpi: true, method: "POST", path: "/containers/create?name=" + c2 + "&platform=linux%2Famd64",
			body: createBody("10.250.17.5", "vol-eph-"+c2+":/var/vcap/data/")},
		{id: "container.start.same-ip", cpi: true, method: "POST", path: "/containers/" + c2 + "/start"},
		{id: "container.inspect.same-ip", method: "GET", path: "/containers/" + c2 + "/json", fields: []string{"State.Running", "State.Status"}},
		{id: "container.remove.same-ip", cpi: true, method: "DELETE", path: "/containers/" + c2 + "?force=1"},
		{id: "volume.remove.same-ip", cpi: true, method: "DELETE", path: "/volumes/vol-eph-" + c2 + "?force=1"},

		// Its files (vm/file_service.go): tar -x of stdin, tar -c of one file.
		{id: "exec.upload", cpi: true, exec: &diffExec{container: c1, upgrade: true, cmd: []string{"tar", "-x", "-f", "-", "-C", "/"},
			stdin: tarOfFiles(map[string]string{"var/vcap/bosh/warden-cpi-agent-env.json": `{"agent_id":"agent-1"}`})}},
		{id: "exec.download", cpi: true, exec: &diffExec{container: c1, upgrade: true, cmd: []string{"tar", "-c", "-f", "-", "-C", "/var/vcap/bosh", "--", "warden-cpi-agent-env.json"}}},
		{id: "exec.download.missing", cpi: true, exec: &diffExec{container: c1, upgrade: true, cmd: []string{"tar", "-c", "-f", "-", "-C", "/var/vcap/bosh", "--", "update_settings.json"}}},
		{id: "exec.chgrp", cpi: true, exec: &diffExec{container: c1, cmd: []string{"bash", "-c", "chgrp vcap /var/vcap/bosh/warden-cpi-agent-env.json"}}},
		{id: "exec.create.missing-container", method: "POST", path: "/containers/c-missing-" + name + "/exec", body: map[string]any{"Cmd": []string{"true"}}},
		{id: "exec.inspect.missing", method: "GET", path: "/exec/no-such-exec-" + name + "/json"},
		{id: "exec.start.missing", method: "POST", path: "/exec/no-such-exec-" + name + "/start", body: map[string]any{"Detach": false, "Tty": false}},

		// Attach by recreate (vm/container.go restartByRecreating): inspect,
		// kill, remove, create with the inspected config and endpoints.
		{id: "container.kill", cpi: true, method: "POST", path: "/containers/" + c1 + "/kill?signal=KILL"},
		{id: "container.kill.not-running", cpi: true, method: "POST", path: "/containers/" + c1 + "/kill?signal=KILL"},
		{id: "container.inspect.killed", method: "GET", path: "/containers/" + c1 + "/json", fields: append([]string{"State.Status", "State.Running"}, inspectFields[len(inspectFields)-8:]...)},
		{id: "exec.create.not-running", method: "POST", path: "/containers/" + c1 + "/exec", body: map[string]any{"Cmd": []string{"true"}}},
		{id: "container.remove", cpi: true, method: "DELETE", path: "/containers/" + c1 + "?force=1"},
		{id: "container.remove.missing", method: "DELETE", path: "/containers/" + c1 + "?force=1"},
		{id: "container.recreate", cpi: true, method: "POST", path: "/containers/create?name=" + c1 + "&platform=linux%2Famd64",
			body: func() map[string]any {
				b := createBody("10.250.17.5", eph+":/var/vcap/data/", "/lib/modules:/usr/lib/modules", disk+":/warden-cpi-dev/"+disk)
				b["NetworkingConfig"] = map[string]any{"EndpointsConfig": map[string]any{net: map[string]any{
					"IPAMConfig": map[string]any{"IPv4Address": "10.250.17.5"}, "NetworkID": "{netid}", "Gateway": "10.250.17.1",
					"IPAddress": "10.250.17.5", "IPPrefixLen": 24, "MacAddress": "02:42:0a:fa:11:05"}}}
				return b
			}(), capture: map[string]string{"ctrid2": "Id"}},
		{id: "container.recreate.start", cpi: true, method: "POST", path: "/containers/" + c1 + "/start"},
		{id: "container.recreate.inspect", cpi: true, method: "GET", path: "/containers/" + c1 + "/json", fields: inspectFields},
		{id: "volume.remove.bound", method: "DELETE", path: "/volumes/" + disk},

		// Delete the VM (vm/container.go Delete), the disk, the stemcell.
		{id: "container.remove.running.no-force", method: "DELETE", path: "/containers/" + c1},
		{id: "container.kill.recreated", cpi: true, method: "POST", path: "/containers/" + c1 + "/kill?signal=KILL"},
		{id: "container.remove.recreated", cpi: true, method: "DELETE", path: "/containers/" + c1 + "?force=1"},
		{id: "container.kill.missing", cpi: true, method: "POST", path: "/containers/" + c1 + "/kill?signal=KILL"},
		{id: "volume.remove", cpi: true, method: "DELETE", path: "/volumes/" + eph + "?force=1"},
		{id: "volume.remove.missing.force", cpi: true, method: "DELETE", path: "/volumes/" + eph + "?force=1"},
		{id: "volume.remove.missing.force-true", method: "DELETE", path: "/volumes/" + eph + "?force=true"},
		{id: "volume.remove.missing", method: "DELETE", path: "/volumes/" + eph},
		{id: "volume.remove.disk", cpi: true, method: "DELETE", path: "/volumes/" + disk + "?force=1"},
		{id: "volume.remove.dup-mount-leftover", method: "DELETE", path: "/volumes/vol-eph-" + c3 + "?force=1"},
		{id: "image.remove", cpi: true, method: "DELETE", path: "/images/" + img + "?force=1&noprune=1", fields: []string{"0.Untagged"}},
		{id: "image.remove.missing", cpi: true, method: "DELETE", path: "/images/" + img + "?force=1&noprune=1"},
	}
}

func tarOfFiles(files map[string]string) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range sortedNames(files) {
		_ = tw.WriteHeader(&tar.Header{Name: n, Typeflag: tar.TypeReg, Mode: 0o640, Size: int64(len(files[n]))})
		_, _ = tw.Write([]byte(files[n]))
	}
	_ = tw.Close()
	return buf.Bytes()
}

func sortedNames(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// deviations reads the row ids docs/docker.md documents as deliberate
// differences (its table under "Rows of the differential test the face
// answers differently").
func deviations(tb testing.TB) map[string]bool {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "docker.md"))
	if err != nil {
		tb.Fatal(err)
	}
	_, sect, ok := strings.Cut(string(b), "### Rows the face answers differently")
	if !ok {
		tb.Fatal(`docs/docker.md has no section "### Rows the face answers differently"`)
	}
	if i := strings.Index(sect, "\n#"); i >= 0 {
		sect = sect[:i]
	}
	out := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z0-9.-]+)`").FindAllStringSubmatch(sect, -1) {
		out[m[1]] = true
	}
	return out
}

// TestDifferentialRealDocker sends the recorded sequence to the face and to a
// private real Docker daemon, and compares them row by row.
func TestDifferentialRealDocker(t *testing.T) {
	sock := realDocker(t)
	real := newDiffSide("docker", sock)
	var ver struct{ ApiVersion, MinAPIVersion, Version string }
	resp, err := real.http.Get("http://docker/version")
	if err != nil {
		t.Fatalf("the real daemon does not answer: %v", err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&ver)
	resp.Body.Close()
	if ver.ApiVersion == "" {
		t.Fatal("the real daemon's /version has no ApiVersion")
	}
	t.Logf("real daemon: Docker %s, API %s (min %s)", ver.Version, ver.ApiVersion, ver.MinAPIVersion)

	env := newFaceEnvWith(t, fakeiaas.Config{Store: "memory"}, dockerapi.Config{MinAPIVersion: ver.MinAPIVersion, MaxAPIVersion: ver.ApiVersion})
	face := newDiffSide("face", env.c.sock)

	name := fmt.Sprintf("%d", os.Getpid())
	t.Cleanup(func() { cleanupReal(real, name) })
	image := rootfsTar(t)
	devs := deviations(t)
	var mismatched, cpiMismatched, documented []string
	for _, r := range diffRows(image, name) {
		got, want := face.do(t, ver.ApiVersion, r), real.do(t, ver.ApiVersion, r)
		gj, _ := json.Marshal(got)
		wj, _ := json.Marshal(want)
		same := bytes.Equal(gj, wj)
		switch {
		case same && devs[r.id]:
			t.Errorf("row %s: the face now answers as the daemon (%s), but docs/docker.md still lists it as a deviation", r.id, wj)
		case same:
			t.Logf("row %-40s same: %s", r.id, wj)
		case devs[r.id]:
			documented = append(documented, r.id)
			t.Logf("row %-40s documented deviation:\n\tface:   %s\n\tdocker: %s", r.id, gj, wj)
		default:
			mismatched = append(mismatched, r.id)
			if r.cpi {
				cpiMismatched = append(cpiMismatched, r.id)
			}
			t.Errorf("row %s (%s): the face differs from the daemon\n\tface:   %s\n\tdocker: %s", r.id, map[bool]string{true: "the Docker CPI relies on it", false: "around the CPI's calls"}[r.cpi], gj, wj)
		}
	}
	t.Logf("%d rows; %d differ %v (%d the CPI relies on); %d documented deviations %v", len(diffRows(image, name)), len(mismatched), mismatched, len(cpiMismatched), len(documented), documented)
}

// cleanupReal removes what the sequence left on a shared daemon after a
// failure (a private one goes away with its directory).
func cleanupReal(s *diffSide, name string) {
	for _, p := range []string{"/containers/c-1-" + name + "?force=1", "/containers/c-2-" + name + "?force=1", "/containers/c-3-" + name + "?force=1", "/containers/c-4-" + name + "?force=1", "/networks/cpilab-diff-dyn-" + name,
		"/volumes/vol-eph-c-1-" + name, "/volumes/vol-eph-c-2-" + name, "/volumes/vol-eph-c-3-" + name, "/volumes/vol-disk-" + name,
		"/networks/cpilab-diff-net-" + name, "/images/bosh.io/stemcells:img-" + name + "?force=1"} {
		req, _ := http.NewRequest("DELETE", "http://docker"+p, nil)
		if resp, err := s.http.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

// The shape the real-daemon rows compare holds on a quiet machine (a /16
// of 172.16.0.0/12) and a busy one (a /20 of 192.168.0.0/16) alike, and
// still tells a subnet that is not a whole default pool.
func TestAddressShapeIsTheSameOnEitherPool(t *testing.T) {
	network := func(subnet, gateway string) any {
		return map[string]any{"IPAM": map[string]any{"Config": []any{map[string]any{"Subnet": subnet, "Gateway": gateway}}}}
	}
	endpoint := func(ip, gateway string, bits float64, mac string) any {
		return map[string]any{"NetworkSettings": map[string]any{"Networks": map[string]any{"n": map[string]any{
			"IPAddress": ip, "Gateway": gateway, "IPPrefixLen": bits, "MacAddress": mac}}}}
	}
	quietNet := addressShape(network("172.18.0.0/16", "172.18.0.1"), "IPAM")
	if busy := addressShape(network("192.168.32.0/20", "192.168.32.1"), "IPAM"); busy != quietNet {
		t.Errorf("a /20 of 192.168.0.0/16: %q, a /16 of 172.16.0.0/12: %q; want the same shape", busy, quietNet)
	}
	for _, bad := range []any{network("192.168.32.0/16", "192.168.0.1"), network("172.18.5.0/24", "172.18.5.1"), network("10.1.0.0/16", "10.1.0.1")} {
		if got := addressShape(bad, "IPAM"); got == quietNet {
			t.Errorf("%v: shape %q, the same as a default pool's", bad, got)
		}
	}
	quietEP := addressShape(endpoint("172.18.0.2", "172.18.0.1", 16, "02:42:ac:12:00:02"), "Networks.n")
	if busy := addressShape(endpoint("192.168.32.2", "192.168.32.1", 20, "02:42:c0:a8:20:02"), "Networks.n"); busy != quietEP {
		t.Errorf("an endpoint on a /20 of 192.168.0.0/16: %q, on a /16 of 172.16.0.0/12: %q; want the same shape", busy, quietEP)
	}
	if got := addressShape(endpoint("192.168.32.2", "192.168.32.1", 16, "02:42:c0:a8:20:02"), "Networks.n"); got == quietEP {
		t.Errorf("an endpoint with a /16 of 192.168.0.0/16: shape %q, the same as a default pool's", got)
	}
}
