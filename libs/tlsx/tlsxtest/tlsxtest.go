// Package tlsxtest writes a throwaway CA and certificates signed by it, for tests that
// need TLS or mTLS on loopback. Keys are ECDSA P-256; certificates are valid for one day
// and name 127.0.0.1, ::1 and localhost.
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

// NewCA creates a CA in t.TempDir().
func NewCA(t testing.TB) *CA {
	t.Helper()
	key := newKey(t)
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
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	ca := &CA{Dir: t.TempDir(), cert: cert, key: key, serial: 1}
	ca.CertFile = filepath.Join(ca.Dir, "ca.pem")
	writePEM(t, ca.CertFile, "CERTIFICATE", der)
	return ca
}

// Issue writes NAME.pem and NAME-key.pem, a certificate with common name cn usable
// both as a server (loopback names) and as a client certificate, and returns their paths.
func (ca *CA) Issue(t testing.TB, name, cn string) (certFile, keyFile string) {
	t.Helper()
	return ca.issue(t, name, cn, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// IssueExpired is Issue for a certificate that expired an hour ago (valid the day
// before), for tests that must see it refused.
func (ca *CA) IssueExpired(t testing.TB, name, cn string) (certFile, keyFile string) {
	t.Helper()
	return ca.issue(t, name, cn, time.Now().Add(-25*time.Hour), time.Now().Add(-time.Hour))
}

func (ca *CA) issue(t testing.TB, name, cn string, notBefore, notAfter time.Time) (certFile, keyFile string) {
	t.Helper()
	key := newKey(t)
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
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile = filepath.Join(ca.Dir, name+".pem")
	keyFile = filepath.Join(ca.Dir, name+"-key.pem")
	writePEM(t, certFile, "CERTIFICATE", der)
	writePEM(t, keyFile, "PRIVATE KEY", keyDER)
	return certFile, keyFile
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return key
}

func writePEM(t testing.TB, file, typ string, der []byte) {
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
}
