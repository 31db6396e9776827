package testbed

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"

	"github.com/cpilab/cpilab/agent"
	"github.com/cpilab/cpilab/fakeiaas/dockerapi"
	"github.com/cpilab/cpilab/suites/cpisuite"
)

// A real Docker daemon (certify --cloud docker --docker-host): the Docker
// CPI runs against it, and the oracle reads the daemon's own state through
// the Docker Engine API — containers (inspect), volumes, images, the
// daemon's events (boots), and the settings file the CPI wrote, read by an
// exec of tar inside the container. The cloud has no cpilab agents, no
// SFTP onto VM roots and no fault injection: those specs are not checked,
// saying so.

// RealDocker is a client of a real Docker daemon on a unix socket.
type RealDocker struct {
	// Host is the daemon's address ("unix:///path").
	Host string
	// Version is the daemon's version, APIVersion its maximum API version.
	Version, APIVersion string
	// CPIMaxAPIVersion, when set, caps the API version a Docker CPI is
	// configured for (CPIAPIVersion).
	CPIMaxAPIVersion string
	http             *http.Client
	sock             string
}

// DialDocker connects to the Docker daemon at host (unix:///path) and
// reads its version.
func DialDocker(ctx context.Context, host string) (*RealDocker, error) {
	sock, ok := strings.CutPrefix(host, "unix://")
	if !ok || sock == "" {
		return nil, fmt.Errorf("testbed: Docker host %q: want unix:///path (a daemon's socket)", host)
	}
	d := &RealDocker{Host: host, sock: sock, http: &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}}}}
	var v struct{ Version, ApiVersion string }
	if _, err := d.get(ctx, "/version", &v); err != nil {
		return nil, fmt.Errorf("testbed: the Docker daemon at %s: %w", host, err)
	}
	if v.ApiVersion == "" {
		return nil, fmt.Errorf("testbed: the Docker daemon at %s names no ApiVersion in /version", host)
	}
	d.Version, d.APIVersion = v.Version, v.ApiVersion
	return d, nil
}

// errDockerNotFound is a 404 from the daemon.
var errDockerNotFound = errors.New("not found")

// get decodes GET path's JSON answer into v; a 404 is errDockerNotFound.
func (d *RealDocker) get(ctx context.Context, path string, v any) (int, error) {
	return d.do(ctx, "GET", path, nil, v)
}

