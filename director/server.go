package director

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"time"
)

// ServeConfig configures Serve.
type ServeConfig struct {
	// Handler is what to serve (required): usually API.Handler().
	Handler http.Handler
	// Addr is the listen address. Default "127.0.0.1:0" (loopback, a free
	// port).
	Addr string
	// PlainHTTP serves without TLS. Default false: TLS with a self-signed
	// certificate for 127.0.0.1, ::1 and localhost generated at start.
	PlainHTTP bool
}

// Server is a running API server.
type Server struct {
	srv    *http.Server
	ln     net.Listener
	url    string
	caPEM  []byte
	closed chan struct{}
}

// Serve starts serving in the background.
func Serve(cfg ServeConfig) (*Server, error) {
	if cfg.Handler == nil {
		return nil, errors.New("director: ServeConfig.Handler is required")
	}
	if cfg.Addr == "" {
		cfg.Addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("director: listen %s: %w", cfg.Addr, err)
	}
	s := &Server{srv: &http.Server{Handler: cfg.Handler, ReadHeaderTimeout: 30 * time.Second}, closed: make(chan struct{})}
	scheme := "http"
	if !cfg.PlainHTTP {
		cert, caPEM, err := selfSigned()
		if err != nil {
			_ = ln.Close()
			return nil, err
		}
		s.caPEM = caPEM
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	}
	s.ln = ln
	s.url = fmt.Sprintf("%s://%s", scheme, ln.Addr().String())
	go func() { // I/O edge: the HTTP server is not director logic.
		defer close(s.closed)
		_ = s.srv.Serve(ln)
	}()
	return s, nil
}

// URL is the server's base URL, e.g. "https://127.0.0.1:25555".
func (s *Server) URL() string { return s.url }

// CACertPEM is the self-signed certificate clients should trust (nil for
// plain HTTP).
func (s *Server) CACertPEM() []byte { return s.caPEM }

// Close stops the server.
func (s *Server) Close() error {
	err := s.srv.Close()
	<-s.closed
	return err
}

func selfSigned() (tls.Certificate, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("director: TLS key: %w", err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now() // certificate validity is wall-clock by nature
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: "cpilab director"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, BasicConstraintsValid: true, IsCA: true,
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, fmt.Errorf("director: TLS certificate: %w", err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, caPEM, nil
}
