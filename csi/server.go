package csi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
)

// ParseEndpoint reads a CSI endpoint: unix:///path (or unix:/path, or a
// bare absolute path).
func ParseEndpoint(ep string) (string, error) {
	if strings.HasPrefix(ep, "/") {
		return ep, nil
	}
	u, err := url.Parse(ep)
	if err != nil || u.Scheme != "unix" {
		return "", fmt.Errorf("endpoint %q: want unix:///path/to/csi.sock", ep)
	}
	p := u.Path
	if p == "" {
		p = u.Opaque
	}
	if !strings.HasPrefix(p, "/") {
		return "", fmt.Errorf("endpoint %q: the socket path must be absolute", ep)
	}
	return p, nil
}

// Server serves a Driver on a unix socket.
type Server struct {
	srv  *grpc.Server
	ln   net.Listener
	path string
}

// Listen opens the endpoint (removing a stale socket) and registers the
// services of mode: Identity always, Controller in controller and all
// modes, Node in node and all modes.
func Listen(d *Driver, mode, endpoint string) (*Server, error) {
	p, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("endpoint %s: removing the old socket: %w", endpoint, err)
	}
	ln, err := net.Listen("unix", p)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", endpoint, err)
	}
	s := &Server{srv: grpc.NewServer(grpc.UnaryInterceptor(d.logCall)), ln: ln, path: p}
	csi.RegisterIdentityServer(s.srv, d)
	if mode == ModeController || mode == ModeAll {
		csi.RegisterControllerServer(s.srv, d)
	}
	if mode == ModeNode || mode == ModeAll {
		csi.RegisterNodeServer(s.srv, d)
	}
	return s, nil
}

// Serve serves until Stop.
func (s *Server) Serve() error {
	if err := s.srv.Serve(s.ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return err
	}
	return nil
}

// Stop stops serving and removes the socket.
func (s *Server) Stop() {
	s.srv.Stop()
	_ = os.Remove(s.path)
}

func (d *Driver) logCall(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if d.deps.Variant.SerialController && strings.HasPrefix(info.FullMethod, "/csi.v1.Controller/") {
		d.serial.Lock()
		defer d.serial.Unlock()
	}
	resp, err := h(ctx, req)
	if err != nil {
		d.log.Printf("%s %v → %v", info.FullMethod, req, err)
	} else {
		d.log.Printf("%s %v → ok", info.FullMethod, req)
	}
	return resp, err
}