func (d *RealDocker) do(ctx context.Context, method, path string, body any, v any) (int, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://docker"+path, rd)
	if err != nil {
		return 0, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := d.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return resp.StatusCode, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return resp.StatusCode, fmt.Errorf("%s %s: %w: %s", method, path, errDockerNotFound, strings.TrimSpace(string(b)))
	}
	if resp.StatusCode >= 300 {
		return resp.StatusCode, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if v != nil && len(b) > 0 {
		if err := json.Unmarshal(b, v); err != nil {
			return resp.StatusCode, fmt.Errorf("%s %s: the answer is not the JSON expected: %w", method, path, err)
		}
	}
	return resp.StatusCode, nil
}

// Exec runs cmd in the running container and returns its stdout and exit
// code (stderr goes into the error of a failed command).
func (d *RealDocker) Exec(ctx context.Context, container string, cmd []string) ([]byte, int, error) {
	var id struct {
		ID string `json:"Id"`
	}
	if _, err := d.do(ctx, "POST", "/containers/"+url.PathEscape(container)+"/exec",
		map[string]any{"Cmd": cmd, "AttachStdout": true, "AttachStderr": true}, &id); err != nil {
		return nil, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, "POST", "http://docker/exec/"+id.ID+"/start", strings.NewReader(`{"Detach":false,"Tty":false}`))
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.http.Do(req)
	if err != nil {
		return nil, 0, err
	}
	var stdout, stderr bytes.Buffer
	_, cerr := stdcopy.StdCopy(&stdout, &stderr, io.LimitReader(resp.Body, 64<<20))
	resp.Body.Close()
	if cerr != nil {
		return nil, 0, fmt.Errorf("exec %q in %s: reading its output: %w", cmd, container, cerr)
	}
	var insp struct {
		Running  bool
		ExitCode int
	}
	for {
		if _, err := d.get(ctx, "/exec/"+id.ID+"/json", &insp); err != nil {
			return nil, 0, err
		}
		if !insp.Running {
			break
		}
		select { // the exec's end can lag its stream's: the daemon's wall clock
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if insp.ExitCode != 0 {
		return stdout.Bytes(), insp.ExitCode, fmt.Errorf("exec %q in %s: exit %d: %s", cmd, container, insp.ExitCode, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), 0, nil
}

// CPIAPIVersion is the API version a Docker CPI config asks of this
// daemon: DockerAPIVersion, or the daemon's maximum when that is lower.
func (d *RealDocker) CPIAPIVersion() string {
	v := minAPIVersion(d.APIVersion, DockerAPIVersion)
	if d.CPIMaxAPIVersion != "" {
		v = minAPIVersion(v, d.CPIMaxAPIVersion)
	}
	return v
}

func minAPIVersion(a, b string) string {
	if apiLess(a, b) {
		return a
	}
	return b
}

func apiLess(a, b string) bool {
	am, an, _ := strings.Cut(a, ".")
	bm, bn, _ := strings.Cut(b, ".")
	ai, _ := strconv.Atoi(am)
	bi, _ := strconv.Atoi(bm)
	if ai != bi {
		return ai < bi
	}
	aj, _ := strconv.Atoi(an)
	bj, _ := strconv.Atoi(bn)
	return aj < bj
}

// RealDockerSuiteConfig returns a cpisuite.Config that certifies the BOSH
// Docker CPI (command) against the real Docker daemon d: the CPI's config
// names d and its API version (CPIAPIVersion), the stemcells are small
// runnable root file systems (RunnableDockerStemcell), and the oracle is
// d's own state (RealDockerOracle), seen through a proxy that notes what
// the CPI made and injects the faults (RealDockerFaults). There are no
// agents and no SFTP on a real daemon: those specs are not checked.
func (t *Testbed) RealDockerSuiteConfig(command []string, d *RealDocker) (cpisuite.Config, error) {
	if t.dockerProxy == nil {
		px, err := StartDockerProxy(d, filepath.Join(t.cfg.Dir, "docker-proxy.sock"))
		if err != nil {
			return cpisuite.Config{}, err
		}
		t.dockerProxy = px
	}
	p := filepath.Join(t.cfg.Dir, "config", "docker-cpi-real.json")
	cfg := map[string]any{"Actions": map[string]any{
		"Docker": map[string]any{"host": t.dockerProxy.Host(), "api_version": d.CPIAPIVersion()},
		"Agent":  map[string]any{"mbus": t.NATS.URL(), "ntp": []string{}},
	}}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return cpisuite.Config{}, err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return cpisuite.Config{}, fmt.Errorf("testbed: %w", err)
	}
	if err := os.WriteFile(p, b, 0o600); err != nil {
		return cpisuite.Config{}, fmt.Errorf("testbed: %w", err)
	}
	stemcells := map[int]cpisuite.Stemcell{}
	for _, v := range []int{1, 2} {
		sp := filepath.Join(t.cfg.Dir, "stemcells", fmt.Sprintf("docker-rootfs-stemcell-api%d.tgz", v))
		if err := os.MkdirAll(filepath.Dir(sp), 0o755); err != nil {
			return cpisuite.Config{}, fmt.Errorf("testbed: %w", err)
		}
		if err := RunnableDockerStemcell(sp, v); err != nil {
			return cpisuite.Config{}, err
		}
		stemcells[v] = cpisuite.Stemcell{ImagePath: sp}
	}
	return cpisuite.Config{
		CPI:    dockerCPITarget(command, p),
		Env:    dockerEnvironment(stemcells),
		Oracle: RealDockerOracle{Docker: d, VolumeSizeMiB: dockerapi.DefaultVolumeSizeMiB, Proxy: t.dockerProxy},
		Faults: RealDockerFaults{Proxy: t.dockerProxy},
	}, nil
}

// runnableTools are the programs the Docker CPI's container command and
// file service run (vm/factory.go: bash -c "umount …, rm -rf, mkdir -p,
// sed -i … /var/vcap/bosh/bin/sync-time, printf, exec env -i
// /usr/sbin/runsvdir-start"; vm/file_service.go: tar; vm/container.go:
// chgrp), taken from this machine with the shared libraries they load.
var runnableTools = []string{"bash", "umount", "rm", "mkdir", "sed", "env", "sleep", "tar", "chgrp"}

// RunnableDockerStemcell writes a stemcell tarball in the Docker CPI's
// shape (a gzipped root file system it imports as an image) whose
// containers run: this machine's bash, coreutils, tar and umount with
// their libraries, /usr/sbin/runsvdir-start sleeping for ever (the stub
// of a stemcell's runit), a stub /var/vcap/bosh/bin/sync-time, a vcap
// group, and the face's stemcell image
// (dockerapi.ImageMember) of api_version, so the same tarball works on
// the face.
func RunnableDockerStemcell(path string, apiVersion int) error {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	seen := map[string]bool{}
	add := func(name string, mode int64, content []byte) error {
		if seen[name] {
			return nil
		}
		seen[name] = true
		if err := tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: mode, Size: int64(len(content))}); err != nil {
			return err
		}
		_, err := tw.Write(content)
		return err
	}
	for _, dir := range []string{"bin/", "etc/", "lib/", "lib64/", "tmp/", "usr/", "usr/bin/", "usr/sbin/", "usr/lib/",
		"var/", "var/vcap/", "var/vcap/bosh/", "var/vcap/bosh/bin/", "var/vcap/data/", "proc/", "sys/", "dev/", "run/"} {
		if err := tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o755}); err != nil {
			return err
		}
	}
	libs := regexp.MustCompile(`(/[^ \t\n]+)`)
	for _, tool := range runnableTools {
		p, err := exec.LookPath(tool)
		if err != nil {
			return fmt.Errorf("testbed: the runnable Docker stemcell needs %s on this machine: %w", tool, err)
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
		b, err := os.ReadFile(real)
		if err != nil {
			return fmt.Errorf("testbed: %w", err)
		}
		// The CPI names some by absolute path (env -i drops PATH): put each in
		// both bin directories.
		for _, dir := range []string{"bin/", "usr/bin/"} {
			if err := add(dir+tool, 0o755, b); err != nil {
				return err
			}
		}
		out, err := exec.Command("ldd", real).Output()
		if err != nil {
			return fmt.Errorf("testbed: ldd %s (the runnable Docker stemcell needs the libraries it loads): %w", real, err)
		}
		for _, lib := range libs.FindAllString(string(out), -1) {
			lr, err := filepath.EvalSymlinks(lib)
			if err != nil {
				continue
			}
			b, err := os.ReadFile(lr)
			if err != nil {
				return fmt.Errorf("testbed: %w", err)
			}
			if err := add(strings.TrimPrefix(lib, "/"), 0o755, b); err != nil {
				return err
			}
		}
	}
	img := map[string]any{"name": "bosh-fakeiaas-ubuntu-jammy-docker", "version": "1.0",
		"agent": map[string]any{"device_path_resolution_type": agent.ResolverIdentity}}
	if apiVersion > 1 {
		img["api_version"] = apiVersion
	}
	ib, err := json.Marshal(img)
	if err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		mode int64
		body string
	}{
		{"usr/sbin/runsvdir-start", 0o755, "#!/bin/bash\nexec /bin/sleep infinity\n"},
		{"var/vcap/bosh/bin/sync-time", 0o755, "#!/bin/bash\n# a stemcell's time sync (chronyc), which the CPI edits\nexit 0\n"},
		{"etc/group", 0o644, "root:x:0:\nvcap:x:1000:\n"},
		{"etc/passwd", 0o644, "root:x:0:0:root:/root:/bin/bash\nvcap:x:1000:1000::/home/vcap:/bin/bash\n"},
		{dockerapi.ImageMember, 0o644, string(ib)},
	} {
		if err := add(f.name, f.mode, []byte(f.body)); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("testbed: %w", err)
	}
	return nil
}

