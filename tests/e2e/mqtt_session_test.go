package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// sessionBridgeConfig is a listener bridge keeping its sessions in dir, storing
// "load/#" into topic (3 partitions).
func sessionBridgeConfig(lis, dir, topic string) string {
	return fmt.Sprintf(`
id: sessions
store-timeout: 5s
listener:
  addr: %s
  session-dir: %s
mqtt-to-kafka:
  - id: load
    mqtt-topic-filters: ["load/#"]
    kafka-topic: %s
    partitions: 3
`, lis, dir, topic)
}

// TestMQTTKillListenerSessions: 10 paho (autopaho) publishers with persistent
// sessions (clean start off, session expiry 5 min) send 3,000 messages to the
// listener, once at QoS 1 and once at QoS 2; the bridge (listener.session-dir set) is
// killed with SIGKILL when 1,000 are acknowledged and started again. The publishers
// reconnect, are told Session Present 1, and resend what had no acknowledgement; each
// publish call waits for its acknowledgement across the restart. Every message
// acknowledged is in Kafka exactly once (the counts are reported), every reconnection
// found its session, and a subscriber that subscribed once, before the kill, gets a
// message published after the restart without subscribing again.
func TestMQTTKillListenerSessions(t *testing.T) {
	for _, qos := range []byte{1, 2} {
		t.Run(fmt.Sprintf("QoS%d", qos), func(t *testing.T) { killListenerSessions(t, qos) })
	}
}

