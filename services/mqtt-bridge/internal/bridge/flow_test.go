package bridge

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"
)

// mqttString is an MQTT UTF-8 string: its length (2 bytes), then its bytes.
func mqttString(s string) []byte {
	return append(binary.BigEndian.AppendUint16(nil, uint16(len(s))), s...)
}

// mqttPacket is a packet of type byte t (flags included) and body (under 128 bytes).
func mqttPacket(t byte, body ...[]byte) []byte {
	b := bytes.Join(body, nil)
	return append([]byte{t, byte(len(b))}, b...)
}

// One MQTT 3.1.1 client sends many QoS 1 PUBLISHes at once, in one write, while the
// Append is held: none is acknowledged before it is stored; then all are, in the
// order they were sent (each PUBACK after the one before it), and the records are
// stored in that order.
func TestListenerAnswersInFlightInOrder(t *testing.T) {
	f, addr := startBackend(t)
	gate := make(chan struct{})
	f.mu.Lock()
	f.gate, f.entered = gate, make(chan struct{}, 100)
	f.mu.Unlock()
	b := startListenerBridge(t, addr, 100)
	c, err := net.Dial("tcp", b.ListenerAddr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const n = 50
	out := mqttPacket(0x10, mqttString("MQTT"), []byte{4, 2, 0, 60}, mqttString("dev-order"))
	for i := 1; i <= n; i++ {
		out = append(out, mqttPacket(0x32, mqttString("dev/order"), binary.BigEndian.AppendUint16(nil, uint16(i)), fmt.Appendf(nil, "m%d", i))...)
	}
	if _, err := c.Write(out); err != nil {
		t.Fatal(err)
	}
	connack := make([]byte, 4)
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, connack); err != nil || !bytes.Equal(connack, []byte{0x20, 2, 0, 0}) {
		t.Fatalf("CONNACK %x: %v", connack, err)
	}
	<-f.entered // an Append is in progress
	_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if k, err := c.Read(make([]byte, 1)); k != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read %d bytes (%v) before the append returned", k, err)
	}
	close(gate)
	acks := make([]byte, 4*n)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, acks); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		want := append([]byte{0x40, 2}, binary.BigEndian.AppendUint16(nil, uint16(i))...)
		if got := acks[4*(i-1) : 4*i]; !bytes.Equal(got, want) {
			t.Fatalf("answer %d is %x, want PUBACK %x", i, got, want)
		}
	}
	recs := f.stored("kafka.devices")
	if len(recs) != n {
		t.Fatalf("%d records stored, want %d", len(recs), n)
	}
	for i, r := range recs {
		if want := fmt.Sprintf("m%d", i+1); string(r.GetValue()) != want {
			t.Fatalf("record %d is %q, want %q", i, r.GetValue(), want)
		}
	}
}

// With idempotent appends, one that storage-core does not answer is sent again until
// it is: the publisher of a client with nothing else in flight still gets 0x97 at
// store-timeout, not once storage-core answers.
func TestListenerRefusesAtStoreTimeoutWhileAppendRetried(t *testing.T) {
	f, addr := startBackend(t)
	gate := make(chan struct{})
	f.mu.Lock()
	f.producers, f.gate, f.entered = true, gate, make(chan struct{}, 100)
	f.mu.Unlock()
	b := startListenerBridge(t, addr, 8)
	c := connect(t, b.ListenerAddr(), "dev-down")
	t.Cleanup(func() { close(gate) }) // runs before the bridge stops
	start := time.Now()
	if rc, err := publish(c, "dev/down", "a"); err != nil || rc != 0x97 {
		t.Fatalf("storage not answering: %#x %v, want 0x97", rc, err)
	}
	if d := time.Since(start); d < 400*time.Millisecond || d > 5*time.Second {
		t.Fatalf("0x97 after %v, want about store-timeout (500ms)", d)
	}
}