// RealDockerOracle is the oracle of a real Docker daemon, in the Docker
// CPI's CIDs: a VM is a container (its name), a disk a volume (its name),
// a stemcell an image reference. Every answer comes from the daemon.
type RealDockerOracle struct {
	Docker *RealDocker
	// VolumeSizeMiB is the size the oracle gives every volume: a Docker
	// volume has none (it is a directory), so this is the nominal size the
	// face gives its volumes (dockerapi.DefaultVolumeSizeMiB), and the
	// size specs judge a CPI the same way on both.
	VolumeSizeMiB int
	// Proxy, when set, is the proxy the CPI reaches the daemon through:
	// the inventory is then what the CPI made through it (a daemon shared
	// by a run's workers holds the others' objects too).
	Proxy *DockerProxy
}

var _ cpisuite.Oracle = RealDockerOracle{}

func (o RealDockerOracle) mine(kind, name string) bool {
	return o.Proxy == nil || o.Proxy.Made(kind, name)
}

// UnseenCloudProperties: as DockerOracle.
func (o RealDockerOracle) UnseenCloudProperties() string {
	return DockerOracle{}.UnseenCloudProperties()
}

// FixedMetadata: as DockerOracle.
func (o RealDockerOracle) FixedMetadata() string { return DockerOracle{}.FixedMetadata() }

