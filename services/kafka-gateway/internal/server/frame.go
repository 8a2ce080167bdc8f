package server

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/bits"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// readSize reads a frame's int32 size and checks it against max bytes.
func readSize(r io.Reader, sizeBuf []byte, max int32) (int32, error) {
	if _, err := io.ReadFull(r, sizeBuf[:4]); err != nil {
		return 0, err
	}
	n := int32(binary.BigEndian.Uint32(sizeBuf[:4]))
	if n < 0 || n > max {
		return 0, fmt.Errorf("%w: %d bytes (limit %d)", ErrFrameTooLarge, n, max)
	}
	if n < 10 {
		return 0, fmt.Errorf("%w: %d-byte frame is shorter than a request header", ErrBadFrame, n)
	}
	return n, nil
}

// MaxAuthFrameBytes is the largest frame read before a SASL listener's connection is
// authenticated, and while it re-authenticates (Kafka's sasl.server.max.receive.size
// default, 512 KiB): an unauthenticated client cannot make the gateway wait for, or
// hold memory for, a frame of the full frame limit.
const MaxAuthFrameBytes = 512 << 10

// Connection timeouts.
const (
	// IdleTimeout closes a connection that sends no request for this long (Kafka's
	// connections.max.idle.ms default, 10 minutes).
	IdleTimeout = 10 * time.Minute
	// BodyProgressTimeout closes a connection whose request body stops arriving: each
	// chunk of a frame's body must arrive within it.
	BodyProgressTimeout = 30 * time.Second
	// bodyChunk is how much of a body is read, and reserved in the memory budget, at a
	// time.
	bodyChunk = 1 << 20
)

// deadliner is the part of net.Conn readBody needs; nil disables deadlines (tests).
type deadliner interface{ SetReadDeadline(time.Time) error }

// readBody reads the n bytes of a frame after its size, in chunks. Memory is reserved
// in mem only as bytes actually arrive, and the buffer grows (doubling, from one
// chunk up to capTo >= n) only as they arrive, so a client that announces a large
// frame and then stalls holds at most about twice what it sent, and is cut off after
// BodyProgressTimeout without progress (or without memory budget for the next chunk).
// into, when not nil, is a recycled buffer with room for n bytes (bodyPool), read into
// directly. It returns the bytes reserved, which the caller releases (also on error).
func readBody(ctx context.Context, r io.Reader, d deadliner, mem *budget, n int32, into []byte, capTo int) (buf []byte, reserved int64, err error) {
	capTo = max(capTo, int(n))
	buf = into[:0:cap(into)]
	for len(buf) < int(n) {
		chunk := min(int(n)-len(buf), bodyChunk)
		// Bounded wait: connections that each hold part of the budget and wait for
		// more would otherwise wait for each other forever.
		actx, cancel := context.WithTimeout(ctx, BodyProgressTimeout)
		err := mem.acquire(actx, int64(chunk))
		cancel()
		if err != nil {
			return nil, reserved, fmt.Errorf("request memory budget: %w", err)
		}
		reserved += int64(chunk)
		if d != nil {
			_ = d.SetReadDeadline(time.Now().Add(BodyProgressTimeout))
		}
		if len(buf)+chunk > cap(buf) {
			nb := make([]byte, len(buf), min(capTo, max(2*cap(buf), len(buf)+chunk, bodyChunk)))
			copy(nb, buf)
			buf = nb
		}
		if _, err := io.ReadFull(r, buf[len(buf):len(buf)+chunk]); err != nil {
			return nil, reserved, err
		}
		buf = buf[:len(buf)+chunk]
	}
	return buf, reserved, nil
}

// bodyPool recycles produce request bodies: a fresh one costs an allocation the
// runtime zeroes, and a body over bodyChunk is grown (copied) as it arrives; together
// a quarter to a third of kafka-gateway's CPU in 1 KiB-record produce profiles. Buffers
// come in power-of-two classes from 64 KiB. A body is put back only once nothing
// views it any more (handler.Request.BodyInUse). A recycled buffer is taken only when
// one is pooled, never allocated for an announced size, so the memory budget's
// protection against stalled large frames is unchanged.
type bodyPool struct {
	classes [bodyPoolClasses]sync.Pool
}

