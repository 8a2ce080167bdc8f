// Package tlsx builds the crypto/tls configurations every Tributary service uses from
// PEM files: a server side (certificate, optional client-certificate verification
// against a CA bundle, i.e. mTLS) and a client side (CA bundle to verify the server,
// optional client certificate). All files are PEM; errors name the file that failed.
package tlsx

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ErrConfig reports unusable TLS settings (a missing file, bad PEM, a key that does not
// match its certificate, a client-auth mode without a CA).
var ErrConfig = errors.New("tls config")

// ClientAuth is how a server treats client certificates.
type ClientAuth string

// Client-auth modes, named as Kafka's ssl.client.auth names them.
const (
	// ClientAuthNone asks for no client certificate.
	ClientAuthNone ClientAuth = "none"
	// ClientAuthRequested verifies a client certificate when one is sent.
	ClientAuthRequested ClientAuth = "requested"
	// ClientAuthRequired refuses a handshake without a verified client certificate.
	ClientAuthRequired ClientAuth = "required"
)

// Server describes a TLS server identity.
type Server struct {
	// CertFile and KeyFile are the server's certificate chain and private key.
	CertFile, KeyFile string
	// ClientCAFile is the CA bundle client certificates are verified against; required
	// unless ClientAuth is none.
	ClientCAFile string
	// ClientAuth defaults to none.
	ClientAuth ClientAuth
}

// Enabled reports whether a server certificate is configured.
func (s Server) Enabled() bool { return s.CertFile != "" || s.KeyFile != "" }

// Config loads the files and returns the server configuration (TLS 1.2 or newer).
func (s Server) Config() (*tls.Config, error) {
	if s.CertFile == "" || s.KeyFile == "" {
		return nil, fmt.Errorf("%w: server certificate and key files are both required", ErrConfig)
	}
	cert, err := tls.LoadX509KeyPair(s.CertFile, s.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("%w: %s / %s: %v", ErrConfig, s.CertFile, s.KeyFile, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{cert}}
	switch s.ClientAuth {
	case "", ClientAuthNone:
		return cfg, nil
	case ClientAuthRequested:
		cfg.ClientAuth = tls.VerifyClientCertIfGiven
	case ClientAuthRequired:
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	default:
		return nil, fmt.Errorf("%w: client auth %q is not none, requested or required", ErrConfig, s.ClientAuth)
	}
	if s.ClientCAFile == "" {
		return nil, fmt.Errorf("%w: client auth %s needs a client CA file", ErrConfig, s.ClientAuth)
	}
	if cfg.ClientCAs, err = LoadPool(s.ClientCAFile); err != nil {
		return nil, err
	}
	return cfg, nil
}

// Client describes how a service dials a TLS server.
type Client struct {
	// CAFile is the CA bundle the server's certificate is verified against ("" = the
	// system roots).
	CAFile string
	// CertFile and KeyFile, when set, are presented as the client certificate (mTLS).
	CertFile, KeyFile string
	// ServerName overrides the name verified in the server's certificate.
	ServerName string
}

// Enabled reports whether any client TLS setting is given.
func (c Client) Enabled() bool { return c.CAFile != "" || c.CertFile != "" || c.KeyFile != "" }

// Config loads the files and returns the client configuration (TLS 1.2 or newer).
func (c Client) Config() (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := LoadPool(c.CAFile)
		if err != nil {
			return nil, err
		}
		cfg.RootCAs = pool
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		return nil, fmt.Errorf("%w: client certificate and key files go together", ErrConfig)
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("%w: %s / %s: %v", ErrConfig, c.CertFile, c.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// LoadPool reads a PEM CA bundle.
func LoadPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%w: %s holds no PEM certificate", ErrConfig, file)
	}
	return pool, nil
}
