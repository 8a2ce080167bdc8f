package queue

import (
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
	b := make([]byte, 0, 40)
	b = strconv.AppendUint(b, a.inc, 16)
	b = append(b, '.')
	b = strconv.AppendInt(b, a.off, 16)
	b = append(b, '.')
	b = strconv.AppendUint(b, a.lease, 16)
	return string(b)
}

func parseAckID(s string) (ackID, bool) {
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
