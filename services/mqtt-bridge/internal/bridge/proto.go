package bridge

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MQTT 5 reason codes the frame check answers with (MQTT 5 section 2.4).
const (
	codeMalformed      = 0x81
	codeProtocolError  = 0x82
	codePacketTooLarge = 0x95
	codeBadAuthMethod  = 0x8c
)

// Control packet types (MQTT 5 section 2.1.2).
const (
	typeConnect     = 1
	typePublish     = 3
	typePuback      = 4
	typePubrec      = 5
	typePubrel      = 6
	typePubcomp     = 7
	typeSubscribe   = 8
	typeUnsubscribe = 10
	typePingreq     = 12
	typeDisconnect  = 14
	typeAuth        = 15
)

// protocolError is the read error of a connection whose client broke the protocol:
// code is the MQTT 5 reason code it was (or would have been, for MQTT 3.1.1) told.
type protocolError struct{ code byte }

func (e *protocolError) Error() string {
	return fmt.Sprintf("mqtt listener: client broke the protocol (reason code %#x)", e.code)
}

// frames follows the packets a client sends, reading only their fixed headers, and
// checks what the library takes without checking or refuses without saying why:
// the CONNECT (its flags and properties), each SUBSCRIBE (its properties and
// subscription options), each PUBLISH's variable header (a well-formed UTF-8 Topic
// Name, MQTT 5 sections 1.5.4 and 3.3.2.1, its Packet Identifier and, in MQTT 5, its
// properties, section 3.3.2.3), in MQTT 5 the bodies of PUBACK, PUBREC, PUBREL,
// PUBCOMP, UNSUBSCRIBE, DISCONNECT and AUTH (their properties, and an UNSUBSCRIBE's
// Topic Filters), each PINGREQ (no body), and the fixed header flags and size (at
// most limit + 1 bytes with the first byte, as the library counts) of every packet.
// A PUBLISH's payload, and the body of any other packet, is skipped unread.
//
// Before its CONNECT is known, a client is only followed; a first packet that is not
// a CONNECT, a CONNECT of a protocol other than MQTT 3.1, 3.1.1 or 5, and a packet
// over limit are left to the library (it refuses them all).
type frames struct {
	// limit is the listener's Maximum Packet Size in bytes, which the library holds a
	// packet's body and first byte to (caps.MaximumPacketSize).
	limit int
	// version is the CONNECT's protocol level (3, 4 or 5), 0 before it.
	version byte
	// off is set once the client is left to the library.
	off bool

	hdr  [5]byte // the fixed header being read
	nhdr int
	skip int    // bytes of the current body still to pass unread
	body []byte // the current body (a PUBLISH's: its variable header) being collected to be checked
	want int    // how many bytes of it to collect
	typ  byte   // its packet type
	qos  byte   // the current PUBLISH's QoS
	rem  int    // the length of the current body
	// buf is the buffer the bodies other than a CONNECT's or SUBSCRIBE's are collected
	// in, kept between packets while it is at most keptBody bytes.
	buf []byte
}

// keptBody is the largest collecting buffer, in bytes, a connection keeps between
// packets (a PUBLISH's variable header or an acknowledgement takes a few dozen).
const keptBody = 512

// scan follows b, the next bytes read from the client. When a packet in it breaks
// the protocol, bad is true, n is how many bytes of b come before that packet (the
// rest are not to be passed on) and code says how (codeMalformed, codeProtocolError,
// codePacketTooLarge).
func (f *frames) scan(b []byte) (n int, code byte, bad bool) {
	start := 0 // where the current packet starts in b (0: in an earlier read)
	for i := 0; i < len(b) && !f.off; {
		switch {
		case f.skip > 0:
			k := min(f.skip, len(b)-i)
			f.skip -= k
			i += k
		case f.want > 0:
			k := min(f.want-len(f.body), len(b)-i)
			f.body = append(f.body, b[i:i+k]...)
			i += k
			if len(f.body) == f.want {
				if code := f.check(); code != 0 {
					return start, code, true
				}
			}
		default:
			if f.nhdr == 0 {
				start = i
			}
			f.hdr[f.nhdr] = b[i]
			f.nhdr++
			i++
			if f.nhdr == 1 {
				continue
			}
			if b[i-1]&0x80 != 0 {
				if f.nhdr == len(f.hdr) {
					return start, codeMalformed, true // a Remaining Length of over 4 bytes
				}
				continue
			}
			rem := 0
			for k := f.nhdr - 1; k >= 1; k-- {
				rem = rem<<7 | int(f.hdr[k]&0x7f)
			}
			f.nhdr = 0
			if code := f.header(f.hdr[0], rem); code != 0 {
				return start, code, true
			}
		}
	}
	return len(b), 0, false
}

