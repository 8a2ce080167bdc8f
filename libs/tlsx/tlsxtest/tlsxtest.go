// Package tlsxtest writes a throwaway CA and certificates signed by it, for tests and
// benchmarks that need TLS or mTLS on loopback. Keys are ECDSA P-256; certificates are
// valid for one day and name 127.0.0.1, ::1 and localhost.
package tlsxtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// CA is a certificate authority whose files are under Dir.
type CA struct {
	// Dir holds ca.pem and every issued NAME.pem / NAME-key.pem.
	Dir string
	// CertFile is the CA certificate (PEM), the bundle peers verify against.
	CertFile string
	cert     *x509.Certificate
	key      *ecdsa.PrivateKey
	serial   int64
}

// NewCA creates a CA in t.TempDir(); any error fails t.
func NewCA(t testing.TB) *CA {
	t.Helper()
	ca, err := NewCAIn(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// NewCAIn creates a CA whose files go in dir (an existing directory), for programs
// that have no testing.TB (the benchmarks). Errors come from key generation, x509 and
// writing ca.pem.
func NewCAIn(dir string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "tributary test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	ca := &CA{Dir: dir, CertFile: filepath.Join(dir, "ca.pem"), cert: cert, key: key, serial: 1}
	if err := writePEM(ca.CertFile, "CERTIFICATE", der); err != nil {
		return nil, err
	}
	return ca, nil
}

// Issue writes NAME.pem and NAME-key.pem, a certificate with common name cn usable
// both as a server (loopback names) and as a client certificate, and returns their
// paths; any error fails t.
func (ca *CA) Issue(t testing.TB, name, cn string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile, err := ca.IssueFiles(name, cn)
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// IssueExpired is Issue for a certificate that expired an hour ago (valid the day
// before), for tests that must see it refused.
func (ca *CA) IssueExpired(t testing.TB, name, cn string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile, err := ca.issue(name, cn, time.Now().Add(-25*time.Hour), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// IssueFiles is Issue returning its error (key generation, x509, writing the files)
// instead of failing a test.
func (ca *CA) IssueFiles(name, cn string) (certFile, keyFile string, err error) {
	return ca.issue(name, cn, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

func (ca *CA) issue(name, cn string, notBefore, notAfter time.Time) (certFile, keyFile string, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", err
	}
	ca.serial++
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(ca.serial),
		Subject:      pkix.Name{CommonName: cn, Organization: []string{"tributary"}},
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return "", "", err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return "", "", err
	}
	certFile = filepath.Join(ca.Dir, name+".pem")
	keyFile = filepath.Join(ca.Dir, name+"-key.pem")
	if err := writePEM(certFile, "CERTIFICATE", der); err != nil {
		return "", "", err
	}
	if err := writePEM(keyFile, "PRIVATE KEY", keyDER); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func writePEM(file, typ string, der []byte) error {
	return os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}
