package vmssh

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// Defaults for Config fields left zero.
const (
	// DefaultAddr is Config.Addr's default: loopback, a free port.
	DefaultAddr = "127.0.0.1:0"
	// DefaultMaxSessions is Config.MaxSessions's default, in sessions.
	DefaultMaxSessions = 64
	// DefaultHandshakeTimeout is Config.HandshakeTimeout's default.
	DefaultHandshakeTimeout = 10 * time.Second
)

// Config configures a Server. Authorize and RootFor are required.
type Config struct {
	// Addr is the TCP address to listen on. Default DefaultAddr
	// ("127.0.0.1:0": loopback, a free port; read it back with Server.Addr).
	Addr string

	// HostKey is the server's host key. Nil: Start generates an ed25519
	// key; clients can pin its public half, Server.HostKey.
	HostKey ssh.Signer

	// Authorize reports whether key may log in as user vmCID (the SSH user
	// name is the VM CID). It is called for every public key a client
	// offers, from the connection's goroutine, so it must be safe for
	// concurrent use. AuthorizedKeys.Authorize fits. Only public-key
	// authentication is offered; there are no passwords.
	Authorize func(vmCID string, key ssh.PublicKey) bool

	// RootFor returns the root directory of the VM vmCID on the host, or
	// ok=false when there is no such VM: the login is then refused. It is
	// called at authentication and again when an SFTP session starts, so
	// a VM deleted in between has no session. It must be safe for
	// concurrent use.
	RootFor func(vmCID string) (root string, ok bool)

	// MaxSessions bounds the SFTP sessions open at once across all
	// connections. A session over the limit is refused with an SSH
	// "resource shortage" channel error. Default DefaultMaxSessions.
	MaxSessions int

	// HandshakeTimeout bounds the SSH handshake and authentication of a
	// new connection. Default DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration

	// Logger receives connection-level errors (failed handshakes, refused
	// sessions). Nil: they are dropped.
	Logger *slog.Logger
}

// Server is a running SSH server with an SFTP subsystem jailed to each VM's
// root. Its methods are safe for concurrent use.
type Server struct {
	cfg      Config
	ln       net.Listener
	sshCfg   *ssh.ServerConfig
	hostKey  ssh.PublicKey
	sessions chan struct{} // one token per open SFTP session
	log      *slog.Logger
	wg       sync.WaitGroup // the accept loop and every connection

	mu struct {
		sync.Mutex
		closed bool
		conns  map[net.Conn]struct{}
	}
}

// Start validates cfg, listens on cfg.Addr and serves SSH connections in
// the background until Close.
func Start(cfg Config) (*Server, error) {
	if cfg.Authorize == nil {
		return nil, errors.New("vmssh: Config.Authorize is required")
	}
	if cfg.RootFor == nil {
		return nil, errors.New("vmssh: Config.RootFor is required")
	}
	if cfg.MaxSessions < 0 {
		return nil, fmt.Errorf("vmssh: Config.MaxSessions is %d, must be ≥ 0", cfg.MaxSessions)
	}
	if cfg.Addr == "" {
		cfg.Addr = DefaultAddr
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = DefaultMaxSessions
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.HostKey == nil {
		signer, err := generateHostKey()
		if err != nil {
			return nil, err
		}
		cfg.HostKey = signer
	}
	s := &Server{
		cfg:      cfg,
		hostKey:  cfg.HostKey.PublicKey(),
		sessions: make(chan struct{}, cfg.MaxSessions),
		log:      cfg.Logger,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.mu.conns = make(map[net.Conn]struct{})
	s.sshCfg = &ssh.ServerConfig{
		PublicKeyCallback: s.authorize,
		ServerVersion:     "SSH-2.0-cpilab-vmssh",
	}
	s.sshCfg.AddHostKey(cfg.HostKey)

	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("vmssh: listen: %w", err)
	}
	s.ln = ln
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

func generateHostKey() (ssh.Signer, error) {
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("vmssh: generate host key: %w", err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		return nil, fmt.Errorf("vmssh: host key signer: %w", err)
	}
	return signer, nil
}

// Addr returns the address the server listens on, as host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// HostKey returns the server's public host key, for ClientConfig.HostKey.
func (s *Server) HostKey() ssh.PublicKey { return s.hostKey }

// Close stops accepting, closes every connection and waits for the
// server's goroutines to end. Calling it again returns nil.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	err := s.ln.Close()
	for c := range s.mu.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

// errUnauthorized is what a refused login sees; it does not tell an
// unknown VM from a wrong key.
var errUnauthorized = errors.New("vmssh: unknown VM CID or unauthorized key")

func (s *Server) authorize(md ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
	if _, ok := s.cfg.RootFor(md.User()); !ok {
		return nil, errUnauthorized
	}
	if !s.cfg.Authorize(md.User(), key) {
		return nil, errUnauthorized
	}
	return &ssh.Permissions{}, nil
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				s.log.Error("vmssh: accept", "err", err)
			}
			return
		}
		if !s.track(c) {
			c.Close()
			return
		}
		s.wg.Add(1)
		go s.serveConn(c)
	}
}

