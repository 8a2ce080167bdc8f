package queue

import (
	"math"
	"strconv"
	"strings"
)

// An ack id names one delivery: "<incarnation>.<queue offset>.<lease>" in lowercase
// hex. incarnation is random per created queue (an ack id of a deleted queue never
// matches its successor of the same name); lease is drawn from a per-queue counter
// that starts at the process start time in ns, so ids handed out before a restart
// never match a lease taken after it. Callers must treat ack ids as opaque.
type ackID struct {
	inc   uint64
	off   int64
	lease uint64
}

func (a ackID) String() string {
	return string(a.appendTo(make([]byte, 0, maxAckIDLen)))
}

// maxAckIDLen is the longest ack id String writes: three runs of 16 hex digits.
const maxAckIDLen = 3*16 + 2

// appendTo appends a's String to b.
func (a ackID) appendTo(b []byte) []byte {
	b = strconv.AppendUint(b, a.inc, 16)
	b = append(b, '.')
	b = strconv.AppendInt(b, a.off, 16)
	b = append(b, '.')
	return strconv.AppendUint(b, a.lease, 16)
}

// parseAckID parses an ack id; ok is false for anything that is not one.
func parseAckID(s string) (ackID, bool) {
	if a, ok := parseAckIDHex(s); ok {
		return a, true
	}
	return parseAckIDStrconv(s)
}

// parseAckIDStrconv is parseAckID's general path.
func parseAckIDStrconv(s string) (ackID, bool) {
	if len(s) > 64 {
		return ackID{}, false
	}
	p1, rest, ok := strings.Cut(s, ".")
	if !ok {
		return ackID{}, false
	}
	p2, p3, ok := strings.Cut(rest, ".")
	if !ok {
		return ackID{}, false
	}
	inc, err1 := strconv.ParseUint(p1, 16, 64)
	off, err2 := strconv.ParseInt(p2, 16, 64)
	lease, err3 := strconv.ParseUint(p3, 16, 64)
	if err1 != nil || err2 != nil || err3 != nil || off < 0 {
		return ackID{}, false
	}
	return ackID{inc: inc, off: off, lease: lease}, true
}

// parseAckIDHex parses the ack ids String writes (three runs of 1..16 hex digits,
// the offset below 2^63) without strconv; anything else is left to parseAckID's
// general path, which accepts these ids with the same values.
func parseAckIDHex(s string) (ackID, bool) {
	var f [3]uint64
	n, digits := 0, 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		case c == '.' && n < 2 && digits > 0:
			n++
			digits = 0
			continue
		default:
			return ackID{}, false
		}
		if digits == 16 {
			return ackID{}, false
		}
		f[n] = f[n]<<4 | uint64(d)
		digits++
	}
	if n != 2 || digits == 0 || f[1] > math.MaxInt64 {
		return ackID{}, false
	}
	return ackID{inc: f[0], off: int64(f[1]), lease: f[2]}, true
}
