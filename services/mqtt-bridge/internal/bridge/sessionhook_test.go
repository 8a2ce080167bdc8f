package bridge

import (
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tributary/tributary/services/mqtt-bridge/internal/config"
	"github.com/tributary/tributary/services/mqtt-bridge/internal/sessions"
)

// sessionBridge is a bridge with a listener whose sessions are kept in dir; stop ends
// it (gracefully) before the test does.
type sessionBridge struct {
	*Bridge
	stop func()
}

func startSessionBridge(t *testing.T, backend, dir string) *sessionBridge {
	t.Helper()
	src := `
store-timeout: 3s
http-addr: 127.0.0.1:0
listener:
  addr: 127.0.0.1:0
mqtt-to-kafka:
  - id: dev
    mqtt-topic-filters: ["dev/#"]
    kafka-topic: devices
`
	cfg, ps := config.Load([]byte(src), func(k string) (string, bool) {
		switch k {
		case "TRIBUTARY_MQTT_STORAGE_ADDR", "TRIBUTARY_MQTT_COORDINATOR_ADDR":
			return backend, true
		case "TRIBUTARY_MQTT_LISTENER_SESSION_DIR":
			return dir, dir != ""
		}
		return "", false
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
	stopped := false
	sb := &sessionBridge{Bridge: b}
	sb.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(sb.stop)
	return sb
}

// crashImage is what a kill -9 of the bridge would leave in dir now: the journal as
// written so far. restore puts it back after the bridge stopped (gracefully, which
// writes more).
func crashImage(t *testing.T, dir string) (restore func()) {
	t.Helper()
	path := filepath.Join(dir, sessions.JournalFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return func() {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// mqttConn is an MQTT 5 client driven packet by packet.
type mqttConn struct {
	t    *testing.T
	conn net.Conn
}

// dialMQTT connects clientID with clean start off and the session expiry interval
// (seconds), returning the CONNACK.
func dialMQTT(t *testing.T, addr, clientID string, expiry uint32) (*mqttConn, *packets.Connack) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	c := &mqttConn{t: t, conn: conn}
	c.send(&packets.Connect{ProtocolName: "MQTT", ProtocolVersion: 5, ClientID: clientID, KeepAlive: 60,
		Properties: &packets.Properties{SessionExpiryInterval: &expiry}})
	ca, ok := c.read().Content.(*packets.Connack)
	if !ok || ca.ReasonCode != 0 {
		t.Fatalf("CONNACK %+v", ca)
	}
	return c, ca
}

func (c *mqttConn) send(p io.WriterTo) {
	c.t.Helper()
	if _, err := p.WriteTo(c.conn); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

func (c *mqttConn) read() *packets.ControlPacket {
	c.t.Helper()
	cp, err := packets.ReadPacket(c.conn)
	if err != nil {
		c.t.Fatalf("read: %v", err)
	}
	return cp
}

// next reads until a packet of type typ for packet identifier id (0: any) comes,
// skipping others (a resumed session's resent PUBRECs, for one).
func (c *mqttConn) next(typ byte, id uint16) *packets.ControlPacket {
	c.t.Helper()
	for {
		cp := c.read()
		if cp.Type == typ && (id == 0 || cp.PacketID() == id) {
			return cp
		}
	}
}

func (c *mqttConn) publish(qos byte, id uint16, dup bool, topic, payload string) {
	c.send(&packets.Publish{QoS: qos, PacketID: id, Duplicate: dup, Topic: topic, Payload: []byte(payload), Properties: &packets.Properties{}})
}

// reason is the reason code of a PUBACK, PUBREC or PUBCOMP.
func reason(cp *packets.ControlPacket) byte {
	switch p := cp.Content.(type) {
	case *packets.Puback:
		return p.ReasonCode
	case *packets.Pubrec:
		return p.ReasonCode
	case *packets.Pubcomp:
		return p.ReasonCode
	}
	return 0xff
}

func values(f *fakeBackend) map[string]int {
	out := map[string]int{}
	for _, r := range f.stored("kafka.devices") {
		out[string(r.GetValue())]++
	}
	return out
}

// After a crash (the journal as a kill -9 leaves it), a persistent session is
// present: its QoS 2 packet identifiers awaiting PUBREL complete with PUBCOMP 0x00, a
// resent PUBLISH of a stored message (QoS 1 whose PUBACK was lost, QoS 2 PUBREC'd) is
// acknowledged without being stored again, its subscription holds, and the message
// queued for it while it was offline is delivered. A session whose expiry interval
// ran out while the bridge was down is gone.
func TestListenerSessionsSurviveCrash(t *testing.T) {
	f, addr := startBackend(t)
	f.producers = true
	dir := t.TempDir()
	b := startSessionBridge(t, addr, dir)

	sub, _ := dialMQTT(t, b.ListenerAddr(), "sub", 300)
	sub.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.SubOptions{{Topic: "watch/#", QoS: 1}}, Properties: &packets.Properties{}})
	sub.next(packets.SUBACK, 1)
	short, _ := dialMQTT(t, b.ListenerAddr(), "short", 1)
	short.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.SubOptions{{Topic: "watch/#", QoS: 1}}, Properties: &packets.Properties{}})
	short.next(packets.SUBACK, 1)

	pub, ca := dialMQTT(t, b.ListenerAddr(), "pub", 300)
	if ca.SessionPresent {
		t.Fatal("a new session is present")
	}
	pub.publish(2, 7, false, "dev/a", "q2-pubrec")
	if rc := reason(pub.next(packets.PUBREC, 7)); rc != 0 {
		t.Fatalf("PUBREC %#x", rc)
	}
	pub.publish(1, 8, false, "dev/b", "q1-ack-lost")
	if rc := reason(pub.next(packets.PUBACK, 8)); rc != 0 {
		t.Fatalf("PUBACK %#x", rc)
	}
	pub.publish(2, 9, false, "dev/c", "q2-pubrel")
	if rc := reason(pub.next(packets.PUBREC, 9)); rc != 0 {
		t.Fatalf("PUBREC %#x", rc)
	}
	sub.conn.Close() // offline: the next message is queued for it
	time.Sleep(100 * time.Millisecond)
	pub.publish(1, 10, false, "watch/queued", "queued")
	pub.next(packets.PUBACK, 10)
	short.next(packets.PUBLISH, 0)
	// The broker hands a message to its subscribers just after the publisher's PUBACK.
	waitFor(t, "the queued message recorded", func() bool {
		n := 0
		for _, m := range b.listener.sessions.Inflight() {
			if m.Client == "sub" {
				n++
			}
		}
		return n == 1
	})

	restore := crashImage(t, dir)
	crashed := time.Now()
	b.stop()
	restore()
	// "short" (expiry 1 s) was connected at the crash: gone 1 s after the last
	// heartbeat (plus one, for the heartbeat interval).
	time.Sleep(time.Until(crashed.Add(3 * time.Second)))
	b = startSessionBridge(t, addr, dir)

	pub, ca = dialMQTT(t, b.ListenerAddr(), "pub", 300)
	if !ca.SessionPresent {
		t.Fatal("pub: Session Present 0 after the restart")
	}
	pub.publish(2, 7, true, "dev/a", "q2-pubrec")
	if rc := reason(pub.next(packets.PUBREC, 7)); rc != 0 {
		t.Fatalf("PUBREC to the resent QoS 2 PUBLISH: %#x", rc)
	}
	pub.send(&packets.Pubrel{PacketID: 7, Properties: &packets.Properties{}})
	if rc := reason(pub.next(packets.PUBCOMP, 7)); rc != 0 {
		t.Fatalf("PUBCOMP 7: %#x", rc)
	}
	pub.publish(1, 8, true, "dev/b", "q1-ack-lost")
	if rc := reason(pub.next(packets.PUBACK, 8)); rc != 0 {
		t.Fatalf("PUBACK to the resent QoS 1 PUBLISH: %#x", rc)
	}
	pub.send(&packets.Pubrel{PacketID: 9, Properties: &packets.Properties{}})
	if rc := reason(pub.next(packets.PUBCOMP, 9)); rc != 0 {
		t.Fatalf("PUBCOMP 9 (PUBREC'd before the crash): %#x, want 0x00", rc)
	}
	got := values(f)
	if len(got) != 3 || got["q2-pubrec"] != 1 || got["q1-ack-lost"] != 1 || got["q2-pubrel"] != 1 {
		t.Fatalf("stored %v, want each message once", got)
	}
	if n := testutil.ToFloat64(b.m.deduplicated.WithLabelValues("dev")); n != 1 {
		t.Errorf("deduplicated_total %v, want 1 (the QoS 1 resend)", n)
	}

	sub, ca = dialMQTT(t, b.ListenerAddr(), "sub", 300)
	if !ca.SessionPresent {
		t.Fatal("sub: Session Present 0 after the restart")
	}
	queued := sub.next(packets.PUBLISH, 0).Content.(*packets.Publish)
	if string(queued.Payload) != "queued" || queued.QoS != 1 {
		t.Fatalf("queued message: %+v", queued)
	}
	sub.send(&packets.Puback{PacketID: queued.PacketID, Properties: &packets.Properties{}})
	pub.publish(1, 11, false, "watch/after", "after")
	pub.next(packets.PUBACK, 11)
	after := sub.next(packets.PUBLISH, 0).Content.(*packets.Publish)
	if string(after.Payload) != "after" {
		t.Fatalf("after the restart, without subscribing again: %+v", after)
	}
	sub.send(&packets.Puback{PacketID: after.PacketID, Properties: &packets.Properties{}})

	if _, ca = dialMQTT(t, b.ListenerAddr(), "short", 1); ca.SessionPresent {
		t.Error("short: its session expired while the bridge was down, yet Session Present 1")
	}

	// Once more, from the journal compacted at the last start: the sessions, the
	// subscription and the remembered messages are still there.
	b.stop()
	b = startSessionBridge(t, addr, dir)
	pub, ca = dialMQTT(t, b.ListenerAddr(), "pub", 300)
	if !ca.SessionPresent {
		t.Fatal("pub: Session Present 0 after the second restart")
	}
	pub.publish(1, 8, true, "dev/b", "q1-ack-lost")
	if rc := reason(pub.next(packets.PUBACK, 8)); rc != 0 {
		t.Fatalf("PUBACK to the second resend: %#x", rc)
	}
	if got := values(f); len(got) != 3 || got["q1-ack-lost"] != 1 {
		t.Fatalf("stored %v after the second resend", got)
	}
	sub, ca = dialMQTT(t, b.ListenerAddr(), "sub", 300)
	if !ca.SessionPresent {
		t.Fatal("sub: Session Present 0 after the second restart")
	}
	pub.publish(1, 12, false, "watch/again", "again")
	pub.next(packets.PUBACK, 12)
	for {
		// "after" comes again first if its PUBACK was not handled before the stop.
		p := sub.next(packets.PUBLISH, 0).Content.(*packets.Publish)
		if string(p.Payload) == "again" {
			break
		}
		if string(p.Payload) != "after" {
			t.Fatalf("after the second restart: %+v", p)
		}
		sub.send(&packets.Puback{PacketID: p.PacketID, Properties: &packets.Properties{}})
	}
}

// A batch journaled and sent, its answer not received when the bridge died, is sent
// again (same producer identity) by the next process: stored once whether the first
// one landed or not, and the publisher's resend is acknowledged from that outcome.
func TestListenerJournaledBatchSentAgainAfterCrash(t *testing.T) {
	for _, landed := range []bool{true, false} {
		name := map[bool]string{true: "landed", false: "not landed"}[landed]
		t.Run(name, func(t *testing.T) {
			f, addr := startBackend(t)
			f.producers = true
			dir := t.TempDir()
			b := startSessionBridge(t, addr, dir)
			waitFor(t, "producer ids", func() bool { return b.store.producers.Load() != nil })
			entered := make(chan struct{}, 10)
			f.mu.Lock()
			f.entered = entered
			if landed {
				f.hold = make(chan struct{})
			} else {
				f.gate = make(chan struct{})
			}
			f.mu.Unlock()
			pub, _ := dialMQTT(t, b.ListenerAddr(), "pub", 300)
			pub.publish(1, 3, false, "dev/x", "in-doubt")
			select {
			case <-entered:
			case <-time.After(10 * time.Second):
				t.Fatal("the publish did not reach storage")
			}
			if landed {
				waitFor(t, "the record stored", func() bool { return len(f.stored("kafka.devices")) == 1 })
			}
			restore := crashImage(t, dir)
			// Let the first process finish (its answer comes after the crash image).
			f.mu.Lock()
			if landed {
				close(f.hold)
				f.hold = nil
			} else {
				f.fail = status.Error(codes.InvalidArgument, "refused")
				close(f.gate)
				f.gate = nil
			}
			f.mu.Unlock()
			pub.read() // its answer: lost with the crash
			b.stop()
			restore()
			f.mu.Lock()
			f.fail = nil
			f.mu.Unlock()

			b = startSessionBridge(t, addr, dir)
			waitFor(t, "the journaled batch sent again", func() bool { return len(f.stored("kafka.devices")) == 1 && (!landed || f.dupCount() == 1) })
			pub, ca := dialMQTT(t, b.ListenerAddr(), "pub", 300)
			if !ca.SessionPresent {
				t.Fatal("Session Present 0")
			}
			pub.publish(1, 3, true, "dev/x", "in-doubt")
			if rc := reason(pub.next(packets.PUBACK, 3)); rc != 0 {
				t.Fatalf("PUBACK to the resend: %#x", rc)
			}
			if got := values(f); got["in-doubt"] != 1 || len(got) != 1 {
				t.Fatalf("stored %v, want the message once", got)
			}
		})
	}
}

// Without a session dir, a persistent session still lives while the bridge runs: a
// QoS 1 message resent (DUP) on a resumed session after its PUBACK was lost is not
// stored again; a DUP with other content, or the same content without DUP (a new
// message reusing the packet identifier), is.
func TestListenerResendOnResumedSession(t *testing.T) {
	f, addr := startBackend(t)
	b := startSessionBridge(t, addr, "")
	c, _ := dialMQTT(t, b.ListenerAddr(), "r", 60)
	c.publish(1, 4, false, "dev/r", "one")
	c.next(packets.PUBACK, 4)
	c.conn.Close()
	time.Sleep(100 * time.Millisecond)
	c, ca := dialMQTT(t, b.ListenerAddr(), "r", 60)
	if !ca.SessionPresent {
		t.Fatal("Session Present 0")
	}
	c.publish(1, 4, true, "dev/r", "one")
	if rc := reason(c.next(packets.PUBACK, 4)); rc != 0 {
		t.Fatalf("PUBACK %#x", rc)
	}
	if got := values(f); got["one"] != 1 {
		t.Fatalf("after the resend: %v", got)
	}
	c.publish(1, 4, true, "dev/r", "two")
	c.next(packets.PUBACK, 4)
	c.publish(1, 4, false, "dev/r", "two")
	c.next(packets.PUBACK, 4)
	if got := values(f); got["one"] != 1 || got["two"] != 2 {
		t.Fatalf("stored %v, want one once and two twice", got)
	}
}

func (f *fakeBackend) dupCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.dups
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A batch still in doubt when the bridge stops gracefully (storage-core took it and
// did not answer) is not taken for refused: the next process sends it again, and the
// client's resend on its resumed session is answered from that, not stored twice.
func TestListenerInDoubtAtStopResolvedAfterRestart(t *testing.T) {
	f, addr := startBackend(t)
	f.producers = true
	dir := t.TempDir()
	b := startSessionBridge(t, addr, dir)
	waitFor(t, "producer ids", func() bool { return b.store.producers.Load() != nil })
	f.mu.Lock()
	f.hold = make(chan struct{})
	f.mu.Unlock()
	pub, _ := dialMQTT(t, b.ListenerAddr(), "pub", 300)
	pub.publish(1, 5, false, "dev/s", "stalled")
	waitFor(t, "the record stored", func() bool { return len(f.stored("kafka.devices")) == 1 })
	b.stop() // the connection ends first: the client gets no answer
	f.mu.Lock()
	close(f.hold)
	f.hold = nil
	f.mu.Unlock()

	b = startSessionBridge(t, addr, dir)
	pub, ca := dialMQTT(t, b.ListenerAddr(), "pub", 300)
	if !ca.SessionPresent {
		t.Fatal("Session Present 0")
	}
	pub.publish(1, 5, true, "dev/s", "stalled")
	if rc := reason(pub.next(packets.PUBACK, 5)); rc != 0 {
		t.Fatalf("PUBACK to the resend: %#x", rc)
	}
	if got := values(f); got["stalled"] != 1 {
		t.Fatalf("stored %v, want the message once", got)
	}
}