func killListenerSessions(t *testing.T, qos byte) {
	s := stack.StartT(t, stack.Options{})
	topic := fmt.Sprintf("mqtt-kill-sess%d-%s", qos, mqttID())
	lis := stack.FreeAddr()
	bridge := startBridge(t, s, "mqtt-bridge-kill-sess", sessionBridgeConfig(lis, filepath.Join(t.TempDir(), "sessions"), topic))
	ctx := ctxT(t, 4*time.Minute)
	u, _ := url.Parse("mqtt://" + lis)

	var mu sync.Mutex
	var reconnects, reconnectsPresent int
	// connectSession starts an autopaho client with a persistent session; onUp runs at
	// each connection (after the first one it must find its session).
	connectSession := func(id string, onUp func(*autopaho.ConnectionManager, bool), onPublish func(paho.PublishReceived)) *autopaho.ConnectionManager {
		first := true
		cfg := autopaho.ClientConfig{
			ServerUrls:            []*url.URL{u},
			KeepAlive:             30,
			SessionExpiryInterval: 300,
			ConnectTimeout:        5 * time.Second,
			ReconnectBackoff:      func(int) time.Duration { return 100 * time.Millisecond },
			OnConnectionUp: func(cm *autopaho.ConnectionManager, ca *paho.Connack) {
				mu.Lock()
				wasFirst := first
				if !first {
					reconnects++
					if ca.SessionPresent {
						reconnectsPresent++
					}
				}
				first = false
				mu.Unlock()
				if onUp != nil {
					onUp(cm, wasFirst)
				}
			},
			ClientConfig: paho.ClientConfig{ClientID: id, PacketTimeout: time.Minute},
		}
		if onPublish != nil {
			cfg.OnPublishReceived = []func(paho.PublishReceived) (bool, error){
				func(pr paho.PublishReceived) (bool, error) { onPublish(pr); return true, nil },
			}
		}
		cm, err := autopaho.NewConnection(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			dctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = cm.Disconnect(dctx)
		})
		if err := cm.AwaitConnection(ctx); err != nil {
			t.Fatal(err)
		}
		return cm
	}

	// The subscriber subscribes on its first connection only.
	got := make(chan string, 10)
	subscribed := make(chan struct{})
	connectSession("watcher", func(cm *autopaho.ConnectionManager, first bool) {
		if !first {
			return
		}
		go func() {
			if _, err := cm.Subscribe(ctx, &paho.Subscribe{Subscriptions: []paho.SubscribeOptions{{Topic: "watch/#", QoS: 1}}}); err != nil {
				t.Errorf("subscribe: %v", err)
			}
			close(subscribed)
		}()
	}, func(pr paho.PublishReceived) { got <- string(pr.Packet.Payload) })
	<-subscribed

	const publishers = 10
	pubs := make([]*autopaho.ConnectionManager, publishers)
	for p := range pubs {
		pubs[p] = connectSession(fmt.Sprintf("sess-pub-%d", p), nil, nil)
	}
	var ackedN, refused, lost atomic.Int64
	acked := make([][]string, publishers)
	restarted := make(chan struct{})
	var wg sync.WaitGroup
	for p, cm := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < killMessages/publishers; i++ {
				payload := fmt.Sprintf("p%d-%d", p, i)
				for {
					resp, err := cm.Publish(ctx, &paho.Publish{QoS: qos, Topic: fmt.Sprintf("load/%d", p), Payload: []byte(payload)})
					switch {
					case errors.Is(err, autopaho.ConnectionDownError) || errors.Is(err, session.ErrNoConnection):
						// Not sent (not in the session): wait for the connection, send it.
						if cm.AwaitConnection(ctx) != nil {
							return
						}
						continue
					case err == nil && resp != nil && resp.ReasonCode == 0:
						acked[p] = append(acked[p], payload)
						ackedN.Add(1)
					case resp != nil && resp.ReasonCode >= 0x80:
						refused.Add(1)
					default:
						t.Logf("publish %s: %v", payload, err)
						lost.Add(1)
					}
					break
				}
			}
		}()
	}
	go func() {
		defer close(restarted)
		waitFor(t, time.Minute, "1000 acknowledged", func() bool { return ackedN.Load() >= 1000 })
		if err := s.Kill(bridge.Name, syscall.SIGKILL); err != nil {
			t.Error(err)
		}
		if err := s.Restart(context.Background(), bridge.Name); err != nil {
			t.Error(err)
		}
	}()
	wg.Wait()
	<-restarted
	if t.Failed() {
		t.FailNow()
	}

	if _, err := pubs[0].Publish(ctx, &paho.Publish{QoS: 1, Topic: "watch/after-restart", Payload: []byte("after-restart")}); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-got:
		if m != "after-restart" {
			t.Errorf("the subscriber got %q", m)
		}
	case <-time.After(20 * time.Second):
		t.Error("the subscriber, which subscribed before the kill only, got nothing published after the restart")
	}

	counts := kafkaCounts(t, s, topic)
	var missing, dup []string
	total := 0
	for _, list := range acked {
		for _, a := range list {
			total++
			switch counts[a] {
			case 1:
			case 0:
				missing = append(missing, a)
			default:
				dup = append(dup, a)
			}
		}
	}
	stored := 0
	for _, n := range counts {
		stored += n
	}
	mu.Lock()
	rc, rcp := reconnects, reconnectsPresent
	mu.Unlock()
	dedup := bridgeMetric(t, bridge, "tributary_mqtt_deduplicated_total", "load")
	t.Logf("listener kill -9 with persistent sessions, QoS %d: %d sent, %d acknowledged with success, %d refused, %d unanswered; %d reconnections, %d with Session Present 1; after the restart %v resent messages were answered from their first append (landed before the kill, or stored by the journaled batch the bridge sent again) instead of being stored again; Kafka holds %d records; acknowledged but missing %d, duplicated %d",
		qos, killMessages, total, refused.Load(), lost.Load(), rc, rcp, dedup, stored, len(missing), len(dup))
	if len(missing) > 0 || len(dup) > 0 {
		t.Errorf("exactly once broken: missing %v, duplicated %v", first(missing, 10), first(dup, 10))
	}
	if rc < publishers+1 || rcp != rc {
		t.Errorf("%d reconnections, %d of them with Session Present 1: want every client back (%d) and every session present", rc, rcp, publishers+1)
	}
	if total+int(refused.Load()) != killMessages || lost.Load() != 0 {
		t.Errorf("%d acknowledged and %d refused of %d, %d unanswered: every publish should get its answer across the restart", total, refused.Load(), killMessages, lost.Load())
	}
	if stored != total {
		t.Errorf("Kafka holds %d records for %d acknowledged messages", stored, total)
	}
}

// mqttConn is an MQTT 5 client driven packet by packet (paho's packet codec), for
// flows a full client does not produce (a PUBLISH resent after its PUBREC).
type mqttConn struct {
	t    *testing.T
	conn net.Conn
}

// dialMQTT connects clientID with clean start off and the session expiry interval
// (seconds) and returns the CONNACK.
func dialMQTT(t *testing.T, addr, clientID string, expiry uint32) (*mqttConn, *packets.Connack) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
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

// next reads until a packet of type typ with packet identifier id (0: any) comes,
// skipping others (the PUBRECs a resumed session sends again, for one).
func (c *mqttConn) next(typ byte, id uint16) *packets.ControlPacket {
	c.t.Helper()
	for {
		if cp := c.read(); cp.Type == typ && (id == 0 || cp.PacketID() == id) {
			return cp
		}
	}
}

func (c *mqttConn) publish(qos byte, id uint16, dup bool, topic, payload string) {
	c.t.Helper()
	c.send(&packets.Publish{QoS: qos, PacketID: id, Duplicate: dup, Topic: topic, Payload: []byte(payload), Properties: &packets.Properties{}})
}

