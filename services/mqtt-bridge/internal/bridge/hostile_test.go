package bridge

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
)

// rawConnect opens a TCP connection to the listener and does an MQTT 5 CONNECT
// (clean start, client id "r"), returning once the CONNACK was read.
func rawConnect(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := conn.Write([]byte{0x10, 0x0e, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 60, 0, 0, 1, 'r'}); err != nil {
		t.Fatal(err)
	}
	typ, _ := readPacket(t, conn)
	if typ != 0x20 {
		t.Fatalf("CONNACK: first byte %#x", typ)
	}
	return conn
}

// readPacket reads one packet: its first byte and the rest.
func readPacket(t *testing.T, conn net.Conn) (byte, []byte) {
	t.Helper()
	b := make([]byte, 1)
	if _, err := io.ReadFull(conn, b); err != nil {
		t.Fatalf("read: %v", err)
	}
	n, mul := 0, 1
	for {
		var c [1]byte
		if _, err := io.ReadFull(conn, c[:]); err != nil {
			t.Fatalf("read length: %v", err)
		}
		n += int(c[0]&0x7f) * mul
		if c[0]&0x80 == 0 {
			break
		}
		mul *= 128
	}
	rest := make([]byte, n)
	if _, err := io.ReadFull(conn, rest); err != nil {
		t.Fatalf("read body: %v", err)
	}
	return b[0], rest
}

// A fixed header claiming a 256 MB packet must not make the listener wait for (and
// allocate) it: the connection ends at once, before and after CONNECT.
func TestListenerRefusesHugePacketClaims(t *testing.T) {
	_, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8)
	for _, connected := range []bool{false, true} {
		var conn net.Conn
		if connected {
			conn = rawConnect(t, b.ListenerAddr())
		} else {
			var err error
			if conn, err = net.Dial("tcp", b.ListenerAddr()); err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
		}
		// PUBLISH (or CONNECT) claiming 268,435,455 bytes.
		first := byte(0x10)
		if connected {
			first = 0x32
		}
		if _, err := conn.Write([]byte{first, 0xff, 0xff, 0xff, 0x7f, 0, 1, 'a'}); err != nil {
			t.Fatal(err)
		}
		_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		buf := make([]byte, 64)
		for {
			_, err := conn.Read(buf)
			if err == nil {
				continue // a DISCONNECT 0x95
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("connected=%v: the connection is still open, waiting for a 256 MB packet", connected)
			}
			break
		}
	}
	// Others are unaffected.
	c := connect(t, b.ListenerAddr(), "after")
	if rc, err := publish(c, "dev/1", "ok"); err != nil || rc != 0 {
		t.Fatalf("publish after: %#x %v", rc, err)
	}
}

// The CONNACK tells an MQTT 5 client the packet size and topic alias limits it is
// held to.
func TestListenerAdvertisesLimits(t *testing.T) {
	_, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8)
	conn, err := net.Dial("tcp", b.ListenerAddr())
	if err != nil {
		t.Fatal(err)
	}
	c := paho.NewClient(paho.ClientConfig{Conn: conn, ClientID: "limits"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	ca, err := c.Connect(ctx, &paho.Connect{ClientID: "limits", CleanStart: true, KeepAlive: 30})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Disconnect(&paho.Disconnect{}); <-c.Done() }()
	if ca.Properties == nil || ca.Properties.MaximumPacketSize == nil || *ca.Properties.MaximumPacketSize != maxPacketSize(nil) {
		t.Errorf("CONNACK Maximum Packet Size %+v, want %d", ca.Properties, maxPacketSize(nil))
	}
	if ca.Properties == nil || ca.Properties.TopicAliasMaximum == nil || *ca.Properties.TopicAliasMaximum != topicAliasMaximum {
		t.Errorf("CONNACK Topic Alias Maximum %+v, want %d", ca.Properties, topicAliasMaximum)
	}
}

