package bridge

import (
	"net"
	"strings"
	"testing"
	"time"

	mqtt "github.com/mochi-mqtt/server/v2"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
)

// stuckSubscriber connects client id, subscribes to filter at QoS 1 and then never
// reads nor acknowledges anything again.
func stuckSubscriber(t *testing.T, addr, id, filter string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	body := append([]byte{0, 4, 'M', 'Q', 'T', 'T', 5, 0x02, 0, 60, 0, 0, byte(len(id))}, id...)
	if _, err := conn.Write(append([]byte{0x10, byte(len(body))}, body...)); err != nil {
		t.Fatal(err)
	}
	if typ, _ := readPacket(t, conn); typ != 0x20 {
		t.Fatalf("CONNACK: first byte %#x", typ)
	}
	pkt := append([]byte{0x82, byte(2 + 1 + 2 + len(filter) + 1), 0, 1, 0, 0, byte(len(filter))}, filter...)
	if _, err := conn.Write(append(pkt, 0x01)); err != nil {
		t.Fatal(err)
	}
	if typ, _ := readPacket(t, conn); typ != 0x90 {
		t.Fatalf("SUBACK: first byte %#x", typ)
	}
	return conn
}

// queueBytesCase: subscribers stuck subscribers of slow/#, a publisher sending n QoS
// 1 messages of payload bytes to slow/x with the listener's queue bytes set to
// session and total. It checks what every queue-bytes case must show and returns what
// each subscriber holds.
func queueBytesCase(t *testing.T, subscribers int, session, total int64, n, payload int) []int {
	t.Helper()
	_, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8)
	stall := 300 * time.Millisecond
	p := &b.listener.pace
	p.stall.Store(int64(stall))
	p.sessionBytes.Store(session)
	p.totalBytes.Store(total)
	var ids []string
	for i := range subscribers {
		ids = append(ids, "stuck-"+string(rune('a'+i)))
		stuckSubscriber(t, b.ListenerAddr(), ids[i], "slow/#")
	}
	pub := connect(t, b.ListenerAddr(), "fast-publisher")
	msg := strings.Repeat("p", payload)
	start := time.Now()
	for i := range n {
		if rc, err := publish(pub, "slow/x", msg); err != nil || rc != 0 {
			t.Fatalf("publish %d: %#x %v (the publisher must be answered as usual)", i, rc, err)
		}
	}
	if took := time.Since(start); took < stall {
		t.Errorf("%d publishes answered in %v: the publisher was not held for the stall timeout (%v) before the drops", n, took, stall)
	}
	// The library hands a message to subscribers after answering its publisher.
	size := int64(payload + len("slow/x"))
	held := make([]int, subscribers)
	count := func() int64 {
		var sum int64
		for i, id := range ids {
			cl, ok := b.listener.srv.Clients.Get(id)
			if !ok {
				t.Fatalf("%s is gone", id)
			}
			held[i] = cl.State.Inflight.Len()
			sum += int64(held[i])
		}
		return sum
	}
	want := int64(subscribers*n) - count()
	for deadline := time.Now().Add(5 * time.Second); p.bytesDropped.Load() < want && time.Now().Before(deadline); {
		<-time.After(10 * time.Millisecond)
		want = int64(subscribers*n) - count()
	}
	if got := p.bytesDropped.Load(); got != want || testutil.ToFloat64(b.listener.dropped) != float64(want) {
		t.Errorf("dropped for queue bytes %d (dropped_total %v), want %d: every message a stuck subscriber does not hold", got, testutil.ToFloat64(b.listener.dropped), want)
	}
	if q := p.queuedBytes.Load(); q != count()*size {
		t.Errorf("queued bytes %d, want %d (%d messages of %d bytes held)", q, count()*size, count(), size)
	}
	if info := b.listener.srv.Info; info.InflightDropped != 0 || info.MessagesDropped != 0 {
		t.Errorf("the library dropped %d/%d itself: queue bytes were not what bounded the subscribers", info.InflightDropped, info.MessagesDropped)
	}
	return held
}

// Per session: a stuck subscriber holds its queue-bytes (plus what publishers that
// checked at the same moment added: here one message), then every later QoS 1
// message to it is dropped and counted, long before its 1,000-message queue is full.
func TestListenerQueueBytesSession(t *testing.T) {
	const session, payload = 64 << 10, 4096
	held := queueBytesCase(t, 1, session, 1<<30, 200, payload)
	size := payload + len("slow/x")
	if minHeld, maxHeld := session/size, session/size+2; held[0] < minHeld || held[0] > maxHeld {
		t.Errorf("the stuck subscriber holds %d messages of %d bytes, want %d..%d (queue-bytes %d)", held[0], size, minHeld, maxHeld, session)
	}
}

// In total: two stuck subscribers share the listener's total queue bytes; past it
// both have their messages dropped, each within its far larger session bound.
func TestListenerQueueBytesTotal(t *testing.T) {
	const total, payload = 64 << 10, 4096
	held := queueBytesCase(t, 2, 1<<20, total, 100, payload)
	size := payload + len("slow/x")
	if sum := held[0] + held[1]; sum < total/size || sum > total/size+3 {
		t.Errorf("the stuck subscribers hold %v messages of %d bytes, want %d..%d together (total queue-bytes %d)", held, size, total/size, total/size+3, total)
	}
}

// The bytes of a message a subscriber acknowledges are released; a resend under the
// same packet identifier replaces what it held; a disconnect releases everything.
func TestPaceBytes(t *testing.T) {
	var p pace
	s := new(subscriberPace)
	p.sessionBytes.Store(100)
	p.totalBytes.Store(150)
	p.holdBytes(s, 1, 60)
	p.holdBytes(s, 2, 30)
	if s.bytes.Load() != 90 || p.overBytes(s) {
		t.Fatalf("90 of 100 held: over %v", p.overBytes(s))
	}
	p.holdBytes(s, 2, 40) // resend of 2
	if s.bytes.Load() != 100 || p.queuedBytes.Load() != 100 || !p.overBytes(s) {
		t.Fatalf("after the resend: %d held, %d queued, over %v; want 100, 100, true", s.bytes.Load(), p.queuedBytes.Load(), p.overBytes(s))
	}
	other := new(subscriberPace)
	if p.overBytes(other) {
		t.Fatal("a subscriber holding nothing is over the total")
	}
	p.holdBytes(other, 1, 50)
	if !p.overBytes(other) {
		t.Fatal("150 of a total of 150 held: not over")
	}
	p.releaseBytes(s, 1)
	p.releaseBytes(s, 7) // unknown: nothing
	if s.bytes.Load() != 40 || p.queuedBytes.Load() != 90 || p.overBytes(s) || p.overBytes(other) {
		t.Fatalf("after an acknowledgement: %d held, %d queued", s.bytes.Load(), p.queuedBytes.Load())
	}
	cl := &mqtt.Client{ID: "x"}
	p.l = &listener{log: zap.NewNop()}
	p.clients.Store(cl, other)
	p.forget(cl)
	p.holdBytes(other, 2, 10) // a delivery racing the disconnect
	if p.queuedBytes.Load() != 40 {
		t.Fatalf("after a disconnect: %d queued, want 40", p.queuedBytes.Load())
	}
}