func (c *mqttConn) subscribe(filter string) {
	c.t.Helper()
	c.send(&packets.Subscribe{PacketID: 1, Subscriptions: []packets.SubOptions{{Topic: filter, QoS: 1}}, Properties: &packets.Properties{}})
	if sa := c.next(packets.SUBACK, 1).Content.(*packets.Suback); len(sa.Reasons) != 1 || sa.Reasons[0] != 1 {
		c.t.Fatalf("SUBACK %+v", sa)
	}
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

// TestMQTTListenerSessionsAfterKill drives the MQTT 5 session flows packet by packet
// across a kill -9 of the bridge (listener.session-dir set):
//   - QoS 2: a PUBLISH PUBREC'd before the kill and sent again (DUP) after it is
//     answered PUBREC 0x00 and not stored again; a PUBREL for another PUBREC'd one is
//     answered PUBCOMP 0x00 (the packet identifier was kept);
//   - QoS 1: a PUBLISH whose PUBACK the client did not get, sent again (DUP) after the
//     restart, is answered 0x00 and not stored again;
//   - a subscriber offline at the kill gets, on reconnecting (Session Present 1), the
//     message queued for it, and messages published after, without subscribing again;
//   - a session whose 2 s expiry ran out while the bridge was down is gone (Session
//     Present 0).
func TestMQTTListenerSessionsAfterKill(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	topic := "mqtt-sess-" + mqttID()
	lis := stack.FreeAddr()
	bridge := startBridge(t, s, "mqtt-bridge-sess", sessionBridgeConfig(lis, filepath.Join(t.TempDir(), "sessions"), topic))

	sub, _ := dialMQTT(t, lis, "sub", 300)
	sub.subscribe("watch/#")
	short, _ := dialMQTT(t, lis, "short", 2)
	short.subscribe("watch/#")
	pub, ca := dialMQTT(t, lis, "pub", 300)
	if ca.SessionPresent {
		t.Fatal("a new session is present")
	}
	pub.publish(2, 7, false, "load/a", "q2-pubrec-resent")
	if rc := reason(pub.next(packets.PUBREC, 7)); rc != 0 {
		t.Fatalf("PUBREC 7: %#x", rc)
	}
	pub.publish(2, 9, false, "load/b", "q2-pubrel-after")
	if rc := reason(pub.next(packets.PUBREC, 9)); rc != 0 {
		t.Fatalf("PUBREC 9: %#x", rc)
	}
	pub.publish(1, 8, false, "load/c", "q1-puback-lost")
	if rc := reason(pub.next(packets.PUBACK, 8)); rc != 0 {
		t.Fatalf("PUBACK 8: %#x", rc)
	}
	sub.conn.Close() // the next message is queued for it (or written to a dead connection: in flight all the same)
	pub.publish(1, 10, false, "watch/queued", "queued")
	pub.next(packets.PUBACK, 10)
	// The broker hands a message to its subscribers just after the publisher's PUBACK,
	// one publish of a client after the other, but to the subscribers of one publish
	// in no set order: once "short" has "fence", the publish after "marker", both
	// "queued" and "marker" were queued for "sub". "fence" itself may or may not be.
	pub.publish(1, 12, false, "watch/marker", "marker")
	pub.next(packets.PUBACK, 12)
	pub.publish(1, 13, false, "watch/fence", "fence")
	pub.next(packets.PUBACK, 13)
	for {
		if p := short.next(packets.PUBLISH, 0).Content.(*packets.Publish); string(p.Payload) == "fence" {
			break
		}
	}

	if err := s.Kill(bridge.Name, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// "short" was connected at the kill: its session ends at most 2 s after the last
	// heartbeat plus one second.
	time.Sleep(time.Until(killed.Add(4 * time.Second)))
	if err := s.Restart(context.Background(), bridge.Name); err != nil {
		t.Fatal(err)
	}

	pub, ca = dialMQTT(t, lis, "pub", 300)
	if !ca.SessionPresent {
		t.Fatal("pub: Session Present 0 after the restart")
	}
	pub.publish(2, 7, true, "load/a", "q2-pubrec-resent")
	if rc := reason(pub.next(packets.PUBREC, 7)); rc != 0 {
		t.Fatalf("PUBREC to the QoS 2 PUBLISH sent again: %#x, want 0x00", rc)
	}
	pub.send(&packets.Pubrel{PacketID: 7, Properties: &packets.Properties{}})
	if rc := reason(pub.next(packets.PUBCOMP, 7)); rc != 0 {
		t.Fatalf("PUBCOMP 7: %#x", rc)
	}
	pub.send(&packets.Pubrel{PacketID: 9, Properties: &packets.Properties{}})
	if rc := reason(pub.next(packets.PUBCOMP, 9)); rc != 0 {
		t.Fatalf("PUBCOMP 9, PUBREC'd before the kill: %#x, want 0x00", rc)
	}
	pub.publish(1, 8, true, "load/c", "q1-puback-lost")
	if rc := reason(pub.next(packets.PUBACK, 8)); rc != 0 {
		t.Fatalf("PUBACK to the QoS 1 PUBLISH sent again: %#x", rc)
	}

	sub, ca = dialMQTT(t, lis, "sub", 300)
	if !ca.SessionPresent {
		t.Fatal("sub: Session Present 0 after the restart")
	}
	// "queued" and "marker" come back, and "fence" may; then the one published now.
	queued := map[string]bool{}
	next := func(want ...string) {
		for {
			p := sub.next(packets.PUBLISH, 0).Content.(*packets.Publish)
			s := string(p.Payload)
			if queued[s] || s != "fence" && !slices.Contains(want, s) {
				t.Fatalf("the subscriber's queued messages, then the one published after the restart: got %+v after %v, want %v", p, queued, want)
			}
			queued[s] = true
			sub.send(&packets.Puback{PacketID: p.PacketID, Properties: &packets.Properties{}})
			if !slices.ContainsFunc(want, func(w string) bool { return !queued[w] }) {
				return
			}
		}
	}
	next("queued", "marker")
	pub.publish(1, 11, false, "watch/after", "after")
	pub.next(packets.PUBACK, 11)
	next("after")
	if _, ca = dialMQTT(t, lis, "short", 2); ca.SessionPresent {
		t.Error("short: its session expired while the bridge was down, yet Session Present 1")
	}

	counts := kafkaCounts(t, s, topic)
	t.Logf("after kill -9: Kafka holds %v; %v resent messages answered from their first append", counts, bridgeMetric(t, bridge, "tributary_mqtt_deduplicated_total", "load"))
	if len(counts) != 3 || counts["q2-pubrec-resent"] != 1 || counts["q2-pubrel-after"] != 1 || counts["q1-puback-lost"] != 1 {
		t.Errorf("Kafka holds %v, want each of the 3 messages once", counts)
	}
}

// TestMQTTListenerInDoubtBatchAfterKill: storage-core is stopped (SIGSTOP) while a
// persistent session's QoS 1 message is being stored, so its Append is sent and not
// answered; the bridge is killed with SIGKILL, storage-core continues, and the bridge
// starts again: it sends the batch it journaled again with its old producer identity,
// and the client's resend (DUP) is answered 0x00 from that outcome. The message is in
// Kafka once, whether storage-core took the dead bridge's Append or not.
func TestMQTTListenerInDoubtBatchAfterKill(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	topic := "mqtt-doubt-" + mqttID()
	lis := stack.FreeAddr()
	dir := filepath.Join(t.TempDir(), "sessions")
	bridge := startBridge(t, s, "mqtt-bridge-doubt", sessionBridgeConfig(lis, dir, topic))
	pub, _ := dialMQTT(t, lis, "pub", 300)
	pub.publish(1, 1, false, "load/x", "warm-up") // the topic exists, the producer ids are known
	if rc := reason(pub.next(packets.PUBACK, 1)); rc != 0 {
		t.Fatalf("PUBACK %#x", rc)
	}
	sc, err := s.Proc(stack.StorageCore)
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	pub.publish(1, 2, false, "load/x", "in-doubt")
	waitFor(t, 10*time.Second, "the batch journaled", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "listener.journal"))
		return bytes.Contains(b, []byte("in-doubt"))
	})
	if err := s.Kill(bridge.Name, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := sc.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := s.Restart(context.Background(), bridge.Name); err != nil {
		t.Fatal(err)
	}
	pub, ca := dialMQTT(t, lis, "pub", 300)
	if !ca.SessionPresent {
		t.Fatal("Session Present 0 after the restart")
	}
	pub.publish(1, 2, true, "load/x", "in-doubt")
	if rc := reason(pub.next(packets.PUBACK, 2)); rc != 0 {
		t.Fatalf("PUBACK to the resend: %#x", rc)
	}
	counts := kafkaCounts(t, s, topic)
	t.Logf("Kafka holds %v", counts)
	if counts["in-doubt"] != 1 || counts["warm-up"] != 1 {
		t.Errorf("Kafka holds %v, want each message once", counts)
	}
}
