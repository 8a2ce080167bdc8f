package e2e

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
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// writeTestPKI writes a CA and a server certificate for 127.0.0.1 (ECDSA P-256, one
// hour) into dir and returns their PEM file paths. The files are world-readable: a
// Mosquitto started as root reads them as the user it drops to.
func writeTestPKI(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	write := func(name, kind string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tributary e2e CA"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return write("ca.pem", "CERTIFICATE", caDER), write("server.pem", "CERTIFICATE", leafDER), write("server-key.pem", "EC PRIVATE KEY", keyDER)
}

// TestMQTTUpstreamTLS: the bridge is a client of a private Mosquitto over TLS (a CA
// made by the test) with a 1 s keep-alive, in both directions at once: 2,000 QoS 1
// messages to Kafka, and 2,000 Kafka records published back as QoS 0 (no answers
// from the broker, so the bridge's pinger writes a PINGREQ every second while PUBLISH
// packets are being written on the same tls.Conn; an unserialised write would corrupt
// the stream and Mosquitto would drop the connection). Every message arrives, and the
// bridge never loses its connection.
func TestMQTTUpstreamTLS(t *testing.T) {
	s := sharedStack(t)
	id := mqttID()
	dir := t.TempDir()
	for _, d := range []string{dir, filepath.Dir(dir)} { // see writeTestPKI
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	caFile, certFile, keyFile := writeTestPKI(t, dir)
	addr := stack.FreeAddr()
	_, port, _ := net.SplitHostPort(addr)
	m := &ownMosquitto{addr: addr, conf: filepath.Join(dir, "mosquitto.conf")}
	conf := fmt.Sprintf("listener %s 127.0.0.1\ncafile %s\ncertfile %s\nkeyfile %s\nallow_anonymous true\npersistence false\nmax_queued_messages 10000\n", port, caFile, certFile, keyFile)
	if err := os.WriteFile(m.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	m.start(t)
	t.Cleanup(m.stop)

	in, out := "mqtt-tls-in-"+id, "mqtt-tls-out-"+id
	createTopic(t, newAdmin(t, s.KafkaAddrs), out, 1, nil)
	bridge := startBridge(t, s, "mqtt-bridge-tls-"+id, fmt.Sprintf(`
id: tls-%[1]s
clusters:
  - name: private
    urls: [mqtts://%[2]s]
    keep-alive: 1
    tls: {ca-file: %[3]s}
mqtt-to-kafka:
  - id: in
    mqtt-topic-filters: ["e2e/%[1]s/in/#"]
    kafka-topic: %[4]s
kafka-to-mqtt:
  - id: out
    kafka-topics: [%[5]s]
    mqtt-topic: "e2e/%[1]s/out"
    qos: 0
    start-at: earliest
`, id, addr, caFile, in, out))
	waitFor(t, 20*time.Second, "the bridge connected and subscribed over TLS", func() bool {
		code, _ := readyz(bridge.HTTPAddr)
		return code == 200
	})

	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(caFile)
	if err != nil || !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("CA: %v", err)
	}
	ctx := ctxT(t, 2*time.Minute)
	dial := func(clientID string, onPublish func(paho.PublishReceived) (bool, error)) *paho.Client {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})
		if err != nil {
			t.Fatal(err)
		}
		cfg := paho.ClientConfig{Conn: packets.NewThreadSafeConn(conn), ClientID: clientID}
		if onPublish != nil {
			cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){onPublish}
		}
		c := paho.NewClient(cfg)
		if _, err := c.Connect(ctx, &paho.Connect{ClientID: clientID, CleanStart: true, KeepAlive: 30}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Disconnect(&paho.Disconnect{}) })
		return c
	}
	var received atomic.Int64
	sub := dial("e2e-tls-sub-"+id, func(paho.PublishReceived) (bool, error) { received.Add(1); return true, nil })
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "e2e/" + id + "/out", QoS: 0}}}); err != nil {
		t.Fatal(err)
	}
	pub := dial("e2e-tls-pub-"+id, nil)

	const n = 2000
	payload := strings.Repeat("x", 1000)
	done := make(chan error, 1)
	kc := newClient(t, s.KafkaAddrs)
	go func() { // Kafka records for kafka-to-mqtt, spread over about 5 s
		for i := 0; i < n; i++ {
			if i%100 == 0 {
				time.Sleep(250 * time.Millisecond)
			}
			if err := kc.ProduceSync(ctx, &kgo.Record{Topic: out, Value: []byte(fmt.Sprintf("%04d%s", i, payload))}).FirstErr(); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for i := 0; i < n; i++ {
		if _, err := pub.Publish(ctx, &paho.Publish{QoS: 1, Topic: fmt.Sprintf("e2e/%s/in/%d", id, i%5), Payload: []byte(fmt.Sprintf("in-%d", i))}); err != nil {
			t.Fatalf("publish %d to Mosquitto: %v", i, err)
		}
		if i%200 == 0 {
			time.Sleep(250 * time.Millisecond)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	waitKafkaTotal(t, s, in, n, time.Minute)
	waitFor(t, time.Minute, fmt.Sprintf("%d records published to Mosquitto over TLS", n), func() bool { return received.Load() >= n })
	counts := kafkaCounts(t, s, in)
	var missing []string
	total := 0
	for _, c := range counts {
		total += c
	}
	for i := 0; i < n; i++ {
		if counts[fmt.Sprintf("in-%d", i)] == 0 {
			missing = append(missing, fmt.Sprintf("in-%d", i))
		}
	}
	logText, _ := os.ReadFile(bridge.LogPath)
	lost := strings.Count(string(logText), "connection to broker lost")
	t.Logf("upstream over TLS, keep-alive 1s: %d messages in Kafka (%d distinct of %d), %d published back and received; connection lost %d times",
		total, n-len(missing), n, received.Load(), lost)
	if len(missing) > 0 {
		t.Errorf("missing from Kafka: %d, e.g. %v", len(missing), first(missing, 10))
	}
	if lost > 0 {
		t.Errorf("the bridge lost its TLS connection to Mosquitto %d times", lost)
	}
}