const (
	bodyPoolMinShift = 16 // 64 KiB; smaller bodies are allocated
	bodyPoolClasses  = 12 // up to 128 MiB
)

func bodyClass(n int) int {
	if n <= 1<<bodyPoolMinShift {
		return 0
	}
	return bits.Len(uint(n-1)) - bodyPoolMinShift
}

// get returns a pooled buffer with room for n bytes, or nil.
func (p *bodyPool) get(n int) []byte {
	c := bodyClass(n)
	if n < 1<<(bodyPoolMinShift-1) || c >= bodyPoolClasses {
		return nil
	}
	if b, ok := p.classes[c].Get().(*[]byte); ok {
		return (*b)[:0]
	}
	return nil
}

// put offers b for reuse; buffers whose capacity is not a class size are dropped.
func (p *bodyPool) put(b []byte) {
	c := bodyClass(cap(b))
	if c >= bodyPoolClasses || cap(b) != bodyClassSize(c) {
		return
	}
	b = b[:0]
	p.classes[c].Put(&b)
}

// capFor is the capacity a new buffer for an n-byte body grows to so that it can be
// pooled (its class size), or n when bodies of that size are not pooled.
func (p *bodyPool) capFor(n int) int {
	if c := bodyClass(n); n >= 1<<(bodyPoolMinShift-1) && c < bodyPoolClasses {
		return bodyClassSize(c)
	}
	return n
}

func bodyClassSize(c int) int { return 1 << (c + bodyPoolMinShift) }

// header is a parsed request header (v1, or v2 for flexible requests).
type header struct {
	key           int16
	version       int16
	correlationID int32
	clientID      *string
}

// parseHeader parses the fixed part of a request header: api key, version, correlation
// id and the (never compact) nullable client id. It returns the rest of the frame.
func parseHeader(b []byte) (header, []byte, error) {
	var h header
	if len(b) < 10 {
		return h, nil, fmt.Errorf("%w: %d-byte header", ErrBadFrame, len(b))
	}
	h.key = int16(binary.BigEndian.Uint16(b[0:]))
	h.version = int16(binary.BigEndian.Uint16(b[2:]))
	h.correlationID = int32(binary.BigEndian.Uint32(b[4:]))
	l := int16(binary.BigEndian.Uint16(b[8:]))
	b = b[10:]
	switch {
	case l == -1:
	case l < -1 || int(l) > len(b):
		return h, nil, fmt.Errorf("%w: client id length %d", ErrBadFrame, l)
	default:
		s := string(b[:l])
		h.clientID = &s
		b = b[l:]
	}
	return h, b, nil
}

// skipTags skips a tagged-fields section (flexible header v2).
func skipTags(b []byte) ([]byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 {
		return nil, fmt.Errorf("%w: tagged fields", ErrBadFrame)
	}
	b = b[k:]
	for i := uint64(0); i < n; i++ {
		_, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, fmt.Errorf("%w: tag", ErrBadFrame)
		}
		b = b[k:]
		sz, k := binary.Uvarint(b)
		if k <= 0 || sz > uint64(len(b)-k) {
			return nil, fmt.Errorf("%w: tag size", ErrBadFrame)
		}
		b = b[k+int(sz):]
	}
	return b, nil
}

// encodeResponse frames resp for correlation id corr: size, correlation id, the tagged
// fields of response header v1 when the response is flexible (never for ApiVersions,
// whose response header is always v0), then the body at resp's version.
func encodeResponse(buf []byte, corr int32, resp kmsg.Response) []byte {
	buf = append(buf[:0], 0, 0, 0, 0)
	buf = binary.BigEndian.AppendUint32(buf, uint32(corr))
	if resp.IsFlexible() && resp.Key() != kmsg.ApiVersions.Int16() {
		buf = append(buf, 0)
	}
	buf = resp.AppendTo(buf)
	binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
	return buf
}
