package fakeiaas

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/cpilab/cpilab/rt"
)

// ServeConfig configures Serve and Run (the `cpilab fakeiaas` command maps
// its flags onto it).
type ServeConfig struct {
	// Cloud, when set, is served as is and the fields below up to Listen are
	// ignored; Server.Close then leaves it open.
	Cloud *Cloud
	// DataDir is Config.DataDir (flag --data-dir); default DefaultDataDir().
	DataDir string
	// Store is Config.Store: "sqlite" (default) or "memory".
	Store string
	// Runtime is Config.Runtime; default rt.Real(0).
	Runtime rt.Runtime
	// Hooks is Config.Hooks.
	Hooks VMHooks
	// RegistryUser and RegistryPassword protect the registry (basic auth).
	RegistryUser, RegistryPassword string
	// Listen is the loopback address to listen on (flag --listen); default
	// "127.0.0.1:0" (a free port). Non-loopback addresses are refused.
	Listen string
}

// DefaultDataDir is the user's cache dir + "cpilab/fakeiaas".
func DefaultDataDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("fakeiaas: no user cache dir for the default data dir (give --data-dir): %w", err)
	}
	return filepath.Join(d, "cpilab", "fakeiaas"), nil
}

// Server is a Cloud served over HTTP on loopback.
type Server struct {
	cloud    *Cloud
	ownCloud bool
	ln       net.Listener
	srv      *http.Server
	url      string
	done     chan error
}

// Serve starts serving (cfg.Cloud or a new Cloud) on cfg.Listen.
func Serve(cfg ServeConfig) (*Server, error) {
	listen := cfg.Listen
	if listen == "" {
		listen = "127.0.0.1:0"
	}
	err := CheckListen(listen)
	if err != nil {
		return nil, err
	}
	c, own := cfg.Cloud, false
	if c == nil {
		dir := cfg.DataDir
		if dir == "" {
			if dir, err = DefaultDataDir(); err != nil {
				return nil, err
			}
		}
		c, err = New(Config{DataDir: dir, Store: cfg.Store, Runtime: cfg.Runtime, Hooks: cfg.Hooks,
			RegistryUser: cfg.RegistryUser, RegistryPassword: cfg.RegistryPassword})
		if err != nil {
			return nil, err
		}
		own = true
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		if own {
			c.Close()
		}
		return nil, fmt.Errorf("fakeiaas: listen on %s: %w", listen, err)
	}
	s := &Server{cloud: c, ownCloud: own, ln: ln, url: "http://" + ln.Addr().String(), done: make(chan error, 1),
		srv: &http.Server{Handler: c.Handler(), ReadHeaderTimeout: 10 * time.Second}}
	c.SetBaseURL(s.url)
	go func() { s.done <- s.srv.Serve(ln) }() // the HTTP edge: real goroutines, as net/http
	return s, nil
}

// CheckListen refuses a listen address that is malformed or not on
// loopback: fakeiaas has no authentication (docs/security.md).
func CheckListen(listen string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("fakeiaas: --listen %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("fakeiaas: --listen %q: fakeiaas serves on loopback only (127.0.0.1 or ::1)", listen)
	}
	return nil
}

// URL is the base URL, e.g. http://127.0.0.1:41234.
func (s *Server) URL() string { return s.url }

// RegistryURL is the registry endpoint (URL() + "/registry").
func (s *Server) RegistryURL() string { return s.url + "/registry" }

// Cloud is the served engine.
func (s *Server) Cloud() *Cloud { return s.cloud }

// Close stops the listener, waits up to 5 s for calls in flight, and closes
// the Cloud when Serve created it.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := s.srv.Shutdown(ctx)
	if serr := <-s.done; serr != nil && !errors.Is(serr, http.ErrServerClosed) && err == nil {
		err = serr
	}
	if s.ownCloud {
		if cerr := s.cloud.Close(); err == nil {
			err = cerr
		}
	}
	return err
}

// Run serves until ctx is done, printing the URL and data dir to out: the
// body of `cpilab fakeiaas`.
func Run(ctx context.Context, cfg ServeConfig, out io.Writer) error {
	s, err := Serve(cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "fakeiaas listening on %s (data dir %s)\n", s.URL(), s.Cloud().DataDir())
	fmt.Fprintf(out, "registry: %s  metadata: %s/metadata  oracle: %s/oracle/state\n", s.RegistryURL(), s.URL(), s.URL())
	<-ctx.Done()
	return s.Close()
}