// header checks the fixed header of a packet whose body is rem bytes long and says
// what to do with the body: skip it, or collect it to be checked.
func (f *frames) header(first byte, rem int) byte {
	typ, flags := first>>4, first&0x0f
	if f.version == 0 {
		if typ != typeConnect || rem > f.limit {
			f.off = true
			return 0
		}
	} else {
		switch typ {
		case 0:
			return codeMalformed // reserved packet type
		case typePublish:
			if flags&0x06 == 0x06 {
				return codeMalformed // QoS 3 [MQTT-3.3.1-4]
			}
			if flags&0x0e == 0x08 {
				return codeProtocolError // DUP on QoS 0 [MQTT-3.3.1-2]
			}
		case typePubrel, typeSubscribe, typeUnsubscribe:
			if flags != 0x02 {
				return codeMalformed // [MQTT-3.6.1-1] [MQTT-3.8.1-1] [MQTT-3.10.1-1]
			}
		default:
			if flags != 0 {
				return codeMalformed // reserved flags (MQTT 5 section 2.1.3)
			}
		}
		if typ == typePingreq && rem != 0 {
			return codeMalformed // a PINGREQ has no body (section 3.12)
		}
		if rem+1 > f.limit {
			return codePacketTooLarge // section 3.1.2.11.4
		}
	}
	switch {
	case typ == typePublish: // (after the CONNECT: see above)
		if rem < 2 {
			return codeMalformed // no room for the Topic Name's length
		}
		f.typ, f.qos, f.rem, f.want, f.body = typ, flags>>1&0x03, rem, 2, f.buf[:0]
	case (typ == typeSubscribe || f.version == 0) && rem <= f.limit:
		if rem == 0 {
			f.typ, f.body = typ, nil
			return f.check()
		}
		f.typ, f.rem, f.want, f.body = typ, rem, rem, make([]byte, 0, rem)
	case f.version == 5 && rem == 0 && typ == typeAuth:
		return codeProtocolError // no Authentication Method was taken (checkConnect)
	case f.version == 5 && rem > 0 && (typ >= typePuback && typ <= typePubcomp || typ == typeUnsubscribe || typ >= typeDisconnect):
		f.typ, f.rem, f.want, f.body = typ, rem, rem, f.buf[:0]
	default:
		f.skip = rem
	}
	return 0
}

// check checks what was collected of the current packet (a body, or the start of a
// PUBLISH's) and says what comes next: the next packet, more of the PUBLISH's
// variable header, or the rest of the PUBLISH (its payload) skipped.
func (f *frames) check() byte {
	var code byte
	switch f.typ {
	case typeConnect:
		code = f.checkConnect(f.body)
	case typeSubscribe:
		code = f.checkSubscribe(f.body)
	case typePublish:
		need := f.publishHeader(f.body)
		if need > f.rem {
			return codeMalformed // the variable header overruns the packet
		}
		if need > len(f.body) {
			f.want = need
			return 0
		}
		if code = f.checkPublish(f.body); code == 0 {
			f.skip = f.rem - len(f.body)
		}
	case typeUnsubscribe:
		code = checkUnsubscribe(f.body)
	default:
		code = checkAck(f.typ, f.body)
		if code == 0 && f.typ == typeAuth {
			code = codeProtocolError // no Authentication Method was taken (checkConnect)
		}
	}
	if cap(f.body) <= keptBody && f.typ != typeConnect && f.typ != typeSubscribe {
		f.buf = f.body[:0]
	}
	f.body, f.want = nil, 0
	return code
}

// publishHeader says how long the variable header of the current PUBLISH is (its
// Topic Name, its Packet Identifier when its QoS is over 0 and, in MQTT 5, its
// Property Length and properties; MQTT 5 section 3.3.2), given b, its first bytes:
// that length once b holds enough of it to tell, else more than len(b) (how much
// more b must hold to tell more). A Property Length of over 4 bytes counts as 5.
func (f *frames) publishHeader(b []byte) int {
	if len(b) < 2 {
		return 2
	}
	n := 2 + int(binary.BigEndian.Uint16(b))
	if f.qos > 0 {
		n += 2
	}
	if f.version < 5 {
		return n
	}
	v := 0
	for k := 0; k < 4; k++ {
		if len(b) <= n+k {
			return n + k + 1
		}
		v |= int(b[n+k]&0x7f) << (7 * k)
		if b[n+k]&0x80 == 0 {
			return n + k + 1 + v
		}
	}
	return n + 5
}

