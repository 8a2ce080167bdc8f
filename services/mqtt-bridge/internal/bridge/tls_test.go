package bridge

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"go.uber.org/zap"

	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
)

type certPair struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	der  []byte
}

func newCert(t *testing.T, cn string, parent *certPair, isCA bool) *certPair {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	if isCA {
		tmpl.IsCA, tmpl.BasicConstraintsValid = true, true
	}
	signer, signKey := tmpl, key
	if parent != nil {
		signer, signKey = parent.cert, parent.key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signer, &key.PublicKey, signKey)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &certPair{cert: c, key: key, der: der}
}

func (c *certPair) write(t *testing.T, dir, name string) (certFile, keyFile string) {
	t.Helper()
	certFile, keyFile = filepath.Join(dir, name+".pem"), filepath.Join(dir, name+"-key.pem")
	kb, err := x509.MarshalECPrivateKey(c.key)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600); err != nil {
		t.Fatal(err)
	}
	return certFile, keyFile
}

// The listener with TLS and require-client-cert takes a client with a certificate
// signed by ca-file and refuses one without.
func TestListenerTLSClientCert(t *testing.T) {
	f, addr := startBackend(t)
	dir := t.TempDir()
	ca := newCert(t, "test-ca", nil, true)
	caFile, _ := ca.write(t, dir, "ca")
	srvCert, srvKey := newCert(t, "127.0.0.1", ca, false).write(t, dir, "server")
	cliCert, cliKey := newCert(t, "device-9", ca, false).write(t, dir, "client")
	cfg, ps := config.Load([]byte(`
http-addr: 127.0.0.1:0
storage-addr: `+addr+`
coordinator-addr: `+addr+`
listener:
  addr: 127.0.0.1:0
  tls: {cert-file: `+srvCert+`, key-file: `+srvKey+`, ca-file: `+caFile+`, require-client-cert: true}
mqtt-to-kafka:
  - {id: dev, mqtt-topic-filters: ["dev/#"], kafka-topic: devices}
`), nil)
	if err := ps.Err(); err != nil {
		t.Fatal(err)
	}
	b, err := New(cfg, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() { cancel(); <-done }()

	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	pair, err := tls.LoadX509KeyPair(cliCert, cliKey)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := tls.Dial("tcp", b.ListenerAddr(), &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatalf("TLS with a client certificate: %v", err)
	}
	// paho writes a packet in several Writes (fixed header, then body) and serialises
	// its writers (the pinger's PINGREQ, a PUBLISH) only on a conn that is a
	// sync.Locker: a bare tls.Conn (no single writev) let a PINGREQ land between a
	// PUBLISH's fixed header and its body (seen: 32 12 c0 00 00 05 "dev/9"...), which
	// the listener rightly refused as malformed. autopaho wraps its TLS conns the same
	// way (the bridge's upstream side: TestMQTTUpstreamTLS in tests/e2e).
	c := paho.NewClient(paho.ClientConfig{Conn: packets.NewThreadSafeConn(conn), ClientID: "device-9"})
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer ccancel()
	if _, err := c.Connect(cctx, &paho.Connect{ClientID: "device-9", CleanStart: true, KeepAlive: 30}); err != nil {
		t.Fatal(err)
	}
	if rc, err := publish(c, "dev/9", "over tls"); err != nil || rc != 0 {
		t.Fatalf("publish over TLS: %#x %v", rc, err)
	}
	_ = c.Disconnect(&paho.Disconnect{})
	<-c.Done()
	if n := len(f.stored("kafka.devices")); n != 1 {
		t.Fatalf("stored %d records, want 1", n)
	}

	// Without a client certificate the handshake fails.
	bad, err := tls.Dial("tcp", b.ListenerAddr(), &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
	if err == nil {
		// TLS 1.3 reports the server's refusal on the first read.
		_ = bad.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = bad.Read(make([]byte, 1))
		_ = bad.Close()
	}
	if err == nil {
		t.Fatal("a client without a certificate was accepted")
	}
}