// A QoS 1 PUBLISH to $SYS gets an answer (0x87), not silence.
func TestListenerRefusesSysTopics(t *testing.T) {
	_, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8, `  - id: all
    mqtt-topic-filters: ["#"]
    kafka-topic: all`)
	conn := rawConnect(t, b.ListenerAddr())
	// PUBLISH QoS 1 "$SYS/x", packet id 7, no properties, payload "p".
	if _, err := conn.Write([]byte{0x32, 0x0c, 0, 6, '$', 'S', 'Y', 'S', '/', 'x', 0, 7, 0, 'p'}); err != nil {
		t.Fatal(err)
	}
	typ, rest := readPacket(t, conn)
	if typ != 0x40 || len(rest) < 3 || rest[1] != 7 || rest[2] != 0x87 {
		t.Fatalf("answer %#x % x, want PUBACK id 7 reason 0x87", typ, rest)
	}
	// QoS 2: PUBREC 0x87.
	if _, err := conn.Write([]byte{0x34, 0x0c, 0, 6, '$', 's', 'y', 's', '/', 'y', 0, 8, 0, 'p'}); err != nil {
		t.Fatal(err)
	}
	typ, rest = readPacket(t, conn)
	if typ != 0x50 || len(rest) < 3 || rest[1] != 8 || rest[2] != 0x87 {
		t.Fatalf("answer %#x % x, want PUBREC id 8 reason 0x87", typ, rest)
	}
}

// An empty topic name with a topic alias never set is a protocol error (0x82); it
// is not stored under the topic "" by a "#" mapping, nor acknowledged.
func TestListenerUnknownTopicAlias(t *testing.T) {
	f, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8, `  - id: all
    mqtt-topic-filters: ["#"]
    kafka-topic: all`)
	conn := rawConnect(t, b.ListenerAddr())
	// PUBLISH QoS 1, topic "", packet id 3, properties: topic alias 5, payload "p".
	if _, err := conn.Write([]byte{0x32, 0x09, 0, 0, 0, 3, 3, 0x23, 0, 5, 'p'}); err != nil {
		t.Fatal(err)
	}
	typ, rest := readPacket(t, conn)
	if typ != 0xe0 || len(rest) < 1 || rest[0] != 0x82 {
		t.Fatalf("answer %#x % x, want DISCONNECT 0x82", typ, rest)
	}
	if n := len(f.stored("kafka.all")); n != 0 {
		t.Fatalf("stored %d records for an unknown alias", n)
	}
	// An alias over the advertised maximum: 0x94.
	conn = rawConnect(t, b.ListenerAddr())
	if _, err := conn.Write([]byte{0x32, 0x0a, 0, 1, 'a', 0, 3, 3, 0x23, 0, topicAliasMaximum + 1, 'p'}); err != nil {
		t.Fatal(err)
	}
	typ, rest = readPacket(t, conn)
	if typ != 0xe0 || len(rest) < 1 || rest[0] != 0x94 {
		t.Fatalf("answer %#x % x, want DISCONNECT 0x94", typ, rest)
	}
}

