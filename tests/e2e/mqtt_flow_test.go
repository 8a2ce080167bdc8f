package e2e

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/packets"

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
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = c.Close() })
	m := &rawMQTT{c: c, r: bufio.NewReader(c)}
	cp := packets.NewControlPacket(packets.CONNECT)
	cn := cp.Content.(*packets.Connect)
	cn.ProtocolName, cn.ProtocolVersion, cn.ClientID, cn.CleanStart, cn.KeepAlive = "MQTT", 5, clientID, true, 30
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
