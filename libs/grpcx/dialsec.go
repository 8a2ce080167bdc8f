package grpcx

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tributary/tributary/libs/tlsx"
)

// DialSecurity is how a service dials one internal backend: TLS when CAFile or a client
// certificate is given (the certificate is then presented: mTLS), and a bearer token
// read from TokenFile sent with every call (TLS only). The zero value dials plaintext,
// as Dial always did.
type DialSecurity struct {
	// CAFile is the CA bundle the backend's certificate is verified against.
	CAFile string
	// CertFile and KeyFile are this service's client certificate and key.
	CertFile, KeyFile string
	// ServerName overrides the name verified in the backend's certificate (default: the
	// host of the address dialed).
	ServerName string
	// TokenFile holds a bearer token ("authorization: Bearer <token>"), re-read when
	// the file changes.
	TokenFile string
}

// Enabled reports whether the connection uses TLS.
func (d DialSecurity) Enabled() bool { return d.CAFile != "" || d.CertFile != "" }

// DialOptions returns the options for Dial: none for the zero value. Errors wrap
// tlsx.ErrConfig or ErrAuthConfig.
func (d DialSecurity) DialOptions() ([]grpc.DialOption, error) {
	if !d.Enabled() {
		if d.TokenFile != "" {
			return nil, fmt.Errorf("%w: a token file needs TLS to the backend (a CA file)", ErrAuthConfig)
		}
		return nil, nil
	}
	cfg, err := tlsx.Client{CAFile: d.CAFile, CertFile: d.CertFile, KeyFile: d.KeyFile, ServerName: d.ServerName}.Config()
	if err != nil {
		return nil, err
	}
	opts := []grpc.DialOption{grpc.WithTransportCredentials(credentials.NewTLS(cfg))}
	if d.TokenFile != "" {
		t := &fileToken{file: d.TokenFile}
		if _, err := t.get(); err != nil {
			return nil, err
		}
		opts = append(opts, grpc.WithPerRPCCredentials(t))
	}
	return opts, nil
}

// tokenRecheck is how often a token file is checked for a new token.
const tokenRecheck = 10 * time.Second

// fileToken sends the token held in a file as a bearer token.
type fileToken struct {
	file string

	mu      sync.Mutex
	token   string
	mod     time.Time
	checked time.Time
}

func (t *fileToken) get() (string, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.token != "" && time.Since(t.checked) < tokenRecheck {
		return t.token, nil
	}
	t.checked = time.Now()
	st, err := os.Stat(t.file)
	if err == nil && t.token != "" && st.ModTime().Equal(t.mod) {
		return t.token, nil
	}
	b, err := os.ReadFile(t.file)
	if err != nil {
		if t.token != "" {
			return t.token, nil // keep the last good one
		}
		return "", fmt.Errorf("%w: token file: %v", ErrAuthConfig, err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%w: token file %s is empty", ErrAuthConfig, t.file)
	}
	t.token = tok
	if st != nil {
		t.mod = st.ModTime()
	}
	return tok, nil
}

func (t *fileToken) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	tok, err := t.get()
	if err != nil {
		return nil, err
	}
	return map[string]string{"authorization": "Bearer " + tok}, nil
}

func (t *fileToken) RequireTransportSecurity() bool { return true }

// ClientFlags are the dial-side security flags of a service with several backends:
// one client certificate and token for all, a CA per backend.
type ClientFlags struct {
	CertFile, KeyFile, TokenFile string
	cas                          map[string]*string
}

// RegisterClientFlags registers --tls-client-cert, --tls-client-key, --token-file and,
// for each backend name, --<name>-tls-ca (the CA turns TLS to that backend on).
func RegisterClientFlags(fs *flag.FlagSet, backends ...string) *ClientFlags {
	f := &ClientFlags{cas: map[string]*string{}}
	for _, b := range backends {
		f.cas[b] = fs.String(b+"-tls-ca", "", "PEM CA bundle of "+b+"'s certificate: dial "+b+" over TLS (presenting --tls-client-cert when given)")
	}
	fs.StringVar(&f.CertFile, "tls-client-cert", "", "PEM client certificate presented to the gRPC backends (mTLS)")
	fs.StringVar(&f.KeyFile, "tls-client-key", "", "PEM private key of --tls-client-cert")
	fs.StringVar(&f.TokenFile, "token-file", "", "file holding a bearer token sent to the gRPC backends over TLS")
	return f
}

// For returns the DialSecurity of backend: plaintext unless its CA flag is set.
func (f *ClientFlags) For(backend string) DialSecurity {
	ca := f.cas[backend]
	if ca == nil || *ca == "" {
		return DialSecurity{}
	}
	return DialSecurity{CAFile: *ca, CertFile: f.CertFile, KeyFile: f.KeyFile, TokenFile: f.TokenFile}
}
