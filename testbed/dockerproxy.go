package testbed

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cpilab/cpilab/cpiv2"
	"github.com/cpilab/cpilab/suites/cpisuite"
)

// DockerProxy passes a Docker CPI's requests to a real Docker daemon
// unchanged, and notes the names of the containers, volumes and images
// they create. A certify run's workers share one daemon, each with its
// own proxy: the oracle's inventory of a worker is the daemon's objects
// that worker's CPI made, so one worker's objects are never another's
// leak.
type DockerProxy struct {
	path string
	ln   net.Listener
	srv  *http.Server
	done chan struct{}

	d *RealDocker

	mu    sync.Mutex
	names map[string]bool // "container/N", "volume/N", "image/REF"
	// failCreates is how many container creates still fail (FailVMCreations).
	failCreates int
	// hold, when set, holds volume creates until it is closed (Hold);
	// held counts those waiting.
	hold chan struct{}
	held int
}

var versionPrefixRE = regexp.MustCompile(`^/v[0-9]+\.[0-9]+(/.*)$`)

// maxProxiedJSON bounds the JSON body the proxy reads to note names.
const maxProxiedJSON = 4 << 20

// StartDockerProxy serves a proxy to the daemon d on the unix socket at
// sock.
func StartDockerProxy(d *RealDocker, sock string) (*DockerProxy, error) {
	if _, err := os.Lstat(sock); err == nil {
		return nil, fmt.Errorf("testbed: %s exists", sock)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("testbed: %w", err)
	}
	p := &DockerProxy{d: d, path: sock, ln: ln, done: make(chan struct{}), names: map[string]bool{}}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host = "http", "docker"
		},
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", d.sock)
		}},
		FlushInterval: -1, // streams (import progress, exec output) pass as they come
	}
	p.srv = &http.Server{ReadHeaderTimeout: 30 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		kind := p.note(r)
		if kind == "/containers/create" && p.takeFailure() {
			p.failCreate(w, r)
			return
		}
		if kind == "/volumes/create" {
			p.waitHold(r.Context())
		}
		rp.ServeHTTP(w, r)
	})}
	go func() { // I/O edge: the proxy's accept loop
		defer close(p.done)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// Host is the proxy's Docker host ("unix:///path").
func (p *DockerProxy) Host() string { return "unix://" + p.path }

// Close stops the proxy and removes its socket.
func (p *DockerProxy) Close() error {
	err := p.srv.Close()
	<-p.done
	if rerr := os.Remove(p.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}

// Made reports whether a request through the proxy created (or named for
// creation) the object of kind ("container", "volume", "image") name.
func (p *DockerProxy) Made(kind, name string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.names[kind+"/"+name]
}

func (p *DockerProxy) add(kind, name string) {
	if name == "" {
		return
	}
	p.mu.Lock()
	p.names[kind+"/"+name] = true
	p.mu.Unlock()
}

// note records the names a create request makes: a container's name and
// the named volumes of its binds, a volume's name, an imported image's
// repo:tag. The body read is given back to the request.
// It returns the request's path without its version prefix.
func (p *DockerProxy) note(r *http.Request) string {
	if r.Method != http.MethodPost {
		return ""
	}
	pth := r.URL.Path
	if m := versionPrefixRE.FindStringSubmatch(pth); m != nil {
		pth = m[1]
	}
	switch pth {
	case "/images/create":
		q := r.URL.Query()
		if repo := q.Get("repo"); repo != "" {
			tag := q.Get("tag")
			if tag == "" {
				tag = "latest"
			}
			p.add("image", repo+":"+tag)
		}
	case "/containers/create", "/volumes/create":
		b, err := io.ReadAll(io.LimitReader(r.Body, maxProxiedJSON))
		r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(b), r.Body))
		if err != nil {
			return pth
		}
		if pth == "/volumes/create" {
			var v struct{ Name string }
			if json.Unmarshal(b, &v) == nil {
				p.add("volume", v.Name)
			}
			return pth
		}
		p.add("container", strings.TrimPrefix(r.URL.Query().Get("name"), "/"))
		var c struct {
			HostConfig struct{ Binds []string }
		}
		if json.Unmarshal(b, &c) != nil {
			return pth
		}
		for _, bind := range c.HostConfig.Binds {
			if src, _, ok := strings.Cut(bind, ":"); ok && !path.IsAbs(src) {
				p.add("volume", src)
			}
		}
	}
	return pth
}

