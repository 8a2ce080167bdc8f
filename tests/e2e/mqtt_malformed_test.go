package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tributary/tributary/tests/e2e/stack"
)

// mqttPacket is a raw MQTT control packet: first (type and flags), the Remaining
// Length, then the body parts.
func mqttPacket(first byte, body ...[]byte) []byte {
	b := bytes.Join(body, nil)
	out := []byte{first}
	for n := len(b); ; {
		c := byte(n & 0x7f)
		if n >>= 7; n > 0 {
			c |= 0x80
		}
		out = append(out, c)
		if n == 0 {
			break
		}
	}
	return append(out, b...)
}

// mqttStr is an MQTT string: a two-byte length, then s's bytes as they are.
func mqttStr(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }

// mqttProps is an MQTT 5 property list of fewer than 128 bytes: its length, then p.
func mqttProps(p ...[]byte) []byte {
	b := bytes.Join(p, nil)
	return append([]byte{byte(len(b))}, b...)
}

// TestMQTTListenerMalformedTopic: a raw MQTT 5 client whose PUBLISH has a Topic Name,
// or a string property (Content Type, Response Topic, a User Property's name or
// value), that is not valid UTF-8, or holds U+0000, is sent DISCONNECT 0x81 (Malformed
// Packet) before its connection is closed (MQTT 5 sections 1.5.4, 2.2.2.2 and 4.13);
// an MQTT 3.1.1 client's connection is closed without an answer. Nothing of theirs is
// stored, and a well-behaved paho client publishing next is stored alone.
func TestMQTTListenerMalformedTopic(t *testing.T) {
	s := stack.StartT(t, stack.Options{})
	id := mqttID()
	topic := "mqtt-bad-" + id
	lis := stack.FreeAddr()
	startBridge(t, s, "mqtt-bridge-bad", fmt.Sprintf(`
id: bad
listener:
  addr: %[1]s
mqtt-to-kafka:
  - id: devices
    mqtt-topic-filters: ["dev/#"]
    kafka-topic: %[2]s
`, lis, topic))
	for _, c := range []struct {
		name  string
		level byte   // protocol level: 5 (answered with DISCONNECT 0x81) or 4 (3.1.1)
		topic string // the PUBLISH's Topic Name bytes
		props []byte // its MQTT 5 property list (nil: an empty one)
	}{
		{name: "v5 not utf-8", level: 5, topic: "dev/" + id + "/\xc3("},
		{name: "v5 surrogate", level: 5, topic: "dev/" + id + "/\xed\xa0\x80"},
		{name: "v5 U+0000", level: 5, topic: "dev/" + id + "/a\x00b"},
		{name: "v3.1.1 not utf-8", level: 4, topic: "dev/" + id + "/\xff"},
		{name: "v5 content type not utf-8", level: 5, topic: "dev/" + id + "/ct", props: mqttProps([]byte{0x03}, mqttStr("text/\xff"))},
		{name: "v5 response topic surrogate", level: 5, topic: "dev/" + id + "/rt", props: mqttProps([]byte{0x08}, mqttStr("re/\xed\xb0\x80"))},
		{name: "v5 user property name U+0000", level: 5, topic: "dev/" + id + "/un", props: mqttProps([]byte{0x26}, mqttStr("k\x00"), mqttStr("v"))},
		{name: "v5 user property value not utf-8", level: 5, topic: "dev/" + id + "/uv", props: mqttProps([]byte{0x01, 0, 0x26}, mqttStr("k"), mqttStr("\xc0\xaf"))},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", lis)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			var connProps, props []byte // none in 3.1.1
			if c.level == 5 {
				connProps, props = mqttProps(), c.props
				if props == nil {
					props = mqttProps()
				}
			}
			vh := append(append(mqttStr("MQTT"), c.level, 0x02, 0, 30), connProps...)
			if _, err := conn.Write(mqttPacket(0x10, vh, mqttStr(fmt.Sprintf("bad-%s-%d", id, c.level)))); err != nil {
				t.Fatal(err)
			}
			hdr := make([]byte, 2)
			if _, err := io.ReadFull(conn, hdr); err != nil || hdr[0] != 0x20 {
				t.Fatalf("CONNACK: %x %v", hdr, err)
			}
			ack := make([]byte, hdr[1])
			if _, err := io.ReadFull(conn, ack); err != nil || ack[1] != 0 {
				t.Fatalf("CONNACK body %x %v, want success", ack, err)
			}
			// QoS 1, packet id 1, c.props (MQTT 5), payload "bad".
			pub := mqttPacket(0x32, mqttStr(c.topic), []byte{0, 1}, props, []byte("bad"))
			if _, err := conn.Write(pub); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(conn)
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection is still open after the PUBLISH (read %x)", got)
			}
			switch {
			case c.level == 5 && (len(got) < 3 || got[0] != 0xe0 || got[1] < 1 || int(got[1]) != len(got)-2 || got[2] != 0x81):
				t.Fatalf("after the PUBLISH of topic %q, properties %x: got %x, then the end; want one DISCONNECT with reason code 0x81", c.topic, c.props, got)
			case c.level == 4 && len(got) > 0:
				t.Fatalf("after the PUBLISH of topic %q: got %x, want the connection closed unanswered", c.topic, got)
			}
		})
	}

	ctx := ctxT(t, time.Minute)
	cl, err := pahoConnect(ctx, lis, "good-"+id, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cl.Disconnect(&paho.Disconnect{}) }()
	pctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if resp, err := cl.Publish(pctx, &paho.Publish{QoS: 1, Topic: "dev/" + id + "/ok", Payload: []byte("ok")}); err != nil || resp.ReasonCode != 0 {
		t.Fatalf("good publish: %v %v", resp, err)
	}
	recs := consumeAll(t, s.KafkaAddrs, topic)
	if len(recs) != 1 || string(recs[0].Value) != "ok" {
		var vals []string
		for _, r := range recs {
			vals = append(vals, string(r.Value))
		}
		t.Fatalf("stored %q, want only the good client's \"ok\"", vals)
	}
}