// Inventory lists the daemon's containers (all, running or not), volumes
// and tagged images: those the CPI made through Proxy, when set.
func (o RealDockerOracle) Inventory(ctx context.Context) (cpisuite.Inventory, error) {
	var inv cpisuite.Inventory
	var cs []struct{ Names []string }
	if _, err := o.Docker.get(ctx, "/containers/json?all=1", &cs); err != nil {
		return inv, err
	}
	for _, c := range cs {
		if len(c.Names) > 0 && o.mine("container", strings.TrimPrefix(c.Names[0], "/")) {
			inv.VMs = append(inv.VMs, strings.TrimPrefix(c.Names[0], "/"))
		}
	}
	var vs struct{ Volumes []struct{ Name string } }
	if _, err := o.Docker.get(ctx, "/volumes", &vs); err != nil {
		return inv, err
	}
	for _, v := range vs.Volumes {
		if o.mine("volume", v.Name) {
			inv.Disks = append(inv.Disks, v.Name)
		}
	}
	var ims []struct{ RepoTags []string }
	if _, err := o.Docker.get(ctx, "/images/json", &ims); err != nil {
		return inv, err
	}
	for _, im := range ims {
		for _, t := range im.RepoTags {
			if t != "<none>:<none>" && o.mine("image", t) {
				inv.Stemcells = append(inv.Stemcells, t)
			}
		}
	}
	sort.Strings(inv.VMs)
	sort.Strings(inv.Disks)
	sort.Strings(inv.Stemcells)
	return inv, nil
}

type realContainer struct {
	ID     string `json:"Id"`
	Config struct {
		Labels map[string]string
	}
	State struct {
		Running bool
	}
	Mounts []struct {
		Type, Name, Destination string
	}
}

func (o RealDockerOracle) inspect(ctx context.Context, name string) (realContainer, bool, error) {
	var c realContainer
	_, err := o.Docker.get(ctx, "/containers/"+url.PathEscape(name)+"/json", &c)
	if errors.Is(err, errDockerNotFound) {
		return c, false, nil
	}
	return c, err == nil, err
}

// VM returns the container: its labels, the volumes mounted in it (each
// with its mount point: a volume is a directory, there is no device), and
// how many times the daemon started it (its start events).
func (o RealDockerOracle) VM(ctx context.Context, name string) (cpisuite.OracleVM, bool, error) {
	c, ok, err := o.inspect(ctx, name)
	if !ok || err != nil {
		return cpisuite.OracleVM{}, false, err
	}
	out := cpisuite.OracleVM{Metadata: c.Config.Labels, Disks: map[string]string{}}
	for _, m := range c.Mounts {
		if m.Type == "volume" {
			out.Disks[m.Name] = m.Destination
		}
	}
	if out.Boots, err = o.starts(ctx, c.ID); err != nil {
		return cpisuite.OracleVM{}, false, err
	}
	return out, true, nil
}

