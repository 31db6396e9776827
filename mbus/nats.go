package mbus

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// NATS is a Transport over a NATS connection. It is I/O-edge code: handlers
// run on nats.go's delivery goroutine (one per subscription).
type NATS struct {
	nc *nats.Conn
}

// NATSConfig configures Connect.
type NATSConfig struct {
	// URL is the NATS server, e.g. "nats://127.0.0.1:4222" (required).
	// Credentials may be given in the URL, as BOSH's mbus URL does.
	URL string
	// Name is the connection name the server shows (default "cpilab").
	Name string
	// ConnectTimeout bounds the initial dial (default 5 s).
	ConnectTimeout time.Duration
	// TLS, when set, is the client side of mutual TLS (a BOSH mbus with
	// certificates: the client presents its certificate and checks the
	// server's against RootCAs and ServerName).
	TLS *tls.Config
}

// Connect opens a NATS transport. It reconnects for ever after the first
// successful connect, as an agent does.
func Connect(cfg NATSConfig) (*NATS, error) {
	if cfg.URL == "" {
		return nil, errors.New("mbus: NATS URL is required")
	}
	if cfg.Name == "" {
		cfg.Name = "cpilab"
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	opts := []nats.Option{
		nats.Name(cfg.Name),
		nats.Timeout(cfg.ConnectTimeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(100 * time.Millisecond),
	}
	if cfg.TLS != nil {
		opts = append(opts, nats.Secure(cfg.TLS))
	}
	nc, err := nats.Connect(cfg.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("mbus: connecting to %s: %w", cfg.URL, err)
	}
	return &NATS{nc: nc}, nil
}

// Publish implements Transport.
func (n *NATS) Publish(subject string, data []byte) error {
	if err := n.nc.Publish(subject, data); err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return ErrClosed
		}
		return fmt.Errorf("mbus: publishing on %s: %w", subject, err)
	}
	return nil
}

// Subscribe implements Transport.
func (n *NATS) Subscribe(subject string, h Handler) (Subscription, error) {
	sub, err := n.nc.Subscribe(subject, func(m *nats.Msg) { h(m.Subject, m.Data) })
	if err != nil {
		if errors.Is(err, nats.ErrConnectionClosed) {
			return nil, ErrClosed
		}
		return nil, fmt.Errorf("mbus: subscribing to %s: %w", subject, err)
	}
	// Make sure the server has the interest before anyone publishes to it.
	if err := n.nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("mbus: subscribing to %s: %w", subject, err)
	}
	return sub, nil
}

// Close implements Transport.
func (n *NATS) Close() error {
	n.nc.Close()
	return nil
}

// EmbeddedConfig configures StartEmbedded.
type EmbeddedConfig struct {
	// Host to listen on (default "127.0.0.1").
	Host string
	// Port to listen on (default 0: a free port chosen by the kernel).
	Port int
	// ReadyTimeout bounds the wait for the server to accept clients (default 10 s).
	ReadyTimeout time.Duration
	// TLS, when set, makes every client speak TLS; with ClientCAs and
	// ClientAuth = tls.RequireAndVerifyClientCert it is a BOSH mbus's
	// mutual TLS (the agent presents env.bosh.mbus.cert).
	TLS *tls.Config
}

// Embedded is a nats-server running in this process.
type Embedded struct {
	s *server.Server
}

// StartEmbedded starts a nats-server in this process, by default on
// 127.0.0.1 and a random port, and waits until it accepts clients.
func StartEmbedded(cfg EmbeddedConfig) (*Embedded, error) {
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	if cfg.ReadyTimeout <= 0 {
		cfg.ReadyTimeout = 10 * time.Second
	}
	opts := &server.Options{
		Host:   cfg.Host,
		Port:   port,
		NoLog:  true,
		NoSigs: true,
		// The HTTP monitor and cluster ports stay off.
		MaxPending: 64 << 20,
	}
	if cfg.TLS != nil {
		opts.TLSConfig = cfg.TLS
		opts.TLS = true
		opts.TLSVerify = cfg.TLS.ClientAuth == tls.RequireAndVerifyClientCert
		opts.TLSTimeout = 5
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("mbus: embedded nats-server: %w", err)
	}
	s.Start()
	if !s.ReadyForConnections(cfg.ReadyTimeout) {
		s.Shutdown()
		return nil, fmt.Errorf("mbus: embedded nats-server on %s not ready after %s", cfg.Host, cfg.ReadyTimeout)
	}
	return &Embedded{s: s}, nil
}

// URL is the server's client URL, e.g. "nats://127.0.0.1:41234".
func (e *Embedded) URL() string { return e.s.ClientURL() }

// NumClients is the number of connected clients.
func (e *Embedded) NumClients() int { return e.s.NumClients() }

// Shutdown stops the server and waits until it has stopped.
func (e *Embedded) Shutdown() {
	e.s.Shutdown()
	e.s.WaitForShutdown()
}
