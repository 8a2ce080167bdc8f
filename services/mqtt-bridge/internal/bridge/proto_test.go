package bridge

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/mochi-mqtt/server/v2/packets"
)

// rawPacket is a packet of type and flags first with body.
func rawPacket(first byte, body ...[]byte) []byte {
	b := bytes.Join(body, nil)
	out := []byte{first}
	n := len(b)
	for {
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

// str is an MQTT string (two-byte length, then s).
func str(s string) []byte { return append([]byte{byte(len(s) >> 8), byte(len(s))}, s...) }

// props is an MQTT 5 property list: its length (a Variable Byte Integer), then the
// properties p.
func props(p ...[]byte) []byte {
	return rawPacket(0, p...)[1:]
}

// connect5 is an MQTT 5 CONNECT with flags, properties props (without their length)
// and payload after the client id "r".
func connect5(flags byte, props []byte, payload ...[]byte) []byte {
	return rawPacket(0x10, str("MQTT"), []byte{5, flags, 0, 60, byte(len(props))}, props, str("r"), bytes.Join(payload, nil))
}

// connect4 is an MQTT 3.1.1 CONNECT with flags and payload after the client id "r".
func connect4(flags byte, payload ...[]byte) []byte {
	return rawPacket(0x10, str("MQTT"), []byte{4, flags, 0, 60}, str("r"), bytes.Join(payload, nil))
}

// subscribe5 is an MQTT 5 SUBSCRIBE (packet id 1, no properties) of filter with options.
func subscribe5(filter string, options byte) []byte {
	return rawPacket(0x82, []byte{0, 1, 0}, str(filter), []byte{options})
}

// expectEnd reads what the listener answers until it closes the connection: one
// packet of type first whose reason code (at offset at of its body) is code, or
// (first 0) nothing.
func expectEnd(t *testing.T, conn net.Conn, first byte, at int, code byte) {
	t.Helper()
	_ = conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	got, err := io.ReadAll(conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open (read %x)", got)
	}
	if first == 0 {
		if len(got) > 0 {
			t.Fatalf("got %x, want the connection closed without an answer", got)
		}
		return
	}
	if len(got) < 2+at+1 || got[0] != first || got[2+at] != code || int(got[1])+2 != len(got) {
		t.Fatalf("got %x, want one packet %#x with reason code %#x, then the end", got, first, code)
	}
}

// A client that breaks the protocol is told so with the reason code MQTT 5 gives
// (0x81 Malformed Packet, 0x82 Protocol Error: in a CONNACK for its CONNECT, in a
// DISCONNECT after; section 4.13) and its connection ends; an MQTT 3.1.1 client's
// connection ends without an answer.
func TestListenerProtocolErrors(t *testing.T) {
	_, addr := startBackend(t)
	b := startListenerBridge(t, addr, 8)
	v5 := connect5(0x02, nil)
	v4 := connect4(0x02)
	for _, c := range []struct {
		name       string
		send       [][]byte
		first      byte // 0x20 CONNACK, 0xe0 DISCONNECT, 0 nothing
		code       byte
		afterConns bool // an answered CONNECT comes first
	}{
		{name: "receive maximum 0", send: [][]byte{connect5(0x02, []byte{0x21, 0, 0})}, first: 0x20, code: 0x82},
		{name: "maximum packet size 0", send: [][]byte{connect5(0x02, []byte{0x27, 0, 0, 0, 0})}, first: 0x20, code: 0x82},
		{name: "session expiry twice", send: [][]byte{connect5(0x02, []byte{0x11, 0, 0, 0, 9, 0x11, 0, 0, 0, 9})}, first: 0x20, code: 0x82},
		{name: "receive maximum twice", send: [][]byte{connect5(0x02, []byte{0x21, 0, 5, 0x21, 0, 5})}, first: 0x20, code: 0x82},
		{name: "property not of CONNECT", send: [][]byte{connect5(0x02, []byte{0x23, 0, 1})}, first: 0x20, code: 0x81},
		{name: "will properties twice", send: [][]byte{connect5(0x06, nil, []byte{10, 0x18, 0, 0, 0, 1, 0x18, 0, 0, 0, 1}, str("w"), str("x"))}, first: 0x20, code: 0x82},
		{name: "will qos without will", send: [][]byte{connect5(0x02|0x08, nil)}, first: 0x20, code: 0x81},
		{name: "will retain without will", send: [][]byte{connect5(0x02|0x20, nil)}, first: 0x20, code: 0x81},
		{name: "subscription reserved bits", send: [][]byte{v5, subscribe5("a", 0x40)}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "subscription qos 3", send: [][]byte{v5, subscribe5("a", 0x03)}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "subscription retain handling 3", send: [][]byte{v5, subscribe5("a", 0x30)}, first: 0xe0, code: 0x82, afterConns: true},
		{name: "subscription filter not utf-8", send: [][]byte{v5, subscribe5("a\xff", 0)}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "subscribe without subscription", send: [][]byte{v5, rawPacket(0x82, []byte{0, 1, 0})}, first: 0xe0, code: 0x82, afterConns: true},
		{name: "pingreq with a body", send: [][]byte{v5, {0xc0, 1, 0}}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "packet over the maximum size", send: [][]byte{v5, {0x32, 0xff, 0xff, 0xff, 0x7f}}, first: 0xe0, code: 0x95, afterConns: true},
		{name: "publish qos 3", send: [][]byte{v5, rawPacket(0x36, str("dev/1"), []byte{0, 1}, []byte("x"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish topic not utf-8", send: [][]byte{v5, rawPacket(0x32, str("dev/\xc3"), []byte{0, 1, 0}, []byte("x"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish topic with U+0000", send: [][]byte{v5, rawPacket(0x30, str("dev/\x00"), []byte{0}, []byte("x"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish topic over the packet", send: [][]byte{v5, rawPacket(0x30, []byte{0, 9}, []byte("dev"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish without a topic length", send: [][]byte{v5, rawPacket(0x30, []byte{0})}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish content type not utf-8", send: [][]byte{v5, rawPacket(0x32, str("dev/1"), []byte{0, 1}, props([]byte{0x03}, str("text/\xff")), []byte("x"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish response topic with U+0000", send: [][]byte{v5, rawPacket(0x30, str("dev/1"), props([]byte{0x08}, str("re\x00ply")), []byte("x"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish user property name not utf-8", send: [][]byte{v5, rawPacket(0x32, str("dev/1"), []byte{0, 1}, props([]byte{0x26}, str("k\xc3"), str("v")), []byte("x"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish user property value surrogate", send: [][]byte{v5, rawPacket(0x32, str("dev/1"), []byte{0, 1}, props([]byte{0x26}, str("k"), str("\xed\xa0\x80")), []byte("x"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish property not of PUBLISH", send: [][]byte{v5, rawPacket(0x32, str("dev/1"), []byte{0, 1}, props([]byte{0x11, 0, 0, 0, 9}), []byte("x"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish property over the list", send: [][]byte{v5, rawPacket(0x32, str("dev/1"), []byte{0, 1}, []byte{3, 0x09, 0, 4}, []byte("xxxx"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish properties over the packet", send: [][]byte{v5, rawPacket(0x32, str("dev/1"), []byte{0, 1}, []byte{9, 0x01, 1})}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "publish payload format twice", send: [][]byte{v5, rawPacket(0x32, str("dev/1"), []byte{0, 1}, props([]byte{0x01, 1, 0x01, 1}), []byte("x"))}, first: 0xe0, code: 0x82, afterConns: true},
		{name: "publish qos 1 without packet id", send: [][]byte{v5, rawPacket(0x32, str("dev/1"), []byte{0})}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "puback reason string not utf-8", send: [][]byte{v5, rawPacket(0x40, []byte{0, 1, 0}, props([]byte{0x1f}, str("\xff")))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "unsubscribe filter not utf-8", send: [][]byte{v5, rawPacket(0xa2, []byte{0, 1, 0}, str("a/\xc3"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "unsubscribe user property with U+0000", send: [][]byte{v5, rawPacket(0xa2, []byte{0, 1}, props([]byte{0x26}, str("k"), str("\x00")), str("a"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "disconnect reason string not utf-8", send: [][]byte{v5, rawPacket(0xe0, []byte{0}, props([]byte{0x1f}, str("bye\xff")))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "subscription filter a#", send: [][]byte{v5, subscribe5("dev/a#", 0)}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "subscription filter # not last", send: [][]byte{v5, subscribe5("#/a", 0)}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "subscription filter a+", send: [][]byte{v5, subscribe5("dev/a+/x", 0)}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "subscription filter +a", send: [][]byte{v5, subscribe5("+a", 0)}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "unsubscribe filter a+", send: [][]byte{v5, rawPacket(0xa2, []byte{0, 1, 0}, str("dev/x+"))}, first: 0xe0, code: 0x81, afterConns: true},
		{name: "3.1.1 subscription filter a#", send: [][]byte{v4, rawPacket(0x82, []byte{0, 1}, str("dev/a#"), []byte{0})}, afterConns: true},
		{name: "authentication method", send: [][]byte{connect5(0x02, append([]byte{0x15}, str("SCRAM-SHA-1")...))}, first: 0x20, code: 0x8c},
		{name: "authentication method and data", send: [][]byte{connect5(0x02, append(append([]byte{0x15}, str("SCRAM-SHA-1")...), append([]byte{0x16}, str("x")...)...))}, first: 0x20, code: 0x8c},
		{name: "auth without an authentication method", send: [][]byte{v5, rawPacket(0xf0, []byte{0x18, 0})}, first: 0xe0, code: 0x82, afterConns: true},
		{name: "re-auth without an authentication method", send: [][]byte{v5, rawPacket(0xf0, []byte{0x19, 0})}, first: 0xe0, code: 0x82, afterConns: true},
		{name: "empty auth without an authentication method", send: [][]byte{v5, {0xf0, 0}}, first: 0xe0, code: 0x82, afterConns: true},
		{name: "no local on a shared subscription", send: [][]byte{v5, subscribe5("$share/g/dev/#", 0x04)}, first: 0xe0, code: 0x82, afterConns: true},
		{name: "no local on a $SHARE subscription", send: [][]byte{v5, subscribe5("$SHARE/g/dev/+", 0x05)}, first: 0xe0, code: 0x82, afterConns: true},
		{name: "3.1.1 publish topic not utf-8", send: [][]byte{v4, rawPacket(0x32, str("dev/\xff"), []byte{0, 1}, []byte("x"))}, afterConns: true},
		{name: "3.1.1 password without username", send: [][]byte{connect4(0x42, str("p"))}},
		{name: "3.1.1 will qos without will", send: [][]byte{connect4(0x02 | 0x10)}},
		{name: "3.1.1 pingreq with a body", send: [][]byte{v4, {0xc0, 1, 0}}, afterConns: true},
		{name: "3.1.1 subscription reserved bits", send: [][]byte{v4, rawPacket(0x82, []byte{0, 1}, str("a"), []byte{0x04})}, afterConns: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", b.ListenerAddr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
			for i, p := range c.send {
				if _, err := conn.Write(p); err != nil {
					t.Fatal(err)
				}
				if i == 0 && c.afterConns {
					if typ, rest := readPacket(t, conn); typ != 0x20 || rest[1] != 0 {
						t.Fatalf("CONNACK %#x %x", typ, rest)
					}
				}
			}
			at := 1 // CONNACK: flags, then the code
			if c.first == 0xe0 {
				at = 0
			}
			expectEnd(t, conn, c.first, at, c.code)
		})
	}
	// The CONNECT guard forgot the connections refused before their CONNECT was taken.
	b.listener.guard.mu.Lock()
	pending := len(b.listener.guard.pending)
	b.listener.guard.mu.Unlock()
	if pending != 0 {
		t.Errorf("the CONNECT guard still holds %d closed connections", pending)
	}
	// Others are unaffected.
	cl := connect(t, b.ListenerAddr(), "after")
	if rc, err := publish(cl, "dev/1", "ok"); err != nil || rc != 0 {
		t.Fatalf("publish after: %#x %v", rc, err)
	}
}

// The packets before a bad one are passed on, never all of the bad one, and every
// byte of a well-formed stream, however it is split into reads.
func TestFramesSplitReads(t *testing.T) {
	good := bytes.Join([][]byte{
		connect5(0x06|0x08|0x20|0x80|0x40, []byte{0x11, 0, 0, 0, 9, 0x21, 0, 5, 0x26, 0, 1, 'k', 0, 1, 'v', 0x26, 0, 1, 'k', 0, 1, 'v'},
			[]byte{5, 0x18, 0, 0, 0, 1}, str("w"), str("x"), str("u"), str("p")),
		rawPacket(0x82, []byte{0, 1, 2, 0x0b, 7}, str("a/+"), []byte{0x2e}, str("b/#"), []byte{0x01}),
		rawPacket(0x3b, str("dev/1"), []byte{0, 2, 0}, bytes.Repeat([]byte("p"), 300)),
		{0xc0, 0},
		rawPacket(0x30, str("dev/1"), []byte{0}, []byte("q")),
		rawPacket(0x30, str(""), []byte{3, 0x23, 0, 1}, []byte("alias")),
		rawPacket(0x33, str("dev/2"), []byte{0, 4}, props([]byte{0x01, 1, 0x02, 0, 0, 0, 60, 0x03}, str("text/plain"), []byte{0x08}, str("re/ply"),
			[]byte{0x09}, str(string(bytes.Repeat([]byte{0xff}, 200))), []byte{0x26}, str("k"), str("v"), []byte{0x26}, str("k"), str("v")), []byte("payload")),
		rawPacket(0x40, []byte{0, 1}),
		rawPacket(0x50, []byte{0, 4, 0x10}, props([]byte{0x1f}, str("why"))),
		rawPacket(0xa2, []byte{0, 2}, props([]byte{0x26}, str("k"), str("v")), str("a/+"), str("b/#")),
	}, nil)
	for _, tail := range [][]byte{
		{0xc0, 1, 0}, // a PINGREQ with a body
		rawPacket(0x32, str("dev/\xed\xa0\x80"), []byte{0, 3, 0}, []byte("p")),                                                                                            // a surrogate in the Topic Name
		rawPacket(0x32, str("dev/3"), []byte{0, 5}, props([]byte{0x09}, str(string(bytes.Repeat([]byte{0xff}, 200))), []byte{0x26}, str("k"), str("v\x00")), []byte("p")), // U+0000 in a User Property
		rawPacket(0x62, []byte{0, 4, 0}, props([]byte{0x1f}, str("\xc3("))),                                                                                               // a PUBREL's Reason String not UTF-8
	} {
		bad := append(append([]byte{}, good...), tail...)
		for size := 1; size <= 8; size++ {
			f := &frames{limit: 1 << 20}
			for i := 0; i < len(good); i += size {
				if n, code, isBad := f.scan(good[i:min(i+size, len(good))]); isBad {
					t.Fatalf("split %d: offset %d: bad (%#x, %d)", size, i, code, n)
				}
			}
			f = &frames{limit: 1 << 20}
			passed := 0
			for i := 0; i < len(bad); i += size {
				n, code, isBad := f.scan(bad[i:min(i+size, len(bad))])
				passed += n
				if isBad {
					// Of the bad packet, what earlier reads held has gone on: never all of it.
					if code != codeMalformed || passed < len(good) || passed >= len(bad) {
						t.Fatalf("split %d: code %#x, %d bytes passed, want 0x81 after %d", size, code, passed, len(good))
					}
					break
				}
			}
			if passed == len(bad) {
				t.Fatalf("split %d: the bad packet %x passed", size, tail)
			}
		}
	}
}

// What following the frames costs a stream of small PUBLISHes, without properties and
// with a Content Type and a User Property, beside the library's decoding of the same
// packets (its least work per PUBLISH).
func BenchmarkFramesPublish(b *testing.B) {
	for _, c := range []struct {
		name string
		pub  []byte
	}{
		{"plain", rawPacket(0x32, str("dev/sensor/17"), []byte{0, 1, 0}, bytes.Repeat([]byte("x"), 32))},
		{"props", rawPacket(0x32, str("dev/sensor/17"), []byte{0, 1}, props([]byte{0x03}, str("application/json"), []byte{0x26}, str("site"), str("north")), bytes.Repeat([]byte("x"), 32))},
	} {
		pub := c.pub
		chunk := bytes.Repeat(pub, 2048/len(pub))
		n := len(chunk) / len(pub)
		b.Run(c.name+"/frames", func(b *testing.B) {
			f := &frames{limit: 1 << 20}
			_, _, _ = f.scan(connect5(0x02, nil))
			for i := 0; i < b.N; i++ {
				if _, _, bad := f.scan(chunk); bad {
					b.Fatal("bad")
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/publish")
		})
		b.Run(c.name+"/mochi-decode", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				for k := 0; k < n; k++ {
					pk := packets.Packet{ProtocolVersion: 5, FixedHeader: packets.FixedHeader{Type: packets.Publish, Qos: 1, Remaining: len(pub) - 2}}
					if err := pk.PublishDecode(append([]byte{}, pub[2:]...)); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/publish")
		})
	}
}

// Topic Filters whose wildcards take whole levels pass the frame check; those that do
// not are refused (MQTT 5 section 4.7.1).
func TestFramesFilterWildcards(t *testing.T) {
	for f, want := range map[string]bool{
		"#": true, "+": true, "/#": true, "a/#": true, "+/+": true, "a/+/b": true, "+/a/#": true, "a//b": true,
		"$share/g/dev/+/t": true, "": true, "dev/a#": false, "#/a": false, "a/#/b": false, "##": false,
		"a+": false, "+a": false, "a/b+/c": false, "++": false, "a/+b": false,
	} {
		if got := (&reader{b: str(f)}).filter(); got != want {
			t.Errorf("filter %q: %v, want %v", f, got, want)
		}
	}
}

// No Local is a Protocol Error on a Shared Subscription only.
func TestFramesSharedNoLocal(t *testing.T) {
	for _, c := range []struct {
		filter string
		opts   byte
		bad    bool
	}{
		{"$share/g/dev/#", 0x04, true}, {"$Share/g/a", 0x05, true}, {"$share/g/dev/#", 0x01, false},
		{"dev/#", 0x04, false}, {"$sharex/g/a", 0x04, false}, {"a/$share/b", 0x04, false},
	} {
		f := &frames{limit: 1 << 20}
		if _, _, bad := f.scan(connect5(0x02, nil)); bad {
			t.Fatal("CONNECT refused")
		}
		_, code, bad := f.scan(subscribe5(c.filter, c.opts))
		if bad != c.bad || bad && code != codeProtocolError {
			t.Errorf("SUBSCRIBE %q options %#x: bad %v (%#x), want %v", c.filter, c.opts, bad, code, c.bad)
		}
	}
}