// track registers c for Close; false when the server is closing.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.closed {
		return false
	}
	s.mu.conns[c] = struct{}{}
	return true
}

func (s *Server) untrack(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.mu.conns, c)
}

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer s.untrack(c)
	defer c.Close()

	if err := c.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout)); err != nil {
		return
	}
	sc, chans, reqs, err := ssh.NewServerConn(c, s.sshCfg)
	if err != nil {
		s.log.Info("vmssh: handshake failed", "remote", c.RemoteAddr().String(), "err", err)
		return
	}
	defer sc.Close()
	if err := c.SetDeadline(time.Time{}); err != nil {
		return
	}

	var sessions sync.WaitGroup
	defer sessions.Wait()
	sessions.Go(func() { ssh.DiscardRequests(reqs) })
	for nc := range chans {
		if nc.ChannelType() != "session" {
			nc.Reject(ssh.UnknownChannelType, "vmssh: only session channels (sftp) are served")
			continue
		}
		select {
		case s.sessions <- struct{}{}:
		default:
			nc.Reject(ssh.ResourceShortage, fmt.Sprintf("vmssh: %d sessions already open", s.cfg.MaxSessions))
			continue
		}
		ch, chReqs, err := nc.Accept()
		if err != nil {
			<-s.sessions
			continue
		}
		sessions.Go(func() {
			defer func() { <-s.sessions }()
			s.serveSession(sc.User(), ch, chReqs)
		})
	}
}

// serveSession answers a session channel's requests: the "sftp"
// subsystem is served, everything else (shell, exec, pty, env) refused.
func (s *Server) serveSession(vmCID string, ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		ok := false
		if req.Type == "subsystem" {
			var payload struct{ Name string }
			if err := ssh.Unmarshal(req.Payload, &payload); err == nil && payload.Name == "sftp" {
				ok = true
			}
		}
		if !ok {
			if req.WantReply {
				req.Reply(false, nil)
			}
			continue
		}
		root, err := s.openRoot(vmCID)
		if err != nil {
			s.log.Info("vmssh: sftp session refused", "vm_cid", vmCID, "err", err)
			if req.WantReply {
				req.Reply(false, nil)
			}
			return
		}
		if req.WantReply {
			req.Reply(true, nil)
		}
		var discard sync.WaitGroup
		discard.Go(func() { ssh.DiscardRequests(reqs) })
		s.serveSFTP(vmCID, root, ch)
		ch.Close() // ends reqs, so the discarding goroutine returns
		discard.Wait()
		return
	}
}

func (s *Server) openRoot(vmCID string) (*os.Root, error) {
	dir, ok := s.cfg.RootFor(vmCID)
	if !ok {
		return nil, fmt.Errorf("vmssh: no VM %q", vmCID)
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("vmssh: open root of VM %q: %w", vmCID, err)
	}
	return root, nil
}

func (s *Server) serveSFTP(vmCID string, root *os.Root, ch ssh.Channel) {
	defer root.Close()
	h := &handlers{j: &jail{root: root}}
	rs := sftp.NewRequestServer(ch, h.sftpHandlers())
	err := rs.Serve()
	rs.Close()
	if err != nil && !errors.Is(err, io.EOF) {
		s.log.Info("vmssh: sftp session ended", "vm_cid", vmCID, "err", err)
	}
}
