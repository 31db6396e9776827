package dockerapi

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/http"
	"os"
	"time"
)

// ErrSocketInUse is returned by Serve when another server answers on the
// socket path.
var ErrSocketInUse = errors.New("dockerapi: a server already listens on the socket")

// Server is a Face served on a unix socket.
type Server struct {
	face *Face
	path string
	ln   net.Listener
	srv  *http.Server
	done chan struct{}
}

// Serve serves face on the unix socket at path (mode 0600). A stale socket
// file (nothing listening) is replaced; a live one is ErrSocketInUse; any
// other file there is refused.
func Serve(face *Face, path string) (*Server, error) {
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode().Type() != fs.ModeSocket {
			return nil, fmt.Errorf("dockerapi: %s exists and is not a socket", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			_ = c.Close()
			return nil, fmt.Errorf("%w: %s", ErrSocketInUse, path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("dockerapi: removing the stale socket %s: %w", path, err)
		}
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("dockerapi: listening on %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		_ = ln.Close()
		return nil, fmt.Errorf("dockerapi: %s: %w", path, err)
	}
	s := &Server{face: face, path: path, ln: ln, done: make(chan struct{}),
		srv: &http.Server{Handler: face.Handler(), ReadHeaderTimeout: 30 * time.Second}}
	go func() { // I/O edge: the HTTP server's accept loop
		defer close(s.done)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// Host is the Docker host URL of the socket ("unix:///path"), as a Docker
// client or the Docker CPI's docker.host wants it.
func (s *Server) Host() string { return "unix://" + s.path }

// Path is the socket's path.
func (s *Server) Path() string { return s.path }

// Face is the face served.
func (s *Server) Face() *Face { return s.face }

// Close stops serving (hijacked exec streams in flight end with their
// command) and removes the socket file.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.done
	if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) && err == nil {
		err = rerr
	}
	return err
}
