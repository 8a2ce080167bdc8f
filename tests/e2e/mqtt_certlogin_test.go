package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// writeClientPKI writes a CA, a server certificate for 127.0.0.1 and a client
// certificate with CN cn into dir: ca, server cert, server key, client cert, client key.
func writeClientPKI(t *testing.T, dir, cn string) (files [5]string) {
	t.Helper()
	write := func(name, kind string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	newKey := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := newKey()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tributary e2e client CA"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	issue := func(serial int64, name string, usage x509.ExtKeyUsage, ip bool) (string, string) {
		k := newKey()
		c := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		}
		if ip {
			c.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		}
		der, err := x509.CreateCertificate(rand.Reader, c, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kd, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".pem", "CERTIFICATE", der), write(name+"-key.pem", "EC PRIVATE KEY", kd)
	}
	files[0] = write("ca.pem", "CERTIFICATE", caDER)
	files[1], files[2] = issue(2, "127.0.0.1", x509.ExtKeyUsageServerAuth, true)
	files[3], files[4] = issue(3, cn, x509.ExtKeyUsageClientAuth, false)
	return files
}

// TestMQTTListenerCertificateLogin: with certificate-login, a mosquitto_pub with a
// client certificate (CN sensor-1, signed by the listener's CA) and no user name is
// let in as sensor-1 and held to sensor-1's rules (dev/%u/#): its publish to
// dev/sensor-1/x is acknowledged 0x00, to dev/other/x 0x87; without a certificate
// and a user name the CONNECT gets 0x87; naming another user than the CN, 0x86.
func TestMQTTListenerCertificateLogin(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	pki := writeClientPKI(t, t.TempDir(), "sensor-1")
	lis := stack.FreeAddr()
	startBridge(t, s, "mqtt-bridge-certlogin", fmt.Sprintf(`
id: certlogin
listener:
  addr: %s
  tls: {ca-file: %s, cert-file: %s, key-file: %s}
  certificate-login: true
  users:
    - username: sensor-1
      publish: ["dev/%%u/#"]
mqtt-to-kafka:
  - id: dev
    mqtt-topic-filters: ["dev/#"]
    kafka-topic: %s
`, lis, pki[0], pki[1], pki[2], "mqtt-certlogin-"+mqttID()))
	withCert := []string{"--cafile", pki[0], "--cert", pki[3], "--key", pki[4], "-d", "-q", "1", "-m", "m"}
	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"-t", "dev/sensor-1/x"}, withCert...), "received PUBACK (Mid: 1, RC:0)"},
		{append([]string{"-t", "dev/other/x"}, withCert...), "received PUBACK (Mid: 1, RC:135)"},
		{append([]string{"-t", "dev/sensor-1/x", "-u", "sensor-2"}, withCert...), "received CONNACK (134)"},
		{[]string{"--cafile", pki[0], "-d", "-q", "1", "-m", "m", "-t", "dev/sensor-1/x"}, "received CONNACK (135)"},
	} {
		out, _ := mosq(t, "mosquitto_pub", lis, c.args...)
		if !strings.Contains(out, c.want) {
			t.Errorf("mosquitto_pub %q: want %q in\n%s", c.args, c.want, out)
		}
	}
}
