package e2e

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/tributary/tributary/tests/e2e/testenv"
)

// certsLeaves are the certificates scripts/dev/certs.sh issues from its CA.
var certsLeaves = []string{"storage-core", "coordinator", "kafka-gateway", "pubsub-gateway", "mqtt-bridge", "admin"}

func runCertsScript(t *testing.T, dir string) {
	t.Helper()
	cmd := exec.Command("../../scripts/dev/certs.sh")
	cmd.Env = append(os.Environ(), "TRIBUTARY_CERTS_DIR="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("certs.sh: %v\n%s", err, out)
	}
}

// make certs run again keeps what the CA still verifies, and reissues what it does
// not: with a new CA (the old one removed or expired) the kept certificates would fail
// every handshake of make up SECURE=1.
func TestCertsScriptReissuesForNewCA(t *testing.T) {
	testenv.RequireBinary(t, "openssl")
	dir := t.TempDir()
	runCertsScript(t, dir)
	read := func(name string) []byte {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	before := read("storage-core.pem")
	runCertsScript(t, dir)
	if !bytes.Equal(before, read("storage-core.pem")) {
		t.Fatal("a second run reissued a certificate its CA verifies")
	}

	for _, f := range []string{"ca.pem", "ca-key.pem"} {
		if err := os.Remove(filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	runCertsScript(t, dir)
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(read("ca.pem")) {
		t.Fatal("ca.pem holds no certificate")
	}
	for _, name := range certsLeaves {
		blk, _ := pem.Decode(read(name + ".pem"))
		if blk == nil {
			t.Fatalf("%s.pem holds no PEM block", name)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Verify(x509.VerifyOptions{Roots: roots, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
			t.Errorf("%s.pem after a new CA: %v", name, err)
		}
	}
}