// checkPublish checks a PUBLISH's variable header, b (section 3.3.2; MQTT 3.1.1
// section 3.3.2): a well-formed Topic Name [MQTT-1.5.4-1] [MQTT-1.5.4-2] and, in MQTT
// 5, properties of a PUBLISH, each of its type (section 2.2.2.2). Left to the library:
// the Packet Identifier's value, the Topic Alias's, and a Subscription Identifier sent
// by a client (its PublishValidate refuses them with a DISCONNECT).
func (f *frames) checkPublish(b []byte) byte {
	r := &reader{b: b}
	if !r.string() {
		return codeMalformed
	}
	if f.qos > 0 {
		r.uint16()
	}
	if f.version == 5 {
		return r.properties(publishProps)
	}
	return 0
}

// checkUnsubscribe checks an MQTT 5 UNSUBSCRIBE body (section 3.10): its Packet
// Identifier, properties, and that each Topic Filter is a well-formed string
// [MQTT-3.10.3-1] with its wildcards in place (reader.filter). An UNSUBSCRIBE without a filter is left to the library (its
// UnsubscribeValidate refuses it with a DISCONNECT).
func checkUnsubscribe(b []byte) byte {
	r := &reader{b: b}
	r.uint16()
	if r.short {
		return codeMalformed
	}
	if code := r.properties(unsubscribeProps); code != 0 {
		return code
	}
	for len(r.b) > 0 {
		if !r.filter() {
			return codeMalformed
		}
	}
	return 0
}

// checkAck checks the body of an MQTT 5 PUBACK, PUBREC, PUBREL, PUBCOMP (a Packet
// Identifier, then optionally a Reason Code and properties: sections 3.4.2 to
// 3.7.2), DISCONNECT or AUTH (optionally a Reason Code and properties: sections
// 3.14.2, 3.15.2), of type typ: it must hold what its length says, and properties of
// its packet type. The Reason Code's value is left to the library.
func checkAck(typ byte, b []byte) byte {
	r := &reader{b: b}
	allowed := uint64(ackProps)
	switch typ {
	case typeDisconnect:
		allowed = disconnectProps
	case typeAuth:
		allowed = authProps
	default:
		r.uint16() // Packet Identifier
		if r.short {
			return codeMalformed
		}
	}
	if len(r.b) == 0 {
		return 0
	}
	r.byte() // Reason Code
	if len(r.b) == 0 {
		return 0
	}
	if code := r.properties(allowed); code != 0 {
		return code
	}
	if len(r.b) > 0 {
		return codeMalformed // bytes after the properties
	}
	return 0
}

// reader takes a packet body apart; a read past its end sets short.
type reader struct {
	b     []byte
	short bool
	// seen is the set of identifiers of the last property list read (properties).
	seen uint64
}

