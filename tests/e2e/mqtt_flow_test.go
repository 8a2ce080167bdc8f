package e2e

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"

	storagev1 "github.com/tributary/tributary/proto/gen/tributary/storage/v1"
	"github.com/tributary/tributary/tests/e2e/stack"
)

// rawMQTT is an MQTT 5 connection driven packet by packet, so that a test sees the
// order the broker answers in (paho matches acknowledgements to publishes by id and
// hides it).
type rawMQTT struct {
	c net.Conn
	r *bufio.Reader
}

func rawConnect(t *testing.T, addr, clientID string) (*rawMQTT, *packets.Connack) {
	t.Helper()
	return rawConnectWith(t, addr, clientID, nil)
}

// rawConnectWith is rawConnect with the CONNECT changed by edit first.
func rawConnectWith(t *testing.T, addr, clientID string, edit func(*packets.Connect)) (*rawMQTT, *packets.Connack) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	m := &rawMQTT{c: c, r: bufio.NewReader(c)}
	cp := packets.NewControlPacket(packets.CONNECT)
	cn := cp.Content.(*packets.Connect)
	cn.ProtocolName, cn.ProtocolVersion, cn.ClientID, cn.CleanStart, cn.KeepAlive = "MQTT", 5, clientID, true, 30
	cn.Properties = &packets.Properties{}
	if edit != nil {
		edit(cn)
	}
	if _, err := cp.WriteTo(c); err != nil {
		t.Fatalf("CONNECT: %v", err)
	}
	p := m.read(t, 10*time.Second)
	ack, ok := p.Content.(*packets.Connack)
	if !ok {
		t.Fatalf("CONNECT answered with %s", p.PacketType())
	}
	return m, ack
}

func (m *rawMQTT) read(t *testing.T, timeout time.Duration) *packets.ControlPacket {
	t.Helper()
	_ = m.c.SetReadDeadline(time.Now().Add(timeout))
	p, err := packets.ReadPacket(m.r)
	if err != nil {
		t.Fatalf("read packet: %v", err)
	}
	return p
}

// TestMQTTListenerInflightOrder: one MQTT 5 client sends 100 QoS 1 PUBLISHes without
// waiting (over two mappings, so two channels), then reads: 100 PUBACKs with 0x00, in
// the order of the PUBLISHes (MQTT 5 section 4.6), and each message is in storage-core
// exactly once (read back natively), in the order it was published per channel.
func TestMQTTListenerInflightOrder(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	lis := stack.FreeAddr()
	ta, tb := "mqtt-order-a-"+id, "mqtt-order-b-"+id
	startBridge(t, s, "mqtt-bridge-order", fmt.Sprintf(`
id: order
listener:
  addr: %[1]s
mqtt-to-kafka:
  - id: a
    mqtt-topic-filters: ["a/#"]
    kafka-topic: %[2]s
    partitions: 1
  - id: b
    mqtt-topic-filters: ["b/#"]
    kafka-topic: %[3]s
    partitions: 1
`, lis, ta, tb))
	m, ack := rawConnect(t, lis, "order-"+id)
	if ack.ReasonCode != 0 {
		t.Fatalf("CONNACK 0x%02x", ack.ReasonCode)
	}
	const n = 100
	for i := 1; i <= n; i++ {
		pub := &packets.Publish{QoS: 1, PacketID: uint16(i), Topic: "a/x", Payload: []byte(strconv.Itoa(i)), Properties: &packets.Properties{}}
		if i%2 == 0 {
			pub.Topic = "b/x"
		}
		if _, err := pub.WriteTo(m.c); err != nil {
			t.Fatalf("PUBLISH %d: %v", i, err)
		}
	}
	for i := 1; i <= n; i++ {
		p := m.read(t, 30*time.Second)
		pa, ok := p.Content.(*packets.Puback)
		if !ok {
			t.Fatalf("answer %d is %s, want PUBACK", i, p.PacketType())
		}
		if pa.PacketID != uint16(i) || pa.ReasonCode != 0 {
			t.Fatalf("answer %d: PUBACK id %d reason 0x%02x, want id %d reason 0x00 (in order)", i, pa.PacketID, pa.ReasonCode, i)
		}
	}
	st := storageClient(t, s.StorageAddr)
	for k, topic := range []string{ta, tb} {
		rr, err := st.Read(ctxT(t, 30*time.Second), &storagev1.ReadRequest{Channel: "kafka." + topic, FromSequence: 1, MaxRecords: 1000})
		if err != nil {
			t.Fatalf("read %s: %v", topic, err)
		}
		var got []string
		for _, r := range rr.GetRecords() {
			got = append(got, string(r.GetValue()))
		}
		var want []string
		for i := 1 + k; i <= n; i += 2 {
			want = append(want, strconv.Itoa(i))
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%s holds %v, want each message once, in order: %v", topic, got, want)
		}
	}
}

