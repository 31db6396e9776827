package vmssh

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/pkg/sftp"
	"golang.org/x/crypto/ssh"
)

// DefaultDialTimeout bounds connecting, the SSH handshake and the SFTP
// start-up in Dial when ClientConfig.Timeout is zero.
const DefaultDialTimeout = 10 * time.Second

// ClientConfig says how to reach one VM's SFTP server.
type ClientConfig struct {
	// Addr is the server's host:port (Server.Addr for a vmssh server).
	// Required.
	Addr string
	// VMCID is the VM to log in to; it is the SSH user name. Required.
	VMCID string
	// Signer is the client's private key. Required.
	Signer ssh.Signer
	// HostKey is the server's expected host key (Server.HostKey). Nil
	// accepts any host key, which is only sound for a server on loopback
	// that the caller started itself.
	HostKey ssh.PublicKey
	// Timeout bounds connecting, the SSH handshake and the SFTP start-up
	// together; it does not bound later requests. Default
	// DefaultDialTimeout.
	Timeout time.Duration
}

// Client is an SFTP client logged in to one VM. It embeds *sftp.Client, so
// Open, Create, ReadDir, Stat, Lstat, ReadLink, RealPath, … are at hand;
// paths are as seen inside the VM ("/" is the VM root).
type Client struct {
	*sftp.Client
	conn *ssh.Client
}

// Dial connects to an SFTP server as cfg.VMCID with key authentication.
func Dial(cfg ClientConfig) (*Client, error) {
	switch {
	case cfg.Addr == "":
		return nil, errors.New("vmssh: ClientConfig.Addr is required")
	case cfg.VMCID == "":
		return nil, errors.New("vmssh: ClientConfig.VMCID is required")
	case cfg.Signer == nil:
		return nil, errors.New("vmssh: ClientConfig.Signer is required")
	}
	timeout := cfg.Timeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	hostKey := ssh.InsecureIgnoreHostKey()
	if cfg.HostKey != nil {
		hostKey = ssh.FixedHostKey(cfg.HostKey)
	}
	sshCfg := &ssh.ClientConfig{
		User:            cfg.VMCID,
		Auth:            []ssh.AuthMethod{ssh.PublicKeys(cfg.Signer)},
		HostKeyCallback: hostKey,
		Timeout:         timeout,
	}
	nc, err := net.DialTimeout("tcp", cfg.Addr, timeout)
	if err != nil {
		return nil, fmt.Errorf("vmssh: dial %s: %w", cfg.Addr, err)
	}
	if err := nc.SetDeadline(time.Now().Add(timeout)); err != nil {
		nc.Close()
		return nil, fmt.Errorf("vmssh: dial %s: %w", cfg.Addr, err)
	}
	c, chans, reqs, err := ssh.NewClientConn(nc, cfg.Addr, sshCfg)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("vmssh: ssh login to %s as %q: %w", cfg.Addr, cfg.VMCID, err)
	}
	conn := ssh.NewClient(c, chans, reqs)
	sc, err := sftp.NewClient(conn)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("vmssh: start sftp on %s as %q: %w", cfg.Addr, cfg.VMCID, err)
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		sc.Close()
		conn.Close()
		return nil, fmt.Errorf("vmssh: dial %s: %w", cfg.Addr, err)
	}
	return &Client{Client: sc, conn: conn}, nil
}

// Close ends the SFTP session and the SSH connection.
func (c *Client) Close() error {
	return errors.Join(c.Client.Close(), c.conn.Close())
}