func (r *reader) bytes(n int) []byte {
	if r.short || n > len(r.b) {
		r.short = true
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) byte() byte {
	if v := r.bytes(1); v != nil {
		return v[0]
	}
	return 0
}

func (r *reader) uint16() int {
	if v := r.bytes(2); v != nil {
		return int(binary.BigEndian.Uint16(v))
	}
	return 0
}

// binary reads Binary Data (a two-byte length and as many bytes).
func (r *reader) binary() []byte { return r.bytes(r.uint16()) }

// string reads a UTF-8 Encoded String, and says whether it is well formed (MQTT 5
// section 1.5.4: valid UTF-8 without U+0000).
func (r *reader) string() bool {
	s := r.binary()
	if r.short {
		return false
	}
	for _, c := range s {
		if c == 0 {
			return false
		}
	}
	return utf8.Valid(s)
}

// filter reads a Topic Filter, and says whether it is a well-formed string whose
// wildcards each take a whole level, '#' only the last (MQTT 5 section 4.7.1,
// [MQTT-4.7.1-1] [MQTT-4.7.1-2]; MQTT 3.1.1 section 4.7.1 alike). The library checks
// only that '#' is the last character: it would subscribe "a#" or "a/b+" as filters no
// topic matches and answer success.
func (r *reader) filter() bool {
	start := r.b
	if !r.string() {
		return false
	}
	f := start[2 : len(start)-len(r.b)]
	for i, c := range f {
		switch {
		case c == '#' && (i != len(f)-1 || i > 0 && f[i-1] != '/'),
			c == '+' && (i > 0 && f[i-1] != '/' || i < len(f)-1 && f[i+1] != '/'):
			return false
		}
	}
	return true
}

// varint reads a Variable Byte Integer (section 1.5.5).
func (r *reader) varint() (int, bool) {
	v := 0
	for k := 0; k < 4; k++ {
		c := r.byte()
		if r.short {
			return 0, false
		}
		v |= int(c&0x7f) << (7 * k)
		if c&0x80 == 0 {
			return v, true
		}
	}
	return 0, false
}

// Property identifiers (MQTT 5 section 2.2.2.2).
const (
	propPayloadFormat      = 0x01
	propMessageExpiry      = 0x02
	propContentType        = 0x03
	propResponseTopic      = 0x08
	propCorrelationData    = 0x09
	propSubscriptionID     = 0x0b
	propSessionExpiry      = 0x11
	propAuthMethod         = 0x15
	propAuthData           = 0x16
	propRequestProblemInfo = 0x17
	propWillDelay          = 0x18
	propRequestRespInfo    = 0x19
	propServerReference    = 0x1c
	propReasonString       = 0x1f
	propReceiveMaximum     = 0x21
	propTopicAliasMaximum  = 0x22
	propTopicAlias         = 0x23
	propUser               = 0x26
	propMaximumPacketSize  = 0x27
)

// Properties allowed in a CONNECT, its Will Properties, a SUBSCRIBE, a PUBLISH, an
// UNSUBSCRIBE, a PUBACK, PUBREC, PUBREL or PUBCOMP, a DISCONNECT and an AUTH (sections
// 3.1.2.11, 3.1.3.2, 3.8.2.1, 3.3.2.3, 3.10.2.1, 3.4.2.2 to 3.7.2.2, 3.14.2.2,
// 3.15.2.2; table 2-4), as sets of identifiers.
const (
	connectProps = 1<<propSessionExpiry | 1<<propAuthMethod | 1<<propAuthData | 1<<propRequestProblemInfo |
		1<<propRequestRespInfo | 1<<propReceiveMaximum | 1<<propTopicAliasMaximum | 1<<propUser | 1<<propMaximumPacketSize
	willProps = 1<<propWillDelay | 1<<propPayloadFormat | 1<<propMessageExpiry | 1<<propContentType |
		1<<propResponseTopic | 1<<propCorrelationData | 1<<propUser
	subscribeProps = 1<<propSubscriptionID | 1<<propUser
	publishProps   = 1<<propPayloadFormat | 1<<propMessageExpiry | 1<<propContentType | 1<<propResponseTopic |
		1<<propCorrelationData | 1<<propSubscriptionID | 1<<propTopicAlias | 1<<propUser
	unsubscribeProps = 1 << propUser
	ackProps         = 1<<propReasonString | 1<<propUser
	disconnectProps  = 1<<propSessionExpiry | 1<<propReasonString | 1<<propServerReference | 1<<propUser
	authProps        = 1<<propAuthMethod | 1<<propAuthData | 1<<propReasonString | 1<<propUser
)

// properties reads a property list and checks it: an identifier not allowed in the
// packet (allowed), a value of the wrong type or a list overrunning the packet is a
// Malformed Packet (section 2.2.2.2); a property other than a User Property given
// twice, and the values the spec forbids (0 for Receive Maximum, Maximum Packet Size
// and a Subscription Identifier, other than 0 or 1 for the two Request flags, and
// Authentication Data without a method) are Protocol Errors (sections 3.1.2.11.x,
// 3.8.2.1.2).
func (r *reader) properties(allowed uint64) byte {
	n, ok := r.varint()
	if !ok || n > len(r.b) {
		return codeMalformed
	}
	p := &reader{b: r.bytes(n)}
	var seen uint64
	for len(p.b) > 0 {
		id := p.byte()
		if id >= 64 || allowed&(1<<id) == 0 {
			return codeMalformed
		}
		if seen&(1<<id) != 0 && id != propUser {
			return codeProtocolError
		}
		seen |= 1 << id
		var v int
		switch id {
		case propPayloadFormat, propRequestProblemInfo, propRequestRespInfo:
			v = int(p.byte())
			if id != propPayloadFormat && v > 1 {
				return codeProtocolError
			}
		case propReceiveMaximum, propTopicAliasMaximum, propTopicAlias:
			v = p.uint16()
			if id == propReceiveMaximum && v == 0 && !p.short {
				return codeProtocolError
			}
		case propMessageExpiry, propSessionExpiry, propWillDelay, propMaximumPacketSize:
			if b := p.bytes(4); b != nil && id == propMaximumPacketSize && binary.BigEndian.Uint32(b) == 0 {
				return codeProtocolError
			}
		case propContentType, propResponseTopic, propAuthMethod, propReasonString, propServerReference:
			if !p.string() {
				return codeMalformed
			}
		case propCorrelationData, propAuthData:
			p.binary()
		case propUser:
			key := p.string()
			if val := p.string(); !key || !val {
				return codeMalformed
			}
		case propSubscriptionID:
			if v, ok = p.varint(); !ok {
				return codeMalformed
			}
			if v == 0 {
				return codeProtocolError
			}
		}
		if p.short {
			return codeMalformed
		}
	}
	if seen&(1<<propAuthData) != 0 && seen&(1<<propAuthMethod) == 0 {
		return codeProtocolError
	}
	r.seen = seen
	return 0
}

// checkConnect checks a CONNECT body (section 3.1; MQTT 3.1.1 section 3.1) and
// learns the client's protocol version. An otherwise well-formed CONNECT naming an
// Authentication Method is refused with 0x8C (Bad authentication method): the
// listener has no enhanced authentication (section 4.12, [MQTT-4.12.0-1]), and the
// library would accept it as if none were asked for. So no AUTH packet may follow a
// CONNECT it takes: one is a Protocol Error (header, check). Left to the library: the
// protocol name and level, the reserved flag, and what its ConnectValidate checks.
func (f *frames) checkConnect(b []byte) byte {
	r := &reader{b: b}
	name := string(r.binary())
	level := r.byte()
	flags := r.byte()
	r.uint16() // Keep Alive
	if r.short || !(name == "MQTT" && (level == 4 || level == 5) || name == "MQIsdp" && level == 3) || flags&0x01 != 0 {
		f.off = true
		return 0
	}
	f.version = level
	will, willQoS, willRetain := flags&0x04 != 0, flags>>3&0x03, flags&0x20 != 0
	username, password := flags&0x80 != 0, flags&0x40 != 0
	switch {
	case willQoS == 3, !will && (willQoS != 0 || willRetain):
		return codeMalformed // [MQTT-3.1.2-11] [MQTT-3.1.2-12] [MQTT-3.1.2-13] [MQTT-3.1.2-15]
	case level < 5 && password && !username:
		return codeProtocolError // MQTT 3.1.1 [MQTT-3.1.2-22]
	}
	if level == 5 {
		if code := r.properties(connectProps); code != 0 {
			return code
		}
	}
	enhanced := r.seen&(1<<propAuthMethod) != 0
	if !r.string() { // Client Identifier
		return codeMalformed
	}
	if will {
		if level == 5 {
			if code := r.properties(willProps); code != 0 {
				return code
			}
		}
		if !r.string() { // Will Topic
			return codeMalformed
		}
		r.binary() // Will Payload
	}
	if username && !r.string() {
		return codeMalformed
	}
	if password {
		r.binary()
	}
	if r.short || len(r.b) > 0 {
		return codeMalformed
	}
	if enhanced {
		return codeBadAuthMethod
	}
	return 0
}

// checkSubscribe checks a SUBSCRIBE body (section 3.8; MQTT 3.1.1 section 3.8): its
// properties, that it has a subscription, that each Topic Filter is a well-formed
// string with its wildcards in place (reader.filter), and each Subscription Options
// byte: QoS 3 or a reserved bit set is a
// Malformed Packet [MQTT-3.8.3-5], Retain Handling 3 a Protocol Error.
func (f *frames) checkSubscribe(b []byte) byte {
	r := &reader{b: b}
	r.uint16() // Packet Identifier
	if f.version == 5 {
		if code := r.properties(subscribeProps); code != 0 {
			return code
		}
	}
	if r.short {
		return codeMalformed
	}
	if len(r.b) == 0 {
		return codeProtocolError // no subscription [MQTT-3.8.3-2]
	}
	reserved := byte(0xc0)
	if f.version < 5 {
		reserved = 0xfc
	}
	for len(r.b) > 0 {
		start := r.b
		if !r.filter() {
			return codeMalformed
		}
		filter := start[2 : len(start)-len(r.b)]
		o := r.byte()
		switch {
		case r.short, o&reserved != 0, o&0x03 == 0x03:
			return codeMalformed
		case o>>4&0x03 == 0x03, o&0x04 != 0 && shared(filter):
			return codeProtocolError
		}
	}
	return 0
}

// shared reports whether filter is a Shared Subscription's, as the library tells one
// ("$share" as its first level, in any case, and more levels after it): No Local on
// one is a Protocol Error [MQTT-3.8.3-4], which the library answers with a SUBACK
// reason code 0x82 that SUBACK does not have (MQTT 5 section 3.9.3), keeping the
// connection.
func shared(filter []byte) bool {
	i := bytes.IndexByte(filter, '/')
	return i >= 0 && strings.EqualFold(string(filter[:i]), "$share")
}
