package realagent

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// MbusCerts is the mutual TLS of a BOSH mbus, made for one box: a CA, the
// NATS server's certificate (named *.nats.bosh-internal, as bosh-agent
// checks, and 127.0.0.1) and one client certificate, which both the
// upstream agent (env.bosh.mbus.cert) and the Director side present.
type MbusCerts struct {
	// CAPEM is the CA certificate, PEM.
	CAPEM string
	// ClientCertPEM and ClientKeyPEM are the client certificate and key, PEM.
	ClientCertPEM, ClientKeyPEM string

	pool   *x509.CertPool
	server tls.Certificate
	client tls.Certificate
}

// mbusServerName is the name bosh-agent expects the NATS server's
// certificate to hold (a name under nats.bosh-internal).
const mbusServerName = "default.nats.bosh-internal"

// NewMbusCerts makes a CA and the server and client certificates it signs,
// valid from an hour before now for a day (wall clock: this is the edge
// with a real process, not simulated logic).
func NewMbusCerts() (*MbusCerts, error) {
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("realagent: CA key: %w", err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "cpilab mbus CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("realagent: CA certificate: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, fmt.Errorf("realagent: CA certificate: %w", err)
	}
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, dns []string, ips []net.IP) (tls.Certificate, string, string, error) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return tls.Certificate{}, "", "", err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
			DNSNames:     dns,
			IPAddresses:  ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return tls.Certificate{}, "", "", err
		}
		kb, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return tls.Certificate{}, "", "", err
		}
		certPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
		keyPEM := string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}))
		c, err := tls.X509KeyPair([]byte(certPEM), []byte(keyPEM))
		return c, certPEM, keyPEM, err
	}
	m := &MbusCerts{CAPEM: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})), pool: x509.NewCertPool()}
	m.pool.AddCert(ca)
	if m.server, _, _, err = leaf(2, mbusServerName, x509.ExtKeyUsageServerAuth,
		[]string{"*.nats.bosh-internal", mbusServerName}, []net.IP{net.IPv4(127, 0, 0, 1)}); err != nil {
		return nil, fmt.Errorf("realagent: NATS server certificate: %w", err)
	}
	if m.client, m.ClientCertPEM, m.ClientKeyPEM, err = leaf(3, "default.agent.bosh-internal", x509.ExtKeyUsageClientAuth, nil, nil); err != nil {
		return nil, fmt.Errorf("realagent: mbus client certificate: %w", err)
	}
	return m, nil
}

// ServerTLS is the NATS server's side: its certificate, and a client
// certificate signed by the CA required of every client.
func (m *MbusCerts) ServerTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{m.server},
		ClientCAs:    m.pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
	}
}

// ClientTLS is a client's side (the Director's, or a reference agent's).
func (m *MbusCerts) ClientTLS() *tls.Config {
	return &tls.Config{
		Certificates: []tls.Certificate{m.client},
		RootCAs:      m.pool,
		ServerName:   mbusServerName,
		MinVersion:   tls.VersionTLS12,
	}
}

// AgentEnvCert is env.bosh.mbus.cert of the agent settings.
func (m *MbusCerts) AgentEnvCert() map[string]string {
	return map[string]string{"ca": m.CAPEM, "certificate": m.ClientCertPEM, "private_key": m.ClientKeyPEM}
}