// bridgeCounter reads one unlabelled counter of a bridge's /metrics (-1 when absent).
func bridgeCounter(t *testing.T, p *stack.Proc, name string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + p.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// pahoPubLines publishes each of lines as one QoS 1 message to topic from one paho
// MQTT 5 client keeping up to inflight in flight, failing the test unless each is
// acknowledged with success. (mosquitto_pub -l loses lines under load: against
// Mosquitto itself, a subscriber got a third of 100,000.)
func pahoPubLines(t *testing.T, addr, topic string, lines []string, inflight int) {
	ctx := ctxT(t, 5*time.Minute)
	c, err := pahoConnect(ctx, addr, "pub-"+mqttID(), "")
	if err != nil {
		t.Errorf("connect publisher: %v", err)
		return
	}
	defer func() { _ = c.Disconnect(&paho.Disconnect{}) }()
	next := make(chan string)
	go func() {
		defer close(next)
		for _, l := range lines {
			next <- l
		}
	}()
	var wg sync.WaitGroup
	for range inflight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for l := range next {
				resp, err := c.Publish(ctx, &paho.Publish{QoS: 1, Topic: topic, Payload: []byte(l)})
				if err != nil || resp.ReasonCode != 0 {
					t.Errorf("publish %s: %v %v", l, resp, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// payloads reads n message lines of s (mqttFormat) and returns how many times each
// payload came.
func payloads(t *testing.T, s *mosqSub, n int, timeout time.Duration) map[string]int {
	t.Helper()
	got := map[string]int{}
	for _, l := range s.next(t, n, timeout) {
		h := l[strings.LastIndexByte(l, '|')+1:]
		b, err := hex.DecodeString(h)
		if err != nil {
			t.Fatalf("line %q: %v", l, err)
		}
		got[string(b)]++
	}
	return got
}

// TestMQTTListenerKeepsPace: 100,000 QoS 1 messages from one paho publisher (100 in
// flight) on a topic no mapping takes reach two QoS 1 mosquitto_sub subscribers (MQTT
// 5 with its Receive Maximum, and 3.1.1) each exactly once: the publisher is held
// back while a subscriber's queue is full instead of messages being dropped, and
// tributary_mqtt_listener_dropped_total stays 0.
func TestMQTTListenerKeepsPace(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	lis := stack.FreeAddr()
	bridge := startBridge(t, s, "mqtt-bridge-pace", fmt.Sprintf(`
id: pace
listener:
  addr: %[1]s
mqtt-to-kafka:
  - id: other
    mqtt-topic-filters: ["mapped/#"]
    kafka-topic: mqtt-pace-%[2]s
`, lis, id))
	topic := "free/" + id
	v5 := startMosqSub(t, lis, "-t", topic, "-q", "1")
	v3 := startMosqSub(t, lis, "-V", "311", "-t", topic, "-q", "1")
	const n = 100000
	lines := make([]string, n)
	for i := range lines {
		lines[i] = strconv.Itoa(i)
	}
	start := time.Now()
	done := make(chan struct{})
	go func() {
		defer close(done)
		pahoPubLines(t, lis, topic, lines, 100)
	}()
	// Both are read at once: one read after the other would stop the second (its
	// output pipe full), which is then a subscriber that stalled.
	var wg sync.WaitGroup
	subs := map[string]*mosqSub{"MQTT 5": v5, "MQTT 3.1.1": v3}
	counts := map[string]map[string]int{}
	var mu sync.Mutex
	for name, sub := range subs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got := map[string]int{}
			deadline := time.After(5 * time.Minute)
			for k := 0; k < n; k++ {
				select {
				case l, ok := <-sub.lines:
					if !ok {
						k = n
						continue
					}
					b, _ := hex.DecodeString(l[strings.LastIndexByte(l, '|')+1:])
					got[string(b)]++
				case <-deadline:
					k = n
				}
			}
			mu.Lock()
			counts[name] = got
			mu.Unlock()
		}()
	}
	wg.Wait()
	for name, got := range counts {
		for _, l := range lines {
			if got[l] != 1 {
				t.Fatalf("%s subscriber got message %s %d times, want once (%d distinct messages)", name, l, got[l], len(got))
			}
		}
	}
	<-done
	if d := bridgeCounter(t, bridge, "tributary_mqtt_listener_dropped_total"); d != 0 {
		t.Fatalf("tributary_mqtt_listener_dropped_total = %v, want 0", d)
	}
	t.Logf("%d QoS 1 messages to two subscribers in %v, none lost", n, time.Since(start).Round(time.Millisecond))
}

// TestMQTTListenerStalledSubscriber: a QoS 1 subscriber that stops reading is taken
// for stalled after the stall timeout: messages to it are dropped and counted, while
// the publisher is answered and another subscriber of the same topic gets every
// message once.
func TestMQTTListenerStalledSubscriber(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	lis := stack.FreeAddr()
	bridge := startBridge(t, s, "mqtt-bridge-stall", fmt.Sprintf(`
id: stall
listener:
  addr: %[1]s
mqtt-to-kafka:
  - id: other
    mqtt-topic-filters: ["mapped/#"]
    kafka-topic: mqtt-stall-%[2]s
`, lis, id))
	topic := "free/" + id
	stuck, ack := rawConnect(t, lis, "stuck-"+id)
	if ack.ReasonCode != 0 {
		t.Fatalf("CONNACK 0x%02x", ack.ReasonCode)
	}
	sp := &packets.Subscribe{PacketID: 1, Subscriptions: []packets.SubOptions{{Topic: topic, QoS: 1}}, Properties: &packets.Properties{}}
	if _, err := sp.WriteTo(stuck.c); err != nil {
		t.Fatal(err)
	}
	if p := stuck.read(t, 10*time.Second); p.PacketType() != "SUBACK" {
		t.Fatalf("SUBSCRIBE answered with %s", p.PacketType())
	}
	// From now on nothing is read from stuck: its socket buffers fill, then its queue.
	live := startMosqSub(t, lis, "-t", topic, "-q", "1")
	const n = 5000
	lines := make([]string, n)
	for i := range lines {
		lines[i] = strconv.Itoa(i) + "-" + strings.Repeat("x", 1000)
	}
	pahoPubLines(t, lis, topic, lines, 20)
	got := payloads(t, live, n, 2*time.Minute)
	for _, l := range lines {
		if got[l] != 1 {
			t.Fatalf("live subscriber got a message %d times, want once", got[l])
		}
	}
	d := bridgeCounter(t, bridge, "tributary_mqtt_listener_dropped_total")
	if d <= 0 || d >= n {
		t.Fatalf("tributary_mqtt_listener_dropped_total = %v, want some of the %d messages dropped for the stalled subscriber", d, n)
	}
	t.Logf("stalled subscriber: %v of %d messages dropped for it; the live one got all", d, n)
}

// TestMQTTListenerLimits: the listener's limits answer as configured: a CONNECT past
// max-connections gets CONNACK 0x89 (server busy); an MQTT 5 client asking for a
// longer keep alive gets max-keepalive as Server Keep Alive, an MQTT 3.1.1 one is
// refused with 0x02 (identifier rejected); a longer Session Expiry Interval is lowered
// to max-session-expiry in the CONNACK; a connection that sends no CONNECT is closed
// after connect-timeout.
func TestMQTTListenerLimits(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	lis := stack.FreeAddr()
	bridge := startBridge(t, s, "mqtt-bridge-limits", fmt.Sprintf(`
id: limits
listener:
  addr: %[1]s
  max-connections: 2
  max-keepalive: 30s
  max-session-expiry: 60s
  connect-timeout: 1s
mqtt-to-kafka:
  - id: other
    mqtt-topic-filters: ["mapped/#"]
    kafka-topic: mqtt-limits-%[2]s
`, lis, id))
	a, ack := rawConnectWith(t, lis, "a-"+id, func(c *packets.Connect) { c.KeepAlive = 0 })
	if ack.ReasonCode != 0 || ack.Properties == nil || ack.Properties.ServerKeepAlive == nil || *ack.Properties.ServerKeepAlive != 30 {
		t.Fatalf("keep alive 0 (none): CONNACK 0x%02x %+v, want 0x00 with Server Keep Alive 30", ack.ReasonCode, ack.Properties)
	}
	se := uint32(3600)
	b, ack := rawConnectWith(t, lis, "b-"+id, func(c *packets.Connect) { c.CleanStart = false; c.Properties.SessionExpiryInterval = &se })
	if ack.ReasonCode != 0 || ack.Properties.SessionExpiryInterval == nil || *ack.Properties.SessionExpiryInterval != 60 {
		t.Fatalf("session expiry 3600: CONNACK 0x%02x %+v, want 0x00 with Session Expiry Interval 60", ack.ReasonCode, ack.Properties)
	}
	if ack.Properties.ServerKeepAlive != nil {
		t.Fatalf("keep alive 30 within max-keepalive: CONNACK has Server Keep Alive %d", *ack.Properties.ServerKeepAlive)
	}
	if _, ack := rawConnect(t, lis, "c-"+id); ack.ReasonCode != 0x89 {
		t.Fatalf("third connection with max-connections 2: CONNACK 0x%02x, want 0x89 (server busy)", ack.ReasonCode)
	}
	if n := bridgeCounter(t, bridge, "tributary_mqtt_listener_connections"); n != 2 {
		t.Fatalf("tributary_mqtt_listener_connections = %v, want 2", n)
	}
	_ = a.c.Close()
	_ = b.c.Close()
	for deadline := time.Now().Add(10 * time.Second); bridgeCounter(t, bridge, "tributary_mqtt_listener_connections") != 0; {
		if time.Now().After(deadline) {
			t.Fatal("connections not counted down after they closed")
		}
		time.Sleep(20 * time.Millisecond)
	}

	// MQTT 3.1.1 with keep alive 60: CONNECT (v4), CONNACK return code 0x02.
	c, err := net.DialTimeout("tcp", lis, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cid := "v3-" + id
	body := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 4, 0x02, 0, 60, 0, byte(len(cid))}, cid...)
	if _, err := c.Write(append([]byte{0x10, byte(len(body))}, body...)); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	resp := make([]byte, 4)
	if _, err := io.ReadFull(c, resp); err != nil {
		t.Fatalf("MQTT 3.1.1 CONNACK: %v", err)
	}
	if resp[0] != 0x20 || resp[3] != 0x02 {
		t.Fatalf("MQTT 3.1.1 keep alive 60 over max-keepalive 30s: CONNACK % x, want return code 0x02", resp)
	}

	// No CONNECT at all: closed after connect-timeout (1 s).
	idle, err := net.DialTimeout("tcp", lis, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	start := time.Now()
	_ = idle.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Fatal("read data from a connection that sent nothing")
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("a connection without CONNECT was not closed after connect-timeout")
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 5*time.Second {
		t.Fatalf("connection without CONNECT closed after %v, want about connect-timeout (1s)", d)
	}
}