// injectedCapacity is the message of an injected container create failure,
// the face's (testbed Faults.FailVMCreations).
const injectedCapacity = "insufficient capacity in the zone (injected by cpilab)"

func (p *DockerProxy) takeFailure() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.failCreates <= 0 {
		return false
	}
	p.failCreates--
	return true
}

// failCreate fails a container create as a daemon does when it fails after
// making the volumes of the binds (and as the face does: it creates them
// before its create_vm): the request goes to the daemon with its first
// bind given twice, so that the daemon creates that bind's volume and
// then refuses the duplicate mount point; the client gets the injected
// capacity error.
func (p *DockerProxy) failCreate(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(io.LimitReader(r.Body, maxProxiedJSON))
	var body map[string]any
	if json.Unmarshal(b, &body) == nil {
		if hc, ok := body["HostConfig"].(map[string]any); ok {
			if binds, ok := hc["Binds"].([]any); ok && len(binds) > 0 {
				hc["Binds"] = append(binds, binds[0])
				q := r.URL.Query()
				q.Set("name", q.Get("name")+"-cpilab-fault") // never a container of its own
				_, _ = p.d.do(r.Context(), "POST", r.URL.Path+"?"+q.Encode(), body, nil)
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusInternalServerError)
	_ = json.NewEncoder(w).Encode(map[string]string{"message": "create container " + r.URL.Query().Get("name") + ": " + injectedCapacity})
}

func (p *DockerProxy) waitHold(ctx context.Context) {
	p.mu.Lock()
	h := p.hold
	if h != nil {
		p.held++
	}
	p.mu.Unlock()
	if h == nil {
		return
	}
	select {
	case <-h:
	case <-ctx.Done():
	}
	p.mu.Lock()
	p.held--
	p.mu.Unlock()
}

// RealDockerFaults are the faults a proxy to a real daemon can inject: a
// container create that fails after making its volumes (create_vm), and
// volume creates held (create_disk).
type RealDockerFaults struct{ Proxy *DockerProxy }

var _ cpisuite.Faults = RealDockerFaults{}

// FailVMCreations makes the next n container creates fail.
func (f RealDockerFaults) FailVMCreations(ctx context.Context, n int) (func() error, error) {
	f.Proxy.mu.Lock()
	f.Proxy.failCreates = n
	f.Proxy.mu.Unlock()
	return func() error {
		f.Proxy.mu.Lock()
		f.Proxy.failCreates = 0
		f.Proxy.mu.Unlock()
		return nil
	}, nil
}

// Hold holds every volume create (create_disk) until the gate is
// released; other methods cannot be held on a real daemon.
func (f RealDockerFaults) Hold(ctx context.Context, method string) (cpisuite.Gate, error) {
	if method != cpiv2.MethodCreateDisk {
		return nil, fmt.Errorf("testbed: a real Docker daemon's proxy holds create_disk (volume creates) only, not %s", method)
	}
	f.Proxy.mu.Lock()
	defer f.Proxy.mu.Unlock()
	if f.Proxy.hold != nil {
		return nil, errors.New("testbed: volume creates are already held")
	}
	f.Proxy.hold = make(chan struct{})
	return proxyGate{f.Proxy}, nil
}

type proxyGate struct{ p *DockerProxy }

func (g proxyGate) Waiting(ctx context.Context) (int, error) {
	g.p.mu.Lock()
	defer g.p.mu.Unlock()
	return g.p.held, nil
}

func (g proxyGate) Release(ctx context.Context) error {
	g.p.mu.Lock()
	defer g.p.mu.Unlock()
	if g.p.hold != nil {
		close(g.p.hold)
		g.p.hold = nil
	}
	return nil
}