// A QoS 2 PUBLISH sent again (DUP) after its PUBREC was lost, on a resumed session,
// is answered PUBREC 0x00 and not stored twice ([MQTT-4.3.3-10]); the library's
// 0x91 (packet identifier in use) would tell the publisher it failed.
func TestListenerQoS2ResentAfterLostPubrec(t *testing.T) {
	f, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8)
	// CONNECT MQTT 5, clean start off, session expiry 300 s, client id "q2".
	connectPkt := []byte{0x10, 0x14, 0, 4, 'M', 'Q', 'T', 'T', 5, 0x00, 0, 60, 5, 0x11, 0, 0, 0x01, 0x2c, 0, 2, 'q', '2'}
	dial := func() net.Conn {
		conn, err := net.Dial("tcp", b.ListenerAddr())
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := conn.Write(connectPkt); err != nil {
			t.Fatal(err)
		}
		if typ, rest := readPacket(t, conn); typ != 0x20 || rest[1] != 0 {
			t.Fatalf("CONNACK %#x % x", typ, rest)
		}
		return conn
	}
	conn := dial()
	// PUBLISH QoS 2 "dev/q", packet id 9, no properties, payload "x".
	pub := []byte{0x34, 0x0b, 0, 5, 'd', 'e', 'v', '/', 'q', 0, 9, 0, 'x'}
	if _, err := conn.Write(pub); err != nil {
		t.Fatal(err)
	}
	if typ, rest := readPacket(t, conn); typ != 0x50 || rest[1] != 9 || (len(rest) > 2 && rest[2] != 0) {
		t.Fatalf("PUBREC %#x % x", typ, rest)
	}
	conn.Close() // as if the PUBREC had been lost
	time.Sleep(100 * time.Millisecond)
	conn = dial()
	defer conn.Close()
	pub[0] |= 0x08 // DUP
	if _, err := conn.Write(pub); err != nil {
		t.Fatal(err)
	}
	// PUBREL; the resumed session may first resend its PUBREC. Every PUBREC must be
	// 0x00, and the PUBCOMP 0x00.
	if _, err := conn.Write([]byte{0x62, 0x02, 0, 9}); err != nil {
		t.Fatal(err)
	}
	recs := 0
	for {
		typ, rest := readPacket(t, conn)
		if typ == 0x50 && rest[1] == 9 {
			recs++
			if len(rest) > 2 && rest[2] != 0 {
				t.Fatalf("PUBREC to the resent PUBLISH: reason %#x, want 0x00", rest[2])
			}
			continue
		}
		if typ != 0x70 || rest[1] != 9 || (len(rest) > 2 && rest[2] != 0) {
			t.Fatalf("PUBCOMP %#x % x", typ, rest)
		}
		break
	}
	if recs == 0 {
		t.Fatal("the resent PUBLISH got no PUBREC")
	}
	if n := len(f.stored("kafka.devices")); n != 1 {
		t.Fatalf("stored %d records, want 1", n)
	}
}

// A connection that sends half a CONNECT is closed after connectTimeout, and does
// not keep the bridge from stopping (the library waited for it for ever).
func TestListenerHalfConnect(t *testing.T) {
	_, addr := startBackend(t)
	cfg, ps := config.Load([]byte("store-timeout: 1s\nhttp-addr: 127.0.0.1:0\nlistener: {addr: \"127.0.0.1:0\", connect-timeout: 500ms}\nmqtt-to-kafka:\n  - {id: d, mqtt-topic-filters: [\"d/#\"], kafka-topic: d}\n"),
		func(k string) (string, bool) {
			return addr, k == "TRIBUTARY_MQTT_STORAGE_ADDR" || k == "TRIBUTARY_MQTT_COORDINATOR_ADDR"
		})
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
	half := func() net.Conn {
		conn, err := net.Dial("tcp", b.ListenerAddr())
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Write([]byte{0x10, 0x0e, 0, 4, 'M', 'Q'}); err != nil {
			t.Fatal(err)
		}
		return conn
	}
	idle := half()
	defer idle.Close()
	_ = idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from a half-connected connection")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a half CONNECT was not closed after connectTimeout")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("closed after %v", d)
	}
	// Stopping with a half-connected connection open.
	b.listener.guard.mu.Lock()
	b.listener.guard.timeout = time.Hour
	b.listener.guard.mu.Unlock()
	c2 := half()
	defer c2.Close()
	time.Sleep(100 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return with a half-connected client open")
	}
}