// starts counts the daemon's start events of the container with id.
func (o RealDockerOracle) starts(ctx context.Context, id string) (int, error) {
	filters, err := json.Marshal(map[string][]string{"type": {"container"}, "container": {id}, "event": {"start"}})
	if err != nil {
		return 0, err
	}
	// until: the events so far (the stream would otherwise stay open).
	until := strconv.FormatInt(time.Now().Add(time.Second).Unix(), 10)
	req, err := http.NewRequestWithContext(ctx, "GET", "http://docker/events?since=0&until="+until+"&filters="+url.QueryEscape(string(filters)), nil)
	if err != nil {
		return 0, err
	}
	resp, err := o.Docker.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNotFound { // a daemon without events (the face): cannot tell
		return 0, nil
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET /events: %s", resp.Status)
	}
	n := 0
	dec := json.NewDecoder(resp.Body)
	for {
		var ev struct{ Action string }
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				return n, nil
			}
			return 0, fmt.Errorf("GET /events: %w", err)
		}
		if ev.Action == "start" {
			n++
		}
	}
}

// Disk returns the volume: its labels, the nominal size, and the
// container it is mounted in with the mount point (OracleDisk.Path).
func (o RealDockerOracle) Disk(ctx context.Context, name string) (cpisuite.OracleDisk, bool, error) {
	var v struct {
		Name   string
		Labels map[string]string
	}
	_, err := o.Docker.get(ctx, "/volumes/"+url.PathEscape(name), &v)
	if errors.Is(err, errDockerNotFound) {
		return cpisuite.OracleDisk{}, false, nil
	}
	if err != nil {
		return cpisuite.OracleDisk{}, false, err
	}
	out := cpisuite.OracleDisk{SizeMiB: o.VolumeSizeMiB, Metadata: v.Labels, LUN: -1}
	filters, err := json.Marshal(map[string][]string{"volume": {name}})
	if err != nil {
		return cpisuite.OracleDisk{}, false, err
	}
	var cs []struct {
		Names  []string
		Mounts []struct{ Type, Name, Destination string }
	}
	if _, err := o.Docker.get(ctx, "/containers/json?all=1&filters="+url.QueryEscape(string(filters)), &cs); err != nil {
		return cpisuite.OracleDisk{}, false, err
	}
	for _, c := range cs {
		for _, m := range c.Mounts {
			if m.Type == "volume" && m.Name == name && len(c.Names) > 0 {
				out.AttachedTo, out.Path = strings.TrimPrefix(c.Names[0], "/"), m.Destination
			}
		}
	}
	return out, true, nil
}

// Settings returns the settings file the Docker CPI wrote into the
// container, read by an exec of tar inside it (the CPI's own way,
// vm/file_service.go); nil while the container runs without it or does
// not run.
func (o RealDockerOracle) Settings(ctx context.Context, name string) (cpisuite.OracleSettings, error) {
	out := cpisuite.OracleSettings{InVM: agent.WardenSettingsFile}
	c, ok, err := o.inspect(ctx, name)
	if err != nil || !ok || !c.State.Running {
		return out, err
	}
	dir, base := filepath.Split(agent.WardenSettingsFile)
	tb, code, err := o.Docker.Exec(ctx, name, []string{"tar", "-c", "-f", "-", "-C", dir, "--", base})
	if code == 2 { // tar: Cannot stat: the file is not there yet
		return out, nil
	}
	if err != nil {
		return out, err
	}
	tr := tar.NewReader(bytes.NewReader(tb))
	if _, err := tr.Next(); err != nil {
		return out, fmt.Errorf("the settings file of container %s: %w", name, err)
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		return out, err
	}
	out.File = b
	return out, nil
}