// A refused publish of an MQTT 3.1.1 client is acknowledged (it cannot be told why)
// but, as for MQTT 5, neither delivered to the listener's subscribers nor retained.
func TestListenerV311RefusalNotDelivered(t *testing.T) {
	_, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8)
	sub := connect(t, b.ListenerAddr(), "watcher")
	got := make(chan string, 10)
	sub.AddOnPublishReceived(func(pr paho.PublishReceived) (bool, error) {
		got <- string(pr.Packet.Payload)
		return true, nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := sub.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "dev/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", b.ListenerAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	// CONNECT MQTT 3.1.1, clean session, client id "v".
	if _, err := conn.Write([]byte{0x10, 0x0d, 0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, 1, 'v'}); err != nil {
		t.Fatal(err)
	}
	if typ, _ := readPacket(t, conn); typ != 0x20 {
		t.Fatalf("CONNACK %#x", typ)
	}
	// Retained QoS 1 PUBLISH "dev/v", id 4, 100 bytes: over max-record-bytes (64).
	big := append([]byte{0x33, 2 + 5 + 2 + 100, 0, 5, 'd', 'e', 'v', '/', 'v', 0, 4}, make([]byte, 100)...)
	copy(big[11:], "big")
	if _, err := conn.Write(big); err != nil {
		t.Fatal(err)
	}
	if typ, rest := readPacket(t, conn); typ != 0x40 || rest[1] != 4 {
		t.Fatalf("PUBACK %#x % x", typ, rest)
	}
	// Then a small one, which is delivered.
	if _, err := conn.Write([]byte{0x32, 2 + 5 + 2 + 5, 0, 5, 'd', 'e', 'v', '/', 'v', 0, 5, 's', 'm', 'a', 'l', 'l'}); err != nil {
		t.Fatal(err)
	}
	if typ, rest := readPacket(t, conn); typ != 0x40 || rest[1] != 5 {
		t.Fatalf("PUBACK %#x % x", typ, rest)
	}
	select {
	case p := <-got:
		if p != "small" {
			t.Fatalf("subscriber got %.10q first: the refused message was delivered", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the stored message never reached the subscriber")
	}
	// Nor retained: a new subscriber gets nothing.
	late := connect(t, b.ListenerAddr(), "late")
	lateGot := make(chan string, 1)
	late.AddOnPublishReceived(func(pr paho.PublishReceived) (bool, error) { lateGot <- string(pr.Packet.Payload); return true, nil })
	if _, err := late.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "dev/#", QoS: 1}}}); err != nil {
		t.Fatal(err)
	}
	select {
	case p := <-lateGot:
		t.Fatalf("retained %.10q", p)
	case <-time.After(300 * time.Millisecond):
	}
}

// A subscriber that never reads nor acknowledges holds the publisher back (its
// PUBACKs wait) for the stall timeout once it holds subscriberQueue QoS 1 messages;
// then it is stalled: it holds at most subscriberHardQueue, every later message to it
// is counted as dropped, the publisher is answered as usual and the listener keeps
// serving.
func TestListenerSlowSubscriberBounded(t *testing.T) {
	_, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8)
	stall := 500 * time.Millisecond
	b.listener.pace.stall.Store(int64(stall))
	sub := rawConnect(t, b.ListenerAddr())
	// SUBSCRIBE id 1, no properties, "slow/#" at QoS 1; then nothing is read again.
	filter := "slow/#"
	pkt := append([]byte{0x82, byte(2 + 1 + 2 + len(filter) + 1), 0, 1, 0, 0, byte(len(filter))}, filter...)
	if _, err := sub.Write(append(pkt, 0x01)); err != nil {
		t.Fatal(err)
	}
	if typ, _ := readPacket(t, sub); typ != 0x90 {
		t.Fatalf("SUBACK: first byte %#x", typ)
	}
	pub := connect(t, b.ListenerAddr(), "fast-publisher")
	const n = 3000
	payload := strings.Repeat("p", 1024)
	start := time.Now()
	for i := 0; i < n; i++ {
		if rc, err := publish(pub, "slow/x", payload); err != nil || rc != 0 {
			t.Fatalf("publish %d: %#x %v", i, rc, err)
		}
	}
	if took := time.Since(start); took < stall {
		t.Errorf("%d publishes answered in %v: the publisher was not held for the stall timeout (%v)", n, took, stall)
	}
	// The library hands a message to subscribers after answering its publisher.
	want := float64(n - subscriberHardQueue)
	dropped := testutil.ToFloat64(b.listener.dropped)
	for deadline := time.Now().Add(5 * time.Second); dropped < want && time.Now().Before(deadline); {
		<-time.After(10 * time.Millisecond)
		dropped = testutil.ToFloat64(b.listener.dropped)
	}
	if dropped != want {
		t.Errorf("dropped_total = %v, want %v (all but the %d the stuck subscriber may hold)", dropped, want, subscriberHardQueue)
	}
	if rc, err := publish(connect(t, b.ListenerAddr(), "other"), "other/y", "still served"); err != nil || rc != 0 {
		t.Errorf("listener after the drops: %#x %v", rc, err)
	}
}
